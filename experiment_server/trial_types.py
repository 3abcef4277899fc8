"""Whether the web task can show a trial's card (``cuebench.trial_types``): the task holds no table of
trial types, only its two ways of answering (``RESPONSES``); the answers a trial accepts and the
card's constants and words come with each trial's plan (``cuebench.runner_contract.TrialPlan``)."""

from __future__ import annotations

from cuebench.errors import CuebenchError
from cuebench.trial_types import RESPONSES
from cuebench.trials import Trial


class UnservedTrialType(CuebenchError):
    """An experiment holds a trial type whose card has no response the web task knows."""


def check_served(trial: Trial) -> None:
    """A trial the web task can show: its card answers with one of the task's ``RESPONSES``."""
    card = trial.card
    if card.response not in RESPONSES:
        raise UnservedTrialType(f"trial {trial.trial_id!r} has trial type {trial.trial_type!r}, whose response "
                                f"{card.response!r} the web task cannot show (it shows {', '.join(RESPONSES)})")
