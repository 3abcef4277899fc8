"""Feature-suppression experiments (Burgert et al. 2025): each source image, unchanged and
under each suppression condition at each level of its parameter grid.

``--grid full`` takes every level of every condition (the model study, Sec. 5);
``--grid human`` the four settings of the human study (Sec. 4.2: patch shuffle g=3 and
g=6, bilateral d=12/sigma_c=170/sigma_s=75, grayscale) beside the originals, which rotate
over groups of five participants as a Latin square.
"""

from __future__ import annotations

import re

from ..build import BuildError, SourceJob, Task, finish, run_jobs, stimulus_seed
from ..design import latin_square_plan
from ..schema import CLASSIFY_TIMING, Experiment, Trial
from ..sources import resolve_images
from .common import CLASSIFY_SCHEDULE, attention_trials, build_provenance, label_set_for

DEFAULT_CONDITIONS = ("patch_shuffle", "patch_rotation", "bilateral", "gaussian_blur", "grayscale",
                      "channel_shuffle", "grid_overlay")
SUPPRESS_FN = "stimuli.suppression:suppress"


def add_arguments(parser) -> None:
    group = parser.add_argument_group("suppression design")
    group.add_argument("--conditions", default=",".join(DEFAULT_CONDITIONS),
                       help="comma-separated suppression conditions; 'a+b' suppresses two cues jointly "
                            f"(default: {','.join(DEFAULT_CONDITIONS)})")
    group.add_argument("--grid", choices=("full", "human"), default="full",
                       help="every level of each condition's parameter grid, or the human-study settings")


def arms(conditions: list[str], grid: str) -> list[tuple[str, int | None, dict]]:
    """(condition, level, params) for every suppressed version of one image; ``level`` is
    the setting's index on its condition's grid."""
    from ..suppression import HUMAN_STUDY, get_condition

    if grid == "human":
        out = []
        for _, name, params in HUMAN_STUDY:
            if name == "original":
                continue
            cond_grid = get_condition(name).grid
            out.append((name, cond_grid.index(params) if params in cond_grid else None, params))
        return out
    return [(name, level, params) for name in conditions
            for level, params in enumerate(get_condition(name).grid)]


def _seed(seed: int, source: str, condition: str, params: dict) -> int:
    """Stochastic conditions get a per-stimulus seed; deterministic ones seed 0, so their
    stimuli (and content addresses) do not change with ``--seed``."""
    from ..suppression import get_condition

    return stimulus_seed(seed, source, condition, params) if get_condition(condition).stochastic else 0


def trial_id(source: str, condition: str, level: int | None) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", source)
    return f"{slug}--{condition}" + ("" if level is None else f"--{level}")


def build(args, expdir) -> Experiment:
    sources = resolve_images(args.images, args.labels)
    label_set = label_set_for(sources, args.images)
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    plan = arms(conditions, args.grid)
    jobs = []
    for src in sources:
        tasks = [Task("original", {}, None)]
        tasks += [Task(cond, params, _seed(args.seed, src.name, cond, params), SUPPRESS_FN) for cond, _, params in plan]
        jobs.append(SourceJob(src, tasks))
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
        specs = [("original", None, {})] + plan
        for stim, (cond, level, params) in zip(made, specs):
            trials.append(Trial(
                trial_id=trial_id(src.name, cond, level), trial_type="classify", role="test", stimuli=(stim.id,),
                choices=tuple(label_set.displayed()), correct=src.category, condition=cond, params=params,
                level=level, source_image=src.name, category=src.category, timing=CLASSIFY_TIMING,
                mask_seed=stimulus_seed(args.seed, src.name, f"mask:{cond}", {"level": level}),
            ))
    if not trials:
        raise BuildError("no stimuli were made: every source image failed")
    n_attention = max(1, -(-len(sources) // 100))
    trials += attention_trials(label_set, originals, n_attention, args.seed)
    print(f"stimuli: {report.made} made, {report.reused} already there, {len(report.failed)} source images skipped")
    experiment = Experiment(
        name=args.name or expdir.root.name, design="suppression", label_set=label_set, stimuli=stimuli,
        trials=trials, schedule=CLASSIFY_SCHEDULE, assignment=latin_square_plan(trials),
        provenance={**build_provenance(args, "suppression"), "skipped_images": report.failed},
    )
    finish(expdir, experiment)
    return experiment
