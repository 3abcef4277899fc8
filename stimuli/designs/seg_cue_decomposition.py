"""Cue decomposition of a labelled segmentation set (Heinert et al., paper 000, Sec. IV-B,
Tables III-VI): every photo as the original, its EED shape cue (5,792 steps) and its texture
cue (Voronoi shuffling with N sites, one condition level per N of a sweep), and optionally the
corruptions of Table IV, as ``segment`` trials scored by mIoU.

The shape cue and the corruptions keep the photo's label mask; the texture cue moves the mask
with exactly the cells and shifts that moved the photo (``texture_cues.shuffle_with_mask``,
Fig. 1, right). Every mask is a stimulus file of its own (one grey channel of class indices,
255 ignored), content-addressed with its provenance, and each trial names its mask in
``label_mask``. The EED work shards over the executors like ``cue-decomposition``; a re-run
makes only what is missing.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
import multiprocessing
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from cuebench.counterbalance import everyone_plan
from cuebench.expdir import ExperimentDir
from cuebench.segmentation import CONVENTIONS, IGNORE, LabelledImage, labelled_set
from cuebench.trial_types.segment import SEGMENT_ANSWER
from cuebench.trials import Experiment, LabelSet, Stimulus, Trial
from ..build import BuildError, Task, known_stimuli, stimulus_seed, task_key
from ..eed import SEGMENTATION_STEPS
from ..sources import SourceImage
from ..texture_cues import PATCH_GRID, SHUFFLES, VORONOI_CELLS
from . import Design
from .common import build_provenance, slug
from .corruptions import arms as corruption_arms
from .cue_decomposition import CueOptions, eed_params, make_shape_cues, shards

MASK = "label_mask"
"""The transform name of a stored label mask."""


class SegCueOptions(CueOptions):
    """Options of seg-cue-decomposition: the set's convention and framing, the cues, the corruptions."""

    convention: Literal[CONVENTIONS] = Field("generic", description="how the set's masks read: cityscapes (19 "
                                             "train ids, 255 ignored), ade20k (150 classes, 0 ignored), generic "
                                             "(classes.json + ignore index)")
    scale: float = Field(1.0, gt=0, le=4, description="scale both sides of cityscapes/generic photos by this "
                                                      "(masks nearest neighbour); ade20k: short side 512, crop 512")
    eed_steps: int = Field(SEGMENTATION_STEPS, ge=1, description="explicit EED steps (Heinert et al.: 5792 for "
                                                                 "segmentation)")
    texture_cue: Literal[SHUFFLES] = Field("voronoi", description="texture cue; the mask follows the shuffle")
    voronoi_cells: str = Field(str(VORONOI_CELLS), description="Voronoi sites N, or a sweep (comma-separated, e.g. "
                                                               "8,16,32,64,128: one texture_cue level per N)")
    corruptions: str = Field("", description="comma-separated corruptions of Table IV at every intensity "
                                             "(`cuebench list corruptions`; empty: none)")

    @field_validator("voronoi_cells")
    @classmethod
    def _cells_are_counts(cls, value: str) -> str:
        counts = [c.strip() for c in value.split(",") if c.strip()]
        if not counts or not all(c.isdigit() and int(c) >= 1 for c in counts):
            raise ValueError(f"expected site counts >= 1 such as 32 or 8,16,32, got {value!r}")
        return ",".join(counts)

    def cell_counts(self) -> list[int]:
        return [int(c) for c in self.voronoi_cells.split(",")]


def texture_arms(args: SegCueOptions) -> list[tuple[int | None, dict]]:
    """(level, params) of each texture cue: one per Voronoi site count of the sweep."""
    if args.texture_cue != "voronoi":
        return [(None, {"method": args.texture_cue, **({"grid": PATCH_GRID} if args.texture_cue == "patch" else {})})]
    counts = args.cell_counts()
    return [(k if len(counts) > 1 else None, {"method": "voronoi", "cells": n}) for k, n in enumerate(counts)]


def sources_of(items: list[LabelledImage]) -> list[SourceImage]:
    """The set's photos as sources whose reader gives the framed photo (for the EED shape cues)."""
    return [SourceImage(item.name, None, item.origin, item.image) for item in items]


def make_item(root: str, item: LabelledImage, plan: dict, known: dict[str, Stimulus]) -> dict[str, Stimulus]:
    """Every stimulus of one photo except its EED: {recipe key: stimulus}; read once, skipping what exists.

    ``plan``: the seed, the texture arms, the corruption arms and the framing text."""
    from ..corruptions import corruption_task
    from ..texture_cues import shuffle_with_mask

    expdir = ExperimentDir(root)
    source = SourceImage(item.name, None, item.origin, item.image)
    recipes = recipes_of(item.name, plan)
    if all(task_key(source, task) in known for task in recipes.values()):
        return {key: known[task_key(source, task)] for key, task in recipes.items()}
    image, mask = item.read()
    made: dict[str, Stimulus] = {}

    def write(key: str, pixels_fn) -> None:
        task = recipes[key]
        found = known.get(task_key(source, task))
        made[key] = found if found is not None else expdir.write_stimulus(np.ascontiguousarray(pixels_fn()),
                                                                           task.provenance(source))

    write("original", lambda: image)
    write("mask", lambda: mask)
    for k, (_, params) in enumerate(plan["textures"]):
        seed = recipes[f"texture:{k}"].seed
        pair = {}

        def shuffled(part: int, params=params, seed=seed):
            if not pair:
                pair["both"] = shuffle_with_mask(params["method"], image, mask, seed, cells=params.get("cells", 32),
                                                 grid=params.get("grid", PATCH_GRID))
            return pair["both"][part]

        write(f"texture:{k}", lambda: shuffled(0))
        write(f"texture_mask:{k}", lambda: shuffled(1))
    for name, level, params in plan["corruptions"]:
        task = recipes[f"corruption:{name}:{level}"]
        write(f"corruption:{name}:{level}", lambda: corruption_task(image, name, params, task.seed))
    return made


def recipes_of(name: str, plan: dict) -> dict[str, Task]:
    """The recipe (``Task``) of each stimulus of one photo, by a key the trials use."""
    seed, framing = plan["seed"], plan["framing"]
    recipes = {"original": Task("original", {}, None, resize=framing),
               "mask": Task(MASK, {"convention": plan["convention"]}, None, resize=framing)}
    for k, (_, params) in enumerate(plan["textures"]):
        cue_seed = stimulus_seed(seed, name, "texture_cue", params)
        recipes[f"texture:{k}"] = Task("texture_cue", params, cue_seed, resize=framing)
        recipes[f"texture_mask:{k}"] = Task(MASK, {"convention": plan["convention"], "follows": "texture_cue",
                                                   **params}, cue_seed, resize=framing)
    for cname, level, params in plan["corruptions"]:
        recipes[f"corruption:{cname}:{level}"] = Task(cname, params, stimulus_seed(seed, name, cname, params),
                                                      resize=framing)
    return recipes


def make_items(expdir: ExperimentDir, items: list[LabelledImage], plan: dict, existing: Experiment | None,
               workers: int | None) -> dict[str, dict[str, Stimulus]]:
    """{photo name: {recipe key: stimulus}} for every photo, in parallel processes when asked."""
    from tqdm import tqdm

    from ..build import default_workers

    known = known_stimuli(expdir, existing)
    workers = workers or default_workers()
    out = {}
    with tqdm(total=len(items), desc="segmentation stimuli", unit="img", leave=False) as bar:
        if workers == 1 or len(items) <= 1:
            for item in items:
                out[item.name] = make_item(str(expdir.root), item, plan, known)
                bar.update()
        else:
            with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("forkserver")) as pool:
                futures = {item.name: pool.submit(make_item, str(expdir.root), item, plan, known) for item in items}
                for name, future in futures.items():
                    out[name] = future.result()
                    bar.update()
    return out


def plan_of(request, conv) -> dict:
    args = request.options
    names = [c.strip() for c in args.corruptions.split(",") if c.strip()]
    return {"seed": request.common.seed, "convention": args.convention, "framing": conv.framing,
            "textures": texture_arms(args), "corruptions": corruption_arms(names) if names else []}


def read_set(request):
    common = request.common
    if common.images == "default" or common.labels:
        raise BuildError("--design seg-cue-decomposition reads a labelled segmentation set: --images SETDIR with "
                         "images/ and labels/ (docs/cue_decomposition.md), and no --labels")
    return labelled_set(common.images, request.options.convention, request.options.scale)


class SegCueDecomposition(Design):
    """Cue decomposition for segmentation (Heinert et al. Sec. IV-B): photo, EED and Voronoi cues with their masks."""

    Options = SegCueOptions

    def build(self, request) -> Experiment:
        return build(request)

    def shards(self, request, shard_size: int) -> list:
        conv, items = read_set(request)
        return shards(request, shard_size, sources_of(items), np.ascontiguousarray, conv.framing)


def build(request) -> Experiment:
    args, expdir = request.options, request.expdir
    conv, items = read_set(request)
    existing = expdir.load() if expdir.exists() else None
    plan = plan_of(request, conv)
    made = make_items(expdir, items, plan, existing, request.common.workers)
    shapes, _ = make_shape_cues(expdir, sources_of(items), args, existing, np.ascontiguousarray, conv.framing)
    e_params = {"method": "eed", **eed_params(args)}
    stimuli: dict[str, Stimulus] = {}
    trials = []
    for item in items:
        got = made[item.name]
        arms = [("original", None, {}, got["original"], got["mask"]),
                ("shape_cue", None, e_params, shapes[item.name], got["mask"])]
        arms += [("texture_cue", level, params, got[f"texture:{k}"], got[f"texture_mask:{k}"])
                 for k, (level, params) in enumerate(plan["textures"])]
        arms += [(name, level, params, got[f"corruption:{name}:{level}"], got["mask"])
                 for name, level, params in plan["corruptions"]]
        for condition, level, params, stim, mask in arms:
            stimuli[stim.id], stimuli[mask.id] = stim, mask
            suffix = "" if level is None else f"--{level}"
            trials.append(Trial(trial_id=f"{slug(item.name)}--{condition}{suffix}", trial_type="segment",
                                role="test", stimuli=(stim.id,), choices=(SEGMENT_ANSWER,), condition=condition,
                                params=params, level=level, source_image=item.name, label_mask=mask.id))
    print(f"stimuli: {len(stimuli)} in the experiment (images and label masks) from {len(items)} labelled photos")
    label_set = LabelSet(name=conv.name, labels=conv.classes, display_order="given", not_clear=False)
    return Experiment(
        name=request.name, design=request.design, label_set=label_set, stimuli=stimuli, trials=trials,
        assignment=everyone_plan(trials),
        provenance={**build_provenance(request), "segmentation": {"convention": conv.name, "ignore_index": IGNORE,
                                                                  "framing": conv.framing}},
    )
