"""Any labelled image set as a plain classification study: ``--design labelled-set``.

The set is a folder with one sub-folder per class, or a flat folder with ``--labels`` (a CSV
``image,category``; a multi-label image lists its labels in one cell, ``street;car;person``, and its
trials have no single right answer: they are scored by mean average precision, ``analysis.multilabel``);
its own classes are the answer labels (the 16 entry-level classes when the set uses them, else the
folder's classes with the ImageNet-1k classes their names match, ``stimuli.designs.common.label_set_for``),
so chance is 1/C of the set's own C. Every image is
one ``classify`` trial of one condition, the set's name (the folder's, or ``--condition``), and
every participant sees every image (as in Geirhos et al.'s edge and silhouette experiments), so a published
set (160 edge maps, 160 silhouettes) is scored whole: practice, catch and attention trials show check photos
from outside it (``--check-images``, else the bundled ones: ``common.study_checks``), and there are no
attention checks unless ``--attention N`` asks for them, as in the imported sets.

Each trial's ``source_image`` is the file's name without its extension (``airplane1``), the
last token of Geirhos et al.'s raw-data image names (``..._airplane_00_airplane1.png``), and its
``condition`` is the set's folder name, as ``analysis.load`` reads a raw-data folder: answers
collected here and raw CSVs of the same images pair on (condition, source image). Where two
classes hold files of one name (``image_0001.jpg`` in every Caltech-101 folder), the names keep
their class (``accordion/image_0001``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from functools import partial
from pathlib import PurePath

from pydantic import Field

from cuebench.counterbalance import everyone_plan
from cuebench.labels import category_labels, single_answer
from cuebench.trials import Experiment, Trial, standard_timing
from ..build import BuildError, SourceJob, Task, stimulus_seed
from ..options import STUDY_OPTIONS, DesignOptions
from ..sources import SourceImage, resolve_images
from . import Design
from .common import (attention_trials, build_provenance, classify_schedule, label_set_for, run_with_checks, slug,
                     study_checks, study_timing, unchanged_trials)


class LabelledSetOptions(DesignOptions):
    """Options of the labelled-set design."""

    condition: str | None = Field(None, min_length=1, description="the condition every trial carries (default: "
                                                                  "the image folder's name, e.g. edges)")


def set_name(images: str) -> str:
    """The set's name: its folder's last part (``.../stimuli/edges`` -> ``edges``)."""
    return PurePath(images.rstrip("/\\")).name or images


def file_named(sources: list[SourceImage]) -> list[SourceImage]:
    """Sources named by their file's stem (``airplane/airplane1`` -> ``airplane1``) when no two share one,
    so names match the raw-data format; else with their class, as the folder names them."""
    stems = Counter(PurePath(s.name).name for s in sources)
    if max(stems.values(), default=0) > 1:
        return sources
    return [replace(s, name=PurePath(s.name).name) for s in sources]


def set_trials(sources: list[SourceImage], report, label_set, condition: str, timing, seed: int) -> list[Trial]:
    """One test trial per made image."""
    trials = []
    for src in sources:
        stim = report.get(src, Task("original", {}, None))
        if stim is None:
            continue
        trials.append(Trial(
            trial_id=f"{slug(condition)}--{slug(src.name)}", trial_type="classify", role="test", stimuli=(stim.id,),
            choices=tuple(label_set.displayed()), correct=single_answer(src.category), condition=condition,
            source_image=src.name,
            category=src.category, timing=timing, mask_seed=stimulus_seed(seed, src.name, f"mask:{condition}", {}),
        ))
    return trials


class LabelledSet(Design):
    """Any labelled image set (class folders, or a flat folder with --labels) as one classification condition."""

    Options = LabelledSetOptions
    study_options = STUDY_OPTIONS

    def build(self, request) -> Experiment:
        # no attention checks unless --attention asks, as in the imported sets (a model run needs none)
        common = request.common.model_copy(update={"attention": request.common.attention or 0})
        expdir = request.expdir
        sources = file_named(resolve_images(common.images, common.labels, common.only))
        unlabelled = [s.origin for s in sources if not s.category]
        if unlabelled and len(unlabelled) < len(sources):
            raise BuildError(f"{common.labels or common.images}: image {unlabelled[0]!r} has no class "
                             f"({len(unlabelled)} of {len(sources)} images have none)")
        label_set = label_set_for(sources, common)
        condition = request.options.condition or set_name(common.images)
        timing = study_timing(common, standard_timing("classify"))
        catch_every = common.catch_every or 0
        if common.attention and any(len(category_labels(s.category)) > 1 for s in sources):
            raise BuildError(f"{common.labels or common.images}: a multi-label set (several labels in a category cell) "
                             "has no one class an attention check could name: build it with --attention 0")
        pick = partial(study_checks, sources, label_set, common, catch_every)
        report, held = run_with_checks(expdir, [SourceJob(src, [Task("original", {}, None)]) for src in sources],
                                       pick(), lambda excluded: pick(excluded=excluded), common,
                                       expdir.load() if expdir.exists() else None)
        trials = set_trials(held.tests, report, label_set, condition, timing, common.seed)
        if not trials:
            raise BuildError(f"no trials made from {common.images}: every image failed")
        for role, photos in (("practice", held.practice), ("catch", held.catch)):
            made = [(src, report.get(src, Task("original", {}, None))) for src in photos]
            made = [(src, stim) for src, stim in made if stim is not None]
            trials += unchanged_trials(role, label_set, [(src, stim.id) for src, stim in made], timing, common.seed)
        originals = [(src.name, stim.id, src.category) for src in held.attention
                     if (stim := report.get(src, Task("original", {}, None))) is not None]
        trials += attention_trials(label_set, originals, common.seed, timing, common.language)
        used = {sid for t in trials for sid in t.stimuli}
        stimuli = {stim.id: stim for stim in report.stimuli.values() if stim.id in used}
        print(f"stimuli: {report.made} made, {report.reused} already there, {len(report.failed)} images skipped")
        return Experiment(
            name=request.name, design=request.design, label_set=label_set, stimuli=stimuli, trials=trials,
            schedule=classify_schedule(common).model_copy(update={"catch_every": catch_every or None}),
            assignment=everyone_plan(trials), provenance={**build_provenance(request), "skipped_images": report.failed},
        )
