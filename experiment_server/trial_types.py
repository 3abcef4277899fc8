"""What the server reads from a trial's card (``cuebench.trial_types``): the answers it accepts and
the constants and words the browser shows it with, so the web task holds no table of trial types,
only its two ways of answering (``RESPONSES``)."""

from __future__ import annotations

from cuebench.errors import CuebenchError
from cuebench.trial_types import RESPONSES
from cuebench.trials import NOT_CLEAR, Experiment, Trial
from cuebench.words import LANGUAGE


class UnservedTrialType(CuebenchError):
    """An experiment holds a trial type whose card has no response the web task knows."""


def check_served(trial: Trial) -> None:
    """A trial the web task can show: its card answers with one of the task's ``RESPONSES``."""
    card = trial.card
    if card.response not in RESPONSES:
        raise UnservedTrialType(f"trial {trial.trial_id!r} has trial type {trial.trial_type!r}, whose response "
                                f"{card.response!r} the web task cannot show (it shows {', '.join(RESPONSES)})")


def allowed_responses(experiment: Experiment, trial: Trial) -> list[str]:
    """The answers a trial accepts, in the order the browser shows them: labels in the label set's display
    order, "not clear" last where the set offers it; other answers in the trial's order."""
    if trial.card.answers == "labels":
        return [label for label in experiment.label_set.displayed() if label in trial.choices or label == NOT_CLEAR]
    return list(trial.choices)


def presentation(trial: Trial, language: str = LANGUAGE) -> dict:
    """The card's constants and words the browser shows a trial with: its response (``label-grid``: buttons
    in ``grid``; ``keys``: ``keys`` maps each answer to its key, ``prompt`` says what to press, in the study's
    ``language``) and whether its images are numbered."""
    card = trial.card
    return {"response": card.response, "numbered": card.numbered,
            "prompt": card.say(card.prompt, language) if card.prompt else None,
            "keys": card.answer_keys(trial) if card.response == "keys" else None}
