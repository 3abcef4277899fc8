"""Accuracy-based metrics of the scored response table, one function per published quantity.

Input is the ``scored`` table of :func:`analysis.exclusions.apply_exclusions` (test
trials only, ``correct`` in {0, 1}). Every function returns a tidy DataFrame so the
report can write it as CSV unchanged.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from cuebench.errors import CuebenchError

from .chance import oddity_chance

Z95 = stats.norm.ppf(0.975)
BASELINE = "original"
CUE_CONDITIONS = {"original": "Q_O", "shape_cue": "Q_S", "texture_cue": "Q_T"}


class MetricError(CuebenchError, ValueError):
    """A metric cannot be computed from the given responses; the message says which data are missing."""


def wilson_ci(k, n, z: float = Z95):
    """Wilson score interval for k successes in n trials (Wilson 1927; Brown, Cai & DasGupta 2001, eq. 4):
    (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n). Works elementwise on arrays."""
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        denom = 1 + z ** 2 / n
        centre = (p + z ** 2 / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z ** 2 / (4 * n ** 2)) / denom
    return centre - half, centre + half


def t_ci(values, confidence: float = 0.95):
    """Mean and t-based confidence interval across observers: mean ± t_{n-1} · s / sqrt(n) (NaN for n < 2)."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return np.nan, np.nan, np.nan
    mean = x.mean()
    if len(x) < 2:
        return mean, np.nan, np.nan
    half = stats.t.ppf(0.5 + confidence / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return mean, mean - half, mean + half


def bootstrap_ci(values, n_boot: int = 2000, seed: int = 0, confidence: float = 0.95):
    """Percentile bootstrap interval of the mean, resampling observers with replacement (Efron & Tibshirani 1993)."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) < 2:
        return np.nan, np.nan
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return lo, hi


def _levels(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(level=df["level"].fillna(-1).astype(int))


def accuracy(scored: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per observer x condition x level with a Wilson 95 % CI (one observer's binomial trials).

    ``level`` -1 stands for "no level" (e.g. the original images)."""
    grouped = (_levels(scored).groupby(["observer", "observer_kind", "condition", "level"], as_index=False)
               .agg(n=("correct", "size"), k=("correct", "sum")))
    grouped["accuracy"] = grouped["k"] / grouped["n"]
    grouped["ci_low"], grouped["ci_high"] = wilson_ci(grouped["k"], grouped["n"])
    return grouped


MIN_T_OBSERVERS = 3
"""A t-interval across observers needs at least this many: with two, t(0.975, 1) = 12.7 makes the
interval many times wider than the scale itself, which says nothing a reader can use."""

BOUNDS = {"accuracy": (0.0, 1.0), "relative_accuracy": (0.0, None), "chance_corrected": (None, None)}
"""The range each per-observer value can take; intervals are clipped to it (a proportion's interval
never leaves [0, 1], a ratio of accuracies never goes below 0)."""


def group_accuracy(per_observer: pd.DataFrame, value: str = "accuracy", seed: int = 0,
                   n_boot: int = 2000) -> pd.DataFrame:
    """Mean of per-observer values across the observers of each kind, with a t-based 95 % CI (only from
    :data:`MIN_T_OBSERVERS` observers on) and a percentile bootstrap CI over observers (``n_boot`` resamples), both
    clipped to the value's range (:data:`BOUNDS`). For accuracy also the Wilson 95 % CI of all trials pooled
    (``wilson_low``, ``wilson_high``), the interval that exists already for one observer."""
    low, high = BOUNDS.get(value, (None, None))
    rows = []
    for (kind, cond, level), g in per_observer.groupby(["observer_kind", "condition", "level"]):
        values = g[value].to_numpy(dtype=float)
        finite = values[np.isfinite(values)]
        mean, t_lo, t_hi = t_ci(finite)
        if len(finite) < MIN_T_OBSERVERS:
            t_lo = t_hi = np.nan
        b_lo, b_hi = bootstrap_ci(finite, n_boot=n_boot, seed=seed)
        row = {"observer_kind": kind, "condition": cond, "level": level, "observers": int(len(finite)),
               value: mean, "t_ci_low": t_lo, "t_ci_high": t_hi, "boot_ci_low": b_lo, "boot_ci_high": b_hi}
        if value == "accuracy" and {"k", "n"} <= set(g.columns):
            row["wilson_low"], row["wilson_high"] = (float(v) for v in wilson_ci(g["k"].sum(), g["n"].sum()))
        rows.append(row)
    out = pd.DataFrame(rows)
    interval = [c for c in ("t_ci_low", "t_ci_high", "boot_ci_low", "boot_ci_high") if c in out.columns]
    if len(out) and (low is not None or high is not None):
        out[interval] = out[interval].clip(lower=low, upper=high)
    return out


NO_BASELINE = "baseline accuracy 0: no relative or chance-corrected accuracy"
AT_CHANCE = "baseline accuracy at or below chance 1/C: no chance-corrected value (its sign would flip)"


def relative_accuracy(acc: pd.DataFrame, n_choices: int, baseline: str = BASELINE) -> pd.DataFrame:
    """Relative accuracy A_sup / A_orig and chance-corrected (A_sup - 1/C) / (A_orig - 1/C)
    (Burgert et al. 2025, Sec. 5.1 and Sec. 5.2 "rescaling"), per observer, condition and level.

    ``acc`` is the output of :func:`accuracy`; the baseline is the observer's accuracy on
    ``baseline`` trials. Observers without baseline trials get no rows. A ratio is defined only
    where its denominator is positive: with A_orig = 0 the relative accuracy, with A_orig <= 1/C the
    chance-corrected one is empty, and ``note`` says why (:data:`NO_BASELINE`, :data:`AT_CHANCE`)."""
    if n_choices < 2:
        raise MetricError(f"relative accuracy needs at least 2 answer choices, got {n_choices}")
    totals = acc[acc["condition"] == baseline].groupby("observer")[["k", "n"]].sum()
    base = (totals["k"] / totals["n"]).rename("baseline_accuracy")
    out = acc[acc["condition"] != baseline].merge(base, left_on="observer", right_index=True)
    chance = 1 / n_choices
    above_zero, above_chance = out["baseline_accuracy"] > 0, out["baseline_accuracy"] > chance
    with np.errstate(divide="ignore", invalid="ignore"):
        out["relative_accuracy"] = (out["accuracy"] / out["baseline_accuracy"]).where(above_zero)
        out["chance_corrected"] = ((out["accuracy"] - chance) / (out["baseline_accuracy"] - chance)).where(above_chance)
    out["note"] = np.where(~above_zero, NO_BASELINE, np.where(~above_chance, AT_CHANCE, ""))
    return out[["observer", "observer_kind", "condition", "level", "n", "accuracy", "baseline_accuracy",
                "relative_accuracy", "chance_corrected", "note"]].reset_index(drop=True)


def ratio_interval(numerator, denominator, z: float = Z95) -> pd.DataFrame:
    """A proportion of counts with its Wilson 95 % interval (:func:`wilson_ci`): ``k / n`` with ``k =
    numerator``, ``n = denominator``; empty (NaN) where n = 0."""
    k, n = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        low, high = wilson_ci(k, n, z)
        value = np.where(n > 0, k / n, np.nan)
    return pd.DataFrame({"value": value, "ci_low": np.where(n > 0, low, np.nan),
                         "ci_high": np.where(n > 0, high, np.nan)})


def shape_bias(scored: pd.DataFrame, by_category: bool = False) -> pd.DataFrame:
    """Shape bias = shape decisions / (shape + texture decisions) (Geirhos et al. 2019, Sec. 3),
    over cue-conflict trials whose shape class (``category``) and texture class differ, with the
    Wilson 95 % interval of that proportion of decisions (:func:`ratio_interval`).

    Columns ``observer, [category,] shape_bias, ci_low, ci_high, n_shape, n_texture``; answers that are
    neither class count for neither; no shape or texture decision at all leaves the bias empty."""
    conflict = scored[scored["texture_category"].notna() & (scored["texture_category"] != scored["category"])]
    conflict = conflict.assign(shape=(conflict["response"] == conflict["category"]).astype(int),
                               texture=(conflict["response"] == conflict["texture_category"]).astype(int))
    keys = ["observer", "observer_kind"] + (["category"] if by_category else [])
    out = conflict.groupby(keys, as_index=False).agg(n_shape=("shape", "sum"), n_texture=("texture", "sum"))
    bias = ratio_interval(out["n_shape"], out["n_shape"] + out["n_texture"])
    out["shape_bias"], out["ci_low"], out["ci_high"] = bias["value"], bias["ci_low"], bias["ci_high"]
    return out[keys + ["shape_bias", "ci_low", "ci_high", "n_shape", "n_texture"]]


def cue_decomposition(scored: pd.DataFrame, model_set: list[str] | None = None) -> pd.DataFrame:
    """Cue-decomposition shape bias S_cd and robustness R_cd (Heinert et al., eqs. 3-5).

    Q_O, Q_S, Q_T are accuracies on ``original``, ``shape_cue`` (EED) and ``texture_cue``
    (Voronoi) trials, each with its Wilson 95 % interval over the observer's trials (``Q_S_low``,
    ``Q_S_high``, ..., and the counts ``n_O``, ``n_S``, ``n_T``); s and t are the means of Q_S and Q_T
    over ``model_set`` (default: every model observer); S_cd = (Q_S/s) / (Q_S/s + Q_T/t);
    R_cd = (Q_S + Q_T) / (2 Q_O). Humans get S_cd on the same model-set scale."""
    cue = scored[scored["condition"].isin(CUE_CONDITIONS)]
    counts = cue.groupby(["observer", "observer_kind", "condition"])["correct"].agg(["sum", "size"]).unstack("condition")
    present = set(cue["condition"])
    missing = [c for c in CUE_CONDITIONS if c not in present]
    if missing:
        raise MetricError(f"cue decomposition needs trials of conditions {list(CUE_CONDITIONS)}; none for {missing}")
    q = pd.DataFrame(index=counts.index)
    for condition, name in CUE_CONDITIONS.items():
        k, n = counts[("sum", condition)].fillna(0), counts[("size", condition)].fillna(0)
        interval = ratio_interval(k, n)
        q[name], q[f"{name}_low"], q[f"{name}_high"] = (interval[c].to_numpy() for c in ("value", "ci_low", "ci_high"))
        q[f"n_{name[-1]}"] = n.astype(int).to_numpy()
    return cue_decomposition_scores(q.reset_index(), model_set)


def cue_decomposition_scores(q: pd.DataFrame, model_set: list[str] | None = None) -> pd.DataFrame:
    """S_cd and R_cd from a table with columns ``observer, Q_O, Q_S, Q_T`` (Heinert et al., eqs. 3-5).
    Each ratio is defined only where its denominators are positive: S_cd needs s, t > 0 and Q_S + Q_T > 0,
    R_cd needs Q_O > 0; otherwise it is empty and ``note`` says why."""
    if model_set is None:
        members = q[q.get("observer_kind", pd.Series("model", index=q.index)) == "model"]
    else:
        unknown = sorted(set(model_set) - set(q["observer"]))
        if unknown:
            raise MetricError(f"model set names {unknown[0]!r}, which has no cue-decomposition accuracies")
        members = q[q["observer"].isin(model_set)]
    if members.empty:
        raise MetricError("the model set for s and t is empty")
    s, t = members["Q_S"].mean(), members["Q_T"].mean()
    out = q.copy()
    out["s"], out["t"] = s, t
    scale_ok = s > 0 and t > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        shape, texture = (out["Q_S"] / s, out["Q_T"] / t) if scale_ok else (np.nan, np.nan)
        out["S_cd"] = (shape / (shape + texture)).where((out["Q_S"] + out["Q_T"]) > 0) if scale_ok else np.nan
        out["R_cd"] = ((out["Q_S"] + out["Q_T"]) / (2 * out["Q_O"])).where(out["Q_O"] > 0)
    notes = []
    for row in out.itertuples():
        why = [] if scale_ok else [f"the model set's mean Q_S or Q_T is 0 (s = {s:.3g}, t = {t:.3g}): no S_cd"]
        if scale_ok and not (row.Q_S + row.Q_T) > 0:
            why.append("Q_S = Q_T = 0: no S_cd")
        if not row.Q_O > 0:
            why.append("Q_O = 0: no R_cd")
        notes.append("; ".join(why))
    out["note"] = notes
    return out


HEINERT_CORRUPTIONS = ("contrast", "high_pass", "low_pass", "uniform_noise", "phase_noise")
"""The corruptions of Heinert et al. Tables I and IV (the names of ``cuebench list corruptions``)."""
UNCHANGED_AT_LEVEL_0 = frozenset({"contrast", "high_pass", "low_pass", "phase_noise"})
"""Corruptions whose level 0 is the unchanged (grayscale) image, no corruption: contrast 100 %, high pass with
sigma = inf, low pass with sigma = 0, phase noise of 0 degrees (Geirhos et al. 2018's grids). Uniform noise's level 0
(width 0) is the image at 30 % contrast, already corrupted, so it counts."""


def relative_robustness(quality: pd.DataFrame, value: str = "accuracy",
                        corruptions: tuple[str, ...] = HEINERT_CORRUPTIONS) -> pd.DataFrame:
    """Relative corruption robustness (Heinert et al. Tables I and IV): per observer and corruption, the mean
    over the corruption's intensity levels of Q(level) / Q_O, with Q the observer's ``value`` (accuracy
    for classification, mIoU for segmentation) and Q_O its value on the ``original`` condition; ``Mean``
    is the mean over the corruptions present. Level 0 is left out where it is the unchanged image
    (:data:`UNCHANGED_AT_LEVEL_0`); uniform noise's level 0, a 30 %-contrast image, stays.

    ``quality``: ``observer, observer_kind, condition, level, <value>``. Returns one row per observer with a
    column per corruption and ``Mean`` (empty where Q_O is 0)."""
    originals = quality[quality["condition"] == BASELINE].groupby("observer")[value].mean()
    level = quality["level"].fillna(0)
    unchanged = quality["condition"].isin(UNCHANGED_AT_LEVEL_0) & (level == 0)
    corrupted = quality[quality["condition"].isin(corruptions) & (level >= 0) & ~unchanged]
    if corrupted.empty:
        raise MetricError(f"relative robustness needs corrupted trials (conditions {', '.join(corruptions)}, "
                          "beyond the unchanged image)")
    if originals.empty:
        raise MetricError("relative robustness needs the observers' answers on original images (condition "
                          f"{BASELINE!r}) to relate the corrupted ones to")
    per_level = corrupted.assign(ratio=corrupted[value] / corrupted["observer"].map(originals.where(originals > 0)))
    wide = per_level.pivot_table(index=["observer", "observer_kind"], columns="condition", values="ratio",
                                 aggfunc="mean", dropna=False)
    present = [c for c in corruptions if c in wide.columns]
    wide = wide[present]
    wide["Mean"] = wide.mean(axis=1, skipna=False)
    wide.columns.name = None
    return wide.reset_index()


RANK_METHODS = ("spearman", "kendall")


def robustness_rank_correlations(predictors: pd.DataFrame, robustness: pd.DataFrame,
                                 methods: tuple[str, ...] = RANK_METHODS) -> pd.DataFrame:
    """Rank correlation of each per-model metric with each relative robustness column over the models both
    tables hold (Heinert et al. Tables V and VI for segmentation, Tables II and X for classification: rows are
    metrics, columns corruptions and Mean). ``spearman``: Spearman's rho, as the paper (its ref. [75]);
    ``kendall``: Kendall's tau-b, which handles ties and is less swayed by one model at a few models. A
    correlation needs three models with both values and neither column constant (else empty).

    ``predictors``: ``observer`` and one column per metric; ``robustness``: :func:`relative_robustness`'s table.
    Returns one row per metric and method: ``metric, method, models``, then a column per robustness column."""
    from scipy import stats

    measure = {"spearman": lambda a, b: stats.spearmanr(a, b).statistic,
               "kendall": lambda a, b: stats.kendalltau(a, b, variant="b").statistic}
    unknown = [m for m in methods if m not in measure]
    if unknown:
        raise MetricError(f"unknown rank correlation {unknown[0]!r}; known: {', '.join(measure)}")
    joined = predictors.merge(robustness.drop(columns="observer_kind", errors="ignore"), on="observer")
    targets = [c for c in robustness.columns if c not in ("observer", "observer_kind")]
    names = [c for c in predictors.columns if c not in ("observer", "observer_kind")]
    rows = []
    for name in names:
        for method in methods:
            row = {"metric": name, "method": method, "models": int(joined[name].notna().sum())}
            for target in targets:
                pair = joined[[name, target]].dropna().to_numpy(float)
                ranked = len(pair) >= 3 and np.ptp(pair[:, 0]) > 0 and np.ptp(pair[:, 1]) > 0
                row[target] = float(measure[method](pair[:, 0], pair[:, 1])) if ranked else np.nan
            rows.append(row)
    return pd.DataFrame(rows, columns=["metric", "method", "models", *targets])


def oddity_accuracy(scored: pd.DataFrame, catch: pd.DataFrame | None = None) -> pd.DataFrame:
    """Oddity-detection accuracy (Wen et al. 2024, DiST, Sec. 3): fraction of triplets whose odd image
    was picked, per observer and condition, with a Wilson CI and the chance of those trials (1/k for k images,
    from the trial type's card: :func:`analysis.chance.oddity_chance`) and the accuracy corrected for guessing,
    (A - g) / (1 - g) with g the chance (the high-threshold correction, Macmillan & Creelman 2005, Ch. 4), so
    triplets and quadruplets read on one scale; catch trials on separate rows (``role`` = catch), never mixed
    into the test accuracy."""
    parts = [scored[scored["trial_type"] == "oddity"]]
    if catch is not None:
        parts.append(catch[(catch["trial_type"] == "oddity") & catch["correct"].notna()].assign(
            correct=lambda d: d["correct"].astype(int)))
    rows = pd.concat(parts, ignore_index=True)
    keys = ["observer", "observer_kind", "role", "condition"]
    out = rows.groupby(keys, as_index=False).agg(n=("correct", "size"), k=("correct", "sum"))
    out["accuracy"] = out["k"] / out["n"]
    out["ci_low"], out["ci_high"] = wilson_ci(out["k"], out["n"])
    out = out.merge(oddity_chance(rows, keys), on=keys)
    out["chance_corrected"] = (out["accuracy"] - out["chance"]) / (1 - out["chance"])
    return out
