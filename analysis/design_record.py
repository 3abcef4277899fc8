"""What an experiment directory says was shown, recorded for the methods paragraph.

The responses record what each runner did (planned and measured timing, display geometry); the
experiment's ``experiment.json`` records the design they ran: the photos and classes, every
condition's transform parameters, the practice, catch and attention trials, the Latin-square
assignment and the QUEST+ settings of adaptive blocks. :func:`experiment_record` turns the latter
into plain numbers (JSON-ready) that the analysis keeps in ``summary["design"]``; nothing here is a
default: each number is read from the experiment as built.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from cuebench.expdir import EXPERIMENT_FILE, ExperimentDir
from cuebench.trials import NOT_CLEAR, Experiment
from cuebench.words import LANGUAGE


def experiment_of(sources) -> Experiment | None:
    """The (first) experiment directory among ``sources``, loaded; None for response files."""
    for source in sources:
        if (Path(source) / EXPERIMENT_FILE).is_file():
            return ExperimentDir(Path(source)).load()
    return None


def fixed_test_trials(experiment: Experiment) -> set[str]:
    """Test trial ids that a fixed sequence shows: those of the Latin square's groups, or without one every test
    trial outside the adaptive blocks' conditions. The rest are an adaptive block's pool, from which QUEST+
    picks a few per person: counting them as trials shown would overstate the design many times over."""
    if experiment.assignment is not None:
        return {trial_id for group in experiment.assignment.groups for trial_id in group}
    adaptive = {plan.condition for plan in experiment.adaptive}
    return {t.trial_id for t in experiment.trials if t.role == "test" and t.condition not in adaptive}


def experiment_record(experiment: Experiment) -> dict:
    """The design as built: photos, classes, conditions with their parameters, trial roles and schedule,
    assignment and adaptive settings (module docstring)."""
    tests = [t for t in experiment.trials if t.role == "test"]
    fixed = fixed_test_trials(experiment)
    conditions: dict[str, list[dict]] = {}
    for trial in sorted(tests, key=lambda t: (t.condition, -1 if t.level is None else t.level)):
        levels = conditions.setdefault(trial.condition, [])
        if trial.params not in levels:
            levels.append(trial.params)
    schedule = experiment.schedule
    assignment = experiment.assignment
    return {
        "design": experiment.design,
        "photos": len({t.source_image for t in tests if t.source_image}),
        "classes": len(experiment.label_set.labels), "not_clear": bool(experiment.label_set.not_clear),
        "label_order": experiment.label_set.display_order,
        "conditions": conditions,
        "trials_by_role": dict(sorted(Counter(t.role for t in experiment.trials).items())),
        "fixed_test_trials": len(fixed), "adaptive_pool_trials": len(tests) - len(fixed),
        "practice_first": schedule.practice_first, "attention_every": schedule.attention_every,
        "catch_every": schedule.catch_every, "break_every": schedule.break_every,
        "assignment": None if assignment is None else {
            "groups": len(assignment.groups), "arms": len(assignment.arms), "images": len(assignment.images)},
        "adaptive": [{"condition": plan.condition, "axis": plan.axis, "trials": plan.trials,
                      "guess_rate": plan.guess_rate, "values": list(plan.values),
                      "thresholds": [min(plan.thresholds), max(plan.thresholds), len(plan.thresholds)],
                      "spreads": list(plan.spreads), "lapses": list(plan.lapses),
                      "people_lapse_prior": None if plan.people_lapse_prior is None else list(plan.people_lapse_prior),
                      "prior_mean": plan.prior_mean,
                      "prior_sd": plan.prior_sd, "stop_ci_width": plan.stop_ci_width}
                     for plan in experiment.adaptive],
        **({"language": experiment.language} if experiment.language != LANGUAGE else {}),  # English: as before
        **({"shown_names": names} if (names := shown_names(experiment)) else {}),
    }


def shown_names(experiment: Experiment) -> dict[str, str]:
    """Label -> the name its answer button showed, in grid order: for a study whose buttons name the labels
    (``label_set.shown``), or one in another language than English with a label grid (which then showed the
    labels themselves); empty otherwise (an English study's buttons are its labels, as before)."""
    labels = experiment.label_set
    grid = any(t.card.response == "label-grid" for t in experiment.trials)
    if not labels.shown and not (grid and experiment.language != LANGUAGE):
        return {}
    return {label: labels.name_of(label) for label in labels.displayed() if label != NOT_CLEAR}
