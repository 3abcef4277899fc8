"""The population mean of adaptive (QUEST+) thresholds: Student's t-interval over observers, extended to observers
whose threshold lies beyond the tested grid (censored), who are neither a point nor left out.

Thresholds differ between people, t ~ Normal(μ, σ). An observer whose answers locate the threshold inside the
tested grid enters as a point, their posterior median t̂_i (its measurement error is part of the spread over
observers, as in the t-interval). With a flat prior on μ and p(σ) ∝ 1/σ, the posterior of μ given points alone is
Student's t with N − 1 degrees of freedom around their mean, scale SD/√N: exactly the t-interval
t̄ ± t_{0.975, N−1} · SD/√N (Gelman et al. 2013, Bayesian Data Analysis, Sec. 3.2).

An observer whose threshold lies below the grid's easiest level answers at chance there: their likelihood of t,
under QUEST+'s model ψ(x) = γ + (1 − γ − λ)(1 − Φ((x − t)/s)) (Watson 2017) with the spread and lapse integrated
out (:func:`observer_likelihood`), is flat below the grid and near 0 inside it. A point for them would be an
arbitrary place in QUEST+'s extension of the grid, and leaving them out drops the lowest thresholds (at 3
alternatives, 20 trials, mean 4 and SD 1.5 on the grid 2-16 the mean of the others sat +0.31 late). They enter
with their likelihood, ∫ L_i(t) N(t; μ, σ) dt, as censored data do in a Tobit model (Tobin 1958), here with the
soft bound the answers give. μ's posterior median and central 95 % interval are the population mean.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm

from cuebench.adaptive import CREDIBLE, credible_interval, psychometric

EXTENSION = 1.0
"""How far the thresholds of the likelihoods reach beyond each end of the tested grid, in grid spans: past it a
censored observer's likelihood is flat (chance at every tested level), so the first and last cells stand for
everything beyond."""
MEAN_EXTENSION = 2.0
"""How far the population mean μ is evaluated beyond each end of the tested grid, in grid spans (flat prior over
it): far enough that a heavy-tailed but proper posterior of μ (few observers) keeps its 95 % interval."""
STEPS_PER_SPAN = 60
SIGMA_STEPS = 60
SIGMA_RANGE = (1e-3, 3.0)
"""σ from a thousandth of the grid's span to three spans, log-spaced: the prior 1/σ is flat on log σ."""


def threshold_axis(values, extension: float = EXTENSION) -> np.ndarray:
    """Thresholds at which likelihoods are evaluated: the tested grid and ``extension`` spans beyond each end,
    :data:`STEPS_PER_SPAN` steps per span (with :data:`MEAN_EXTENSION`, the values of μ, on the same steps)."""
    low, high = float(np.min(values)), float(np.max(values))
    span = (high - low) or 1.0
    steps = int(round(STEPS_PER_SPAN * (1 + 2 * extension)))
    return np.linspace(low - extension * span, high + extension * span, steps + 1)


def observer_likelihood(shown, correct, thresholds, spreads, lapses, lapse_weights, guess_rate: float) -> np.ndarray:
    """L(t) = Σ_s Σ_λ p(s) p(λ) Π_k ψ(x_k)^r_k (1 − ψ(x_k))^(1 − r_k) at each threshold t, the spread uniform over
    ``spreads`` (QUEST+'s default prior) and the lapse weighted by ``lapse_weights``; scaled to a maximum of 1."""
    x = np.asarray(shown, dtype=float)
    r = np.asarray(correct, dtype=bool)
    psi = psychometric(x, np.asarray(thresholds, dtype=float)[:, None, None, None],
                       np.asarray(spreads, dtype=float)[None, :, None, None], guess_rate,
                       np.asarray(lapses, dtype=float)[None, None, :, None])
    with np.errstate(divide="ignore"):
        log = np.where(r, np.log(psi), np.log1p(-psi)).sum(axis=-1)
        log = log + np.log(np.asarray(lapse_weights, dtype=float))[None, None, :]
    log = logsumexp(log.reshape(len(log), -1), axis=1)
    return np.exp(log - log.max())


@dataclass(frozen=True)
class PopulationEstimate:
    """μ's posterior median and central 95 % interval (±inf where open; the median then NaN: not identified), and
    the posterior median of the between-observer SD σ."""

    mean: float
    ci_low: float
    ci_high: float
    between_sd: float

    @property
    def identified(self) -> bool:
        return bool(np.isfinite(self.ci_low) and np.isfinite(self.ci_high))


def sigma_axis(values) -> np.ndarray:
    """The values of σ (:data:`SIGMA_RANGE` times the tested grid's span, :data:`SIGMA_STEPS` log-spaced)."""
    span = float(np.max(values) - np.min(values)) or 1.0
    return np.geomspace(SIGMA_RANGE[0] * span, SIGMA_RANGE[1] * span, SIGMA_STEPS)


@functools.lru_cache(maxsize=2)
def cell_probabilities(thresholds: tuple[float, ...], means: tuple[float, ...],
                       sigmas: tuple[float, ...]) -> np.ndarray:
    """P(t in cell j | μ, σ) as [σ, μ, j], the cells half-way between thresholds and the outermost reaching to ±inf
    (a likelihood is flat beyond its reach); built once per grid (read-only, about 26 MB)."""
    points, mu, sd = np.asarray(thresholds), np.asarray(means), np.asarray(sigmas)
    middles = (points[1:] + points[:-1]) / 2
    edges = np.concatenate([[-np.inf], middles, [np.inf]])
    cells = np.diff(norm.cdf((edges[None, None, :] - mu[None, :, None]) / sd[:, None, None]), axis=-1)
    cells.flags.writeable = False
    return cells


def population_posterior(values, points, likelihoods) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p(μ, σ | data) as [σ, μ], the means μ, the sigmas σ): flat prior on μ over :data:`MEAN_EXTENSION` spans
    beyond the tested grid ``values``, 1/σ on σ (:func:`sigma_axis`); each point t̂_i contributes N(t̂_i; μ, σ), each
    censored observer's likelihood (on :func:`threshold_axis`) ∫ L(t) N(t; μ, σ) dt."""
    thresholds, means, sigmas = threshold_axis(values), threshold_axis(values, MEAN_EXTENSION), sigma_axis(values)
    points = np.asarray(points, dtype=float)
    z = (points[None, None, :] - means[None, :, None]) / sigmas[:, None, None]
    log = (-0.5 * z ** 2 - np.log(sigmas)[:, None, None]).sum(axis=-1)
    if len(likelihoods):
        cells = cell_probabilities(tuple(thresholds), tuple(means), tuple(sigmas))
        with np.errstate(divide="ignore"):
            log = log + np.log(cells @ np.asarray(likelihoods, dtype=float).T).sum(axis=-1)
    posterior = np.exp(log - log.max())
    return posterior / posterior.sum(), means, sigmas


def population_mean(values, points, likelihoods=()) -> PopulationEstimate:
    """The population mean threshold of observers located at ``points`` and censored observers with
    ``likelihoods`` (observers × :func:`threshold_axis` of the tested grid ``values``). A side of μ's 95 % interval
    is open (±inf, and no median: not identified) where more than its 2.5 % of μ's posterior lies beyond the
    likelihoods' reach: there no answer tells thresholds apart, and the bound would rest on how far the prior
    reaches."""
    posterior, means, sigmas = population_posterior(values, points, likelihoods)
    mu = posterior.sum(axis=0)
    low, median, high = credible_interval(means, mu)
    sd = float(np.interp(0.5, np.cumsum(posterior.sum(axis=1)), sigmas))
    reach = threshold_axis(values)
    tail = (1 - CREDIBLE) / 2
    open_low, open_high = mu[means < reach[0]].sum() > tail, mu[means > reach[-1]].sum() > tail
    if open_low or open_high:
        return PopulationEstimate(np.nan, -np.inf if open_low else low, np.inf if open_high else high, sd)
    return PopulationEstimate(median, low, high, sd)
