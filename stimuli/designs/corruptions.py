"""Corruption experiments for the robustness side of cue decomposition (Heinert et al.,
paper 000, Sec. IV: R_cd is compared with the relative accuracy under contrast
reduction, high pass, low pass, uniform noise and phase noise): each source image under
each corruption at each intensity of the Geirhos et al. (2018) / model-vs-human grids.

Conditions are the corruption names, ``level`` is the position on the grid (0 = the
weakest) and ``params`` hold the intensity; the arms rotate over participant groups as a
Latin square, so a person sees each image once.
"""

from __future__ import annotations

import math

from ..build import BuildError, SourceJob, Task, finish, run_jobs, stimulus_seed
from ..design import latin_square_plan
from ..schema import CLASSIFY_TIMING, Experiment, Trial
from ..sources import resolve_images
from .common import CLASSIFY_SCHEDULE, attention_trials, build_provenance, label_set_for
from .cue_decomposition import slug

CORRUPTION_FN = "stimuli.corruptions:corruption_task"


def add_arguments(parser) -> None:
    from ..corruptions import CORRUPTIONS

    group = parser.add_argument_group("corruptions design")
    group.add_argument("--corruptions", default=",".join(CORRUPTIONS),
                       help=f"comma-separated corruptions (default: all of {', '.join(CORRUPTIONS)})")


def intensity(value: float) -> float | str:
    """A grid value as JSON can hold it: infinity (high pass level 0) as the string 'inf'."""
    return "inf" if math.isinf(value) else value


def arms(names: list[str]) -> list[tuple[str, int, dict]]:
    """(corruption, level, params) for every corrupted version of one image."""
    from ..corruptions import CORRUPTIONS

    unknown = [n for n in names if n not in CORRUPTIONS]
    if unknown or not names:
        raise BuildError(f"unknown corruption {unknown[0] if unknown else '(none given)'!r}; "
                         f"known: {', '.join(CORRUPTIONS)}")
    return [(name, level, {CORRUPTIONS[name].param: intensity(value)})
            for name in names for level, value in enumerate(CORRUPTIONS[name].grid)]


def build(args, expdir) -> Experiment:
    sources = resolve_images(args.images, args.labels)
    label_set = label_set_for(sources, args.images)
    plan = arms([c.strip() for c in args.corruptions.split(",") if c.strip()])
    jobs = [SourceJob(src, [Task("original", {}, None)] +
                      [Task(name, params, stimulus_seed(args.seed, src.name, name, params), CORRUPTION_FN)
                       for name, _, params in plan])
            for src in sources]
    existing = expdir.load() if expdir.exists() else None
    report = run_jobs(expdir, jobs, workers=args.workers, on_error=args.on_error, existing=existing)
    failed = {f.split(":", 1)[0] for f in report.failed}
    stimuli, trials, originals = {}, [], []
    for job in jobs:
        src = job.source
        if src.name in failed:
            continue
        made = [report.get(src, task) for task in job.tasks]
        for stim in made:
            stimuli[stim.id] = stim
        originals.append((src.name, made[0].id, src.category))
        for stim, (name, level, params) in zip(made[1:], plan):
            trials.append(Trial(
                trial_id=f"{slug(src.name)}--{name}--{level}", trial_type="classify", role="test",
                stimuli=(stim.id,), choices=tuple(label_set.displayed()), correct=src.category, condition=name,
                params=params, level=level, source_image=src.name, category=src.category, timing=CLASSIFY_TIMING,
                mask_seed=stimulus_seed(args.seed, src.name, f"mask:{name}", {"level": level}),
            ))
    if not trials:
        raise BuildError("no stimuli were made: every source image failed")
    trials += attention_trials(label_set, originals, max(1, -(-len(originals) // 100)), args.seed)
    print(f"stimuli: {report.made} made, {report.reused} already there, {len(report.failed)} source images skipped")
    experiment = Experiment(
        name=args.name or expdir.root.name, design="corruptions", label_set=label_set, stimuli=stimuli,
        trials=trials, schedule=CLASSIFY_SCHEDULE, assignment=latin_square_plan(trials),
        provenance={**build_provenance(args, "corruptions"), "skipped_images": report.failed},
    )
    finish(expdir, experiment)
    return experiment
