"""Cue-decomposition experiments (Heinert et al., paper 000): each source image as the
original, its shape cue (edge-enhancing diffusion) and its texture cue (Voronoi
shuffling by default), as ``classify`` trials with conditions ``original``,
``shape_cue`` and ``texture_cue`` -- what S_cd and R_cd are computed from.

The EED shape cues are made here, batched in torch (``--eed-device cuda`` on a GPU),
and are shared with ``cue-conflict-eed`` through ``make_shape_cues``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..build import BuildError, SourceJob, Task, finish, known_stimuli, run_jobs, stimulus_seed, task_key
from cuebench.design import latin_square_plan
from cuebench.expdir import ExperimentDir
from cuebench.trials import CLASSIFY_TIMING, Experiment, Stimulus, Trial
from ..sources import SourceImage, fit_to_stimulus, resolve_images
from .common import CLASSIFY_SCHEDULE, attention_trials, build_provenance, label_set_for, slug

TEXTURE_FN = "stimuli.texture_cues:texture_task"
SHUFFLE_CUES = ("voronoi", "patch", "diamond")  # made from the photo alone, in worker processes


def add_eed_arguments(parser) -> None:
    """EED options, shared by the designs that make shape cues (added once per parser)."""
    from ..eed import CLASSIFICATION_STEPS
    from ..texture_cues import TEXTURE_CUES, VORONOI_CELLS

    if "--eed-steps" in parser._option_string_actions:
        return
    group = parser.add_argument_group("EED shape cues (cue-decomposition, cue-conflict-eed)")
    group.add_argument("--eed-steps", type=int, default=CLASSIFICATION_STEPS,
                       help="explicit EED steps (Heinert et al.: 16384 for classification, 5792 for segmentation)")
    group.add_argument("--eed-device", default="cpu", help="torch device for EED: cpu, cuda, cuda:1, ...")
    group.add_argument("--eed-batch", type=int, default=None,
                       help="images diffused together (default: 8 or one per CPU thread; on a GPU as many as "
                            "fit into its free memory)")
    group.add_argument("--eed-no-limit", action="store_true",
                       help="plain WWW stencil without the bound-preserving flux limiter: values may leave "
                            "the input range by a few grey levels before the saved image is clipped")
    group.add_argument("--texture-cue", default="voronoi", choices=TEXTURE_CUES,
                       help="texture cue (Heinert et al.: voronoi; the others are the paper's alternatives)")
    group.add_argument("--voronoi-cells", type=int, default=VORONOI_CELLS, help="Voronoi sites N")


def add_arguments(parser) -> None:
    """cue-decomposition takes only the shared EED / texture-cue options."""
    add_eed_arguments(parser)


def eed_settings(args):
    """The EEDParams the options ask for."""
    from ..eed import EEDParams

    return EEDParams(limit=not args.eed_no_limit)


def eed_params(args) -> dict:
    """The EED recipe recorded with each shape cue; checks the EED options before any work."""
    from ..eed import resolve_device

    if args.eed_steps < 1:
        raise BuildError(f"--eed-steps must be >= 1, got {args.eed_steps}")
    if args.eed_batch is not None and args.eed_batch < 1:
        raise BuildError(f"--eed-batch must be >= 1, got {args.eed_batch}")
    resolve_device(args.eed_device)
    return {"steps": args.eed_steps, **eed_settings(args).as_dict()}


def texture_params(args) -> dict:
    from ..texture_cues import PATCH_GRID

    if args.texture_cue == "voronoi":
        if args.voronoi_cells < 1:
            raise BuildError(f"--voronoi-cells must be >= 1, got {args.voronoi_cells}")
        return {"method": "voronoi", "cells": args.voronoi_cells}
    if args.texture_cue in ("patch", "tex_eed_patch"):
        return {"method": args.texture_cue, "grid": PATCH_GRID}
    return {"method": args.texture_cue}


def make_shape_cues(expdir: ExperimentDir, sources: list[SourceImage], args, existing: Experiment | None,
                    ) -> tuple[dict[str, Stimulus], dict[str, np.ndarray]]:
    """EED of every source (skipping those already made): {source name: stimulus} and,
    for the images diffused in this run, {source name: uint8 pixels}."""
    from ..eed import eed

    params = eed_params(args)
    known = known_stimuli(expdir, existing)
    task = Task("eed", params, None)
    made: dict[str, Stimulus] = {}
    todo: list[tuple[SourceImage, np.ndarray]] = []
    for src in sources:
        key = task_key(src, task)
        if key in known:
            made[src.name] = known[key]
        else:
            todo.append((src, fit_to_stimulus(src.read())))
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


def shards(args, expdir: ExperimentDir) -> list:
    """The EED shape cues still to make, cut into shards of ``--shard-size`` source images
    (``stimuli.shards``); names stay the same across re-runs, finished ones are left out."""
    from cuebench.executors import Shard

    from ..shards import chunks, manifest_path

    if args.shard_size < 1:
        raise BuildError(f"--shard-size must be >= 1, got {args.shard_size}")
    sources = resolve_images(args.images, args.labels)
    task = Task("eed", eed_params(args), None)
    known = known_stimuli(expdir, expdir.load() if expdir.exists() else None)
    groups = chunks(sources, args.shard_size)
    gpus = 1.0 if str(args.eed_device).startswith("cuda") else 0.0
    found = []
    for i, group in enumerate(groups):
        name = f"eed-{i + 1:04d}-of-{len(groups):04d}"
        if all(task_key(src, task) in known for src in group):
            continue
        found.append(Shard(name, make_shape_cue_shard, (str(expdir.root), group, args, name),
                           done=Path.is_file, done_args=(manifest_path(expdir, name),), gpus=gpus))
    return found


def make_shape_cue_shard(root: str, sources: list[SourceImage], args, name: str) -> None:
    """One shard: the EED shape cues of ``sources``, recorded for the build that follows."""
    from ..shards import write_manifest

    expdir = ExperimentDir(root)
    made, _ = make_shape_cues(expdir, sources, args, None)
    write_manifest(expdir, name, list(made.values()))


def shape_cue_pixels(expdir: ExperimentDir, stim: Stimulus, fresh: dict[str, np.ndarray]) -> np.ndarray:
    """A shape cue's pixels: from this run's memory, or decoded from an earlier build's file."""
    from cuebench.images import decode_image

    if stim.source_image in fresh:
        return fresh[stim.source_image]
    return decode_image(expdir.stimulus_path(stim))


def make_texture_cues(expdir: ExperimentDir, sources: list[SourceImage], args, existing: Experiment | None,
                      shapes: dict[str, Stimulus], fresh_shapes: dict[str, np.ndarray]) -> dict[str, Stimulus]:
    """The tex.EED kinds, which need each image's EED: {source name: stimulus}."""
    from ..texture_cues import texture_cue

    params = texture_params(args)
    known = known_stimuli(expdir, existing)
    out = {}
    for src in sources:
        seed = stimulus_seed(args.seed, src.name, "texture_cue", params)
        task = Task("texture_cue", params, seed)
        key = task_key(src, task)
        if key in known:
            out[src.name] = known[key]
            continue
        shape = shape_cue_pixels(expdir, shapes[src.name], fresh_shapes)
        pixels = texture_cue(args.texture_cue, fit_to_stimulus(src.read()), seed, shape=shape,
                             cells=params.get("cells", 32))
        out[src.name] = expdir.write_stimulus(pixels, task.provenance(src))
    return out


def cue_jobs(sources: list[SourceImage], args, t_params: dict) -> list[SourceJob]:
    """Worker tasks per source: the original, and the texture cue if it needs only the photo."""
    jobs = []
    for src in sources:
        tasks = [Task("original", {}, None)]
        if args.texture_cue in SHUFFLE_CUES:
            tasks.append(Task("texture_cue", t_params, stimulus_seed(args.seed, src.name, "texture_cue", t_params),
                              TEXTURE_FN))
        jobs.append(SourceJob(src, tasks))
    return jobs


def texture_stimuli(expdir: ExperimentDir, args, jobs: list[SourceJob], report, usable: list[SourceImage],
                    existing: Experiment | None, shapes: dict[str, Stimulus], fresh: dict[str, np.ndarray],
                    ) -> dict[str, Stimulus]:
    """{source name: texture-cue stimulus}: from the workers' report, or made here from the EED."""
    if args.texture_cue not in SHUFFLE_CUES:
        return make_texture_cues(expdir, usable, args, existing, shapes, fresh)
    names = {src.name for src in usable}
    return {job.source.name: report.get(job.source, job.tasks[1]) for job in jobs if job.source.name in names}


def build(args, expdir) -> Experiment:
    sources = resolve_images(args.images, args.labels)
    label_set = label_set_for(sources, args.images)
    t_params = texture_params(args)
    e_params = eed_params(args)
    jobs = cue_jobs(sources, args, t_params)
    existing = expdir.load() if expdir.exists() else None
    report = run_jobs(expdir, jobs, workers=args.workers, on_error=args.on_error, existing=existing)
    failed = {f.split(":", 1)[0] for f in report.failed}
    usable = [src for src in sources if src.name not in failed]
    if not usable:
        raise BuildError("no stimuli were made: every source image failed")
    shapes, fresh = make_shape_cues(expdir, usable, args, existing)
    textures = texture_stimuli(expdir, args, jobs, report, usable, existing, shapes, fresh)
    stimuli, trials, originals = {}, [], []
    for job in jobs:
        src = job.source
        if src.name in failed:
            continue
        original = report.get(src, job.tasks[0])
        originals.append((src.name, original.id, src.category))
        arms = (("original", original, {}), ("shape_cue", shapes[src.name], {"method": "eed", **e_params}),
                ("texture_cue", textures[src.name], t_params))
        for condition, stim, params in arms:
            stimuli[stim.id] = stim
            trials.append(Trial(
                trial_id=f"{slug(src.name)}--{condition}", trial_type="classify", role="test", stimuli=(stim.id,),
                choices=tuple(label_set.displayed()), correct=src.category, condition=condition, params=params,
                source_image=src.name, category=src.category, timing=CLASSIFY_TIMING,
                mask_seed=stimulus_seed(args.seed, src.name, f"mask:{condition}", {}),
            ))
    trials += attention_trials(label_set, originals, max(1, -(-len(originals) // 100)), args.seed)
    print(f"stimuli: {len(stimuli)} in the experiment, {len(report.failed)} source images skipped")
    experiment = Experiment(
        name=args.name or expdir.root.name, design="cue-decomposition", label_set=label_set, stimuli=stimuli,
        trials=trials, schedule=CLASSIFY_SCHEDULE, assignment=latin_square_plan(trials),
        provenance={**build_provenance(args, "cue-decomposition"), "skipped_images": report.failed},
    )
    finish(expdir, experiment)
    return experiment
