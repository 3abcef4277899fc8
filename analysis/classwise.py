"""Class-wise reliance (Burgert et al. 2025, App. I.1): is a reliance pattern carried by every class, or by a few?

For each observer, class k and suppression arm a (a condition at one level), the class's relative accuracy
r_{k,a} = A_{k,a} / A_{k,original}: its accuracy under the suppression over its accuracy on the unchanged
images (undefined where A_{k,original} = 0). The observer's *global* relative accuracy R_a = A_a / A_original
pools every class. Then

- ``pairs``: for every two arms with R_a > R_b (the global ranking of the pair), the share of classes that
  follow it, r_{k,a} > r_{k,b} (Burgert: "88.0 % of classes show greater reliance on local shape than on
  texture", i.e. relative accuracy under texture suppression above that under local-shape suppression),
  the share of ties, and the overlap of the two arms' class distributions, ∫ min(f_a, f_b) of their
  Gaussian kernel density estimates (Burgert: "approximately 25–30 %");
- ``rankings``: the share of classes whose whole order of the arms (by r_{k,a}, ties not following) is the
  global order by R_a;
- ``outliers``: the classes outside Tukey's fences of an arm's class distribution,
  [Q1 − 1.5 IQR, Q3 + 1.5 IQR].

Scale: r is the plain ratio of Burgert et al.'s App. I.1, not the chance-corrected (A − 1/C) / (A_orig − 1/C)
of their Exp. II (Sec. 5.2, Eq. 11), which the table gives beside it (``chance_corrected``). Within one
class both are increasing in A_{k,a} with the same baseline, so a class orders two arms alike on either
scale wherever both are defined: the shares differ only by the classes whose originals are at or below
chance (kept on the plain ratio); the overlap and the outliers depend on the scale and are on the plain ratio.

Each r_{k,a} carries a 95 % interval (MOVER-R, Donner & Zou 2012, from the Wilson intervals of the two
accuracies, treated as independent: wider than needed where the same images are answered in both arms),
and a class counts in the shares, overlap and outliers only with at least :data:`MIN_CLASS_TRIALS` answered
trials on its originals and under the arm (``counted``): with one or two trials a class's accuracy is 0,
0.5 or 1 and would weigh as much as a class of fifty. ``n_classes`` says how many classes counted,
``n_classes_small`` how many were left out for too few trials.
"""

from __future__ import annotations

from itertools import permutations

import numpy as np
import pandas as pd

from .metrics import wilson_ci

BASELINE = "original"
TUKEY_K = 1.5
KDE_GRID = 512
MIN_CLASS_TRIALS = 3
TOO_FEW = f"fewer than {MIN_CLASS_TRIALS} trials on the originals or under the suppression: not counted"


def arm_label(condition: str, level: int) -> str:
    """``patch_shuffle`` at level 4 -> ``patch_shuffle 4``; a condition without levels keeps its name."""
    return str(condition) if level < 0 else f"{condition} {level}"


def _with_levels(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(level=df["level"].fillna(-1).astype(int))


def class_relative_accuracy(scored: pd.DataFrame, arms: set[str], n_choices: int) -> pd.DataFrame:
    """Per observer, class and arm of the conditions ``arms``: n, accuracy, the class's baseline accuracy on
    the originals (``n_original`` trials), its relative accuracy (NaN where the baseline is 0) with its 95 %
    interval (:func:`ratio_interval_mover`), the chance-corrected value with C = ``n_choices`` (NaN where the
    baseline is at or below 1/C), and whether the class counts (``counted``, ``note``)."""
    rows = _with_levels(scored[scored["condition"].isin(arms | {BASELINE})])
    keys = ["observer", "observer_kind", "category", "condition", "level"]
    acc = rows.groupby(keys, as_index=False).agg(n=("correct", "size"), k=("correct", "sum"),
                                                 accuracy=("correct", "mean"))
    base = acc[acc["condition"] == BASELINE].groupby(["observer", "category"])[["k", "n"]].sum()
    out = acc[acc["condition"] != BASELINE].copy()
    base = base.reindex(pd.MultiIndex.from_arrays([out["observer"], out["category"]]))
    out["n_original"] = base["n"].fillna(0).astype(int).to_numpy()
    k_original = base["k"].fillna(0).to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["baseline_accuracy"] = np.where(out["n_original"] > 0, k_original / out["n_original"], np.nan)
    out["relative_accuracy"] = (out["accuracy"] / out["baseline_accuracy"]).where(out["baseline_accuracy"] > 0)
    low, high = ratio_interval_mover(out["k"], out["n"], k_original, out["n_original"])
    out["ci_low"], out["ci_high"] = np.where(out["relative_accuracy"].notna(), low, np.nan), \
        np.where(out["relative_accuracy"].notna(), high, np.nan)
    chance = 1 / n_choices
    out["chance_corrected"] = ((out["accuracy"] - chance) / (out["baseline_accuracy"] - chance)).where(
        out["baseline_accuracy"] > chance)
    out["counted"] = (out["n"] >= MIN_CLASS_TRIALS) & (out["n_original"] >= MIN_CLASS_TRIALS)
    out["note"] = np.where(out["counted"], "", TOO_FEW)
    out["arm"] = [arm_label(c, lv) for c, lv in zip(out["condition"], out["level"])]
    return out.drop(columns="k").reset_index(drop=True)


def ratio_interval_mover(k1, n1, k2, n2, z: float = 1.959963984540054) -> tuple[np.ndarray, np.ndarray]:
    """95 % interval of p1 / p2 for two independent binomial proportions k1/n1, k2/n2 by MOVER-R (Donner &
    Zou 2012, Stat Methods Med Res 21:347, eqs. for the ratio), built from each proportion's Wilson interval
    (l_i, u_i): L = [p1 p2 − √((p1 p2)² − l1 u2 (2 p1 − l1)(2 p2 − u2))] / [u2 (2 p2 − u2)], U likewise
    with (u1, l2); NaN where p2 = 0 (no ratio) and U = ∞ where l2 = 0."""
    k1, n1, k2, n2 = (np.asarray(x, dtype=float) for x in (k1, n1, k2, n2))
    with np.errstate(divide="ignore", invalid="ignore"):
        p1, p2 = k1 / n1, k2 / n2
        l1, u1 = wilson_ci(k1, n1, z)
        l2, u2 = wilson_ci(k2, n2, z)
        product = p1 * p2
        low = (product - np.sqrt(np.maximum(product ** 2 - l1 * u2 * (2 * p1 - l1) * (2 * p2 - u2), 0))) \
            / (u2 * (2 * p2 - u2))
        high_den = l2 * (2 * p2 - l2)
        high = np.where(high_den > 0, (product + np.sqrt(np.maximum(
            product ** 2 - u1 * l2 * (2 * p1 - u1) * (2 * p2 - l2), 0))) / high_den, np.inf)
    defined = p2 > 0
    return np.where(defined, np.maximum(low, 0), np.nan), np.where(defined, high, np.nan)


def global_relative_accuracy(scored: pd.DataFrame, arms: set[str]) -> pd.DataFrame:
    """Per observer and arm: R_a = A_a / A_original over every class pooled (NaN where A_original = 0)."""
    rows = _with_levels(scored[scored["condition"].isin(arms | {BASELINE})])
    acc = rows.groupby(["observer", "condition", "level"], as_index=False)["correct"].mean()
    base = acc[acc["condition"] == BASELINE].set_index("observer")["correct"]
    out = acc[acc["condition"] != BASELINE].copy()
    baseline = out["observer"].map(base)
    out["global_relative_accuracy"] = (out["correct"] / baseline).where(baseline > 0)
    out["arm"] = [arm_label(c, lv) for c, lv in zip(out["condition"], out["level"])]
    return out[["observer", "arm", "global_relative_accuracy"]].reset_index(drop=True)


def kde_overlap(a: np.ndarray, b: np.ndarray) -> float:
    """∫ min(f_a, f_b) of two Gaussian KDEs (Scott's bandwidth) on a grid spanning both samples and three
    bandwidths beyond; NaN when either sample has fewer than two distinct values (no density to estimate)."""
    from scipy.stats import gaussian_kde

    if len(np.unique(a)) < 2 or len(np.unique(b)) < 2:
        return float("nan")
    fa, fb = gaussian_kde(a), gaussian_kde(b)
    pad = 3 * max(np.sqrt(fa.covariance[0, 0]), np.sqrt(fb.covariance[0, 0]))
    grid = np.linspace(min(a.min(), b.min()) - pad, max(a.max(), b.max()) + pad, KDE_GRID)
    return float(np.trapezoid(np.minimum(fa(grid), fb(grid)), grid))


def _wide(per_class: pd.DataFrame, observer: str) -> pd.DataFrame:
    """Classes x arms of one observer's relative accuracies, empty where the class does not count."""
    mine = per_class[per_class["observer"] == observer]
    mine = mine.assign(relative_accuracy=mine["relative_accuracy"].where(mine["counted"]))
    return mine.pivot_table(index="category", columns="arm", values="relative_accuracy", aggfunc="mean",
                            dropna=False)


def _small(per_class: pd.DataFrame, observer: str, arms: list[str]) -> int:
    """Classes of one observer left out of a comparison of ``arms`` for too few trials under one of them."""
    mine = per_class[(per_class["observer"] == observer) & per_class["arm"].isin(arms)]
    return int(mine.loc[~mine["counted"], "category"].nunique())


def ranking_pairs(per_class: pd.DataFrame, global_rel: pd.DataFrame) -> pd.DataFrame:
    """Per observer and ordered pair of arms (a, b) with R_a > R_b: classes with both values, the share with
    r_{k,a} > r_{k,b} (``share_following``), the share of ties and the KDE overlap of the two distributions."""
    rows = []
    for observer, glob in global_rel.dropna().groupby("observer"):
        wide, r = _wide(per_class, observer), glob.set_index("arm")["global_relative_accuracy"]
        for a, b in permutations(r.index, 2):
            if not r[a] > r[b] or a not in wide or b not in wide:
                continue
            both = wide[[a, b]].dropna()
            n = len(both)
            rows.append({"observer": observer, "higher": a, "lower": b, "global_higher": r[a], "global_lower": r[b],
                         "n_classes": n, "n_classes_small": _small(per_class, observer, [a, b]),
                         "share_following": (both[a] > both[b]).mean() if n else np.nan,
                         "share_tied": (both[a] == both[b]).mean() if n else np.nan,
                         "overlap": kde_overlap(both[a].to_numpy(), both[b].to_numpy()) if n else np.nan})
    return pd.DataFrame(rows, columns=["observer", "higher", "lower", "global_higher", "global_lower", "n_classes",
                                       "n_classes_small", "share_following", "share_tied", "overlap"])


def ranking_agreement(per_class: pd.DataFrame, global_rel: pd.DataFrame) -> pd.DataFrame:
    """Per observer: the global order of its arms (by R_a, highest first), the classes with every arm defined,
    and the share of them whose own order is the global one (strictly: a tie between two arms does not follow)."""
    rows = []
    for observer, glob in global_rel.dropna().groupby("observer"):
        order = glob.sort_values("global_relative_accuracy", ascending=False)["arm"].tolist()
        if len(order) < 2:
            continue
        wide = _wide(per_class, observer).reindex(columns=order).dropna()
        follows = (np.diff(wide.to_numpy(), axis=1) < 0).all(axis=1) if len(wide) else np.array([])
        rows.append({"observer": observer, "global_order": " > ".join(order), "n_classes": len(wide),
                     "n_classes_small": _small(per_class, observer, order),
                     "share_following": follows.mean() if len(wide) else np.nan})
    return pd.DataFrame(rows, columns=["observer", "global_order", "n_classes", "n_classes_small", "share_following"])


def outlier_classes(per_class: pd.DataFrame) -> pd.DataFrame:
    """The classes outside Tukey's fences [Q1 − 1.5 IQR, Q3 + 1.5 IQR] of their observer's and arm's class
    distribution of relative accuracy (the classes that count), with the fences and the side."""
    rows = []
    counted = per_class[per_class["counted"]].dropna(subset=["relative_accuracy"])
    for (observer, arm), group in counted.groupby(["observer", "arm"]):
        values = group["relative_accuracy"]
        q1, q3 = values.quantile(0.25), values.quantile(0.75)
        low, high = q1 - TUKEY_K * (q3 - q1), q3 + TUKEY_K * (q3 - q1)
        for category, value in zip(group["category"], values):
            if value < low or value > high:
                rows.append({"observer": observer, "arm": arm, "category": category, "relative_accuracy": value,
                             "median": values.median(), "fence_low": low, "fence_high": high,
                             "side": "below" if value < low else "above"})
    return pd.DataFrame(rows, columns=["observer", "arm", "category", "relative_accuracy", "median", "fence_low",
                                       "fence_high", "side"])


def arm_names(per_class: pd.DataFrame) -> pd.DataFrame:
    """``arm, condition, level, name`` of every arm in design order (condition, then level by number, not as text):
    ``name`` is the level's parameters (``grid 3``, a ``parameters`` column as :func:`analysis.tables.level_parameters`
    writes it) or, without them, the level's index."""
    arms = per_class.drop_duplicates("arm").sort_values(["condition", "level"])
    named = arms["parameters"] if "parameters" in arms else pd.Series("", index=arms.index)
    names = [str(p) if isinstance(p, str) and p else ("" if lv < 0 else f"level {lv}")
             for p, lv in zip(named, arms["level"])]
    return pd.DataFrame({"arm": arms["arm"].to_numpy(), "condition": arms["condition"].astype(str).to_numpy(),
                         "level": arms["level"].to_numpy(), "name": names})


def class_strip_plot(per_class: pd.DataFrame, max_observers: int = 6, columns: int = 2):
    """One panel per observer (the first ``max_observers`` by name, ``columns`` to a row): each class's relative
    accuracy per arm as a jittered point, coloured by condition, the arm's median as a black bar; the arms in
    design order and named by their parameters, each condition's name under its arms; 1 = as accurate as on the
    originals."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from .figure_style import SERIES_COLOURS

    observers = sorted(per_class["observer"].astype(str).unique())[:max_observers]
    arms = arm_names(per_class)
    conditions = list(dict.fromkeys(arms["condition"]))
    colour = {c: SERIES_COLOURS[i % len(SERIES_COLOURS)] for i, c in enumerate(conditions)}
    x = np.arange(len(arms)) + np.cumsum(np.r_[0, (arms["condition"].to_numpy()[1:]
                                                   != arms["condition"].to_numpy()[:-1])]) * 0.6
    columns = min(columns, len(observers))
    rows = -(-len(observers) // columns)
    width = max(4.5, 0.42 * len(arms) + 2.0)
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, 3.4 * rows + 0.6), squeeze=False, sharey=True)
    rng = np.random.default_rng(0)
    for ax, observer in zip(axes.ravel(), observers):
        mine = per_class[per_class["observer"].astype(str) == observer].dropna(subset=["relative_accuracy"])
        for at, arm, condition in zip(x, arms["arm"], arms["condition"]):
            values = mine.loc[mine["arm"] == arm, "relative_accuracy"].to_numpy()
            if not len(values):
                continue
            ax.scatter(at + rng.uniform(-0.2, 0.2, len(values)), values, s=14, alpha=0.7, color=colour[condition],
                       edgecolor="none")
            ax.plot([at - 0.32, at + 0.32], [np.median(values)] * 2, color="#000000", lw=2)
        ax.axhline(1.0, color="#7f7f7f", ls=":", lw=1)
        ax.set_xticks(x, arms["name"], rotation=60, ha="right", fontsize=8)
        for condition in conditions:
            where = x[(arms["condition"] == condition).to_numpy()]
            ax.text(where.mean(), 1.0, condition.replace("_", " "), transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=8, color=colour[condition])
        classes = mine["category"].nunique()
        ax.set_title(f"{observer} ({classes} classes)", fontsize=9, pad=14)
        ax.set_xlim(x.min() - 0.7, x.max() + 0.7)
    for ax in axes.ravel()[len(observers):]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("class-wise relative accuracy\n(A_class,arm / A_class,original)")
    handles = [Line2D([], [], color="#000000", lw=2, label="median over classes"),
               Line2D([], [], color="#7f7f7f", ls=":", lw=1, label="as accurate as on the originals"),
               *[Line2D([], [], ls="", marker="o", color=colour[c], label=f"a class under {c.replace('_', ' ')}")
                 for c in conditions]]
    fig.legend(handles=handles, loc="lower center", ncol=min(4, len(handles)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07 + 0.02 * (len(handles) > 4), 1, 1))
    return fig
