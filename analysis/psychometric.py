"""Psychometric functions of accuracy against suppression strength, for people and models on one scale.

For every observer (each person, each model, and all people pooled) and every suppression
condition with an ordered parameter grid, accuracy is fitted against the stimulus axis x with
psignifit (Schütt, Harmeling, Macke & Wichmann 2016, Vision Research 122, Eq. 1) as

    ψ(x) = γ + (1 − γ − λ)(1 − F(x; m, w)),   F logistic, w the 5 %–95 % width,

falling from 1 − λ to the floor γ; for n-AFC the floor is chance, γ = 1/C. psignifit's
``negative=True`` sigmoid is 1 − (γ + (1 − γ − λ)F) = λ + (1 − γ − λ)(1 − F): its γ pins the
*ceiling* and its λ is the floor, not this model. So the fit runs psignifit's *rising* logistic
on u = −x, whose γ and λ are the floor and the lapse above (1 − F(x; m) = F(−x; −m) for the
symmetric logistic). Pooled human data are overdispersed (people differ), so their fit includes
psignifit's beta-binomial η (Schütt et al. 2016, Sec. 2.2); one observer's answers are binomial, η = 0.

Priors: the lapse λ is flat on [0, 1 − 1/C) for people and models alike (a model at 55 % on the originals has
λ = 0.45); threshold and width have psignifit's defaults (flat over the tested range with cosine tails).
psignifit's default lapse prior Beta(1, 10) (Schütt et al. 2016, Sec. 2.4) was tried for people: it keeps a
small lapse small (the flat prior pulls a true 0.02 up), but with a floor above chance and few trials it
lowered the half-way threshold's coverage (4 alternatives, floor 0.45, 12 trials per level: 26 of 30
simulated observers against 28 of 30 flat) and bent the fits of people below 100 % even at the easiest level
into shallow curves. The lapse is a nuisance parameter of the thresholds, so the flat prior stays and the
pull on small lapses is documented (docs/adaptive.md).

**The floor: two models averaged by their evidence.** Accuracy may level off above chance (a cue the suppression
leaves intact). Every series is fitted twice: with the floor at chance, γ = 1/C, and with a free floor, γ flat on
[1/C, 1) and the joint prior of (γ, λ) zero where γ + λ ≥ 1 (a curve that would *rise* with suppression is outside
the model), renormalised. With prior odds 1:1 between the two models, half the floor's prior mass sits on chance. A
free floor concentrated near chance as well (Beta(1, b) on (γ − 1/C)/(1 − 1/C), as psignifit's default prior on a
yes/no guess rate is Beta(1, 10)) was tried and not kept: Beta(1, 10) covered a floor of 0.3-0.45 in 24 of 40
simulated observers (33 needed); Beta(1, 3) covered the half-way threshold on the 15-level grid with a floor of 0.45
in 26 of 30 (28 flat) and late thresholds on a 7-level grid in 0.91 of 193 (0.88 flat; both short of 0.95 until the
lower ends of intervals beyond the grid came from the data, "Falls the grid does not show" below). Each model's
evidence (marginal likelihood) p(data | model) is the integral of likelihood × prior over psignifit's posterior
grid, and with prior odds 1:1 the free floor's posterior probability is p_free = E_free /
(E_free + E_chance) (Bayes factor; Kass & Raftery 1995, J. Am. Stat. Assoc. 90). The reported estimates come from
the mixture of both posteriors, p_free of the draws from the free-floor one (Bayesian model averaging, Hoeting et
al. 1999, Statistical Science 14). Nothing is chosen by a significance test: with 8–20 trials per level a floor
above chance whose interval still touches chance is not pushed down to chance (which biased the threshold by over a
grid unit), and where the floor may lie at or above the half-way level some draws never fall that far, so
``threshold_halfway``'s interval is open above. ``model`` names the more probable model (whose MAP curve is drawn),
``p_free_floor`` the free floor's probability.

**Not identified.** A threshold (half-way, midpoint, 75 %) gets its posterior median only where its 95 % interval
lies inside the tested grid (:func:`identify`). An interval that reaches beyond the grid, or is open, rests on the
prior's tails and the sigmoid's shape, not on data: the row keeps the interval and says "not identified" in its
note, and no point value is printed in the table, the report or a figure. On a 7-level grid with 12 trials per
level and a floor of 0.45 (4 alternatives), most half-way intervals were open above while their medians sat about
two grid units late.

**Falls the grid does not show.** Where a crossing threshold's (half-way, 75 %) interval reaches beyond the last
level, the data never show accuracy falling to that threshold's accuracy, and the posterior's lower end extrapolates
the sigmoid past them, leaning on the floor's prior: on 7 levels of 12 trials with the fall late in the grid and a
floor of 0.45, last levels whose answers run high read as a floor at or above the half-way level and a fall later
than it is (0.89 of 300 simulated intervals covered; 32 of the 33 misses began 0.02-1.4 grid units above the truth).
Such an interval starts no higher than the last level whose accuracy lies above the threshold's with posterior
probability 0.975 (:func:`last_level_above`, each level's Beta posterior on its own, the rule of the central
interval's 2.5 % tail): accuracy falls with x, so the threshold lies beyond that level whatever the sigmoid's shape
and the floor, and the note says so. Intervals inside the grid, and so every point value, are unchanged.

Reported per fit as the posterior median with the central 95 % credible interval of 4000
posterior draws (a median always lies inside its interval; the drawn curve is psignifit's MAP fit of
the more probable floor model).
The lapse and the free floor are bounded below (λ ≥ 0, γ ≥ 1/C) and psignifit's posterior lives
on a grid whose first point is that bound: where at least 2.5 % of the draws lie on the bound (an
observer at 100 % on the easy levels, a floor at chance) the posterior piles up there, and the
interval is the one-sided [bound, 95th percentile] (a central interval would never contain the
bound, and a truth on it would always be missed).

- ``threshold_halfway``: the level where accuracy has fallen half-way from the observer's
  accuracy on the original images A_o to chance, ψ(x) = γ₀ + (A_o − γ₀)/2 with γ₀ = 1/C, i.e.
  where the relative accuracy (A − γ₀)/(A_o − γ₀) falls to 0.5. The rescaling is Burgert et al.
  2025, Eq. 11 (chance → 0, the originals → 1); the half-way threshold on it is this project's
  definition, not theirs. A_o is drawn from its Beta(k+1, n−k+1) posterior so its uncertainty enters the
  interval; without original trials the fitted ceiling 1 − λ stands in. Empty, with a note,
  where most posterior draws level off at or above that level ("does not fall half-way to
  chance"); its interval open above (+inf) where at least 2.5 % of them do;
- ``threshold_midpoint``: the sigmoid's own threshold m, half-way between the ceiling 1 − λ and
  the floor γ (psignifit's threshold); with the floor at chance it is what QUEST+ estimates
  (``quest_threshold``, :mod:`cuebench.adaptive`);
- ``threshold_75``: the level where accuracy falls to 75 % correct, only where the fitted curve
  is at or above 75 % at the easiest measured level and falls below it (else empty, with a note:
  no 75 % point extrapolated for an observer that never reached 75 % in the data);
- ``slope``: dψ/dx at ``threshold_halfway`` (accuracy lost per unit of the axis);
- ``deviance`` (binomial deviance of the best fit against the saturated model, Wichmann & Hill
  2001, Perception & Psychophysics 63, Sec. 2) and ``deviance_p``, its posterior-predictive p:
  the share of datasets simulated from posterior draws whose deviance is at least the observed
  one (Gelman, Meng & Stern 1996); a small p says the model does not describe the data, and the
  note says so.

Trials of adaptive (QUEST+) blocks are not fitted here: their levels follow the observer's answers,
so they are no sample of a fixed grid (:func:`fixed_level_rows`); their posteriors are
:func:`quest_estimates`.

A series with fewer than :data:`MIN_LEVELS` levels gets no fit, and its ``note`` says why. Flat data (no
significant fall of accuracy over the levels, Cochran-Armitage test) are fitted all the same, with a note: the
trend test sees the grid only, not the originals, and is flat exactly where the fall lies before the first level
or after the last. There the thresholds' intervals say so (below or beyond the grid, or open: not identified),
while a series left unfitted reported no interval at all; on 7 levels of 12 trials (floor 0.45) that left 29 of
200 simulated observers without one. Accuracy below chance is allowed (a "not clear" answer or a
time-out scored as an error is below any guess), and the note names the levels where it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats
from scipy.special import expit, logit, xlogy

from cuebench.adaptive import Estimate, stimulus_axis
from cuebench.errors import CuebenchError

from .load import fixed_level_rows, has_posterior, params_of

MIN_LEVELS = 3
TREND_ALPHA = 0.05
CREDIBLE = 0.95
POSTERIOR_DRAWS = 4000
PREDICTIVE_DRAWS = 1000
CURVE_POINTS = 120
WIDTH_ALPHA = 0.05
"""psignifit's width w spans F from WIDTH_ALPHA to 1 − WIDTH_ALPHA."""
ASYMPTOTE_MARGIN = 1e-3
"""Keeps the lapse and the free floor off the values where the curve is flat."""
CHANCE_FLOOR, FREE_FLOOR = "floor at chance", "free floor"
NOT_IDENTIFIED = "not identified"
DATA_BOUND = "the last level clearly above its accuracy"
"""Names :func:`last_level_above` in a row's note where it sets an interval's lower end."""
POOLED_HUMANS = "humans (pooled)"
NOT_GRADED = ("original", "attention", "practice")
ESTIMATES = ("threshold_halfway", "threshold_midpoint", "threshold_75", "lapse", "floor", "slope")
"""Columns reported as posterior median with ``_ci_low`` and ``_ci_high``."""
TABLE_COLUMNS = ["observer", "observer_kind", "fit", "condition", "axis", "model",
                 *(f"{name}{part}" for name in ESTIMATES for part in ("", "_ci_low", "_ci_high")),
                 "p_free_floor", "reference_accuracy", "reference", "guess_rate", "levels", "trials",
                 "deviance", "deviance_p",
                 "trend_p", "note"]
BELOW_CHANCE_ALPHA = 0.05
"""A level whose accuracy is below chance at this one-sided binomial p is named in the note."""
PREDICTIVE_ALPHA = 0.05
"""A posterior-predictive p below this says, in the note, that the curve does not describe the data."""
POOLED_FREE_FLOOR_GRID = {"eta": 10, "gamma": 20, "lambda": 20, "threshold": 30, "width": 30}
POOLED_FREE_FLOOR_COARSE_GRID = {"eta": 8, "gamma": 8, "lambda": 8, "threshold": 20, "width": 20}
"""psignifit's grid (and its first, bound-finding grid) for the five-parameter posterior of a pooled free-floor
fit: its defaults (20 x 20 x 20 x 40 x 40) take ~30 s a fit, these ~4 s with the same intervals to the grid step."""
QUEST_COLUMNS = ["observer", "observer_kind", "condition", "quest_threshold", "ci_low", "ci_high", "trials",
                 "lapse_prior", "lapse_prior_beta"]


class PsychometricError(CuebenchError, ValueError):
    """A psychometric fit was asked of data that cannot give one; the message names the condition."""


@dataclass
class PsychometricFits:
    """``table``: one row per observer x condition (:data:`TABLE_COLUMNS`); ``curves``: the fitted
    accuracy on a fine grid of each fitted row; ``points``: observed accuracy per level."""

    table: pd.DataFrame
    curves: pd.DataFrame
    points: pd.DataFrame


def rising_logistic():
    """psignifit's (rising) logistic sigmoid with its CDF, PDF and quantile in closed form:
    F(u) = 1/(1 + e^(−(u − loc)/scale)), F' = F(1 − F)/scale, F⁻¹(p) = loc + scale·logit(p). Fitted on u = −x
    (module docstring); the same function as psignifit's ``"logistic"``, 1.7-2x faster than through
    scipy.stats (benchmarks/bench_psychometric.py)."""
    from psignifit.sigmoids import Logistic

    class ClosedFormLogistic(Logistic):
        def _cdf(self, x, loc=0, scale=1):
            return expit((np.asarray(x, dtype=float) - loc) / scale)

        def _pdf(self, x, loc=0, scale=1):
            value = self._cdf(x, loc, scale)
            return value * (1 - value) / scale

        def _ppf(self, p, loc=0, scale=1):
            return loc + scale * logit(p)

    return ClosedFormLogistic(alpha=WIDTH_ALPHA)


def logistic_scale(width):
    """The logistic's scale s from psignifit's width w = F⁻¹(1 − α) − F⁻¹(α) = 2 s ln(1/α − 1)."""
    return np.asarray(width, dtype=float) / (2 * np.log(1 / WIDTH_ALPHA - 1))


def psi(x, params):
    """ψ(x) = γ + (1 − γ − λ)(1 − F(x)) of the module docstring; ``params`` holds (arrays of) ``location`` m,
    ``width`` w, ``floor`` γ and ``lapse`` λ."""
    floor, lapse = np.asarray(params["floor"], float), np.asarray(params["lapse"], float)
    falling = expit(-(np.asarray(x, float) - params["location"]) / logistic_scale(params["width"]))
    return floor + (1 - floor - lapse) * falling


def level_at(target, params) -> np.ndarray:
    """Stimulus value where ψ = target for (arrays of) parameters; −inf where the observer never reaches the
    target (at or above the ceiling 1 − λ), +inf where accuracy never falls to it (at or below the floor γ)."""
    floor, lapse = np.asarray(params["floor"], float), np.asarray(params["lapse"], float)
    falling = (np.asarray(target, float) - floor) / (1 - floor - lapse)
    inside = np.clip(falling, 1e-12, 1 - 1e-12)
    level = np.asarray(params["location"], float) + logistic_scale(params["width"]) * logit(1 - inside)
    return np.where(falling >= 1, -np.inf, np.where(falling <= 0, np.inf, level))


def slope_at(x, params) -> np.ndarray:
    """dψ/dx = −(1 − γ − λ) F(1 − F)/s, negative: accuracy lost per unit of the axis."""
    scale = logistic_scale(params["width"])
    rising = expit((np.asarray(x, float) - params["location"]) / scale)
    floor, lapse = np.asarray(params["floor"], float), np.asarray(params["lapse"], float)
    return -(1 - floor - lapse) * rising * (1 - rising) / scale


def deviance(k, n, p) -> np.ndarray:
    """Binomial deviance against the saturated model, D = 2 Σ [k ln(k/np) + (n − k) ln((n − k)/(n(1 − p)))]
    (Wichmann & Hill 2001, Perception & Psychophysics 63, Eq. 5), summed over the last axis."""
    k, n = np.asarray(k, float), np.asarray(n, float)
    p = np.clip(np.asarray(p, float), 1e-12, 1 - 1e-12)
    return 2 * (xlogy(k, k / (n * p)) + xlogy(n - k, (n - k) / (n * (1 - p)))).sum(axis=-1)


def predictive_p(x, k, n, draws: dict, rng) -> float:
    """Posterior-predictive p of the deviance (Gelman, Meng & Stern 1996, Statistica Sinica 6): for each posterior
    draw, data simulated from it (beta-binomial where the draw has psignifit's overdispersion η, Schütt et al.
    2016 Sec. 2.2: p ~ Beta(ψν, (1 − ψ)ν), ν = 1/η² − 1) are compared with the observed data by their deviance
    from that draw's curve; p = share of simulated deviances at least the observed one."""
    head = {name: np.asarray(values, float)[:PREDICTIVE_DRAWS, None] for name, values in draws.items()}
    expected = psi(np.asarray(x, float)[None, :], head)
    eta = np.broadcast_to(head["eta"], expected.shape)
    spread = np.where(eta > 1e-9, 1 / np.maximum(eta, 1e-9) ** 2 - 1, np.inf)
    overdispersed = np.isfinite(spread)
    p = expected.copy()
    p[overdispersed] = rng.beta(expected[overdispersed] * spread[overdispersed],
                                (1 - expected[overdispersed]) * spread[overdispersed])
    simulated = rng.binomial(np.broadcast_to(np.asarray(n, dtype=np.int64), p.shape), p)
    return float(np.mean(deviance(simulated, n, expected) >= deviance(k, n, expected)))


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
    if all(len(values) < MIN_LEVELS for _, values in axes.values()):
        named = ", ".join(f"{c!r} ({axis} {', '.join(f'{v:g}' for v in values.values())})"
                          for c, (axis, values) in sorted(axes.items()))
        raise PsychometricError(f"too few levels: condition {named}; a psychometric fit needs an ordered grid of at "
                                f"least {MIN_LEVELS} levels, so no threshold can come from this grid (build the "
                                f"experiment with --grid full)")


def psychometric_fits(scored: pd.DataFrame, n_choices: int, seed: int = 0) -> PsychometricFits:
    """Fits of every observer (and the pooled humans) on every condition of ``scored`` with more than one
    level (the scored test trials of :func:`analysis.exclusions.apply_exclusions`); conditions with a single
    setting (channel shuffle, cue images) are no grid and get no row. Answers of adaptive blocks are left out
    (:func:`fixed_level_rows`)."""
    from tqdm import tqdm

    fixed = fixed_level_rows(scored)
    axes = condition_axes(fixed)
    if not axes and condition_axes(scored):
        raise PsychometricError("psychometric fits need suppression trials at fixed levels; these responses have "
                                "graded levels only in adaptive (QUEST+) blocks, whose thresholds are the "
                                "quest-thresholds table")
    check_fittable(axes)
    axes = {condition: axis for condition, axis in axes.items() if len(axis[1]) > 1}
    guess = 1.0 / n_choices
    cells = fixed.assign(level=fixed["level"].astype("Float64"))
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


def method_record(table: pd.DataFrame) -> dict:
    """What the fits in ``table`` (:data:`TABLE_COLUMNS`) did, for the methods paragraph
    (``summary["thresholds"]["method"]``): model, priors, floor handling, threshold definitions, counts."""
    fitted = table[table["model"].notna()]
    return {
        "psychometric model": "psi(x) = gamma + (1 - gamma - lambda)(1 - F(x; m, w)), F logistic, w its 5-95 % width "
                              "(psignifit 4, Schuett et al. 2016), fitted as psignifit's rising logistic on -x",
        "priors": {"threshold": "psignifit default: flat over the tested range, cosine tails half the range beyond",
                   "width": "psignifit default: flat from twice the smallest level step to the range, cosine tails",
                   "floor": "chance 1/C; or free, flat on [1/C, 1), the joint prior zero where floor + lapse >= 1",
                   "lapse": "flat on [0, 1 - 1/C), people and models alike",
                   "overdispersion": "pooled humans: psignifit's beta-binomial eta, prior Beta(1, 10); "
                                     "single observers: binomial (eta = 0)"},
        "floor handling": "model average of the chance-floor and free-floor fits by their evidence (marginal "
                          "likelihood), prior odds 1:1",
        "threshold definitions": {
            "threshold_halfway": "level where accuracy falls half-way from the originals' accuracy to chance "
                                 "(relative accuracy 0.5 on the rescaling of Burgert et al. 2025, Eq. 11; the "
                                 "threshold is this project's definition)",
            "threshold_midpoint": "the logistic's midpoint between ceiling 1 - lambda and floor",
            "threshold_75": "level where accuracy falls to 75 % correct"},
        "estimates": f"posterior median and central {CREDIBLE:.0%} credible interval of {POSTERIOR_DRAWS} draws "
                     "(one-sided at the lapse's and floor's lower bound where the posterior piles up there)",
        "identification": "a threshold whose 95 % interval reaches beyond the tested grid is not identified: "
                          "interval only, no point value",
        "half-way thresholds not identified": int((fitted["threshold_halfway"].isna()).sum()),
        "lower ends from the data": "an interval reaching beyond the last level starts no higher than the last level "
                                    "whose accuracy lies above the threshold's with 97.5 % posterior probability "
                                    "(Beta posterior per level): the fall to it is not in the data",
        "half-way lower ends from the data": int(fitted["note"].str.contains(
            f"threshold_halfway's interval (?:starts at {DATA_BOUND}|is unbounded below)", regex=True).sum()),
        "series": int(len(table)),
        "series fitted": int(len(fitted)),
        "series not fitted": {str(reason): int(count) for reason, count in  # the reason without its numbers
                              table.loc[table["model"].isna(), "note"].str.split(" \\(").str[0].value_counts().items()},
    }


def quest_estimates(responses: pd.DataFrame) -> pd.DataFrame:
    """Each observer's QUEST+ posterior at the end of each adaptive block (:data:`QUEST_COLUMNS`): the ``adaptive``
    column of the block's last answer, read by :meth:`cuebench.adaptive.Estimate.from_dict` (so rows stored with
    the old key ``threshold`` still count). Its ``quest_threshold`` is half-way between chance and 1 − λ, a
    different point from the fits' ``threshold_halfway``."""
    if "adaptive" not in responses:
        return pd.DataFrame(columns=QUEST_COLUMNS)
    answered = responses[has_posterior(responses["adaptive"])]
    rows = []
    for (observer, kind, condition), block in answered.groupby(["observer", "observer_kind", "condition"]):
        last = block.sort_values("trial_index")["adaptive"].iloc[-1]
        estimate = Estimate.from_dict(last if isinstance(last, dict) else json.loads(last))
        rows.append({"observer": observer, "observer_kind": kind, "condition": condition, **estimate.to_dict()})
    return pd.DataFrame(rows, columns=QUEST_COLUMNS)


def fit_curve(x, k, n, guess: float, reference: tuple[float, float] | None = None, overdispersed: bool = False,
              seed: int = 0) -> tuple[dict, tuple[np.ndarray, np.ndarray] | None]:
    """Psignifit fits of k correct out of n at stimulus values x, falling towards the floor, the floor at chance
    and free averaged by their evidence (module docstring).

    ``reference`` is (correct, trials) on the original images, defining the half-way threshold.
    Returns the table row (without the observer columns) and the fitted curve (x, accuracy), or
    ``None`` with a ``note`` when the data cannot support a fit."""
    x, k, n = (np.asarray(v, dtype=float) for v in (x, k, n))
    row = {"levels": int(len(x)), "trials": int(n.sum()), "guess_rate": guess, "note": ""}
    if reference is not None:
        row["reference_accuracy"], row["reference"] = reference[0] / reference[1], "original trials"
    else:
        row["reference"] = "fitted ceiling 1 - lapse"
    if len(x) < MIN_LEVELS:
        row["note"] = ("not fitted: one level only" if len(x) == 1 else
                       f"not fitted: too few levels ({len(x)} < {MIN_LEVELS})")
        return row, None
    _, trend_p = cochran_armitage(x, k, n)
    row["trend_p"] = trend_p
    rng = np.random.default_rng(seed)
    fit = floor_averaged(x, k, n, guess, overdispersed, rng)
    row["model"], row["p_free_floor"] = fit.model, fit.free_floor_probability
    best, draws = fit.best, fit.draws
    if reference is not None:
        a_draws = rng.beta(reference[0] + 1, reference[1] - reference[0] + 1, POSTERIOR_DRAWS)
    else:
        a_draws = 1 - draws["lapse"]
        row["reference_accuracy"] = float(np.median(a_draws))
    notes = [] if trend_p < TREND_ALPHA else [
        f"flat data: accuracy does not fall significantly over the levels (trend p = {trend_p:.2g}), so the fall "
        f"lies before the first level, after the last or nowhere; the thresholds' intervals say which"]
    row["lapse"], row["lapse_ci_low"], row["lapse_ci_high"] = fit.lapse
    row["floor"], row["floor_ci_low"], row["floor_ci_high"] = fit.floor
    identify(row, notes, "threshold_midpoint", draws["location"], x)
    halfway_level = guess + (a_draws - guess) / 2
    halfway = level_at(halfway_level, draws)
    median = summary(halfway)[0]
    if median == np.inf:
        notes.append(f"does not fall half-way to chance (levels off at {row['floor']:.3g}, above the half-way level "
                     f"{np.median(halfway_level):.3g})")
    elif median == -np.inf:
        notes.append("below half-way to chance at every level (threshold below the grid)")
    if identify(row, notes, "threshold_halfway", halfway, x, say=np.isfinite(median),
                lowest=last_level_above(x, k, n, halfway_level)):
        slopes = slope_at(np.where(np.isfinite(halfway), halfway, np.nan), draws)
        row["slope"], row["slope_ci_low"], row["slope_ci_high"] = summary(slopes[np.isfinite(slopes)])
    elif np.isfinite(median) and row["threshold_halfway_ci_high"] == np.inf:
        notes.append(f"half-way threshold open above: the floor may lie at or above the half-way level "
                     f"{np.median(halfway_level):.3g} (floor up to {row['floor_ci_high']:.3g})")
    easiest = float(np.median(psi(x.min(), draws)))
    at_75 = level_at(np.full(POSTERIOR_DRAWS, 0.75), draws)
    if easiest < 0.75:
        notes.append(f"never reaches 75 % correct on the measured grid (fitted {easiest:.3g} at {x.min():g}, "
                     f"ceiling {1 - row['lapse']:.3g})")
    elif np.isfinite(summary(at_75)[0]):
        identify(row, notes, "threshold_75", at_75, x, lowest=last_level_above(x, k, n, 0.75))
    else:
        notes.append(f"never falls to 75 % correct (floor {row['floor']:.3g})")
    if fit.model == FREE_FLOOR:
        notes.insert(0, f"accuracy levels off above chance (floor {row['floor']:.3g}, free floor with posterior "
                        f"probability {fit.free_floor_probability:.2f})")
    below = below_chance(x, k, n, guess)
    if below:
        notes.append(f"accuracy below chance {guess:.3g} at {', '.join(f'{v:g}' for v in below)}: 'not clear' "
                     f"answers and time-outs are scored as errors, so accuracy can fall below any guess rate; the "
                     f"fitted floor stays at or above chance")
    row["deviance"] = float(deviance(k, n, psi(x, best)))
    row["deviance_p"] = predictive_p(x, k, n, draws, rng)
    if row["deviance_p"] < PREDICTIVE_ALPHA:
        notes.append(f"the fitted curve does not describe the data (posterior-predictive p = {row['deviance_p']:.2g})")
    row["note"] = "; ".join(notes)
    grid = np.linspace(x.min(), x.max(), CURVE_POINTS)
    return row, (grid, np.asarray(psi(grid, best), dtype=float))


def identify(row: dict, notes: list[str], column: str, samples, x, say: bool = True,
             lowest: float | None = None) -> bool:
    """Puts a threshold's 95 % credible interval into ``row`` (``_ci_low``, ``_ci_high``) and its median only where
    that interval is closed inside the tested grid [min x, max x]; otherwise the data do not pin the threshold down
    (the interval reaches an edge: open, or beyond the grid, where only the prior's tails and the sigmoid's shape
    speak) and the row says "not identified" (in ``notes`` when ``say``) with no point value. Returns whether it is
    identified.

    ``lowest`` (:func:`last_level_above`) is where the data alone bound a crossing threshold from below. Where the
    interval's upper end lies beyond the last level, the grid never shows the fall to the threshold's accuracy, and
    the posterior's lower end comes from extrapolating the sigmoid past the data: it is lowered to ``lowest`` where
    that lies below it (module docstring, "Falls the grid does not show")."""
    point, low, high = summary(samples)
    if lowest is not None and high > x.max() and lowest < low:
        extrapolation = f"{low:.3g}" if np.isfinite(low) else "none, at least 97.5 % of its draws never fall that far"
        notes.append(f"{column}'s interval starts at {DATA_BOUND} {lowest:g} (the sigmoid's extrapolation: "
                     f"{extrapolation})" if np.isfinite(lowest) else f"{column}'s interval is unbounded below: no "
                     f"level's accuracy lies clearly above the threshold's (the sigmoid's extrapolation: {extrapolation})")
        low = lowest
    row[f"{column}_ci_low"], row[f"{column}_ci_high"] = low, high
    if x.min() <= low and high <= x.max():
        row[column] = point
        return True
    if say:
        bounds = (f"{low:.3g}" if np.isfinite(low) else "unbounded below",
                  f"{high:.3g}" if np.isfinite(high) else "unbounded above")
        notes.append(f"{column} {NOT_IDENTIFIED}: its 95 % interval [{bounds[0]}, {bounds[1]}] reaches beyond the "
                     f"tested grid [{x.min():g}, {x.max():g}]")
    return False


def last_level_above(x, k, n, target) -> float:
    """The last level x_j whose accuracy lies above ``target`` (a number, or posterior draws of it) with posterior
    probability at least 1 − (1 − :data:`CREDIBLE`)/2, each level's accuracy Beta(k_j + 1, n_j − k_j + 1) (flat
    prior) on its own; −inf where no level does. Accuracy falls with x, so a threshold where ψ = target lies above
    x_j, whatever the sigmoid's shape; by the same per-level rule as the central interval's 2.5 % tail."""
    x, k, n = (np.asarray(v, dtype=float) for v in (x, k, n))
    targets = np.atleast_1d(np.asarray(target, dtype=float))
    above = stats.beta.sf(targets[None, :], k[:, None] + 1, n[:, None] - k[:, None] + 1).mean(axis=1)
    clear = x[above >= 1 - (1 - CREDIBLE) / 2]
    return float(clear.max()) if clear.size else -np.inf


def below_chance(x, k, n, guess: float) -> list[float]:
    """The stimulus values whose accuracy lies below chance at one-sided binomial p < :data:`BELOW_CHANCE_ALPHA`."""
    p = stats.binom.cdf(np.asarray(k, float), np.asarray(n, float), guess)
    return [float(v) for v, pv in zip(x, p) if pv < BELOW_CHANCE_ALPHA]


@dataclass
class Fit:
    """The floor-averaged fit in this module's parameters: the more probable model's name (:data:`CHANCE_FLOOR`,
    :data:`FREE_FLOOR`) and MAP parameters, :data:`POSTERIOR_DRAWS` draws of the model-averaged posterior, the
    summaries (median, low, high) of lapse and floor, and the free floor's posterior probability."""

    model: str
    best: dict
    draws: dict
    lapse: tuple[float, float, float]
    floor: tuple[float, float, float]
    free_floor_probability: float


@dataclass
class ModelPosterior:
    """One model's psignifit fit: MAP parameters, posterior draws and log evidence log p(data | model)."""

    best: dict
    draws: dict
    log_evidence: float


def floor_averaged(x, k, n, guess: float, overdispersed: bool, rng) -> Fit:
    """Both floor models (module docstring) averaged by their evidence: p_free = E_free / (E_free + E_chance)
    at prior odds 1:1, and the draws a shuffled mixture, round(p_free · N) of them from the free-floor posterior.
    Pooled data get η fitted in both models."""
    eta = None if overdispersed else 0.0
    chance = model_posterior(CHANCE_FLOOR, x, k, n, guess, eta, rng)
    free = model_posterior(FREE_FLOOR, x, k, n, guess, eta, rng)
    p_free = float(expit(free.log_evidence - chance.log_evidence))
    from_free = int(round(POSTERIOR_DRAWS * p_free))
    order = rng.permutation(POSTERIOR_DRAWS)
    draws = {name: np.concatenate([free.draws[name][:from_free], chance.draws[name][from_free:]])[order]
             for name in chance.draws}
    model, best = (FREE_FLOOR, free.best) if p_free > 0.5 else (CHANCE_FLOOR, chance.best)
    return Fit(model, best, draws, lapse=summary(draws["lapse"], bound=0.0), floor=summary(draws["floor"], bound=guess),
               free_floor_probability=p_free)


def model_posterior(model: str, x, k, n, guess: float, eta: float | None, rng) -> ModelPosterior:
    """psignifit's posterior grid of one floor model, with the free floor's joint prior set to zero where γ + λ ≥ 1
    and renormalised (:func:`inside_prior_mass`), its draws and its log evidence.

    psignifit normalises each prior over its bounds and returns the posterior mass on its grid without the
    normaliser; the evidence is recovered at the grid's peak i as E = exp(log posterior_i) w_i / mass_i (w_i the
    trapezoid weight: mass_i = exp(log posterior_i) w_i / E). Restricting the prior to γ + λ < 1 multiplies it by
    1/Z (Z its prior mass there) and the evidence by (posterior mass there)/Z."""
    from psignifit._posterior import integral_weights, log_posterior

    free = model == FREE_FLOOR
    sigmoid = rising_logistic()
    result = _psignifit(x, k, n, guess, free, eta, sigmoid)
    grid = dict(sorted(result.parameter_values.items()))
    mass = np.asarray(result.debug["posteriors"], dtype=float)
    peak = np.unravel_index(np.argmax(mass), mass.shape)
    at_peak = {name: values[[index]] for (name, values), index in zip(grid.items(), peak)}
    log_peak = float(np.ravel(log_posterior(result.data, sigmoid, result.debug["priors"], at_peak))[0])
    weight = float(np.broadcast_to(integral_weights(list(grid.values())), mass.shape)[peak])
    log_evidence = log_peak + np.log(weight) - np.log(mass[peak])
    if free:
        inside = (grid["gamma"][:, None] + grid["lambda"][None, :] < 1)[None, :, :, None, None]
        kept = float((mass * inside).sum())
        mass = mass * inside / kept
        log_evidence += np.log(kept) - np.log(inside_prior_mass(guess))
    index = np.unravel_index(rng.choice(mass.size, size=POSTERIOR_DRAWS, p=mass.ravel() / mass.sum()), mass.shape)
    draws = {name: values[i] for (name, values), i in zip(grid.items(), index)}
    return ModelPosterior(model_parameters(result.parameter_estimate), model_parameters(draws), log_evidence)


def lapse_bound(guess: float) -> float:
    """The lapse's upper end 1 − 1/C − margin: at 1 − 1/C the curve would be flat at chance."""
    return 1 - guess - ASYMPTOTE_MARGIN


def inside_prior_mass(guess: float) -> float:
    """Z = P(γ + λ < 1) under the free floor's product prior, γ flat on [1/C, 1 − margin] and λ flat on
    [0, h], h = :func:`lapse_bound`: Z = E_γ[min(1, (1 − γ)/h)] (the mean over a fine grid of γ)."""
    floors = np.linspace(guess, 1 - ASYMPTOTE_MARGIN, 4001)
    return float(np.mean(np.minimum(1, (1 - floors) / lapse_bound(guess))))


def _psignifit(x, k, n, guess: float, free_floor: bool, eta: float | None, sigmoid):
    """psignifit's rising logistic on u = −x with flat priors on the lapse and (free) floor, zero outside their
    bounds; η fitted (None) or fixed."""
    import psignifit

    bounds = {"lambda": (0.0, lapse_bound(guess))}
    priors = {"lambda": _truncated(np.ones_like, *bounds["lambda"]), "width": width_prior(x)}
    kind = {"experiment_type": "nAFC", "experiment_choices": round(1 / guess)}
    if free_floor:
        bounds["gamma"] = (guess, 1 - ASYMPTOTE_MARGIN)
        priors["gamma"] = _truncated(np.ones_like, *bounds["gamma"])
        kind = {"experiment_type": "yes/no"}
        if eta is None:
            kind |= {"grid_steps": POOLED_FREE_FLOOR_GRID, "steps_moving_bounds": POOLED_FREE_FLOOR_COARSE_GRID}
    return psignifit.psignifit(np.column_stack([-x, k, n]), sigmoid=sigmoid, bounds=bounds, priors=priors,
                               fixed_parameters=None if eta is None else {"eta": eta}, width_alpha=WIDTH_ALPHA,
                               debug=True, verbose=False, **kind)


def width_prior(x):
    """psignifit's default width prior (Schütt et al. 2016, Sec. 2.4; ``psignifit._priors.width_prior``) for
    ``WIDTH_ALPHA`` = 0.05, where its rescaling of w to the 5-95 % width is the identity: flat on (2 w₀, R), rising
    as (1 − cos(π (w − w₀)/w₀))/2 from w₀ and falling as (1 + cos(π/2 (w − R)/R))/2 to 3R, w₀ the smallest level
    step and R the tested range. The same function in closed form: psignifit's freezes a scipy distribution on each
    call, half of a fit's time in the MAP search."""
    levels = np.unique(np.asarray(x, dtype=float))
    step, spread = float(np.diff(levels).min()), float(levels[-1] - levels[0])

    def prior(width):
        width = np.asarray(width, dtype=float)
        rising = (1 - np.cos(np.pi * (width - step) / step)) / 2
        falling = (1 + np.cos(np.pi / 2 * (width - spread) / spread)) / 2
        return np.select([(width > 2 * step) & (width < spread), (width >= step) & (width <= 2 * step),
                          (width >= spread) & (width <= 3 * spread)], [1.0, rising, falling], 0.0)
    return prior


def _truncated(density, low: float, high: float):
    """A prior density on [low, high], zero outside (psignifit normalises it over the parameter's bounds)."""
    def prior(values):
        values = np.asarray(values, dtype=float)
        return np.where((values >= low) & (values <= high), density(values), 0.0)
    return prior


def model_parameters(fitted: dict) -> dict:
    """psignifit's parameters on u = −x as this module's: location m = −threshold, floor γ, lapse λ."""
    return {"location": -np.asarray(fitted["threshold"], float), "width": np.asarray(fitted["width"], float),
            "floor": np.asarray(fitted["gamma"], float), "lapse": np.asarray(fitted["lambda"], float),
            "eta": np.asarray(fitted["eta"], float)}


def summary(samples, bound: float | None = None) -> tuple[float, float, float]:
    """Posterior median and 95 % credible interval of draws: central, or for a parameter bounded below at ``bound``
    whose posterior piles up there (at least (1 − CREDIBLE)/2 of the draws on the bound, module docstring) the
    one-sided [bound, CREDIBLE quantile]. ±inf stands for draws that never reach (−) or never fall to (+) a
    target, so a median at ±inf says most draws do not."""
    samples = np.asarray(samples, dtype=float)
    tail = (1 - CREDIBLE) / 2
    if bound is not None and np.mean(samples <= bound + 1e-12) >= tail:
        median, high = np.percentile(samples, [50, CREDIBLE * 100], method="inverted_cdf")
        return float(median), float(bound), float(high)
    return tuple(map(float, np.percentile(samples, [50, tail * 100, 100 - tail * 100], method="inverted_cdf")))
