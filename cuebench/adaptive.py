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
far below 100 % on easy images (a model at 55 %) is inside the parameter space. QUEST+ (the
``questplus`` package) models rising functions of an intensity, so the intensity is the cue's
strength −x and its mean parameter is −t.

The plan is plain data stored in experiment.json (``cuebench.trials.AdaptivePlan``); a run is
rebuilt from the answers so far (:meth:`AdaptiveRun.replay`), so a stateless server and a
resumed session continue exactly where they were.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

import numpy as np

from .errors import CuebenchError
from .trials import AdaptivePlan

CREDIBLE = 0.95
OUTCOMES = ("correct", "incorrect")
THRESHOLD_STEPS = 41
SPREAD_STEPS = 6
LAPSE_STEP = 0.05
LEVEL_AXIS = "level"
SESSION_PREFIX = "adaptive-"


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
    """QUEST+'s posterior threshold after some answers (half-way between chance and 1 − λ): mean, 95 % credible
    interval, answers so far."""

    quest_threshold: float
    ci_low: float
    ci_high: float
    trials: int

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Estimate":
        """An estimate as stored in a response row's ``adaptive`` column; rows written before the threshold was
        named ``quest_threshold`` carry it as ``threshold``."""
        threshold = data["quest_threshold"] if "quest_threshold" in data else data["threshold"]
        return cls(float(threshold), float(data["ci_low"]), float(data["ci_high"]), int(data["trials"]))


def plan_for_grid(condition: str, levels, values, axis: str, guess_rate: float, trials: int,
                  prior_mean: float | None = None, prior_sd: float | None = None,
                  stop_ci_width: float | None = None) -> AdaptivePlan:
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
                        prior_mean=prior_mean, prior_sd=prior_sd, stop_ci_width=stop_ci_width)


class AdaptiveRun:
    """One observer's QUEST+ run through a plan: :meth:`next_level`, then :meth:`update` with the answer."""

    def __init__(self, plan: AdaptivePlan):
        from questplus import QuestPlus

        self.plan = plan
        thresholds = np.asarray(plan.thresholds, dtype=float)
        prior = None
        if plan.prior_mean is not None:
            weights = np.exp(-0.5 * ((thresholds - plan.prior_mean) / plan.prior_sd) ** 2)
            prior = {"mean": weights / weights.sum()}
        self._quest = QuestPlus(
            stim_domain={"intensity": -np.asarray(plan.values, dtype=float)},
            param_domain={"mean": -thresholds, "sd": np.asarray(plan.spreads, dtype=float),
                          "lower_asymptote": np.array([plan.guess_rate]),
                          "lapse_rate": np.asarray(plan.lapses, dtype=float)},
            outcome_domain={"response": list(OUTCOMES)}, prior=prior, func="norm_cdf", stim_scale="linear",
            stim_selection_method="min_entropy", param_estimation_method="mean")
        self.answers: list[tuple[int, bool]] = []

    @classmethod
    def replay(cls, plan: AdaptivePlan, answers) -> "AdaptiveRun":
        """The run after ``answers`` [(level, correct), ...] in the order given (a resumed session, a server request)."""
        run = cls(plan)
        for level, correct in answers:
            run.update(level, correct)
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
        """The grid level QUEST+ shows next (minimum expected entropy)."""
        if self.finished:
            raise AdaptiveError(f"adaptive block for condition {self.plan.condition!r} is finished after "
                                f"{len(self.answers)} answers")
        intensity = self._quest.next_stim["intensity"]
        return self.plan.levels[int(np.argmin(np.abs(np.asarray(self.plan.values) + intensity)))]

    def update(self, level: int, correct: bool) -> Estimate:
        """Take one answer at ``level``; returns the posterior estimate after it."""
        if level not in self.plan.levels:
            raise AdaptiveError(f"adaptive block for condition {self.plan.condition!r}: level {level} is not on the "
                                f"grid {list(self.plan.levels)}")
        value = self.plan.value_of(int(level))
        self._quest.update(stim={"intensity": -value}, outcome={"response": OUTCOMES[0] if correct else OUTCOMES[1]})
        self.answers.append((int(level), bool(correct)))
        return self.estimate()

    def estimate(self) -> Estimate:
        """Posterior mean ``quest_threshold`` and the central 95 % credible interval of its marginal posterior."""
        marginal = np.asarray(self._quest.marginal_posterior["mean"], dtype=float)
        thresholds = -np.asarray(self._quest.param_domain["mean"], dtype=float)
        order = np.argsort(thresholds)
        thresholds, marginal = thresholds[order], marginal[order]
        cumulative = np.cumsum(marginal) / marginal.sum()
        tail = (1 - CREDIBLE) / 2
        low = thresholds[min(np.searchsorted(cumulative, tail), len(thresholds) - 1)]
        high = thresholds[min(np.searchsorted(cumulative, 1 - tail), len(thresholds) - 1)]
        mean = float((thresholds * marginal).sum() / marginal.sum())
        return Estimate(quest_threshold=mean, ci_low=float(low), ci_high=float(high), trials=len(self.answers))


class ObserverBlock:
    """One observer's place in one adaptive block, rebuilt from the rows stored so far: which trial to show
    next (QUEST+ picks the level, :func:`pick_trial` the image) and what to store with each answer.
    Every runner drives its blocks through this, so people and models meet the same procedure."""

    def __init__(self, plan: AdaptivePlan, trials_by_level: dict[int, list[str]], stored_rows, seed: int):
        rows = sorted(stored_rows, key=lambda r: r["trial_index"])
        self.plan, self.trials_by_level, self.seed = plan, trials_by_level, seed
        self.session = session_name(plan.condition)
        self.run = AdaptiveRun.replay(plan, answers_from_rows(rows))
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
