"""Sample size from a pilot, for the test the report runs: how many people a study needs.

The report tests humans against each model with one paired two-sided t-test per model, condition and level,
paired by item (:mod:`analysis.comparison`: each image x condition trial gives the people's mean correctness on
it minus the model's), and corrects the p-values over all of those tests by Holm's method. More people do not
add pairs to that test (its n is the number of images in the cell); they shrink the binomial noise of each
item's human mean, which each image shows to ``N x share`` people (``share``: the part of the people who see an
item, 1/G for a Latin square of G groups, read from the pilot). The plan therefore simulates that test:

- each of the cell's I items has a human accuracy ``pi_i = expit(beta + b_i)``, ``b_i ~ N(0, sigma^2)`` (items
  differ in difficulty, a logistic-normal item model, independent of the model's answers: conservative when
  the images a model misses are also harder for people), with ``beta`` set so that the people's mean accuracy is
  the model's accuracy on the cell's items plus the effect asked for;
- each item's human mean is Binomial(r_i, pi_i) / r_i with r_i from N people x share; the model's answers are
  the pilot's (a model answers the same way again);
- the test rejects at alpha / m, m the number of tests the report runs on the pilot (all models x conditions x
  levels): Holm's first step, so every test of the family has at least the power planned.

``sigma`` is estimated from the pilot by the binomial logistic-normal likelihood (Gauss-Hermite quadrature) of
the items answered, with each cell's ``beta`` integrated out (flat on :data:`BETAS`; maximising over it makes a
pilot of 3 people look alike, the ML variance's n in place of n - 1), over a grid with a flat prior: the plan is the
smallest N whose power, averaged over that posterior of sigma, reaches the power asked for (expected power,
Julious & Owen 2006), so a small pilot's uncertainty is carried into N instead of planning from a point
estimate that is too small half the time. The N of the posterior's 10 % and 90 % points are printed as the
range of plausible n. Only items seen by two or more pilot people tell how much items differ; without them the
posterior is the flat prior and the plan says so.

The search doubles N and then bisects (power is taken to rise with N). Every N's studies share their SDs and
items (common random numbers) and draw their people from a seed of N's own, so the simulated power curve rises
smoothly instead of crossing the target early by chance, and a repeated N gives the same power. Adaptive blocks (levels chosen from the answers) are left out,
as in every fixed-level statistic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd
from scipy import stats
from scipy.special import expit, gammaln, logsumexp

from cuebench.errors import CuebenchError

from .load import fixed_level_rows

SDS = np.round(np.linspace(0.0, 4.0, 41), 3)
"""Grid of the item and person SDs (logit scale) the posteriors live on; 4 spans near-always to near-never right."""
BETAS = np.linspace(-7.0, 7.0, 141)
NODES, WEIGHTS = np.polynomial.hermite_e.hermegauss(24)
WEIGHTS = WEIGHTS / WEIGHTS.sum()
"""Gauss-Hermite nodes and weights for E[f(Z)], Z ~ N(0, 1)."""
PLAUSIBLE = (0.1, 0.9)


class PlanError(CuebenchError, ValueError):
    """The pilot cannot support a sample-size plan; the message says what is missing."""


@dataclass
class Cell:
    """One test of the report's family: a model, condition and level, its items and the model's answers."""

    model: str
    condition: str
    level: int
    model_correct: np.ndarray
    share: float

    @property
    def name(self) -> str:
        return f"{self.model} on {self.condition}" + (f" level {self.level}" if self.level >= 0 else "")


@dataclass
class CellPlan:
    cell: Cell
    n: int | None
    power: float
    limit_power: float
    plausible: tuple[int | None, int | None]


@dataclass
class Plan:
    cells: list[CellPlan]
    tests: int
    alpha: float
    target: float
    effect: float
    sims: int
    pilot_people: int
    spread: Variability
    max_n: int
    unplannable: list[str] = field(default_factory=list)
    """One line per test of the family that cannot be planned (why), kept out of ``cells``."""

    @property
    def needed(self) -> CellPlan:
        """The cell that needs the most people among those some n serves (the worst cell when none is)."""
        reached = [c for c in self.cells if c.n]
        return max(reached or self.cells, key=lambda c: (c.n is None, c.n or 0))

    @property
    def n(self) -> int | None:
        return self.needed.n

    def lines(self) -> list[str]:
        worst = self.needed
        reached = [c for c in self.cells if c.n]
        short = [c for c in self.cells if not c.n]
        effect = f"a difference of {self.effect:+.3f} in accuracy on these images"
        scope = (f"the {len(reached)} test(s) planned" if len(reached) > 1 else worst.cell.name)
        low, high = worst.plausible
        if worst.n:
            head = (f"{worst.n} people give expected power {worst.power:.3f} to detect {effect} for {scope} "
                    f"({self.sims} simulated studies per n; plausible n {_n(low, self.max_n)} to "
                    f"{_n(high, self.max_n)} over the pilot's uncertainty about how much items and people differ)")
        else:
            head = _unreachable(worst, self)
        per_cell = [f"  {c.cell.name}: {_n(c.n, self.max_n)} people (power {c.power:.3f}; "
                    f"{len(c.cell.model_correct)} items, model accuracy {c.cell.model_correct.mean():.3f}, "
                    f"{_seen_by(c.cell.share)})" for c in self.cells] if len(self.cells) > 1 else []
        notes = ([f"note: {_unreachable(c, self)}" for c in short if reached]
                 + [f"note: {line}; not planned" for line in self.unplannable])
        sds = "; ".join(f"{what} SD on the logit scale {(w * SDS).sum():.2f} (posterior mean; 80 % from "
                        f"{quantile(w, PLAUSIBLE[0]):.2f} to {quantile(w, PLAUSIBLE[1]):.2f})"
                        for what, w in (("item", self.spread.item), ("person", self.spread.person)))
        items = (f"{sds}, from {self.pilot_people} pilot people and {self.spread.replicated_items} item(s) answered by "
                 f">= 2 of them")
        unknown = ([f"note: no item was answered by two pilot people, so how much items differ is unknown and the "
                    f"plan averages over item SDs from 0 to {SDS[-1]:g}; a pilot whose people share a group "
                    f"narrows it"] if self.spread.replicated_items == 0 else [])
        return [head, *per_cell, *notes, *unknown,
                f"assumptions: the report's test, per model, condition and level, paired by item, two-sided, at "
                f"alpha {self.alpha:g} / {self.tests} tests (Holm's first step over the family); the effect is on "
                f"these images: people's mean accuracy on each test's pilot images = the model's accuracy on them "
                f"{self.effect:+.3f}, not a difference on images in general; {items}; items' difficulty "
                f"independent of the model's answers; people independent, each item seen by N x share people"]


def _unreachable(plan: CellPlan, of: Plan) -> str:
    return (f"no n up to {of.max_n} people reaches power {of.target} for {plan.cell.name}: with its "
            f"{len(plan.cell.model_correct)} images even infinitely many people give power {plan.limit_power:.3f} "
            f"for a difference of {of.effect:+.3f} in accuracy on these images; more images per condition and level "
            f"are needed")


def _seen_by(share: float) -> str:
    return "every person sees each item" if share >= 0.999 else f"1 in {1 / share:.3g} people sees each item"


def _n(n: int | None, max_n: int) -> str:
    return str(n) if n else f"more than {max_n}"


def pilot_cells(scored: pd.DataFrame, model: str | None = None, condition: str | None = None,
                level: int | None = None) -> tuple[list[Cell], int, pd.DataFrame]:
    """The cells to plan (one model's, or every model's; one condition/level or all), the number of tests the
    report runs on the pilot (every model x condition x level with >= 2 items), and the people's answers as
    ``condition, level, trial_id, observer, correct``."""
    fixed = fixed_level_rows(scored).assign(level=lambda d: d["level"].fillna(-1).astype(int))
    models = sorted(fixed.loc[fixed["observer_kind"] == "model", "observer"].unique())
    people = fixed[fixed["observer_kind"] == "human"]
    if not models:
        raise PlanError("a plan needs a model's responses in the pilot (cuebench eval); none found")
    if model is not None and model not in models:
        raise PlanError(f"no responses of model {model!r}; models: {', '.join(models)}")
    if people["observer"].nunique() < 2:
        raise PlanError(f"a plan needs >= 2 pilot people; {people['observer'].nunique()} so far")
    pilot_people = people["observer"].nunique()
    cells, tests = [], 0
    for (name, cond, lvl), rows in fixed[fixed["observer_kind"] == "model"].groupby(["observer", "condition", "level"]):
        correct = rows.drop_duplicates("trial_id")["correct"].to_numpy(float)
        if len(correct) < 2:
            continue
        tests += 1
        if (model is None or name == model) and (condition is None or cond == condition) and \
                (level is None or lvl == level):
            seen = people[(people["condition"] == cond) & (people["level"] == lvl)]
            cells.append(Cell(name, cond, int(lvl), correct, share=len(seen) / pilot_people / len(correct)))
    if not cells:
        where = f"{condition or 'any condition'} level {level if level is not None else 'any'}"
        raise PlanError(f"no test of the report matches {where}: a cell needs >= 2 items the model answered")
    unseen = [c.name for c in cells if c.share == 0]
    if unseen:
        raise PlanError(f"no pilot person answered the items of {unseen[0]}: nothing to plan its test from")
    return cells, tests, people[["condition", "level", "trial_id", "observer", "correct"]]


def sd_posterior(counts: pd.DataFrame) -> np.ndarray:
    """Posterior weights over :data:`SDS` of a logit-scale random effect from ``condition, level, k, r`` rows
    (right answers of r, one row per item or per person): flat prior, each condition x level's location integrated
    out of the logistic-normal binomial likelihood over :data:`BETAS` (Gauss-Hermite quadrature over the effect)."""
    loglik = np.zeros(len(SDS))
    p = np.clip(expit(BETAS[None, :, None] + SDS[:, None, None] * NODES[None, None, :]), 1e-12, 1 - 1e-12)
    for _, cell in counts.groupby(["condition", "level"]):
        total = np.zeros((len(SDS), len(BETAS)))
        for (k, r), count in cell.groupby(["k", "r"]).size().items():
            binom = np.exp(gammaln(r + 1) - gammaln(k + 1) - gammaln(r - k + 1) + k * np.log(p)
                           + (r - k) * np.log1p(-p))  # sd x beta x node
            total += count * np.log(np.maximum((binom * WEIGHTS).sum(axis=2), 1e-300))
        loglik += logsumexp(total, axis=1)
    weights = np.exp(loglik - loglik.max())
    return weights / weights.sum()


@dataclass
class Variability:
    """Posteriors of how much items (``item``) and people (``person``) differ, logit-scale SDs on :data:`SDS`."""

    item: np.ndarray
    person: np.ndarray
    replicated_items: int

    def draw(self, rng: np.random.Generator, sims: int) -> tuple[np.ndarray, np.ndarray]:
        return (SDS[rng.choice(len(SDS), size=sims, p=self.item)], SDS[rng.choice(len(SDS), size=sims, p=self.person)])

    def at(self, q: float) -> "Variability":
        """Both SDs fixed at their posterior's q-quantile (for the range of plausible n)."""
        return Variability(_point(quantile(self.item, q)), _point(quantile(self.person, q)), self.replicated_items)


def quantile(weights: np.ndarray, q: float) -> float:
    return float(SDS[min(int(np.searchsorted(np.cumsum(weights), q)), len(SDS) - 1)])


def _point(sd: float) -> np.ndarray:
    return (SDS == sd).astype(float)


def variability(answers: pd.DataFrame) -> Variability:
    """The pilot's people answers (``condition, level, trial_id, observer, correct``) -> :class:`Variability`."""
    items = answers.groupby(["condition", "level", "trial_id"])["correct"].agg(k="sum", r="size").reset_index()
    people = answers.groupby(["condition", "level", "observer"])["correct"].agg(k="sum", r="size").reset_index()
    return Variability(sd_posterior(items), sd_posterior(people), int((items["r"] >= 2).sum()))


def items_at_mean(offsets: np.ndarray, tau: np.ndarray, mean: float, steps: int = 30) -> np.ndarray:
    """Item logits ``beta + offsets`` (sims x items) with beta solved per simulated study (bisection) so that these
    items' accuracy, averaged over them and over people whose logit SD is ``tau``, is ``mean``: the effect is a
    difference on the images the study shows, not on images in general. The average over people uses the
    probit approximation E[expit(x + tau Z)] = expit(x / sqrt(1 + pi tau^2 / 8)) (error < 0.01)."""
    scale = np.sqrt(1 + np.pi * tau ** 2 / 8)[:, None]
    low, high = np.full((len(offsets), 1), -30.0), np.full((len(offsets), 1), 30.0)
    for _ in range(steps):
        middle = (low + high) / 2
        above = expit((middle + offsets) / scale).mean(axis=1, keepdims=True) > mean
        high, low = np.where(above, middle, high), np.where(above, low, middle)
    return (low + high) / 2 + offsets


def group_sizes(people: int, groups: int) -> np.ndarray:
    """People per group when ``people`` are assigned to ``groups`` in turn (the server's rotation)."""
    return people // groups + (np.arange(groups) < people % groups)


def people_means(logits: np.ndarray, tau: np.ndarray, people: int, groups: int, rng: np.random.Generator,
                 chunk: int = 64) -> np.ndarray:
    """Each item's mean correctness over the people who see it (sims x items; NaN where nobody does): item i is
    seen by group ``i mod groups``, each of its people answers right with ``expit(logit_i + a_j)``, a_j ~ N(0, tau)
    drawn per simulated study, so one person's ability is shared by the items they see, as in a study."""
    sims, items = logits.shape
    out = np.full((sims, items), np.nan)
    for group, size in enumerate(group_sizes(people, groups)):
        seen = np.arange(items) % groups == group
        if not size or not seen.any():
            continue
        for start in range(0, sims, chunk):
            rows = slice(start, start + chunk)
            ability = tau[rows, None, None] * rng.standard_normal((len(tau[rows]), 1, size))
            p = expit(logits[rows][:, seen, None] + ability)
            out[rows, seen] = (rng.random(p.shape) < p).mean(axis=2)
    return out


def simulated_power(cell: Cell, effect: float, spread: Variability, people: int | None, alpha: float, sims: int,
                    seed: int) -> float:
    """Fraction of ``sims`` simulated studies of ``people`` (None: infinitely many) whose item-paired t-test of
    ``cell`` rejects at ``alpha`` (module docstring); the item and person SDs are drawn from their posteriors."""
    rng = np.random.default_rng(seed)  # the same SDs and items at every n: a smooth power curve to search
    y = cell.model_correct
    sigma, tau = spread.draw(rng, sims)
    logits = items_at_mean(sigma[:, None] * rng.standard_normal((sims, len(y))), tau, y.mean() + effect)
    if people is None:
        x = expit(logits)
    else:
        x = people_means(logits, tau, people, max(1, round(1 / cell.share)), np.random.default_rng([seed, people]))
    answered = ~np.isnan(x).any(axis=0)
    x = x[:, answered]
    d = x - y[answered]
    n = d.shape[1]
    if n < 2:
        return 0.0
    mean, sd = d.mean(axis=1), d.std(axis=1, ddof=1)
    constant = sd <= 1e-12
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


def plan_cell(cell: Cell, effect: float, spread: Variability, power: float, alpha: float, sims: int, max_n: int,
              seed: int) -> CellPlan:
    """The smallest N for one test (expected power over the posteriors) and the N with both SDs at their
    posteriors' :data:`PLAUSIBLE` points."""
    def search(at: Variability) -> tuple[int | None, float]:
        cache: dict[int, float] = {}

        def power_at(n: int) -> float:
            if n not in cache:
                cache[n] = simulated_power(cell, effect, at, n, alpha, sims, seed)
            return cache[n]
        return smallest_n(power_at, power, max_n)

    n, achieved = search(spread)
    ends = [search(spread.at(q))[0] for q in PLAUSIBLE]  # need not rise with the SDs: sorted, None (too many) last
    low, high = sorted(ends, key=lambda v: (v is None, v or 0))
    return CellPlan(cell, n, achieved, simulated_power(cell, effect, spread, None, alpha, sims, seed), (low, high))


def plan(scored: pd.DataFrame, effect: float, power: float = 0.8, alpha: float = 0.05, model: str | None = None,
         condition: str | None = None, level: int | None = None, sims: int = 2000, max_n: int = 500,
         seed: int = 0) -> Plan:
    """People needed for the report's item-paired, Holm-corrected t-tests to reach ``power`` (module docstring):
    for the test of ``condition`` and ``level`` (and ``model``), or for every test of the family."""
    if not 0 < power < 1 or not 0 < alpha < 1:
        raise PlanError(f"power and alpha must lie between 0 and 1, got power {power} and alpha {alpha}")
    if effect == 0:
        raise PlanError("an effect of 0 cannot be detected: give the difference to detect, e.g. --effect 0.1")
    cells, tests, people = pilot_cells(scored, model, condition, level)
    unplannable = [f"{c.name}: the model's accuracy {c.model_correct.mean():.3f} {effect:+g} puts the people's "
                   f"accuracy at {c.model_correct.mean() + effect:.3f}, outside (0, 1)"
                   for c in cells if not 0 < c.model_correct.mean() + effect < 1]
    cells = [c for c in cells if 0 < c.model_correct.mean() + effect < 1]
    if not cells:
        raise PlanError(f"no test can be planned for an effect of {effect:+g}: {unplannable[0]}"
                        + (f" (and {len(unplannable) - 1} more)" if len(unplannable) > 1 else ""))
    spread = variability(people)
    planned = [plan_cell(c, effect, spread, power, alpha / tests, sims, max_n, seed) for c in cells]
    return Plan(cells=planned, tests=tests, alpha=alpha, target=power, effect=effect, sims=sims,
                pilot_people=int(people["observer"].nunique()), spread=spread, max_n=max_n, unplannable=unplannable)
