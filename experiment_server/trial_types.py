"""How the server serves each trial type: one row per type (the lab runner's ``ResponseMode``
table and the web task's ``TRIAL_TYPES`` are the other runners' rows), so a new trial type is a
new row here and not a branch in the plan, the validation and the mask route."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cuebench.errors import CuebenchError
from cuebench.trials import NOT_CLEAR, Experiment, Trial


@dataclass(frozen=True)
class ServedTrialType:
    """``answers`` gives the responses a trial accepts, in the order the browser shows them;
    ``on_label_grid`` whether they are buttons in the lab's label grid; ``masked`` whether a
    noise mask can follow the image (the trial's timing decides whether one does)."""

    answers: Callable[[Experiment, Trial], list[str]]
    on_label_grid: bool
    masked: bool


def _labels_in_grid_order(experiment: Experiment, trial: Trial) -> list[str]:
    """The trial's labels in the label set's display order, "not clear" last where the set offers it."""
    return [label for label in experiment.label_set.displayed() if label in trial.choices or label == NOT_CLEAR]


def _positions(experiment: Experiment, trial: Trial) -> list[str]:
    return list(trial.choices)


SERVED_TRIAL_TYPES: dict[str, ServedTrialType] = {
    "classify": ServedTrialType(answers=_labels_in_grid_order, on_label_grid=True, masked=True),
    "oddity": ServedTrialType(answers=_positions, on_label_grid=False, masked=False),
}


class UnservedTrialType(CuebenchError):
    """An experiment holds a trial type this server has no row for."""


def served(trial: Trial) -> ServedTrialType:
    try:
        return SERVED_TRIAL_TYPES[trial.trial_type]
    except KeyError:
        raise UnservedTrialType(f"trial {trial.trial_id!r} has trial type {trial.trial_type!r}, which the web "
                                f"server cannot serve (it serves {', '.join(SERVED_TRIAL_TYPES)})") from None


def allowed_responses(experiment: Experiment, trial: Trial) -> list[str]:
    """The answers a trial accepts, in display order."""
    return served(trial).answers(experiment, trial)
