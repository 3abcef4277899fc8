"""Psychometric functions of accuracy against suppression strength, for people and models on one scale.

For every observer (each person, each model, and all people pooled) and every suppression
condition with an ordered parameter grid, accuracy is fitted against the stimulus axis with
psignifit (Schütt, Harmeling, Macke & Wichmann 2016, Vision Research 122): a decreasing
logistic ψ(x) = γ + (1 − γ − λ)(1 − F(x; m, w)) with the guess rate γ = 1/C fixed by the label
set (n-AFC) and the lapse rate λ fitted. Pooled human data are overdispersed (people differ),
so their fit includes psignifit's beta-binomial η (Schütt et al. 2016, Sec. 2.2); one observer's
answers are binomial, so η = 0 there.

Reported per fit, each with a 95 % credible interval from posterior draws:

- ``threshold``: the level where accuracy has fallen half-way from the observer's accuracy on
  the original images A_o to chance, ψ(x) = γ + (A_o − γ)/2, i.e. where the chance-corrected
  relative accuracy (A − γ)/(A_o − γ) halves (Burgert et al. 2025, Sec. 5). A_o is drawn from
  its Beta(k+1, n−k+1) posterior so its uncertainty enters the interval; without original
  trials the fitted upper asymptote 1 − λ stands in for A_o;
- ``threshold_75``: the level where accuracy falls to 75 % correct;
- ``slope``: dψ/dx at ``threshold`` (accuracy lost per unit of the axis).

A fit that the data cannot support says why in ``note`` instead of giving numbers: fewer
than :data:`MIN_LEVELS` levels, or flat data (no decreasing trend in accuracy over the
levels, Cochran-Armitage test).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from cuebench.adaptive import stimulus_axis
from cuebench.errors import CuebenchError

from .load import params_of

MIN_LEVELS = 3
TREND_ALPHA = 0.05
CREDIBLE = 0.95
POSTERIOR_DRAWS = 4000
CURVE_POINTS = 120
POOLED_HUMANS = "humans (pooled)"
NOT_GRADED = ("original", "attention", "practice")
TABLE_COLUMNS = ["observer", "observer_kind", "fit", "condition", "axis", "levels", "trials", "guess_rate",
                 "reference_accuracy", "reference", "threshold", "threshold_ci_low", "threshold_ci_high",
                 "threshold_75", "threshold_75_ci_low", "threshold_75_ci_high", "slope", "slope_ci_low",
                 "slope_ci_high", "lapse", "lapse_ci_low", "lapse_ci_high", "trend_p", "note"]


class PsychometricError(CuebenchError, ValueError):
    """A psychometric fit was asked of data that cannot give one; the message names the condition."""


@dataclass
class PsychometricFits:
    """``table``: one row per observer x condition (:data:`TABLE_COLUMNS`); ``curves``: the fitted
    accuracy on a fine grid of each fitted row; ``points``: observed accuracy per level."""

    table: pd.DataFrame
    curves: pd.DataFrame
    points: pd.DataFrame


def decreasing_logistic():
    """psignifit's logistic sigmoid, decreasing with the level, with its CDF, PDF and quantile in
    closed form: F(x) = 1/(1 + e^(−(x − loc)/scale)), F' = F(1 − F)/scale, F⁻¹(p) = loc + scale·logit(p).
    The same function as ``"neg_logistic"``, fitted about 2.5x faster than through scipy.stats."""
    from psignifit.sigmoids import Logistic
    from scipy.special import expit, logit

    class ClosedFormLogistic(Logistic):
        def _cdf(self, x, loc=0, scale=1):
            return expit((np.asarray(x, dtype=float) - loc) / scale)

        def _pdf(self, x, loc=0, scale=1):
            value = self._cdf(x, loc, scale)
            return value * (1 - value) / scale

        def _ppf(self, p, loc=0, scale=1):
            return loc + scale * logit(p)

    return ClosedFormLogistic(negative=True)


def cochran_armitage(x, k, n) -> tuple[float, float]:
    """Cochran-Armitage test for a trend in proportions over ordered doses (Armitage 1955, Biometrics 11;
    Cochran 1954): T = Σ x_i (k_i − n_i p̄), Var T = p̄(1 − p̄)[Σ n_i x_i² − (Σ n_i x_i)²/N], z = T/√Var T.
    Returns z and the one-sided p for a *decrease* with x, Φ(z) (1 when every answer is equally scored)."""
    x, k, n = (np.asarray(v, dtype=float) for v in (x, k, n))
    total = n.sum()
    p_bar = k.sum() / total
    var = p_bar * (1 - p_bar) * ((n * x ** 2).sum() - (n * x).sum() ** 2 / total)
    if var <= 0:
        return 0.0, 1.0
    z = float((x * (k - n * p_bar)).sum() / np.sqrt(var))
    return z, float(stats.norm.cdf(z))


def condition_axes(scored: pd.DataFrame) -> dict[str, tuple[str, dict[int, float]]]:
    """Each graded condition's stimulus axis, from the parameters stored with its trials."""
    graded = scored[~scored["condition"].isin(NOT_GRADED) & scored["level"].notna()]
    axes = {}
    for condition, rows in graded.groupby("condition"):
        first = rows.drop_duplicates("level")
        axes[condition] = stimulus_axis({int(lv): params_of(p) for lv, p in zip(first["level"], first["params"])})
    return axes


def check_fittable(axes: dict[str, tuple[str, dict[int, float]]]) -> None:
    """A fit needs an ordered grid: refuse data where no condition has more than one level."""
    if not axes:
        raise PsychometricError("psychometric fits need suppression trials with a level on an ordered grid; "
                                "these responses have none")
    if all(len(values) < 2 for _, values in axes.values()):
        named = ", ".join(f"{c!r} (level {next(iter(v))})" for c, (_, v) in sorted(axes.items()))
        raise PsychometricError(f"condition {named} has one level only; a psychometric fit needs an ordered grid "
                                f"of at least {MIN_LEVELS} levels (build the experiment with --grid full)")


def psychometric_fits(scored: pd.DataFrame, n_choices: int, seed: int = 0) -> PsychometricFits:
    """Fits of every observer (and the pooled humans) on every condition of ``scored`` with more than one
    level (the scored test trials of :func:`analysis.exclusions.apply_exclusions`); conditions with a single
    setting (channel shuffle, cue images) are no grid and get no row."""
    from tqdm import tqdm

    axes = condition_axes(scored)
    check_fittable(axes)
    axes = {condition: axis for condition, axis in axes.items() if len(axis[1]) > 1}
    guess = 1.0 / n_choices
    cells = scored.assign(level=scored["level"].astype("Float64"))
    groups = [(obs, kind, "individual", rows) for (obs, kind), rows in cells.groupby(["observer", "observer_kind"])]
    humans = cells[cells["observer_kind"] == "human"]
    if humans["observer"].nunique() > 1:
        groups.append((POOLED_HUMANS, "human", "pooled", humans))
    rows, curves, points = [], [], []
    jobs = [(g, c) for g in groups for c in sorted(axes)]
    for (observer, kind, fit, data), condition in tqdm(jobs, desc="psychometric fits", unit="fit",
                                                       disable=len(jobs) < 8):
        axis, values = axes[condition]
        cond = data[data["condition"] == condition]
        if cond.empty:
            continue
        per_level = cond.groupby(cond["level"].astype(int))["correct"].agg(["sum", "size"])
        x = np.array([values[lv] for lv in per_level.index])
        k, n = per_level["sum"].to_numpy(float), per_level["size"].to_numpy(float)
        originals = data[data["condition"] == "original"]["correct"]
        reference = (float(originals.sum()), float(len(originals))) if len(originals) else None
        who = {"observer": observer, "observer_kind": kind, "fit": fit, "condition": condition, "axis": axis}
        points += [{**who, "level": int(lv), "x": xi, "k": ki, "n": ni, "accuracy": ki / ni}
                   for lv, xi, ki, ni in zip(per_level.index, x, k, n)]
        row, curve = fit_curve(x, k, n, guess, reference, overdispersed=fit == "pooled", seed=seed)
        rows.append({**who, **row})
        if curve is not None:
            curves.append(pd.DataFrame({**who, "x": curve[0], "accuracy": curve[1]}))
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    curve_table = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame(
        columns=["observer", "observer_kind", "fit", "condition", "axis", "x", "accuracy"])
    return PsychometricFits(table, curve_table, pd.DataFrame(points))


def fit_curve(x, k, n, guess: float, reference: tuple[float, float] | None = None, overdispersed: bool = False,
              seed: int = 0) -> tuple[dict, tuple[np.ndarray, np.ndarray] | None]:
    """One psignifit fit of k correct out of n at stimulus values x, decreasing towards the guess rate.

    ``reference`` is (correct, trials) on the original images, defining the half-way threshold.
    Returns the table row (without the observer columns) and the fitted curve (x, accuracy), or
    ``None`` with a ``note`` when the data cannot support a fit."""
    import psignifit

    x, k, n = (np.asarray(v, dtype=float) for v in (x, k, n))
    row = {"levels": int(len(x)), "trials": int(n.sum()), "guess_rate": guess, "note": ""}
    if reference is not None:
        row["reference_accuracy"], row["reference"] = reference[0] / reference[1], "original trials"
    else:
        row["reference"] = "fitted upper asymptote"
    if len(x) < MIN_LEVELS:
        row["note"] = ("not fitted: one level only" if len(x) == 1 else
                       f"not fitted: too few levels ({len(x)} < {MIN_LEVELS})")
        return row, None
    _, trend_p = cochran_armitage(x, k, n)
    row["trend_p"] = trend_p
    if trend_p >= TREND_ALPHA:
        row["note"] = f"not fitted: flat data, accuracy does not fall with the level (trend p = {trend_p:.2g})"
        return row, None
    result = psignifit.psignifit(np.column_stack([x, k, n]), sigmoid=decreasing_logistic(), experiment_type="nAFC",
                                 experiment_choices=round(1 / guess), fixed_parameters=None if overdispersed
                                 else {"eta": 0.0}, debug=True, verbose=False)
    sigmoid = result.configuration.make_sigmoid()
    rng = np.random.default_rng(seed)
    draws = result.posterior_samples(POSTERIOR_DRAWS, random_state=rng)
    best = result.parameter_estimate
    if reference is not None:
        a_best = reference[0] / reference[1]
        a_draws = rng.beta(reference[0] + 1, reference[1] - reference[0] + 1, POSTERIOR_DRAWS)
    else:
        a_best, a_draws = 1 - best["lambda"], 1 - draws["lambda"]
        row["reference_accuracy"] = a_best
    tail = (1 - CREDIBLE) / 2 * 100
    for name, best_target, draw_targets in (("threshold", guess + (a_best - guess) / 2, guess + (a_draws - guess) / 2),
                                            ("threshold_75", 0.75, np.full(POSTERIOR_DRAWS, 0.75))):
        row[name] = float(level_at(sigmoid, best_target, best))
        samples = level_at(sigmoid, draw_targets, draws)
        row[f"{name}_ci_low"], row[f"{name}_ci_high"] = map(float, np.percentile(samples, [tail, 100 - tail],
                                                                                 method="inverted_cdf"))
        if name == "threshold":
            slopes = sigmoid.slope(np.where(np.isfinite(samples), samples, np.nan), draws["threshold"],
                                   draws["width"], draws["gamma"], draws["lambda"])
            row["slope"] = float(sigmoid.slope(row["threshold"], best["threshold"], best["width"], best["gamma"],
                                               best["lambda"])) if np.isfinite(row["threshold"]) else np.nan
            row["slope_ci_low"], row["slope_ci_high"] = map(float, np.nanpercentile(slopes, [tail, 100 - tail]))
    row["lapse"] = float(best["lambda"])
    row["lapse_ci_low"], row["lapse_ci_high"] = map(float, result.confidence_intervals["lambda"][f"{CREDIBLE:g}"])
    row["note"] = _threshold_note(row, x)
    grid = np.linspace(x.min(), x.max(), CURVE_POINTS)
    return row, (grid, np.asarray(result.proportion_correct(grid), dtype=float))


def level_at(sigmoid, target, params) -> np.ndarray:
    """Stimulus value where ψ = target for (arrays of) parameters; −inf where the observer never
    reaches the target (above 1 − λ), +inf where accuracy never falls to it (at or below γ)."""
    gamma, lapse = np.asarray(params["gamma"], float), np.asarray(params["lambda"], float)
    unscaled = (np.asarray(target, float) - gamma) / (1 - lapse - gamma)
    inside = np.clip(unscaled, 1e-12, 1 - 1e-12)
    level = np.asarray(sigmoid.inverse(inside, params["threshold"], params["width"]), dtype=float)
    return np.where(unscaled >= 1, -np.inf, np.where(unscaled <= 0, np.inf, level))


def _threshold_note(row: dict, x: np.ndarray) -> str:
    notes = []
    if not np.isfinite(row["threshold_75"]):
        notes.append("never reaches 75 % correct" if row["threshold_75"] < 0 else "never falls to 75 % correct")
    if np.isfinite(row["threshold"]) and not x.min() <= row["threshold"] <= x.max():
        notes.append("threshold outside the measured grid (extrapolated)")
    return "; ".join(notes)
