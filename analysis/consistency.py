"""Trial-by-trial agreement between observers: error consistency and noise ceilings.

Two observers are compared on the trials both answered (same ``trial_id``), through their per-trial
correctness, and only *within* a cell of the design (condition x level, :data:`CELL`): two observers who
both find the strong suppression levels hard agree on *which levels* are hard even when their errors are
independent inside each level, so a kappa or an item-wise correlation pooled over levels measures the
design's difficulty profile, not trial-by-trial agreement. Each statistic is computed per cell; a pair's
error consistency pools the cells' agreement beyond chance (:func:`stratified_kappa`), the ceilings average the
cells where they are defined.
"""

from __future__ import annotations

import warnings
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats

CELL = ("condition", "level")
"""The unit within which trials are comparable: one condition at one level."""
NO_LEVEL = -1
"""``level`` of trials without one (the original images), as in :func:`analysis.metrics.accuracy`."""
SPLIT_HALVES = 100
"""Random splits of a group into halves for the split-half ceiling."""
MIN_SHARED_PER_CELL = 2
"""Fewest trials two observers share in a cell for it to enter their kappa: the chance agreement of a cell is
estimated from pairs of distinct trials (:func:`expected_agreement`)."""
MIN_JACKKNIFE_OBSERVERS = 3
"""Fewest observers for the leave-one-observer-out interval of a mean over pairs (t with n - 1 >= 2 dof)."""
UNDEFINED_KAPPA = ("kappa undefined: an observer is always right (or always wrong) on the shared trials of every "
                   "condition x level, so there are no errors whose overlap kappa could measure")


def correctness_matrix(scored: pd.DataFrame) -> pd.DataFrame:
    """Items (``trial_id``) x observers, 1/0 correctness, NaN where an observer did not see the item.
    An item answered twice by one observer counts with its first answer."""
    first = scored.drop_duplicates(["observer", "trial_id"])
    return first.pivot(index="trial_id", columns="observer", values="correct").astype(float)


def item_cells(scored: pd.DataFrame) -> pd.DataFrame:
    """``condition`` and ``level`` (:data:`NO_LEVEL` for none) of every item (``trial_id``), indexed by item."""
    first = scored.drop_duplicates("trial_id").set_index("trial_id")
    return pd.DataFrame({"condition": first["condition"].astype(str),
                         "level": first["level"].astype("Float64").fillna(NO_LEVEL).astype(int)})


def kappa_from_counts(counts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """c_obs, c_exp and kappa (Geirhos et al. 2020, eqs. 1-3) from the counts of the four outcomes
    (both right, only a right, only b right, both wrong) in the last axis: c_obs = fraction of trials both got
    right or both got wrong; c_exp = p1 p2 + (1-p1)(1-p2) with p1, p2 the two accuracies;
    kappa = (c_obs - c_exp) / (1 - c_exp).

    kappa is undefined (NaN) where an observer is always right or always wrong (p1 or p2 in {0, 1}): the
    formula then gives 0 (or 0/0) whatever the other observer does, which says nothing about overlapping
    errors; a model without errors is not "as consistent as chance"."""
    counts = np.asarray(counts, dtype=float)
    n = counts.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        both, only_a, only_b, neither = (counts[..., i] / n for i in range(4))
        c_obs = both + neither
        p1, p2 = both + only_a, both + only_b
        c_exp = p1 * p2 + (1 - p1) * (1 - p2)
        constant = np.isclose(p1 * (1 - p1), 0) | np.isclose(p2 * (1 - p2), 0)
        kappa = np.where(constant | ~(n > 0), np.nan, (c_obs - c_exp) / (1 - c_exp))
    return c_obs, c_exp, kappa


def expected_agreement(counts) -> np.ndarray:
    """Unbiased chance agreement c_exp = p1 p2 + (1-p1)(1-p2) of one cell from its outcome counts (last axis):
    p1 p2 is estimated over pairs of *distinct* trials, (sum a sum b - sum a b) / (n (n-1)) (a U-statistic,
    Hoeffding 1948), as is (1-p1)(1-p2). The plug-in p1_hat p2_hat is too large by cov(a, b) / n when the two
    observers' errors go together, so a kappa built from it shrinks towards 0 by a factor (n-1)/n in cells of n
    trials. NaN for n < 2."""
    counts = np.asarray(counts, dtype=float)
    both, only_a, only_b, neither = (counts[..., i] for i in range(4))
    n = counts.sum(axis=-1)
    right_a, right_b = both + only_a, both + only_b
    with np.errstate(divide="ignore", invalid="ignore"):
        pairs = (right_a * right_b - both + (n - right_a) * (n - right_b) - neither) / (n * (n - 1))
    return np.where(n >= 2, pairs, np.nan)


def stratified_kappa(counts, axis: int = 0) -> np.ndarray:
    """A pair's error consistency over the cells of a design (outcome counts: cells along ``axis``, the four
    outcomes in the last axis): kappa = sum_c n_c (c_obs,c - c_exp,c) / sum_c n_c (1 - c_exp,c), with each cell's
    chance agreement from its own accuracies (:func:`expected_agreement`) and cells of fewer than
    :data:`MIN_SHARED_PER_CELL` trials left out. Geirhos et al. 2020's kappa within each cell, pooled as a
    stratified kappa (Barlow, Lai & Azen 1991): the weighted mean of the cell kappas with weights n_c (1 - c_exp,c),
    whose numerator and denominator are unbiased sums, so it does not drift with the trials per cell as the
    unweighted mean of cell kappas does (a true 0.30 read 0.41 at 3 trials per cell and 0.54 at 2).
    Difficulty differences between cells still make no agreement: chance is taken within each cell."""
    counts = np.moveaxis(np.asarray(counts, dtype=float), axis, 0)
    n = counts.sum(axis=-1)
    c_exp = expected_agreement(counts)
    used = n >= MIN_SHARED_PER_CELL
    beyond = np.where(used, (counts[..., 0] + counts[..., 3]) - n * c_exp, 0).sum(axis=0)
    possible = np.where(used, n * (1 - c_exp), 0).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(possible > 1e-12, beyond / possible, np.nan)


def outcome_counts(a, b) -> np.ndarray:
    """Counts (both right, only a, only b, both wrong) of two 1/0 correctness vectors over the last axis."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    return np.stack([np.sum(a & b, -1), np.sum(a & ~b, -1), np.sum(~a & b, -1), np.sum(~a & ~b, -1)], axis=-1)


def kappa_from_correct(a, b) -> tuple[float, float, float]:
    """:func:`kappa_from_counts` of two 1/0 correctness vectors (trials in the last axis)."""
    return kappa_from_counts(outcome_counts(a, b))


def bootstrap_counts(counts, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``n_boot`` resamples (with replacement) of the trials behind one table of outcome counts, drawn as
    multinomial counts of the four outcomes: the same distribution as resampling trial indices, in O(n_boot)
    instead of O(n_boot x trials). Returns n_boot x 4 counts."""
    counts = np.asarray(counts, dtype=float)
    n = int(counts.sum())
    return rng.multinomial(n, counts / n, size=n_boot)


def bootstrap_kappa(a, b, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """kappa of ``n_boot`` resamples of the trials of two correctness vectors (:func:`bootstrap_counts`)."""
    return kappa_from_counts(bootstrap_counts(outcome_counts(a, b), n_boot, rng))[2]


CELL_COLUMNS = ["observer_a", "observer_b", "pair", "condition", "level", "n_shared", "both_right", "only_a",
                "only_b", "both_wrong", "c_obs", "c_exp", "kappa"]


def cell_kappas(scored: pd.DataFrame, min_shared: int = 1) -> pd.DataFrame:
    """Error consistency of every pair of observers in every cell (condition x level) where they share at least
    ``min_shared`` trials: the outcome counts, c_obs, c_exp and kappa (:func:`kappa_from_counts`). ``pair`` is
    human-human, human-model or model-model."""
    matrix = correctness_matrix(scored)
    cells = item_cells(scored).reindex(matrix.index)
    kinds = scored.drop_duplicates("observer").set_index("observer")["observer_kind"]
    seen = matrix.notna().to_numpy()
    right = matrix.fillna(0).to_numpy().astype(bool)
    groups = [(key, np.flatnonzero(((cells["condition"] == key[0]) & (cells["level"] == key[1])).to_numpy()))
              for key in cells.drop_duplicates().sort_values(list(CELL)).itertuples(index=False, name=None)]
    rows = []
    for i, j in combinations(range(matrix.shape[1]), 2):
        a, b = matrix.columns[i], matrix.columns[j]
        shared = seen[:, i] & seen[:, j]
        if not shared.any():
            continue
        pair = "-".join(sorted([kinds[a], kinds[b]]))
        for (condition, level), items in groups:
            items = items[shared[items]]
            if len(items) < max(min_shared, 1):
                continue
            counts = outcome_counts(right[items, i], right[items, j])
            c_obs, c_exp, kappa = kappa_from_counts(counts)
            rows.append({"observer_a": a, "observer_b": b, "pair": pair, "condition": condition, "level": level,
                         "n_shared": len(items), "both_right": counts[0], "only_a": counts[1], "only_b": counts[2],
                         "both_wrong": counts[3], "c_obs": float(c_obs), "c_exp": float(c_exp),
                         "kappa": float(kappa)})
    return pd.DataFrame(rows, columns=CELL_COLUMNS)


PAIR_COLUMNS = ["observer_a", "observer_b", "pair", "n_shared", "cells", "cells_undefined", "kappa", "kappa_ci_low",
                "kappa_ci_high", "kappa_pooled", "note"]


def pair_kappas(cells: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Error consistency of every pair: ``kappa`` pools the pair's cells (:func:`cell_kappas`) with at least
    :data:`MIN_SHARED_PER_CELL` shared trials (:func:`stratified_kappa`; ``cells`` of them), with a 95 % percentile
    bootstrap interval that resamples the trials within each cell (:func:`bootstrap_counts`). It is undefined where
    no cell has both observers sometimes right and sometimes wrong (Geirhos et al.'s kappa is then 0 whatever the
    other does); ``cells_undefined`` counts the cells where an observer is always right or always wrong (they still
    enter the pooled sums). ``kappa_pooled`` is kappa over all shared trials pooled across conditions and levels:
    it counts agreeing on which levels are hard as consistency, so it is shown under its own name, never as kappa."""
    rng = np.random.default_rng(seed)
    rows = []
    for (a, b, pair), g in cells.groupby(["observer_a", "observer_b", "pair"], sort=False):
        counts = g[["both_right", "only_a", "only_b", "both_wrong"]].to_numpy(dtype=float)
        used = g["n_shared"].to_numpy() >= MIN_SHARED_PER_CELL
        varying = np.isfinite(g["kappa"].to_numpy(dtype=float)) & used
        kappa = lo = hi = np.nan
        if varying.any():
            kappa = float(stratified_kappa(counts[used]))
            if n_boot > 0:
                draws = np.stack([bootstrap_counts(c, n_boot, rng) for c in counts[used]])
                resampled = stratified_kappa(draws)
                resampled = resampled[np.isfinite(resampled)]
                if len(resampled):
                    lo, hi = np.percentile(resampled, [2.5, 97.5])
        cells_undefined = int((used & ~varying).sum())
        too_few = int((~used).sum())
        note = "; ".join(filter(None, [
            UNDEFINED_KAPPA if not varying.any() else "",
            f"{too_few} of {len(g)} cell(s) with fewer than {MIN_SHARED_PER_CELL} shared trials left out" if too_few
            else "",
            f"an observer is always right or always wrong in {cells_undefined} of {int(used.sum())} cell(s)"
            if cells_undefined and varying.any() else ""]))
        rows.append({"observer_a": a, "observer_b": b, "pair": pair, "n_shared": int(g["n_shared"].sum()),
                     "cells": int(used.sum()), "cells_undefined": cells_undefined, "kappa": kappa,
                     "kappa_ci_low": lo, "kappa_ci_high": hi,
                     "kappa_pooled": float(kappa_from_counts(counts.sum(axis=0))[2]), "note": note})
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def error_consistency(scored: pd.DataFrame, n_boot: int = 1000, seed: int = 0, min_shared: int = 1) -> pd.DataFrame:
    """Error consistency of every pair of observers on their shared trials, per condition x level and pooled
    over the cells (:func:`cell_kappas`, :func:`pair_kappas`)."""
    return pair_kappas(cell_kappas(scored, min_shared), n_boot, seed)


def pair_matrix(pairs: pd.DataFrame, observers: list[str], column: str = "kappa") -> pd.DataFrame:
    """Symmetric observers x observers table of one column of :func:`error_consistency`
    (``kappa``, ``n_shared``, ...); the diagonal and pairs below ``min_shared`` are NaN."""
    m = pd.DataFrame(np.nan, index=observers, columns=observers)
    for r in pairs.itertuples():
        if r.observer_a in m.index and r.observer_b in m.index:
            m.loc[r.observer_a, r.observer_b] = m.loc[r.observer_b, r.observer_a] = getattr(r, column)
    return m


def mean_over_pairs(matrix: pd.DataFrame, confidence: float = 0.95) -> dict:
    """Mean of a symmetric observers x observers statistic over the pairs where it is defined, with a
    leave-one-observer-out jackknife t-interval (Arvesen 1969, jackknifing U-statistics): the pairs share
    observers, so they are not independent and a t-interval over pairs is too narrow (an observer who agrees
    with everyone lifts all of their pairs at once). With theta_(-i) the mean over the pairs without observer
    i, se^2 = (n-1)/n sum_i (theta_(-i) - mean theta_(-i))^2 and the interval is mean +- t_{n-1} se, only from
    :data:`MIN_JACKKNIFE_OBSERVERS` observers on; ``observers`` counts those in at least one defined pair."""
    values = matrix.to_numpy(dtype=float)
    upper = np.triu(np.ones_like(values, dtype=bool), 1) & np.isfinite(values)
    involved = np.flatnonzero((upper | upper.T).any(axis=0))
    out = {"mean": float(values[upper].mean()) if upper.any() else np.nan, "ci_low": np.nan, "ci_high": np.nan,
           "pairs": int(upper.sum()), "observers": int(len(involved))}
    n = len(involved)
    if n < MIN_JACKKNIFE_OBSERVERS:
        return out
    sub, mask = values[np.ix_(involved, involved)], upper[np.ix_(involved, involved)]
    leave_out = []
    for i in range(n):
        keep = mask.copy()
        keep[i, :] = keep[:, i] = False
        leave_out.append(sub[keep].mean() if keep.any() else np.nan)
    leave_out = np.asarray(leave_out)
    if not np.isfinite(leave_out).all():
        return out  # an observer whose removal leaves no pair: the group is a star, not a sample of pairs
    se = np.sqrt((n - 1) / n * np.sum((leave_out - leave_out.mean()) ** 2))
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * se
    return out | {"ci_low": out["mean"] - half, "ci_high": out["mean"] + half}


def _nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    """nanmean without the empty-slice warning: NaN where nothing along ``axis`` is defined."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Mean of empty slice", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def _cell_agreement(x: np.ndarray, y: np.ndarray, measure: str) -> float:
    """Agreement of two item-wise profiles of one cell: ``accuracy`` -> Pearson r of the item-wise accuracies;
    ``kappa`` -> error consistency of the correctness after rounding each profile to a consensus (mean >= 0.5
    counts as right). NaN with fewer than 2 items or a profile without variance."""
    if len(x) < 2:
        return np.nan
    if measure == "kappa":
        return float(kappa_from_correct(x >= 0.5, y >= 0.5)[2])
    if np.std(x) == 0 or np.std(y) == 0:
        return np.nan
    return float(np.corrcoef(x, y)[0, 1])


def _agreement(x: np.ndarray, y: np.ndarray, measure: str, cells: np.ndarray) -> float:
    """Item-wise agreement of two profiles on the items both have, within each cell (``cells``: one code per
    item) and averaged over the cells where it is defined (:func:`_cell_agreement`): how hard a level is
    makes no agreement."""
    ok = ~(np.isnan(x) | np.isnan(y))
    return _mean_of_finite([_cell_agreement(x[ok & (cells == c)], y[ok & (cells == c)], measure)
                            for c in np.unique(cells[ok])])


def spearman_brown(r: float, factor: float = 2.0) -> float:
    """Spearman-Brown prophecy: reliability of a test ``factor`` times as long, factor·r / (1 + (factor-1)·r)
    (Brown 1910; Spearman 1910). Undefined (NaN) where 1 + (factor-1)·r <= 0: two halves of a pilot that
    disagree perfectly (r = -1) have no reliability to step up."""
    denominator = 1 + (factor - 1) * r
    if not (np.isfinite(r) and denominator > 0):
        return np.nan
    return float(factor * r / denominator)


def cell_codes(matrix: pd.DataFrame, cells: pd.Series | None) -> np.ndarray:
    """One integer per item of ``matrix``: its cell (``cells``, a label per item), or one cell for all."""
    if cells is None:
        return np.zeros(len(matrix), dtype=int)
    return pd.factorize(cells.reindex(matrix.index))[0]


def sharing(values: np.ndarray) -> dict:
    """Who of a group shares items (items x observers, NaN = not seen): ``observers`` that share at least one
    item with another member, ``pairs`` that share one, ``items`` seen by at least 2 members. A Latin square
    gives each person other trials than most others, so the group's size overstates what a ceiling rests on."""
    seen = ~np.isnan(values)
    shared = seen.T.astype(int) @ seen.astype(int)
    np.fill_diagonal(shared, 0)
    return {"observers": int((shared > 0).any(axis=0).sum()), "pairs": int(np.triu(shared > 0, 1).sum()),
            "items": int((seen.sum(axis=1) >= 2).sum())}


def noise_ceiling(matrix: pd.DataFrame, measure: str = "accuracy", n_splits: int = SPLIT_HALVES, seed: int = 0,
                  cells: pd.Series | None = None) -> dict:
    """Item-wise noise ceiling of a group of observers (Nili et al. 2014; as used by Burgert et al. 2025, App. F),
    computed within each cell of the design and averaged over cells (:func:`_agreement`).

    ``matrix`` is items x observers correctness (:func:`correctness_matrix`, one group's columns), ``cells`` each
    item's cell label (None: one cell). Leave-one-participant-out: the lower bound is the mean agreement of
    each observer with the mean profile of the *others*, the upper bound with the mean of *all* (itself
    included). Split-half: observers are split at random into halves ``n_splits`` times; the agreement of the
    two half-means is stepped up to the full group with Spearman-Brown. ``measure`` is ``accuracy`` or
    ``kappa`` (see :func:`_cell_agreement`). ``observers``, ``pairs`` and ``items`` say who shares items
    (:func:`sharing`); ``observers_in_group`` how many there are in all."""
    values = matrix.to_numpy(dtype=float)
    codes = cell_codes(matrix, cells)
    shared = sharing(values)
    n_obs = values.shape[1]
    out = {"measure": measure, **shared, "observers_in_group": n_obs,
           "cells": int(len(np.unique(codes[(~np.isnan(values)).sum(axis=1) >= 2])))}
    if shared["observers"] < 2:
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
            lower.append(_agreement(own, others, measure, codes))
            upper.append(_agreement(own, total / count, measure, codes))
        rng = np.random.default_rng(seed)
        halves = []
        for _ in range(n_splits):
            perm = rng.permutation(n_obs)
            first, second = perm[: n_obs // 2], perm[n_obs // 2:]
            halves.append(_agreement(_item_means(values[:, first]), _item_means(values[:, second]), measure, codes))
    split = _mean_of_finite(halves)
    return out | {"lower": _mean_of_finite(lower), "upper": _mean_of_finite(upper),
                  "lower_sd": float(np.nanstd(lower, ddof=1)) if np.isfinite(lower).sum() >= 2 else np.nan,
                  "split_half": split, "split_half_sb": spearman_brown(split)}


def _item_means(values: np.ndarray) -> np.ndarray:
    """Each item's mean over the observers who answered it; NaN (not a warning) for an item none of them did, as
    in a half of a small pilot whose people saw different trials."""
    return _nanmean(values, axis=1)


def _mean_of_finite(values) -> float:
    """Mean of the defined values; NaN (not a warning) when none is defined."""
    values = np.asarray(values, dtype=float)
    return float(values[np.isfinite(values)].mean()) if np.isfinite(values).any() else np.nan


def agreement_with_group(profile: pd.Series, matrix: pd.DataFrame, measure: str = "accuracy",
                         cells: pd.Series | None = None) -> float:
    """Agreement of one observer's item-wise correctness with a group's mean profile, within cells as the
    ceiling (:func:`noise_ceiling`)."""
    group_mean = _item_means(matrix.to_numpy(dtype=float))
    aligned = profile.reindex(matrix.index).to_numpy(dtype=float)
    return _agreement(aligned, group_mean, measure, cell_codes(matrix, cells))


def ceilings_and_models(scored: pd.DataFrame, n_splits: int = SPLIT_HALVES,
                        seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Noise ceilings of the humans and of the models (for accuracy and kappa), within condition x level, and each
    model's agreement with the human mean profile relative to the human ceiling (agreement / lower bound,
    / upper bound)."""
    matrix = correctness_matrix(scored)
    cells = item_cells(scored).reindex(matrix.index)
    labels = cells["condition"] + " / " + cells["level"].astype(str)
    kinds = scored.drop_duplicates("observer").set_index("observer")["observer_kind"]
    humans = [o for o in matrix.columns if kinds[o] == "human"]
    models = [o for o in matrix.columns if kinds[o] == "model"]
    ceilings, relative = [], []
    for measure in ("accuracy", "kappa"):
        for kind, members in (("human", humans), ("model", models)):
            if members:
                ceilings.append({"group": kind} | noise_ceiling(matrix[members], measure, n_splits, seed, labels))
        if not humans:
            continue
        human_ceiling = next(c for c in ceilings if c["group"] == "human" and c["measure"] == measure)
        for model in models:
            agree = agreement_with_group(matrix[model], matrix[humans], measure, labels)
            lower, upper = human_ceiling["lower"], human_ceiling["upper"]
            relative.append({"observer": model, "measure": measure, "agreement": agree,
                             "ceiling_lower": lower, "ceiling_upper": upper,
                             "relative_to_lower": ratio_to_ceiling(agree, lower),
                             "relative_to_upper": ratio_to_ceiling(agree, upper),
                             "note": ceiling_note(human_ceiling) or agreement_note(agree)})
    return pd.DataFrame(ceilings), pd.DataFrame(relative)


def ratio_to_ceiling(agreement: float, ceiling: float) -> float:
    """agreement / ceiling, only where the ceiling is positive: a ratio to a zero or negative ceiling
    (people who do not agree with each other) has no meaning as "fraction of the explainable"."""
    if not (np.isfinite(agreement) and np.isfinite(ceiling) and ceiling > 0):
        return np.nan
    return float(agreement / ceiling)


def agreement_note(agreement: float) -> str:
    """Why a model's agreement with the humans is missing; empty when it is defined."""
    if np.isfinite(agreement):
        return ""
    return ("agreement undefined: within every condition x level the model answers all shared items alike "
            "(or the humans do), so there is no item-wise variance to correlate")


def ceiling_note(ceiling: dict) -> str:
    """One line on why a ceiling (or a ratio to it) is missing; empty when both bounds are usable."""
    if ceiling["observers"] < 2:
        group = ceiling.get("observers_in_group", ceiling["observers"])
        return (f"noise ceiling needs >= 2 people who answered the same trials; {ceiling['observers']} of "
                f"{group} share any")
    bounds = [ceiling["lower"], ceiling["upper"]]
    if any(not np.isfinite(b) for b in bounds):
        return ("noise ceiling undefined: within every condition x level the observers answer every shared trial "
                "alike (no item-wise variance)")
    if any(b <= 0 for b in bounds):
        return "noise ceiling <= 0 (observers do not agree with each other): no ratio to it"
    return ""
