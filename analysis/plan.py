"""Sample size from a pilot: how many people a study needs to detect a human-model difference.

The pilot gives each person's accuracy and the model's accuracy on the same trials; their
per-person differences have a standard deviation s. Assuming the main study's differences are
normal with the effect asked for as mean and s as standard deviation, the power of the paired
two-sided t-test (Burgert et al. 2025's human-model test) at n people is estimated by simulating
that many studies; the plan is the smallest n reaching the power asked for. pingouin's analytic
power of the paired t-test (noncentral t) is printed beside it as a check.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from cuebench.errors import CuebenchError


class PlanError(CuebenchError, ValueError):
    """The pilot cannot support a sample-size plan; the message says what is missing."""


@dataclass
class Plan:
    n: int | None
    power: float
    analytic_power: float
    sd: float
    pilot_people: int
    effect: float
    alpha: float
    target: float
    model: str

    def lines(self) -> list[str]:
        found = (f"{self.n} people give power {self.power:.3f} (simulated; pingouin's analytic paired t-test: "
                 f"{self.analytic_power:.3f})" if self.n else f"no n up to the search limit reaches power {self.target}")
        return [found,
                f"assumptions: per-person differences human - {self.model} are normal with mean {self.effect:+.3f} "
                f"(the effect asked for) and sd {self.sd:.3f} (from {self.pilot_people} pilot people); paired "
                f"two-sided t-test at alpha {self.alpha}; people independent; every person sees as many trials as "
                f"in the pilot"]


def person_differences(scored: pd.DataFrame, model: str | None = None) -> tuple[pd.Series, str]:
    """Each person's accuracy minus the model's accuracy on the same trials (the pairing of the t-test)."""
    models = sorted(scored.loc[scored["observer_kind"] == "model", "observer"].unique())
    if not models:
        raise PlanError("a plan needs a model's responses in the pilot (cuebench eval); none found")
    model = model or models[0]
    if model not in models:
        raise PlanError(f"no responses of model {model!r}; models: {', '.join(models)}")
    model_correct = scored[scored["observer"] == model].drop_duplicates("trial_id").set_index("trial_id")["correct"]
    people = scored[scored["observer_kind"] == "human"]
    diffs = {}
    for person, rows in people.groupby("observer"):
        shared = rows[rows["trial_id"].isin(model_correct.index)]
        if len(shared):
            diffs[person] = shared["correct"].mean() - model_correct.loc[shared["trial_id"]].mean()
    if len(diffs) < 2:
        raise PlanError(f"a plan needs >= 2 pilot people who share trials with {model}; {len(diffs)} so far")
    return pd.Series(diffs, dtype=float), model


def simulated_power(effect: float, sd: float, n: int, alpha: float, sims: int, rng: np.random.Generator) -> float:
    """Fraction of ``sims`` simulated studies of n people whose paired two-sided t-test rejects at alpha."""
    diffs = rng.normal(effect, sd, size=(sims, n))
    t = diffs.mean(axis=1) / (diffs.std(axis=1, ddof=1) / np.sqrt(n))
    return float(np.mean(2 * stats.t.sf(np.abs(t), n - 1) < alpha))


def plan(scored: pd.DataFrame, effect: float, power: float = 0.8, alpha: float = 0.05, model: str | None = None,
         sims: int = 4000, max_n: int = 500, seed: int = 0) -> Plan:
    """Smallest n whose simulated power reaches ``power`` (module docstring)."""
    import pingouin

    diffs, model = person_differences(scored, model)
    sd = float(diffs.std(ddof=1))
    if not np.isfinite(sd) or sd <= 0:
        raise PlanError("the pilot people do not vary in their difference to the model (sd 0): no variability "
                        "to plan from")
    rng = np.random.default_rng(seed)
    n, achieved = None, 0.0
    for candidate in range(2, max_n + 1):
        achieved = simulated_power(effect, sd, candidate, alpha, sims, rng)
        if achieved >= power:
            n = candidate
            break
    analytic = float(pingouin.power_ttest(d=abs(effect) / sd, n=n or max_n, alpha=alpha, contrast="paired"))
    return Plan(n=n, power=achieved, analytic_power=analytic, sd=sd, pilot_people=len(diffs), effect=effect,
                alpha=alpha, target=power, model=model)
