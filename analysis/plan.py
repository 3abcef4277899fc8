"""Sample size from a pilot: how many people a study needs to detect a human-model difference.

The pilot gives each person's accuracy and the model's accuracy on the same trials (the model's
answers to exactly the trials that person saw); their differences are the paired units of the
two-sided paired t-test (Burgert et al. 2025's human-model test). The power of that test at n
people is estimated by simulating studies of n people, drawn in one of two ways:

- ``resample`` (default): the n differences are drawn with replacement from the pilot's per-person
  differences, shifted so that their mean is the effect asked for (a shifted bootstrap, Efron &
  Tibshirani 1993, Sec. 16.2): the pilot's spread and shape (skew, ceiling effects), not its mean.
- ``normal``: the differences are normal with the effect as mean and the pilot's standard deviation,
  the model pingouin solves analytically (noncentral t); it is kept as the cross-check of the
  simulation and printed beside the resampled answer with pingouin's n.

The plan is the smallest n whose simulated power reaches the power asked for, found by doubling n
and then bisecting (power is taken to rise with n; each n's studies are drawn from a seed of their
own, so a repeated n gives the same power).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
from scipy import stats

from cuebench.errors import CuebenchError

from .load import fixed_level_rows

METHODS = ("resample", "normal")
FEW_PILOT_PEOPLE = 10
"""Below this many pilot people the resampled differences are too few distinct values to trust alone."""


class PlanError(CuebenchError, ValueError):
    """The pilot cannot support a sample-size plan; the message says what is missing."""


@dataclass
class Plan:
    method: str
    n: int | None
    power: float
    normal_n: int | None
    analytic_n: float
    analytic_power: float
    sd: float
    pilot_mean: float
    pilot_people: int
    effect: float
    alpha: float
    target: float
    model: str
    sims: int

    def lines(self) -> list[str]:
        found = (f"{self.n} people give power {self.power:.3f} ({self.method}, {self.sims} simulated studies per n)"
                 if self.n else f"no n up to the search limit reaches power {self.target} ({self.method})")
        check = (f"cross-check: normal differences give n = {self.normal_n} (simulated); pingouin's analytic paired "
                 f"t-test n = {self.analytic_n:.1f}, power {self.analytic_power:.3f} at "
                 f"{self.n or 'the search limit'}")
        drawn = (f"people drawn with replacement from the {self.pilot_people} pilot people's differences "
                 f"human - {self.model} (mean {self.pilot_mean:+.3f}, sd {self.sd:.3f}), shifted to mean "
                 f"{self.effect:+.3f} (the effect asked for)" if self.method == "resample" else
                 f"per-person differences human - {self.model} normal with mean {self.effect:+.3f} (the effect "
                 f"asked for) and sd {self.sd:.3f} (from {self.pilot_people} pilot people)")
        few = ([f"note: {self.pilot_people} pilot people give only {self.pilot_people} distinct differences to resample, "
                f"so the power jumps between neighbouring n; with fewer than {FEW_PILOT_PEOPLE} pilot people weigh "
                f"the normal model's n as well"] if self.method == "resample" and self.pilot_people < FEW_PILOT_PEOPLE
               else [])
        return [found, check, *few,
                f"assumptions: {drawn}; each person sees as many trials as in the pilot, the model answers the same "
                f"trials as in the pilot; people independent; paired two-sided t-test at alpha {self.alpha}; power "
                f"rises with n (bisection)"]


def person_differences(scored: pd.DataFrame, model: str | None = None) -> tuple[pd.Series, str]:
    """Each person's accuracy minus the model's accuracy on the same trials (the pairing of the t-test), over the
    fixed sequence only (:func:`analysis.load.fixed_level_rows`: the levels of adaptive blocks follow the answers)."""
    scored = fixed_level_rows(scored)
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


Sampler = Callable[[np.random.Generator, int, int], np.ndarray]


def sampler(method: str, diffs: pd.Series, effect: float) -> Sampler:
    """``draw(rng, sims, n)`` -> sims x n per-person differences of simulated studies (module docstring)."""
    if method == "normal":
        sd = float(diffs.std(ddof=1))
        return lambda rng, sims, n: rng.normal(effect, sd, size=(sims, n))
    if method == "resample":
        shifted = diffs.to_numpy(dtype=float) - float(diffs.mean()) + effect
        return lambda rng, sims, n: shifted[rng.integers(0, len(shifted), size=(sims, n))]
    raise PlanError(f"method must be one of {', '.join(METHODS)}, got {method!r}")


def simulated_power(draw: Sampler, n: int, alpha: float, sims: int, seed: int) -> float:
    """Fraction of ``sims`` simulated studies of n people whose paired two-sided t-test rejects at alpha; a study
    whose differences are all equal (possible when resampling a small pilot) rejects when they are not 0."""
    diffs = draw(np.random.default_rng([seed, n]), sims, n)
    mean, sd = diffs.mean(axis=1), diffs.std(axis=1, ddof=1)
    constant = sd <= 1e-12 * np.maximum(1.0, np.abs(mean))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * stats.t.sf(np.abs(mean / (sd / np.sqrt(n))), n - 1)
    return float(np.mean(np.where(constant, np.abs(mean) > 1e-12, p < alpha)))


def smallest_n(power_at: Callable[[int], float], target: float, max_n: int) -> tuple[int | None, float]:
    """The smallest n in 2..max_n with ``power_at(n) >= target``, by doubling and then bisection (power taken to
    rise with n): O(log max_n) evaluations instead of one per n. (None, power at max_n) when none reaches it."""
    if max_n < 2:
        raise PlanError(f"the search limit must be >= 2 people, got {max_n}")
    low, high = 1, 2
    while power_at(high) < target:
        if high >= max_n:
            return None, power_at(max_n)
        low, high = high, min(2 * high, max_n)
    while high - low > 1:
        middle = (low + high) // 2
        if power_at(middle) >= target:
            high = middle
        else:
            low = middle
    return high, power_at(high)


def plan(scored: pd.DataFrame, effect: float, power: float = 0.8, alpha: float = 0.05, model: str | None = None,
         sims: int = 4000, max_n: int = 500, seed: int = 0, method: str = "resample") -> Plan:
    """Smallest n whose simulated power reaches ``power`` (module docstring), with the normal model's n and
    pingouin's analytic n as the cross-check."""
    import pingouin

    if method not in METHODS:
        raise PlanError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if not 0 < power < 1 or not 0 < alpha < 1:
        raise PlanError(f"power and alpha must lie between 0 and 1, got power {power} and alpha {alpha}")
    if effect == 0:
        raise PlanError("an effect of 0 cannot be detected: give the difference to detect, e.g. --effect 0.1")
    diffs, model = person_differences(scored, model)
    sd = float(diffs.std(ddof=1))
    if not np.isfinite(sd) or sd <= 0:
        raise PlanError("the pilot people do not vary in their difference to the model (sd 0): no variability "
                        "to plan from")
    found = {}
    for name in dict.fromkeys((method, "normal")):
        draw, cache = sampler(name, diffs, effect), {}

        def power_at(n: int, draw=draw, cache=cache) -> float:
            if n not in cache:
                cache[n] = simulated_power(draw, n, alpha, sims, seed)
            return cache[n]

        found[name] = smallest_n(power_at, power, max_n)
    n, achieved = found[method]
    d = abs(effect) / sd
    analytic_n = float(pingouin.power_ttest(d=d, power=power, alpha=alpha, contrast="paired"))
    analytic = float(pingouin.power_ttest(d=d, n=n or max_n, alpha=alpha, contrast="paired"))
    return Plan(method=method, n=n, power=achieved, normal_n=found["normal"][0], analytic_n=analytic_n,
                analytic_power=analytic, sd=sd, pilot_mean=float(diffs.mean()), pilot_people=len(diffs),
                effect=effect, alpha=alpha, target=power, model=model, sims=sims)
