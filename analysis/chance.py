"""Chance levels from the trial types' cards, so a plug-in's trial type is judged against its own guess rate.

What guessing scores depends on the trial: 1/16 for a 16-label classification, 1/k for an oddity of
k images, 1/2 for a same/different task. The card of each trial's type knows it
(``cuebench.trial_types.TrialTypeCard.n_choices``); the response rows carry the trial's type and id but
not its choices, so the experiment as built supplies them. Responses read without their experiment (a
raw CSV or SQLite file) have no choices to ask about: C falls back to the number of true categories and
the oddity to DiST's triplets, and the methods say so (:data:`FROM_CATEGORIES`, :data:`DIST_TRIPLETS`).
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from cuebench.trial_types import card
from cuebench.trials import Experiment

FROM_CARD = "card"
FROM_OPTION = "option"
FROM_CATEGORIES = "categories"
"""Where C came from: the trial type's card, the ``--n-choices`` option, or the count of true categories."""


def origin(n_choices_from: str) -> str:
    """The methods' words for where C came from (``summary["n_choices_from"]``: ``card <type>``, ``option`` or
    ``categories``)."""
    if n_choices_from.startswith(FROM_CARD + " "):
        return f"C from the {n_choices_from.split(' ', 1)[1]} trial type's card"
    if n_choices_from == FROM_OPTION:
        return "C as given (the --n-choices option)"
    return ("C the number of true categories: the responses came without their experiment, so no trial type's "
            "card could be asked")


DIST_TRIPLETS = 1 / 3
"""The oddity's chance when the trials are unknown: Wen et al. 2024 (DiST) show triplets."""


def chance_per_trial(experiment: Experiment) -> pd.DataFrame:
    """``trial_id, n_choices, chance`` of every trial whose card gives a chance level (not ``segment``)."""
    rows = []
    for trial in experiment.trials:
        n = trial.card.n_choices(trial.choices)
        if n is not None:
            rows.append({"trial_id": trial.trial_id, "n_choices": n, "chance": trial.card.chance(trial.choices)})
    return pd.DataFrame(rows, columns=["trial_id", "n_choices", "chance"])


def with_chance(df: pd.DataFrame, experiment: Experiment | None) -> pd.DataFrame:
    """The responses with each trial's ``chance`` (1/C from its card); empty (NaN) without the experiment."""
    if experiment is None:
        return df.assign(chance=float("nan"))
    per_trial = chance_per_trial(experiment).set_index("trial_id")["chance"]
    return df.assign(chance=df["trial_id"].map(per_trial))


def experiment_n_choices(experiment: Experiment) -> tuple[int, str] | None:
    """C of the experiment's test trials and the trial type it is of: the most common C among the test trials
    of the type that has most of them (one C for the sections that name one, e.g. the reliance's (A - 1/C)); None
    when no test trial has a chance level."""
    tests = [t for t in experiment.trials if t.role == "test"]
    types = Counter(t.trial_type for t in tests if card(t.trial_type).n_choices(t.choices) is not None)
    if not types:
        return None
    trial_type = types.most_common(1)[0][0]
    counts = Counter(card(trial_type).n_choices(t.choices) for t in tests if t.trial_type == trial_type)
    return counts.most_common(1)[0][0], trial_type


def oddity_chance(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per group of ``keys``, the chance of its oddity answers: the mean of the trials' 1/k (what a guesser scores
    over those trials), with ``chance_from`` naming its source; DiST's 1/3 for rows without their experiment."""
    known = rows["chance"].notna() if "chance" in rows else pd.Series(False, index=rows.index, dtype=bool)
    filled = rows.assign(chance=rows["chance"].where(known, DIST_TRIPLETS) if "chance" in rows else DIST_TRIPLETS,
                         chance_from=known.map({True: "trial type's card",
                                                False: "DiST triplets assumed (responses without their experiment)"}))
    return filled.groupby(keys, as_index=False).agg(chance=("chance", "mean"), chance_from=("chance_from", "first"))
