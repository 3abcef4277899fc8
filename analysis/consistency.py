"""Trial-by-trial agreement between observers: error consistency and noise ceilings.

Two observers are compared on the trials both answered (same ``trial_id``), through
their per-trial correctness; nothing else about the answers is used.
"""

from __future__ import annotations

import warnings

from itertools import combinations

import numpy as np
import pandas as pd


def correctness_matrix(scored: pd.DataFrame) -> pd.DataFrame:
    """Items (``trial_id``) x observers, 1/0 correctness, NaN where an observer did not see the item.
    An item answered twice by one observer counts with its first answer."""
    first = scored.drop_duplicates(["observer", "trial_id"])
    return first.pivot(index="trial_id", columns="observer", values="correct").astype(float)


def kappa_from_correct(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """Observed consistency c_obs, expected c_exp and error consistency kappa (Geirhos et al. 2020, eqs. 1-3):
    c_obs = fraction of trials both got right or both got wrong; c_exp = p1 p2 + (1-p1)(1-p2) with
    p1, p2 the two accuracies; kappa = (c_obs - c_exp) / (1 - c_exp).

    kappa is undefined (NaN) when c_exp = 1, i.e. both observers are always right or always wrong."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    c_obs = np.mean(a == b, axis=-1)
    p1, p2 = a.mean(axis=-1), b.mean(axis=-1)
    c_exp = p1 * p2 + (1 - p1) * (1 - p2)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(np.isclose(c_exp, 1.0), np.nan, (c_obs - c_exp) / (1 - c_exp))
    return c_obs, c_exp, kappa


def bootstrap_kappa(a: np.ndarray, b: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """kappa of ``n_boot`` resamples of the trials (with replacement), drawn as multinomial counts of the
    four outcome types (both right, only a, only b, both wrong): the same distribution as resampling
    trial indices, in O(n_boot) instead of O(n_boot x trials)."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    counts = np.array([np.sum(a & b), np.sum(a & ~b), np.sum(~a & b), np.sum(~a & ~b)])
    n = counts.sum()
    draws = rng.multinomial(n, counts / n, size=n_boot) / n
    c_obs = draws[:, 0] + draws[:, 3]
    p1, p2 = draws[:, 0] + draws[:, 1], draws[:, 0] + draws[:, 2]
    c_exp = p1 * p2 + (1 - p1) * (1 - p2)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isclose(c_exp, 1.0), np.nan, (c_obs - c_exp) / (1 - c_exp))


def error_consistency(scored: pd.DataFrame, n_boot: int = 1000, seed: int = 0, min_shared: int = 1) -> pd.DataFrame:
    """c_obs, c_exp and kappa for every pair of observers on their shared trials, with a 95 % percentile
    bootstrap CI of kappa over trials (:func:`bootstrap_kappa`); ``pair`` is human-human, human-model or
    model-model, so human pairs serve as the reference."""
    matrix = correctness_matrix(scored)
    kinds = scored.drop_duplicates("observer").set_index("observer")["observer_kind"]
    rng = np.random.default_rng(seed)
    rows = []
    for a, b in combinations(matrix.columns, 2):
        both = matrix[[a, b]].dropna()
        n = len(both)
        if n < min_shared:
            continue
        x, y = both[a].to_numpy(), both[b].to_numpy()
        c_obs, c_exp, kappa = kappa_from_correct(x, y)
        boot = bootstrap_kappa(x, y, n_boot, rng)
        boot = boot[~np.isnan(boot)]
        lo, hi = np.percentile(boot, [2.5, 97.5]) if len(boot) else (np.nan, np.nan)
        pair = "-".join(sorted([kinds[a], kinds[b]]))
        rows.append({"observer_a": a, "observer_b": b, "pair": pair, "n_shared": n, "c_obs": float(c_obs),
                     "c_exp": float(c_exp), "kappa": float(kappa), "kappa_ci_low": lo, "kappa_ci_high": hi})
    return pd.DataFrame(rows, columns=["observer_a", "observer_b", "pair", "n_shared", "c_obs", "c_exp", "kappa",
                                       "kappa_ci_low", "kappa_ci_high"])


def pair_matrix(pairs: pd.DataFrame, observers: list[str], column: str = "kappa") -> pd.DataFrame:
    """Symmetric observers x observers table of one column of :func:`error_consistency`
    (``kappa``, ``n_shared``, ...); the diagonal and pairs below ``min_shared`` are NaN."""
    m = pd.DataFrame(np.nan, index=observers, columns=observers)
    for r in pairs.itertuples():
        if r.observer_a in m.index and r.observer_b in m.index:
            m.loc[r.observer_a, r.observer_b] = m.loc[r.observer_b, r.observer_a] = getattr(r, column)
    return m


def _agreement(x: np.ndarray, y: np.ndarray, measure: str) -> float:
    """Item-wise agreement of two correctness profiles on the items both have:
    ``accuracy`` -> Pearson r of the item-wise accuracies; ``kappa`` -> error consistency of
    the correctness after rounding each profile to a consensus (mean >= 0.5 counts as right)."""
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    if len(x) < 2:
        return np.nan
    if measure == "kappa":
        return float(kappa_from_correct(x >= 0.5, y >= 0.5)[2])
    if np.std(x) == 0 or np.std(y) == 0:
        return np.nan
    return float(np.corrcoef(x, y)[0, 1])


def spearman_brown(r: float, factor: float = 2.0) -> float:
    """Spearman-Brown prophecy: reliability of a test ``factor`` times as long, factor·r / (1 + (factor-1)·r)
    (Brown 1910; Spearman 1910). Undefined (NaN) where 1 + (factor-1)·r <= 0: two halves of a pilot that
    disagree perfectly (r = -1) have no reliability to step up."""
    denominator = 1 + (factor - 1) * r
    if not (np.isfinite(r) and denominator > 0):
        return np.nan
    return float(factor * r / denominator)


def noise_ceiling(matrix: pd.DataFrame, measure: str = "accuracy", n_splits: int = 100, seed: int = 0) -> dict:
    """Item-wise noise ceiling of a group of observers (Nili et al. 2014; as used by Burgert et al. 2025, App. F).

    ``matrix`` is items x observers correctness (:func:`correctness_matrix`, one group's
    columns). Leave-one-participant-out: the lower bound is the mean agreement of each
    observer with the mean profile of the *others*, the upper bound with the mean of *all*
    (itself included). Split-half: observers are split at random into halves ``n_splits``
    times; the agreement of the two half-means is stepped up to the full group with
    Spearman-Brown. ``measure`` is ``accuracy`` or ``kappa`` (see :func:`_agreement`)."""
    values = matrix.to_numpy(dtype=float)
    n_obs = values.shape[1]
    out = {"measure": measure, "observers": n_obs, "items": int(matrix.notna().any(axis=1).sum())}
    if n_obs < 2:
        return out | {"lower": np.nan, "upper": np.nan, "lower_sd": np.nan, "split_half": np.nan,
                      "split_half_sb": np.nan}
    with np.errstate(invalid="ignore", divide="ignore"):
        total = np.nansum(values, axis=1)
        count = np.sum(~np.isnan(values), axis=1)
        lower, upper = [], []
        for j in range(n_obs):
            own = values[:, j]
            seen = ~np.isnan(own)
            others = (total - np.nan_to_num(own)) / (count - seen)
            lower.append(_agreement(own, others, measure))
            upper.append(_agreement(own, total / count, measure))
        rng = np.random.default_rng(seed)
        halves = []
        for _ in range(n_splits):
            perm = rng.permutation(n_obs)
            first, second = perm[: n_obs // 2], perm[n_obs // 2:]
            halves.append(_agreement(_item_means(values[:, first]), _item_means(values[:, second]), measure))
    split = _mean_of_finite(halves)
    return out | {"lower": _mean_of_finite(lower), "upper": _mean_of_finite(upper),
                  "lower_sd": float(np.nanstd(lower, ddof=1)) if np.isfinite(lower).sum() >= 2 else np.nan,
                  "split_half": split, "split_half_sb": spearman_brown(split)}


def _item_means(values: np.ndarray) -> np.ndarray:
    """Each item's mean over the observers who answered it; NaN (not a warning) for an item none of them did, as
    in a half of a small pilot whose people saw different trials."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Mean of empty slice", RuntimeWarning)
        return np.nanmean(values, axis=1)


def _mean_of_finite(values) -> float:
    """Mean of the defined values; NaN (not a warning) when none is defined."""
    values = np.asarray(values, dtype=float)
    return float(values[np.isfinite(values)].mean()) if np.isfinite(values).any() else np.nan


def agreement_with_group(profile: pd.Series, matrix: pd.DataFrame, measure: str = "accuracy") -> float:
    """Agreement of one observer's item-wise correctness with a group's mean profile (same measure as the ceiling)."""
    group_mean = matrix.mean(axis=1)
    aligned = profile.reindex(group_mean.index)
    return _agreement(aligned.to_numpy(dtype=float), group_mean.to_numpy(dtype=float), measure)


def ceilings_and_models(scored: pd.DataFrame, n_splits: int = 100, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Noise ceilings of the humans and of the models (for accuracy and kappa), and each model's agreement
    with the human mean profile relative to the human ceiling (agreement / lower bound, / upper bound)."""
    matrix = correctness_matrix(scored)
    kinds = scored.drop_duplicates("observer").set_index("observer")["observer_kind"]
    humans = [o for o in matrix.columns if kinds[o] == "human"]
    models = [o for o in matrix.columns if kinds[o] == "model"]
    ceilings, relative = [], []
    for measure in ("accuracy", "kappa"):
        for kind, members in (("human", humans), ("model", models)):
            if members:
                ceilings.append({"group": kind} | noise_ceiling(matrix[members], measure, n_splits, seed))
        if not humans:
            continue
        human_ceiling = next(c for c in ceilings if c["group"] == "human" and c["measure"] == measure)
        for model in models:
            agree = agreement_with_group(matrix[model], matrix[humans], measure)
            lower, upper = human_ceiling["lower"], human_ceiling["upper"]
            relative.append({"observer": model, "measure": measure, "agreement": agree,
                             "ceiling_lower": lower, "ceiling_upper": upper,
                             "relative_to_lower": ratio_to_ceiling(agree, lower),
                             "relative_to_upper": ratio_to_ceiling(agree, upper),
                             "note": ceiling_note(human_ceiling)})
    return pd.DataFrame(ceilings), pd.DataFrame(relative)


def ratio_to_ceiling(agreement: float, ceiling: float) -> float:
    """agreement / ceiling, only where the ceiling is positive: a ratio to a zero or negative ceiling
    (people who do not agree with each other) has no meaning as "fraction of the explainable"."""
    if not (np.isfinite(agreement) and np.isfinite(ceiling) and ceiling > 0):
        return np.nan
    return float(agreement / ceiling)


def ceiling_note(ceiling: dict) -> str:
    """One line on why a ceiling (or a ratio to it) is missing; empty when both bounds are usable."""
    if ceiling["observers"] < 2:
        return f"noise ceiling needs >= 2 people per trial; {ceiling['observers']} so far"
    bounds = [ceiling["lower"], ceiling["upper"]]
    if any(not np.isfinite(b) for b in bounds):
        return "noise ceiling undefined: every observer answers every shared trial alike (no item-wise variance)"
    if any(b <= 0 for b in bounds):
        return "noise ceiling <= 0 (observers do not agree with each other): no ratio to it"
    return ""
