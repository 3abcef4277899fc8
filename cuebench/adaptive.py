"""Adaptive testing by QUEST+ (Watson 2017, Journal of Vision 17(3):10), shared by every runner.

An adaptive block measures one observer's threshold on one suppression condition: its stimuli
exist at every level of the condition's grid, and after each answer QUEST+ picks the level whose
answer is expected to leave the least posterior entropy over the psychometric function's
parameters. The web task, the PsychoPy runner and model evaluation all drive the same
:class:`AdaptiveRun`, so a model is measured exactly like a person.

The psychometric function is the one the analysis fits (``analysis.psychometric``), decreasing
with the suppression value x: ψ(x) = γ + (1 − γ − λ)(1 − Φ((x − t)/s)), guess rate γ = 1/C,
lapse λ, threshold t where accuracy is half-way between chance and 1 − λ. QUEST+ (the
``questplus`` package) models rising functions of an intensity, so the intensity is the cue's
strength −x and its mean parameter is −t.

The plan is plain data stored in experiment.json (:meth:`AdaptivePlan.to_dict`); a run is
rebuilt from the answers so far (:meth:`AdaptiveRun.replay`), so a stateless server and a
resumed session continue exactly where they were.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .errors import CuebenchError

CREDIBLE = 0.95
OUTCOMES = ("correct", "incorrect")
DEFAULT_LAPSES = (0.0, 0.03, 0.1, 0.2, 0.3)
THRESHOLD_STEPS = 41
SPREAD_STEPS = 6


class AdaptiveError(CuebenchError, ValueError):
    """An adaptive plan or answer is invalid; the message names the condition and the field."""


@dataclass(frozen=True)
class Estimate:
    """QUEST+'s posterior threshold after some answers: mean, 95 % credible interval, answers so far."""

    threshold: float
    ci_low: float
    ci_high: float
    trials: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class AdaptivePlan:
    """What experiment.json says about one adaptive block.

    ``levels`` are grid positions with stimuli, ``values`` their stimulus-axis values (``axis``,
    e.g. the patch-shuffle ``grid``), strictly increasing. The parameter space spans
    ``thresholds`` (axis units), ``spreads`` (the normal's s) and ``lapses``; the prior over the
    threshold is normal (``prior_mean``, ``prior_sd``) or, without a mean, uniform. The block stops
    after ``trials`` answers, or earlier once the credible interval is narrower than
    ``stop_ci_width`` (axis units; ``None``: never early)."""

    condition: str
    levels: tuple[int, ...]
    values: tuple[float, ...]
    axis: str
    guess_rate: float
    trials: int
    thresholds: tuple[float, ...]
    spreads: tuple[float, ...]
    lapses: tuple[float, ...] = DEFAULT_LAPSES
    prior_mean: float | None = None
    prior_sd: float | None = None
    stop_ci_width: float | None = None

    def __post_init__(self):
        self.validate()

    def _error(self, name: str, problem: str) -> AdaptiveError:
        return AdaptiveError(f"adaptive block for condition {self.condition!r}: {name} {problem}")

    def validate(self) -> None:
        if len(self.levels) < 3 or len(self.levels) != len(self.values):
            raise self._error("levels", f"need an ordered grid of at least 3 levels with one value each, got "
                                        f"{len(self.levels)} levels and {len(self.values)} values")
        if any(b <= a for a, b in zip(self.values, self.values[1:])):
            raise self._error("values", f"must increase strictly with the level, got {list(self.values)}")
        if not 0 < self.guess_rate < 1:
            raise self._error("guess_rate", f"must lie in (0, 1), got {self.guess_rate}")
        if self.trials < 1:
            raise self._error("trials", f"must be at least 1, got {self.trials}")
        if not self.thresholds or not self.spreads or min(self.spreads) <= 0:
            raise self._error("parameter space", "needs thresholds and positive spreads")
        if any(not 0 <= lapse < 1 - self.guess_rate for lapse in self.lapses):
            raise self._error("lapses", f"must lie in [0, {1 - self.guess_rate:g}), got {list(self.lapses)}")
        low, high = self.values[0], self.values[-1]
        if self.prior_mean is not None and not low <= self.prior_mean <= high:
            raise self._error("prior_mean", f"{self.prior_mean:g} lies outside the grid ({self.axis} {low:g} to "
                                            f"{high:g})")
        if self.prior_mean is not None and (self.prior_sd is None or self.prior_sd <= 0):
            raise self._error("prior_sd", f"must be a positive number with a prior mean, got {self.prior_sd}")
        if self.stop_ci_width is not None and self.stop_ci_width <= 0:
            raise self._error("stop_ci_width", f"must be positive, got {self.stop_ci_width}")

    @classmethod
    def for_grid(cls, condition: str, levels, values, axis: str, guess_rate: float, trials: int,
                 prior_mean: float | None = None, prior_sd: float | None = None,
                 stop_ci_width: float | None = None) -> "AdaptivePlan":
        """The default parameter space of a grid: thresholds over the grid and a quarter of its span beyond
        each end, spreads from a fortieth to half the span (log-spaced), lapses up to 0.3 (models often
        stay well below 100 % on the originals)."""
        values = tuple(float(v) for v in values)
        span = (values[-1] - values[0]) or 1.0  # a one-level grid is refused by validate(), naming the condition
        thresholds = np.linspace(values[0] - span / 4, values[-1] + span / 4, THRESHOLD_STEPS)
        spreads = np.geomspace(span / 40, span / 2, SPREAD_STEPS)
        return cls(condition=condition, levels=tuple(int(lv) for lv in levels), values=values, axis=axis,
                   guess_rate=float(guess_rate), trials=int(trials),
                   thresholds=tuple(round(float(t), 6) for t in thresholds),
                   spreads=tuple(round(float(s), 6) for s in spreads),
                   prior_mean=prior_mean, prior_sd=prior_sd, stop_ci_width=stop_ci_width)

    def value_of(self, level: int) -> float:
        try:
            return self.values[self.levels.index(level)]
        except ValueError:
            raise self._error("level", f"{level} is not on the grid {list(self.levels)}") from None

    def to_dict(self) -> dict:
        data = asdict(self)
        for name in ("levels", "values", "thresholds", "spreads", "lapses"):
            data[name] = list(data[name])
        return data

    @classmethod
    def from_dict(cls, data: dict, path: str = "adaptive") -> "AdaptivePlan":
        if not isinstance(data, dict):
            raise AdaptiveError(f"{path}: expected an object, got {type(data).__name__}")
        names = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - names)
        if unknown:
            raise AdaptiveError(f"{path}.{unknown[0]}: unknown field (known: {', '.join(sorted(names))})")
        missing = [n for n in ("condition", "levels", "values", "axis", "guess_rate", "trials", "thresholds",
                               "spreads") if n not in data]
        if missing:
            raise AdaptiveError(f"{path}.{missing[0]}: is missing")
        try:
            return cls(**{**data, **{n: tuple(data[n]) for n in ("levels", "values", "thresholds", "spreads",
                                                                  "lapses") if n in data}})
        except TypeError as err:
            raise AdaptiveError(f"{path}: {err}") from None


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
        value = self.plan.value_of(int(level))
        self._quest.update(stim={"intensity": -value}, outcome={"response": OUTCOMES[0] if correct else OUTCOMES[1]})
        self.answers.append((int(level), bool(correct)))
        return self.estimate()

    def estimate(self) -> Estimate:
        """Posterior mean threshold and the central 95 % credible interval of its marginal posterior."""
        marginal = np.asarray(self._quest.marginal_posterior["mean"], dtype=float)
        thresholds = -np.asarray(self._quest.param_domain["mean"], dtype=float)
        order = np.argsort(thresholds)
        thresholds, marginal = thresholds[order], marginal[order]
        cumulative = np.cumsum(marginal) / marginal.sum()
        tail = (1 - CREDIBLE) / 2
        low = thresholds[min(np.searchsorted(cumulative, tail), len(thresholds) - 1)]
        high = thresholds[min(np.searchsorted(cumulative, 1 - tail), len(thresholds) - 1)]
        mean = float((thresholds * marginal).sum() / marginal.sum())
        return Estimate(threshold=mean, ci_low=float(low), ci_high=float(high), trials=len(self.answers))


def psychometric(value, threshold: float, spread: float, guess_rate: float, lapse: float):
    """ψ(x) of the plan's model: γ + (1 − γ − λ)(1 − Φ((x − t)/s)), decreasing in the suppression value x."""
    from scipy.stats import norm

    return guess_rate + (1 - guess_rate - lapse) * norm.sf((np.asarray(value, dtype=float) - threshold) / spread)
