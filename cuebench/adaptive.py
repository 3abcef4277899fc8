"""Adaptive testing by QUEST+ (Watson 2017, Journal of Vision 17(3):10), shared by every runner.

An adaptive block measures one observer's threshold on one suppression condition: its stimuli
exist at every level of the condition's grid, and after each answer QUEST+ picks the level whose
answer is expected to leave the least posterior entropy over the psychometric function's
parameters. The web task, the PsychoPy runner and model evaluation all drive the same
:class:`AdaptiveRun`, so a model is measured exactly like a person.

The psychometric function falls with the suppression value x like the one the analysis fits
(``analysis.psychometric``, a logistic there): ψ(x) = γ + (1 − γ − λ)(1 − Φ((x − t)/s)), guess
rate γ = 1/C, lapse λ, on the same stimulus axis (:func:`stimulus_axis`). Its threshold t, the
``quest_threshold``, is where accuracy is half-way between chance and 1 − λ: the analysis's
``threshold_midpoint`` of a chance-floor fit. The analysis's ``threshold_halfway`` is half-way
between chance and the accuracy on the original images, the same point only when that accuracy
is 1 − λ. An adaptive block's answers are never part of the analysis's fixed-level fits. The lapse grid reaches up to 1 − γ, so an observer
far below 100 % on easy images (a model at 55 %) is inside the parameter space. Over that grid a model's
lapse prior is flat (a model may lapse arbitrarily), a person's is Beta(1, 20) (``AdaptivePlan.people_lapse_prior``):
with a flat prior a person's few answers could not tell a large lapse from a late threshold, and every person's
posterior mean landed 0.4-2.2 grid units too late. With 20-40 answers a person's lapse follows its prior, so each
prior suits the people whose mean lapse it matches: psignifit's default Beta(1, 10) (Schütt et al. 2016, Sec. 2.4;
mean 0.07 on the 0.05-step grid) read people lapsing 0-5 % up to +0.40 grid units late at 3 alternatives and 20
answers, Beta(1, 20) (0.028 on the grid) stays within 0.15 there and for people lapsing 0-10 %, and reads people
lapsing 0-20 % up to 0.48 early, where Beta(1, 10) is within 0.16 (benchmarks/bench_psychometric.py --studies,
--people-lapse-prior; docs/adaptive.md). No Beta(1, b) met both; a study expecting frequent lapses sets its own.
QUEST+ (the ``questplus`` package) models rising functions of an intensity, so the intensity is the cue's
strength −x and its mean parameter is −t. ``questplus`` builds the prior and the likelihood table; the
posterior update and the expected-entropy choice (Watson 2017, Eqs. 7-13, as ``QuestPlus.update`` and
``next_stim`` compute them) run here on plain arrays, because xarray's overhead made a 40-answer block cost
~1 s to replay, and every server request replays one.

The plan is plain data stored in experiment.json (``cuebench.trials.AdaptivePlan``); a run is
rebuilt from the answers so far (:meth:`AdaptiveRun.replay`), so a stateless server and a
resumed session continue exactly where they were.
"""

from __future__ import annotations

import functools
import random
from dataclasses import asdict, dataclass

import numpy as np

from .errors import CuebenchError
from .trials import PEOPLE_LAPSE_PRIOR, AdaptivePlan

CREDIBLE = 0.95
OUTCOMES = ("correct", "incorrect")
THRESHOLD_STEPS = 41
SPREAD_STEPS = 6
LAPSE_STEP = 0.05
LEVEL_AXIS = "level"
SESSION_PREFIX = "adaptive-"
MODEL = "model"
"""The observer kind whose lapse prior stays flat; people (``human``, ``pilot``) get the plan's Beta prior."""
FLAT = "flat"


class AdaptiveError(CuebenchError, ValueError):
    """An answer does not fit the block (it is finished, or the level is not on its grid); the message names
    the condition."""


def stimulus_axis(params_by_level: dict[int, dict]) -> tuple[str, dict[int, float]]:
    """The x axis of a condition's grid: its first numeric parameter that grows strictly with the level
    (``grid`` for patch shuffle, ``alpha`` for grayscale, ``d`` for the bilateral filter), so thresholds
    read in the transform's own units; else the level index itself. Shared by the adaptive plan and the
    psychometric fits, so both measure on the same scale."""
    levels = sorted(params_by_level)
    first = params_by_level[levels[0]]
    for name, value in first.items():
        values = [params_by_level[lv].get(name) for lv in levels]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if numeric and (len(values) == 1 or all(b > a for a, b in zip(values, values[1:]))):
            return name, {lv: float(v) for lv, v in zip(levels, values)}
    return LEVEL_AXIS, {lv: float(lv) for lv in levels}


def session_name(condition: str) -> str:
    """The response-store session of an adaptive block: its answers are keyed apart from the fixed sequence."""
    return f"{SESSION_PREFIX}{condition}"


def answers_from_rows(rows) -> list[tuple[int, bool]]:
    """(level, correct) of stored adaptive rows in the order shown, for :meth:`AdaptiveRun.replay`."""
    ordered = sorted(rows, key=lambda r: r["trial_index"])
    return [(int(r["level"]), bool(r["correct"])) for r in ordered]


def pick_trial(candidates: list[str], shown: list[str], seed: int) -> str:
    """Which trial (source image) to show at the chosen level: one this observer has seen least often,
    ties broken by a seeded shuffle, so images repeat only once every image of the level has been shown."""
    if not candidates:
        raise AdaptiveError("no trial at the chosen level")
    counts = {tid: 0 for tid in candidates}
    for tid in shown:
        if tid in counts:
            counts[tid] += 1
    order = list(candidates)
    random.Random(seed).shuffle(order)
    return min(order, key=lambda tid: counts[tid])


@dataclass(frozen=True)
class Estimate:
    """QUEST+'s posterior threshold after some answers (half-way between chance and 1 − λ): median, 95 % credible
    interval, answers so far, and the lapse prior the run used, by name (:func:`lapse_prior_name`), so the analysis
    can say which prior each observer's estimate rests on, and by its numbers, so it can weigh the observer's
    answers with that prior again."""

    quest_threshold: float
    ci_low: float
    ci_high: float
    trials: int
    lapse_prior: str = FLAT
    lapse_prior_beta: tuple[float, float] | None = None
    """The Beta(a, b) parameters of ``lapse_prior``; None for the flat prior."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Estimate":
        """An estimate as stored in a response row's ``adaptive`` column; rows written before the threshold was
        named ``quest_threshold`` carry it as ``threshold``, rows written before the prior's numbers were stored
        carry only its name (read back by :func:`lapse_prior_of_name`), and rows written before people had a lapse
        prior of their own carry none (their runs had the flat one)."""
        threshold = data["quest_threshold"] if "quest_threshold" in data else data["threshold"]
        name = str(data.get("lapse_prior", FLAT))
        beta = data["lapse_prior_beta"] if "lapse_prior_beta" in data else lapse_prior_of_name(name)
        return cls(float(threshold), float(data["ci_low"]), float(data["ci_high"]), int(data["trials"]), name,
                   None if beta is None else (float(beta[0]), float(beta[1])))


def lapse_prior_of(plan: AdaptivePlan, observer_kind: str) -> tuple[float, float] | None:
    """The Beta(a, b) lapse prior of people under a plan with a people's lapse prior; None (flat) for models
    (:data:`MODEL`) or a plan without one."""
    return None if observer_kind == MODEL else plan.people_lapse_prior


def lapse_prior_name(beta: tuple[float, float] | None) -> str:
    """``Beta(a, b)``, or ``flat`` for ``beta`` None: how estimates and the methods name a lapse prior."""
    return FLAT if beta is None else f"Beta({beta[0]:g}, {beta[1]:g})"


def lapse_weights(plan: AdaptivePlan, observer_kind: str) -> np.ndarray:
    """Prior weights over the plan's lapse grid: the Beta(a, b) density λ^(a−1) (1 − λ)^(b−1) at each grid lapse
    for people (normalised over the grid, as psignifit evaluates its priors on its grid), equal weights for
    models (:data:`MODEL`) or a plan without a people's prior."""
    return beta_weights(plan.lapses, lapse_prior_of(plan, observer_kind))


def beta_weights(lapses, beta: tuple[float, float] | None) -> np.ndarray:
    """The Beta(a, b) density at each grid lapse, normalised over the grid; equal weights for ``beta`` None."""
    lapses = np.asarray(lapses, dtype=float)
    weights = np.ones_like(lapses) if beta is None else lapses ** (beta[0] - 1) * (1 - lapses) ** (beta[1] - 1)
    return weights / weights.sum()


def lapse_prior_of_name(name: str) -> tuple[float, float] | None:
    """The Beta(a, b) parameters of a stored :func:`lapse_prior_name` (``Beta(1, 20)``), None for ``flat``: how
    estimates stored with the name alone are read."""
    if name == FLAT:
        return None
    try:
        a, b = name.removeprefix("Beta(").removesuffix(")").split(",")
        return float(a), float(b)
    except ValueError:
        raise AdaptiveError(f"lapse prior {name!r} is neither {FLAT!r} nor Beta(a, b)") from None


def plan_for_grid(condition: str, levels, values, axis: str, guess_rate: float, trials: int,
                  prior_mean: float | None = None, prior_sd: float | None = None,
                  stop_ci_width: float | None = None,
                  people_lapse_prior: tuple[float, float] | None = PEOPLE_LAPSE_PRIOR) -> AdaptivePlan:
    """A block over a grid with the default parameter space: thresholds over the grid and a quarter of its
    span beyond each end, spreads from a fortieth to half the span (log-spaced), lapses from 0
    in steps of :data:`LAPSE_STEP` up to below 1 − γ (models often stay far below 100 % on the originals, and a
    lapse beyond the grid biases the threshold: with lapses up to 0.3 only, an observer at 55 % on the originals
    measured 3.9 for a true 5.6). The plan's own checks name the condition."""
    values = tuple(float(v) for v in values)
    span = (values[-1] - values[0]) or 1.0  # a one-level grid is refused by the plan, naming the condition
    thresholds = np.linspace(values[0] - span / 4, values[-1] + span / 4, THRESHOLD_STEPS)
    spreads = np.geomspace(span / 40, span / 2, SPREAD_STEPS)
    lapses = np.arange(0, 1 - guess_rate - LAPSE_STEP / 2, LAPSE_STEP)
    return AdaptivePlan(condition=condition, levels=tuple(int(lv) for lv in levels), values=values, axis=axis,
                        guess_rate=float(guess_rate), trials=int(trials),
                        thresholds=tuple(round(float(t), 6) for t in thresholds),
                        spreads=tuple(round(float(s), 6) for s in spreads),
                        lapses=tuple(round(float(lapse), 6) for lapse in lapses),
                        prior_mean=prior_mean, prior_sd=prior_sd, stop_ci_width=stop_ci_width,
                        people_lapse_prior=people_lapse_prior)


PARAMETERS = ("mean", "sd", "lower_asymptote", "lapse_rate")
"""questplus's names of the parameter axes, in the order the posterior array keeps them."""


@dataclass(frozen=True)
class ParameterGrid:
    """QUEST+'s parameter space of one plan and observer kind, as ``questplus`` builds it: the prior over the
    flattened parameter grid, the likelihood p(outcome | level, parameters) as [outcome, level, parameters], the
    grid's shape (threshold, spread, guess rate, lapse) and the thresholds in axis units."""

    prior: np.ndarray
    likelihood: np.ndarray
    likelihood_log_likelihood: np.ndarray
    """p log p of each likelihood entry (0 where p = 0)."""
    shape: tuple[int, ...]
    thresholds: np.ndarray


@functools.lru_cache(maxsize=64)
def parameter_grid(plan: AdaptivePlan, observer_kind: str) -> ParameterGrid:
    """Built once per plan and lapse prior (a server replays a block on every request); read-only arrays."""
    from questplus import QuestPlus

    thresholds = np.asarray(plan.thresholds, dtype=float)
    prior = {"lapse_rate": lapse_weights(plan, observer_kind)}
    if plan.prior_mean is not None:
        weights = np.exp(-0.5 * ((thresholds - plan.prior_mean) / plan.prior_sd) ** 2)
        prior["mean"] = weights / weights.sum()
    quest = QuestPlus(
        stim_domain={"intensity": -np.asarray(plan.values, dtype=float)},
        param_domain={"mean": -thresholds, "sd": np.asarray(plan.spreads, dtype=float),
                      "lower_asymptote": np.array([plan.guess_rate]),
                      "lapse_rate": np.asarray(plan.lapses, dtype=float)},
        outcome_domain={"response": list(OUTCOMES)}, prior=prior, func="norm_cdf", stim_scale="linear",
        stim_selection_method="min_entropy", param_estimation_method="mean")
    from scipy.special import xlogy

    likelihood = quest.likelihoods.transpose("response", "intensity", *PARAMETERS).values.reshape(
        len(OUTCOMES), len(plan.values), -1).copy()
    grid = ParameterGrid(
        prior=quest.posterior.transpose(*PARAMETERS).values.ravel().copy(),
        likelihood=likelihood, likelihood_log_likelihood=xlogy(likelihood, likelihood),
        shape=tuple(len(quest.param_domain[name]) for name in PARAMETERS),
        thresholds=-np.asarray(quest.param_domain["mean"], dtype=float))
    for array in (grid.prior, grid.likelihood, grid.likelihood_log_likelihood, grid.thresholds):
        array.flags.writeable = False
    return grid


class AdaptiveRun:
    """One observer's QUEST+ run through a plan: :meth:`next_level`, then :meth:`update` with the answer.
    ``observer_kind`` (the response schema's ``human``, ``pilot`` or ``model``) picks the lapse prior."""

    def __init__(self, plan: AdaptivePlan, observer_kind: str):
        self.plan, self.observer_kind = plan, observer_kind
        self._grid = parameter_grid(plan, observer_kind)
        self._posterior = self._grid.prior.copy()
        self.answers: list[tuple[int, bool]] = []

    @classmethod
    def replay(cls, plan: AdaptivePlan, observer_kind: str, answers) -> "AdaptiveRun":
        """The run after ``answers`` [(level, correct), ...] in the order given (a resumed session, a server request)."""
        run = cls(plan, observer_kind)
        for level, correct in answers:
            run._take(level, correct)
        return run

    @property
    def finished(self) -> bool:
        if len(self.answers) >= self.plan.trials:
            return True
        if self.plan.stop_ci_width is None or not self.answers:
            return False
        estimate = self.estimate()
        return estimate.ci_high - estimate.ci_low <= self.plan.stop_ci_width

    def next_level(self) -> int:
        """The grid level QUEST+ shows next: the one whose answer leaves the least expected posterior entropy
        E_r[H(posterior | level, r)] (Watson 2017, Eqs. 10-13; ``QuestPlus.next_stim``, the first on ties)."""
        if self.finished:
            raise AdaptiveError(f"adaptive block for condition {self.plan.condition!r} is finished after "
                                f"{len(self.answers)} answers")
        from scipy.special import xlogy

        # joint p(r, θ | level) = p(θ) p(r | level, θ); p(r | level) = Σ_θ joint; the expected entropy
        # Σ_r p(r) H(θ | r) = Σ_r [p(r) log p(r) − Σ_θ joint log joint], 0 log 0 = 0, with
        # Σ_θ joint log joint = Σ_θ p(r | θ) · p(θ) log p(θ) + Σ_θ p(r | θ) log p(r | θ) · p(θ): products with the
        # grid's tables instead of a logarithm of every joint probability
        posterior, grid = self._posterior, self._grid
        outcome = grid.likelihood @ posterior
        joint_log_joint = grid.likelihood @ xlogy(posterior, posterior) + grid.likelihood_log_likelihood @ posterior
        expected = (xlogy(outcome, outcome) - joint_log_joint).sum(axis=0)
        return self.plan.levels[int(np.argmin(expected))]

    def update(self, level: int, correct: bool) -> Estimate:
        """Take one answer at ``level``; returns the posterior estimate after it."""
        self._take(level, correct)
        return self.estimate()

    def _take(self, level: int, correct: bool) -> None:
        """Bayes' rule on the parameter grid: posterior ∝ posterior · p(answer | level, parameters)."""
        if level not in self.plan.levels:
            raise AdaptiveError(f"adaptive block for condition {self.plan.condition!r}: level {level} is not on the "
                                f"grid {list(self.plan.levels)}")
        outcome = 0 if correct else 1
        self._posterior = self._posterior * self._grid.likelihood[outcome, self.plan.levels.index(int(level))]
        self._posterior /= self._posterior.sum()
        self.answers.append((int(level), bool(correct)))

    def marginal_thresholds(self) -> tuple[np.ndarray, np.ndarray]:
        """(thresholds ascending, their marginal posterior probabilities)."""
        marginal = self._posterior.reshape(self._grid.shape).sum(axis=(1, 2, 3))
        order = np.argsort(self._grid.thresholds)
        return self._grid.thresholds[order], marginal[order] / marginal.sum()

    def estimate(self) -> Estimate:
        """Posterior median ``quest_threshold`` and the central 95 % credible interval of its marginal posterior,
        each grid threshold standing for the cell half-way to its neighbours (the posterior's CDF rises linearly
        across a cell). The median, not the mean: with 20-40 answers the marginal has a long tail towards late
        thresholds (shallow curves), and its mean sat 0.2 grid units late even with the lapse known; cells, not
        grid points: an interval from grid point to grid point covered a person's threshold between two points
        in 8 of 10 runs."""
        low, median, high = credible_interval(*self.marginal_thresholds())
        beta = lapse_prior_of(self.plan, self.observer_kind)
        return Estimate(quest_threshold=float(median), ci_low=float(low), ci_high=float(high),
                        trials=len(self.answers), lapse_prior=lapse_prior_name(beta), lapse_prior_beta=beta)


def credible_interval(points: np.ndarray, probabilities: np.ndarray) -> tuple[float, float, float]:
    """(low, median, high) of a posterior on ascending grid ``points``: the central :data:`CREDIBLE` interval and
    the median, each point standing for the cell half-way to its neighbours (the CDF rises linearly across a
    cell; the outer cells reach as far beyond the first and last point as half a step)."""
    middles = (points[1:] + points[:-1]) / 2
    edges = np.concatenate([[2 * points[0] - middles[0]], middles, [2 * points[-1] - middles[-1]]])
    cumulative = np.concatenate([[0.0], np.cumsum(probabilities / probabilities.sum())])
    tail = (1 - CREDIBLE) / 2
    low, median, high = np.interp([tail, 0.5, 1 - tail], cumulative, edges)
    return float(low), float(median), float(high)


class ObserverBlock:
    """One observer's place in one adaptive block, rebuilt from the rows stored so far: which trial to show
    next (QUEST+ picks the level, :func:`pick_trial` the image) and what to store with each answer.
    Every runner drives its blocks through this, so people and models meet the same procedure (with the lapse
    prior of their kind, :func:`lapse_weights`)."""

    def __init__(self, plan: AdaptivePlan, observer_kind: str, trials_by_level: dict[int, list[str]], stored_rows,
                 seed: int):
        rows = sorted(stored_rows, key=lambda r: r["trial_index"])
        self.plan, self.trials_by_level, self.seed = plan, trials_by_level, seed
        self.session = session_name(plan.condition)
        self.run = AdaptiveRun.replay(plan, observer_kind, answers_from_rows(rows))
        self.shown = [r["trial_id"] for r in rows]

    @property
    def finished(self) -> bool:
        return self.run.finished

    @property
    def index(self) -> int:
        """The ``trial_index`` of the next answer in this block's session."""
        return len(self.shown)

    def next_trial(self) -> tuple[int, str]:
        """(level, trial id) to show next."""
        level = self.run.next_level()
        return level, pick_trial(self.trials_by_level.get(level, []), self.shown, self.seed + len(self.shown))

    def record(self, level: int, trial_id: str, correct: bool) -> dict:
        """Take the answer; returns the fields its response row carries besides the trial's own
        (``session``, ``trial_index``, ``adaptive`` = the posterior estimate after it)."""
        index = self.index
        estimate = self.run.update(level, correct)
        self.shown.append(trial_id)
        return {"session": self.session, "trial_index": index, "adaptive": estimate.to_dict()}


def psychometric(value, threshold: float, spread: float, guess_rate: float, lapse: float):
    """ψ(x) of the plan's model: γ + (1 − γ − λ)(1 − Φ((x − t)/s)), decreasing in the suppression value x."""
    from scipy.stats import norm

    return guess_rate + (1 - guess_rate - lapse) * norm.sf((np.asarray(value, dtype=float) - threshold) / spread)
