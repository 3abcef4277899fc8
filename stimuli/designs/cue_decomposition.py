"""Cue-decomposition experiments (Heinert et al., paper 000): each source image as the
original, its shape cue (edge-enhancing diffusion) and its texture cue (Voronoi
shuffling by default), as ``classify`` trials with conditions ``original``,
``shape_cue`` and ``texture_cue`` -- what S_cd and R_cd are computed from.

The EED shape cues are made here, batched in torch (``--eed-device cuda`` on a GPU),
and are shared with ``cue-conflict-eed`` through ``make_shape_cues``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Literal

import numpy as np

from pydantic import Field

from ..build import RESIZE_POLICY, BuildError, SourceJob, Task, known_stimuli, stimulus_seed, task_key
from cuebench.counterbalance import latin_square_plan
from cuebench.expdir import ExperimentDir
from cuebench.trials import Experiment, Stimulus, Trial, standard_timing
from ..sources import SourceImage, fit_to_stimulus, resolve_images
from ..eed import CLASSIFICATION_STEPS
from ..options import DesignOptions
from ..texture_cues import TEXTURE_CUES, VORONOI_CELLS
from . import Design
from .common import (attention_trials, build_provenance, classify_schedule, held_originals, label_set_for, slug,
                     run_with_checks, study_checks, study_timing)

TEXTURE_FN = "stimuli.texture_cues:texture_task"
SHUFFLE_CUES = ("voronoi", "patch", "diamond")  # made from the photo alone, in worker processes


class CueOptions(DesignOptions):
    """The EED shape-cue and texture-cue options, shared by cue-decomposition and cue-conflict-eed."""

    eed_steps: int = Field(CLASSIFICATION_STEPS, ge=1, description="explicit EED steps (Heinert et al.: 16384 for "
                                                             "classification, 5792 for segmentation)")
    eed_device: str = Field("cpu", description="torch device for EED: cpu, cuda, cuda:1, ...")
    eed_batch: int | None = Field(None, ge=1, description="images diffused together (default: 8 or one per CPU thread; "
                                                    "on a GPU as many as fit into its free memory)")
    eed_no_limit: bool = Field(False, description="plain WWW stencil without the bound-preserving flux limiter: "
                                                  "values may leave the input range by a few grey levels before "
                                                  "the saved image is clipped")
    texture_cue: Literal[TEXTURE_CUES] = Field("voronoi", description="texture cue (Heinert et al.: voronoi; the "
                                                                      "others are the paper's alternatives)")
    voronoi_cells: int = Field(VORONOI_CELLS, ge=1, description="Voronoi sites N")


class CueDecomposition(Design):
    """Cue decomposition (Heinert et al.): each photo, its EED shape cue and its texture cue."""

    Options = CueOptions
    study_options = frozenset({"attention", "check_images", "timing", "label_names"})

    def build(self, request) -> Experiment:
        return build(request)

    def shards(self, request, shard_size: int) -> list:
        return shards(request, shard_size)


def eed_settings(args):
    """The EEDParams the options ask for."""
    from ..eed import EEDParams

    return EEDParams(limit=not args.eed_no_limit)


def eed_params(args: CueOptions) -> dict:
    """The EED recipe recorded with each shape cue; checks before any work that the device exists here."""
    from ..eed import resolve_device

    resolve_device(args.eed_device)
    return {"steps": args.eed_steps, **eed_settings(args).as_dict()}


def texture_params(args) -> dict:
    from ..texture_cues import PATCH_GRID

    if args.texture_cue == "voronoi":
        return {"method": "voronoi", "cells": args.voronoi_cells}
    if args.texture_cue in ("patch", "tex_eed_patch"):
        return {"method": args.texture_cue, "grid": PATCH_GRID}
    return {"method": args.texture_cue}


def make_shape_cues(expdir: ExperimentDir, sources: list[SourceImage], args: CueOptions, existing: Experiment | None,
                    fit=fit_to_stimulus, resize: str = RESIZE_POLICY,
                    ) -> tuple[dict[str, Stimulus], dict[str, np.ndarray]]:
    """EED of every source (skipping those already made): {source name: stimulus} and,
    for the images diffused in this run, {source name: uint8 pixels}. ``fit`` frames a source's
    pixels first (``resize`` says how, for the provenance): 224 x 224 for classification, the
    segmentation set's own framing for a labelled set."""
    from ..eed import eed

    params = eed_params(args)
    known = known_stimuli(expdir, existing)
    task = Task("eed", params, None, resize=resize)
    made: dict[str, Stimulus] = {}
    todo: list[tuple[SourceImage, np.ndarray]] = []
    for src in sources:
        key = task_key(src, task)
        if key in known:
            made[src.name] = known[key]
        else:
            todo.append((src, fit(src.read())))
    pixels: dict[str, np.ndarray] = {}
    by_size: dict[tuple, list[tuple[SourceImage, np.ndarray]]] = {}
    for src, image in todo:
        by_size.setdefault(image.shape, []).append((src, image))
    for group in by_size.values():
        images = np.stack([image for _, image in group])
        shapes = eed(images, args.eed_steps, params=eed_settings(args), device=args.eed_device,
                     batch_size=args.eed_batch)[args.eed_steps]
        for (src, _), shape in zip(group, shapes):
            made[src.name] = expdir.write_stimulus(shape, task.provenance(src))
            pixels[src.name] = shape
    return made, pixels


def shards(request, shard_size: int, sources: list[SourceImage] | None = None, fit=fit_to_stimulus,
           resize: str = RESIZE_POLICY) -> list:
    """The EED shape cues still to make, cut into shards of ``--shard-size`` source images
    (``stimuli.shards``); names stay the same across re-runs, finished ones are left out.
    ``sources``, ``fit`` and ``resize`` as for ``make_shape_cues`` (default: the build's photos at 224 x 224, all
    test photos: check photos come from outside them and show only the original)."""
    from cuebench.executors import Shard

    from ..shards import chunks, manifest_path

    if shard_size < 1:
        raise BuildError(f"--shard-size must be >= 1, got {shard_size}")
    args, expdir = request.options, request.expdir
    if sources is None:
        sources = resolve_images(request.common.images, request.common.labels)
    task = Task("eed", eed_params(args), None)
    known = known_stimuli(expdir, expdir.load() if expdir.exists() else None)
    groups = chunks(sources, shard_size)
    gpus = 1.0 if str(args.eed_device).startswith("cuda") else 0.0
    found = []
    for i, group in enumerate(groups):
        name = f"eed-{i + 1:04d}-of-{len(groups):04d}"
        if all(task_key(src, task) in known for src in group):
            continue
        found.append(Shard(name, make_shape_cue_shard, (str(expdir.root), group, args, name, fit, resize),
                           done=Path.is_file, done_args=(manifest_path(expdir, name),), gpus=gpus))
    return found


def make_shape_cue_shard(root: str, sources: list[SourceImage], args: CueOptions, name: str, fit=fit_to_stimulus,
                         resize: str = RESIZE_POLICY) -> None:
    """One shard: the EED shape cues of ``sources``, recorded for the build that follows."""
    from ..shards import write_manifest

    expdir = ExperimentDir(root)
    made, _ = make_shape_cues(expdir, sources, args, None, fit, resize)
    write_manifest(expdir, name, list(made.values()))


def shape_cue_pixels(expdir: ExperimentDir, stim: Stimulus, fresh: dict[str, np.ndarray]) -> np.ndarray:
    """A shape cue's pixels: from this run's memory, or decoded from an earlier build's file."""
    from cuebench.images import decode_image

    if stim.source_image in fresh:
        return fresh[stim.source_image]
    return decode_image(expdir.stimulus_path(stim))


def make_texture_cues(expdir: ExperimentDir, sources: list[SourceImage], args: CueOptions, seed: int,
                      existing: Experiment | None, shapes: dict[str, Stimulus], fresh_shapes: dict[str, np.ndarray],
                      ) -> dict[str, Stimulus]:
    """The tex.EED kinds, which need each image's EED: {source name: stimulus}."""
    from ..texture_cues import texture_cue

    params = texture_params(args)
    known = known_stimuli(expdir, existing)
    out = {}
    for src in sources:
        cue_seed = stimulus_seed(seed, src.name, "texture_cue", params)
        task = Task("texture_cue", params, cue_seed)
        key = task_key(src, task)
        if key in known:
            out[src.name] = known[key]
            continue
        shape = shape_cue_pixels(expdir, shapes[src.name], fresh_shapes)
        pixels = texture_cue(args.texture_cue, fit_to_stimulus(src.read()), cue_seed, shape=shape,
                             cells=params.get("cells", 32))
        out[src.name] = expdir.write_stimulus(pixels, task.provenance(src))
    return out


def cue_jobs(sources: list[SourceImage], args: CueOptions, seed: int, t_params: dict) -> list[SourceJob]:
    """Worker tasks per source: the original, and the texture cue if it needs only the photo."""
    jobs = []
    for src in sources:
        tasks = [Task("original", {}, None)]
        if args.texture_cue in SHUFFLE_CUES:
            tasks.append(Task("texture_cue", t_params, stimulus_seed(seed, src.name, "texture_cue", t_params),
                              TEXTURE_FN))
        jobs.append(SourceJob(src, tasks))
    return jobs


def texture_stimuli(expdir: ExperimentDir, args: CueOptions, seed: int, jobs: list[SourceJob], report,
                    usable: list[SourceImage],
                    existing: Experiment | None, shapes: dict[str, Stimulus], fresh: dict[str, np.ndarray],
                    ) -> dict[str, Stimulus]:
    """{source name: texture-cue stimulus}: from the workers' report, or made here from the EED."""
    if args.texture_cue not in SHUFFLE_CUES:
        return make_texture_cues(expdir, usable, args, seed, existing, shapes, fresh)
    names = {src.name for src in usable}
    return {job.source.name: report.get(job.source, job.tasks[1]) for job in jobs if job.source.name in names}


def build(request) -> Experiment:
    args, common, expdir = request.options, request.common, request.expdir
    sources = resolve_images(common.images, common.labels)
    label_set = label_set_for(sources, common)
    t_params = texture_params(args)
    e_params = eed_params(args)
    pick = partial(study_checks, sources, label_set, common)
    jobs = cue_jobs(sources, args, common.seed, t_params)
    existing = expdir.load() if expdir.exists() else None
    report, held = run_with_checks(expdir, jobs, pick(), lambda excluded: pick(excluded=excluded), common, existing)
    failed = {f.split(":", 1)[0] for f in report.failed}
    usable = [src for src in sources if src.name not in failed]
    if not usable:
        raise BuildError("no stimuli were made: every source image failed")
    shapes, fresh = make_shape_cues(expdir, usable, args, existing)
    textures = texture_stimuli(expdir, args, common.seed, jobs, report, usable, existing, shapes, fresh)
    timing = study_timing(common, standard_timing("classify"))
    stimuli, trials = {}, []
    for job in jobs[:len(sources)]:
        src = job.source
        if src.name in failed:
            continue
        original = report.get(src, job.tasks[0])
        arms = (("original", original, {}), ("shape_cue", shapes[src.name], {"method": "eed", **e_params}),
                ("texture_cue", textures[src.name], t_params))
        for condition, stim, params in arms:
            stimuli[stim.id] = stim
            trials.append(Trial(
                trial_id=f"{slug(src.name)}--{condition}", trial_type="classify", role="test", stimuli=(stim.id,),
                choices=tuple(label_set.displayed()), correct=src.category, condition=condition, params=params,
                source_image=src.name, category=src.category, timing=timing,
                mask_seed=stimulus_seed(common.seed, src.name, f"mask:{condition}", {}),
            ))
    trials += attention_trials(label_set, held_originals(held.attention, report, failed, stimuli), common.seed, timing,
                               common.language)
    print(f"stimuli: {len(stimuli)} in the experiment, {len(report.failed)} source images skipped")
    return Experiment(
        name=request.name, design=request.design, label_set=label_set, stimuli=stimuli,
        trials=trials, schedule=classify_schedule(common), assignment=latin_square_plan(trials),
        provenance={**build_provenance(request), "skipped_images": report.failed},
    )
