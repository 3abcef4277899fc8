"""Pieces every design needs: label sets, provenance, attention trials, the finished experiment."""

from __future__ import annotations

import platform
import random
import re
import sys
from pathlib import PurePath
from typing import Callable

import numpy as np

from cuebench import __version__
from cuebench.adaptive import plan_for_grid, stimulus_axis
from cuebench.labels import IMAGENET16, IMAGENET16_NAME, imagenet_mapping
from ..build import BuildError, SourceJob, Task, finish, run_jobs, stimulus_seed
from cuebench.design import latin_square_plan
from cuebench.trials import CLASSIFY_TIMING, NOT_CLEAR, Experiment, LabelSet, Schedule, Trial
from ..sources import DEFAULT_LABEL_INDICES, SourceImage, resolve_images


def label_set_for(sources: list[SourceImage], spec: str) -> LabelSet:
    """The answer labels: the 16 ImageNet entry-level classes when the images use them,
    the embedded default's labels (with their ImageNet indices), or the folder's classes with
    the ImageNet classes their names match (``cuebench.labels.imagenet_mapping``)."""
    categories = sorted({s.category for s in sources if s.category})
    if not categories:
        raise BuildError(f"images from {spec!r} have no classes: use a folder with one sub-folder per class, "
                         "or a flat folder with --labels labels.csv (columns image,category)")
    if set(categories) <= set(IMAGENET16):
        return LabelSet(IMAGENET16_NAME, IMAGENET16)
    if spec == "default":
        return LabelSet("default", tuple(DEFAULT_LABEL_INDICES), imagenet_indices=dict(DEFAULT_LABEL_INDICES))
    return LabelSet("custom", tuple(categories), imagenet_indices=imagenet_mapping(categories))


WHERE_IT_RAN = ("func", "workers", "executor", "executor_option", "shard_size")
"""Options that say where and how fast a build ran, not what it made: left out of the recorded
options, so the same experiment built locally or on a cluster writes the same experiment.json."""


def build_provenance(args, design: str) -> dict:
    """How the experiment was made: command, options, versions (no timestamp, so a rebuild
    with the same inputs writes the same experiment.json)."""
    import cv2
    import PIL

    options = {k: _portable(v) for k, v in sorted(vars(args).items()) if k not in WHERE_IT_RAN and _jsonable(v)}
    return {
        "design": design,
        "command": "cuebench " + " ".join(map(_portable, sys.argv[1:])) if sys.argv and "cuebench" in sys.argv[0]
        else None,
        "options": options,
        "software": {"cuebench": __version__, "python": platform.python_version(), "numpy": np.__version__,
                     "pillow": PIL.__version__, "opencv": cv2.__version__},
    }


def _portable(value):
    """An absolute path as its last part: the folder is shared, the researcher's file system is not."""
    return PurePath(value).name if isinstance(value, str) and PurePath(value).is_absolute() else value


def _jsonable(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, list, tuple))


def attention_trials(label_set: LabelSet, originals: list[tuple[str, str, str]], count: int, seed: int) -> list[Trial]:
    """Burgert et al. 2025, appendix E.2: "you will see an A; click B". ``originals`` are
    (source image, stimulus id, category A); B is another label, chosen by seed. The image
    is an original photo of class A, so the check tests reading, not recognition."""
    if not originals or count <= 0:
        return []
    rng = random.Random(seed)
    labels = [lab for lab in label_set.displayed() if lab != NOT_CLEAR]
    trials = []
    for k in range(count):
        source, sid, a = originals[k % len(originals)]
        b = rng.choice([lab for lab in labels if lab != a])
        trials.append(Trial(
            trial_id=f"attention-{k + 1:03d}", trial_type="classify", role="attention", stimuli=(sid,),
            choices=tuple(label_set.displayed()), correct=b, condition="attention", source_image=source,
            category=a, timing=CLASSIFY_TIMING,
            instruction=f"Attention check: the next image shows a {a}. Please click \u201c{b}\u201d.",
        ))
    return trials


CLASSIFY_SCHEDULE = Schedule(break_every=100, attention_every=100, catch_every=None)
"""Burgert et al. 2025: an attention test every 100 trials; a break every 100."""


def slug(name: str) -> str:
    """A source name as a trial-id part."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


Arm = tuple[str, "int | None", dict]  # (condition, level on its grid, params)


def adaptive_plans(specs: list[str], plan: list[Arm], n_labels: int) -> tuple:
    """QUEST+ blocks from ``--adaptive COND:TRIALS[:PRIOR_MEAN:PRIOR_SD]`` over the conditions being built:
    the condition's grid levels, its stimulus axis (``cuebench.adaptive.stimulus_axis``) and guess rate 1/C.
    Checked before any stimulus is made, so a bad block leaves nothing behind."""
    plans = []
    for spec in specs:
        parts = spec.split(":")
        try:
            if len(parts) not in (2, 4):
                raise ValueError
            condition, trials = parts[0], int(parts[1])
            prior = (float(parts[2]), float(parts[3])) if len(parts) == 4 else (None, None)
        except ValueError:
            raise BuildError(f"--adaptive {spec!r}: expected CONDITION:TRIALS or CONDITION:TRIALS:PRIOR_MEAN:PRIOR_SD "
                             "(e.g. patch_shuffle:40)") from None
        params = {level: p for cond, level, p in plan if cond == condition and level is not None}
        if not params:
            raise BuildError(f"--adaptive {spec!r}: condition {condition!r} is not among the conditions built "
                             f"({', '.join(sorted({c for c, _, _ in plan}))})")
        axis, values = stimulus_axis(params)
        plans.append(plan_for_grid(condition, list(values), list(values.values()), axis, 1 / n_labels,
                                           trials, prior_mean=prior[0], prior_sd=prior[1]))
    return tuple(plans)


def grid_experiment(args, expdir, design: str, plan: list[Arm], fn: str,
                    seed_for: Callable[[str, str, dict], int | None], original_trials: bool) -> Experiment:
    """Every source image under every (condition, level) of ``plan``, one ``classify`` trial
    each, made by the per-image transform ``fn`` in parallel; the arms rotate over
    participant groups as a Latin square, with attention checks every 100 trials.

    ``original_trials`` adds the unchanged image as condition ``original`` (the baseline of
    relative accuracy); grids whose level 0 is the unchanged image leave it out. Conditions with an
    adaptive block (``args.adaptive``) keep their trials at every level but leave the Latin square:
    QUEST+ chooses among them per observer.
    """
    sources = resolve_images(args.images, args.labels)
    label_set = label_set_for(sources, args.images)
    adaptive = adaptive_plans(getattr(args, "adaptive", None) or [], plan, len(label_set.labels))
    adaptive_conditions = {p.condition for p in adaptive}
    jobs = [SourceJob(src, [Task("original", {}, None)] +
                      [Task(cond, params, seed_for(src.name, cond, params), fn) for cond, _, params in plan])
            for src in sources]
    existing = expdir.load() if expdir.exists() else None
    report = run_jobs(expdir, jobs, workers=args.workers, on_error=args.on_error, existing=existing)
    failed = {f.split(":", 1)[0] for f in report.failed}
    arms = ([("original", None, {})] if original_trials else []) + list(plan)
    stimuli, trials, originals = {}, [], []
    for job in jobs:
        src = job.source
        if src.name in failed:
            continue
        made = [report.get(src, task) for task in job.tasks]
        stimuli.update((stim.id, stim) for stim in made)
        originals.append((src.name, made[0].id, src.category))
        for stim, (cond, level, params) in zip(made if original_trials else made[1:], arms):
            trials.append(Trial(
                trial_id=f"{slug(src.name)}--{cond}" + ("" if level is None else f"--{level}"),
                trial_type="classify", role="test", stimuli=(stim.id,), choices=tuple(label_set.displayed()),
                correct=src.category, condition=cond, params=params, level=level, source_image=src.name,
                category=src.category, timing=CLASSIFY_TIMING,
                mask_seed=stimulus_seed(args.seed, src.name, f"mask:{cond}", {"level": level}),
            ))
    if not trials:
        raise BuildError("no stimuli were made: every source image failed")
    trials += attention_trials(label_set, originals, max(1, -(-len(originals) // 100)), args.seed)
    print(f"stimuli: {report.made} made, {report.reused} already there, {len(report.failed)} source images skipped")
    experiment = Experiment(
        name=args.name or expdir.root.name, design=design, label_set=label_set, stimuli=stimuli, trials=trials,
        schedule=CLASSIFY_SCHEDULE,
        assignment=latin_square_plan([t for t in trials if t.condition not in adaptive_conditions]),
        provenance={**build_provenance(args, design), "skipped_images": report.failed}, adaptive=adaptive,
    )
    finish(expdir, experiment)
    return experiment
