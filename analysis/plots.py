"""The report's figures (matplotlib, Agg): each function takes result tables and returns a Figure.

Colours, markers and legend placement come from :mod:`analysis.figure_style` (colour-blind-safe,
distinct in greyscale); the x axis of a suppression condition is its transform parameter in its
unit (:func:`parameter_axis`), never a level index.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .figure_style import (HUMAN, REFERENCE, REFERENCE_MARKER, human_style, legend_outside, marker_only,  # noqa: E402
                           series_styles, style_of)
from .load import params_of  # noqa: E402
from .metrics import wilson_ci  # noqa: E402
from .psychometric import MIN_LEVELS  # noqa: E402

UNITS = {"grid": "grid cells per side", "sigma": "σ (px)", "d": "d (px)", "sigma_color": "σ_colour (intensity)",
         "sigma_space": "σ_space (px)", "alpha": "grayscale blend α", "k": "kernel size (px)",
         "kernel": "kernel size (px)", "ksize": "kernel size (px)", "cells": "Voronoi cells", "steps": "diffusion steps", "severity": "severity",
         "angle": "angle (°)", "condition": "condition"}
"""Parameter -> axis label with its unit (stimuli.suppression's parameters)."""


def axis_label(keys) -> str:
    return " / ".join(UNITS.get(k, k) for k in keys)


def reference_level(levels: pd.DataFrame, condition: str, params: dict):
    """The level of ``condition`` whose parameters include ``params`` (None if no level matches);
    a condition with a single level, or a reference without parameters, matches its last level."""
    cand = levels[levels["condition"] == condition]
    if cand.empty:
        return None
    if not params or len(cand) == 1:
        return int(cand["level"].max())
    for row in cand.itertuples():
        have = params_of(row.params)
        if all(have.get(k) == v for k, v in params.items()):
            return int(row.level)
    return None


def parameter_axis(levels: pd.DataFrame, condition: str) -> tuple[dict, list[str], str]:
    """Where each level of ``condition`` sits on the x axis, its tick labels and the axis label.

    One numeric parameter varying across the levels (grid, σ, α): x is that parameter's value.
    Several varying together (the bilateral filter's d and σ_colour): x is the level's position,
    labelled with the values. A single level: its parameter values as the label."""
    rows = levels[levels["condition"] == condition].sort_values("level")
    params = [params_of(p) for p in rows["params"]]
    keys = [k for k in dict.fromkeys(k for p in params for k in p) if len({str(p.get(k)) for p in params}) > 1]
    shown = keys or list(dict.fromkeys(k for p in params for k in p))
    if len(keys) == 1 and all(isinstance(p.get(keys[0]), (int, float)) for p in params):
        xs = {int(lvl): float(p[keys[0]]) for p, lvl in zip(params, rows["level"])}
    else:
        xs = {int(lvl): float(lvl) for lvl in rows["level"]}
    labels = ["/".join(f"{p[k]:g}" if isinstance(p.get(k), (int, float)) else str(p.get(k)) for k in shown)
              or f"level {lvl}" for p, lvl in zip(params, rows["level"])]
    return xs, labels, axis_label(shown) if shown else "suppression level"


WHOLE_NUMBER_AXES = {"grid", "d", "k", "kernel", "ksize", "cells", "steps", "level"}
"""Parameters that only take whole numbers (grid cells, pixels of a kernel, diffusion steps, level index)."""


def integer_ticks(ax, axis: str, values=()) -> None:
    """Whole-number ticks on an x axis of a whole-number parameter (:data:`WHOLE_NUMBER_AXES`), or whose tested
    ``values`` are all whole: a tick at 7.5 grid cells names a grid that cannot exist."""
    from matplotlib.ticker import MaxNLocator

    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if axis in WHOLE_NUMBER_AXES or (len(values) and np.allclose(values, np.round(values))):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def reliance_profiles(relative: pd.DataFrame, human_group: pd.DataFrame, levels: pd.DataFrame,
                      reference: pd.DataFrame | None = None, value: str = "relative_accuracy"):
    """Relative accuracy vs the suppression parameter, one panel per suppressed cue (Burgert et al. 2025,
    Fig. 3-4): humans as mean with their 95 % t-interval as a band (where there is one), each model as a
    line with its own colour and marker, the published reference as grey stars."""
    conditions = sorted(relative["condition"].unique())
    ncols = min(3, len(conditions))
    nrows = int(np.ceil(len(conditions) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 3.4 * nrows), squeeze=False, sharey=True)
    models = relative.loc[relative["observer_kind"] == "model", "observer"].unique()
    styles = series_styles(models)
    for ax, cond in zip(axes.flat, conditions):
        xs, labels, xlabel = parameter_axis(levels, cond)
        sub = relative[relative["condition"] == cond]
        for model in sorted(models):
            m = sub[sub["observer"] == model].sort_values("level")
            if len(m):
                ax.plot(m["level"].map(xs), m[value], label=model, lw=1.4, ms=5, **styles[model])
        h = human_group[(human_group["condition"] == cond) & (human_group["observer_kind"] == "human")]
        if len(h):
            h = h.sort_values("level")
            x = h["level"].map(xs)
            band = h["t_ci_low"].notna() & h["t_ci_high"].notna()
            if band.sum() > 1:
                ax.fill_between(x[band], h.loc[band, "t_ci_low"], h.loc[band, "t_ci_high"], color=HUMAN, alpha=0.15,
                                lw=0, label="humans, 95 % t-interval")
            elif band.any():  # one level: a band of one point would not show, so a whisker
                ax.errorbar(x[band], h.loc[band, value], yerr=[h.loc[band, value] - h.loc[band, "t_ci_low"],
                                                               h.loc[band, "t_ci_high"] - h.loc[band, value]],
                            color=HUMAN, ls="none", capsize=4, lw=1.2, label="humans, 95 % t-interval")
            ax.plot(x, h[value], lw=2.0, ms=6, label=f"humans (n={int(h['observers'].max())})", **human_style())
        if reference is not None:
            _draw_reference(ax, reference[reference["condition"] == cond], levels, cond, xs)
        ax.set_title(cond.replace("_", " "))
        ticks = [xs[k] for k in sorted(xs)]
        ax.set_xticks(ticks, labels, rotation=30 if max(map(len, labels), default=0) > 4 else 0)
        pad = 0.08 * (max(ticks) - min(ticks)) or 0.5
        ax.set_xlim(min(ticks) - pad, max(ticks) + pad)
        ax.set_xlabel(xlabel)
        ax.axhline(1.0, color="#999999", lw=0.8, ls=":")
    for ax in axes.flat[len(conditions):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("chance-corrected accuracy" if value == "chance_corrected" else "relative accuracy (A_sup / A_orig)")
    fig.tight_layout()
    legend_outside(fig, axes)
    return fig


def _draw_reference(ax, ref: pd.DataFrame, levels: pd.DataFrame, cond: str, xs: dict) -> None:
    from .reference import BURGERT2025_LABEL

    for row in ref.itertuples():
        level = reference_level(levels, cond, row.params)
        if level is None:
            ax.axhline(row.relative_accuracy, color=REFERENCE, ls="--", lw=1.2, label=BURGERT2025_LABEL)
            ax.annotate(f"published humans, {row.feature.replace('_', ' ')}: {row.relative_accuracy:.3f}",
                        (0.02, row.relative_accuracy), xycoords=("axes fraction", "data"), fontsize=8,
                        color=REFERENCE, va="bottom")
        else:
            ax.plot([xs[level]], [row.relative_accuracy], marker=REFERENCE_MARKER, ms=13, color=REFERENCE, ls="none",
                    label=BURGERT2025_LABEL)
            ax.annotate(row.feature.replace("_", " "), (xs[level], row.relative_accuracy), textcoords="offset points",
                        xytext=(6, 4), fontsize=8, color=REFERENCE)


def reference_bars(reference: pd.DataFrame):
    """Published Table 3 of Burgert et al. 2025 as a dot plot: one column per suppressed feature, each
    observer its own colour and marker (13 series: bars could only tell them apart by colour)."""
    from .reference import BURGERT2025_LABEL

    table = reference[reference["feature"] != "original"].pivot(index="observer", columns="feature",
                                                                 values="relative_accuracy")
    models = [o for o in table.index if o != "Humans"]
    table = table.loc[["Humans"] + models, ["global_shape", "local_shape", "texture", "color"]]
    styles = series_styles(models) | {"Humans": human_style()}
    fig, ax = plt.subplots(figsize=(7.5, 4))
    offsets = np.linspace(-0.3, 0.3, len(table))
    for offset, obs in zip(offsets, table.index):
        style = {k: v for k, v in styles[obs].items() if k != "ls"}
        ax.plot(np.arange(4) + offset, table.loc[obs], ls="none", ms=8 if obs == "Humans" else 6, label=obs, **style)
    ax.set_xticks(np.arange(4), [c.replace("_", " ") for c in table.columns])
    ax.set_xlabel("suppressed feature")
    ax.set_ylabel("relative accuracy (A_sup / A_orig)")
    ax.set_title(BURGERT2025_LABEL, fontsize=10)
    fig.tight_layout()
    legend_outside(fig, ax)
    return fig


def shape_bias_plot(per_category: pd.DataFrame, overall: pd.DataFrame, published: pd.DataFrame | None = None):
    """Geirhos et al. 2019 Fig. 4 style: one row per shape category, x = fraction of shape decisions
    (top) / texture decisions (bottom); humans black diamonds (mean over humans, individuals as small dots),
    each model its own colour and marker; vertical lines mark each observer's overall shape bias, and a grey
    dash-dotted one the published human mean (``published``: :func:`analysis.reference.geirhos2019_shape_bias`)."""
    categories = sorted(per_category["category"].unique(), reverse=True)
    y = {c: i for i, c in enumerate(categories)}
    fig, ax = plt.subplots(figsize=(6.5, 0.32 * len(categories) + 2.2))
    humans = per_category[per_category["observer_kind"] == "human"]
    models = sorted(per_category.loc[per_category["observer_kind"] == "model", "observer"].unique())
    styles = series_styles(models)
    if len(humans):
        ax.scatter(humans["shape_bias"], humans["category"].map(y), s=10, color=HUMAN, alpha=0.35, lw=0)
        mean = humans.groupby("category")["shape_bias"].mean()
        ax.plot(mean.to_numpy(), mean.index.map(y), ls="none", ms=7, zorder=3, label="humans (mean)",
                **{k: v for k, v in human_style().items() if k != "ls"})
        overall_h = overall.loc[overall["observer_kind"] == "human", "shape_bias"].mean()
        ax.axvline(overall_h, color=HUMAN, lw=1.5, ls="-")
    dodge = 0.5 / max(len(models), 1)
    for i, model in enumerate(models):
        m = per_category[per_category["observer"] == model]
        style = styles[model]
        offset = (i - (len(models) - 1) / 2) * dodge  # side by side in a row, so no marker hides another
        ax.plot(m["shape_bias"], m["category"].map(y) + offset, ls="none", ms=6, alpha=0.9, zorder=3, label=model,
                marker=style["marker"], color=style["color"], mfc=style["mfc"])
        ax.axvline(overall.loc[overall["observer"] == model, "shape_bias"].iloc[0], color=style["color"], lw=1.2,
                   ls="--")
    if published is not None:
        humans_published = published[published["observer"].str.startswith("Humans")].iloc[0]
        ax.axvline(humans_published["shape_bias"], color=REFERENCE, lw=1.5, ls="-.",
                   label=f"{humans_published['observer']}: {humans_published['shape_bias']:.3f}, "
                         f"{humans_published['source']}")
    ax.set_yticks(range(len(categories)), categories)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.7, len(categories) - 0.3)
    ax.set_xlabel("fraction of 'shape' decisions  (vertical lines: overall shape bias)")
    top = ax.secondary_xaxis("top", functions=(lambda v: 1 - v, lambda v: 1 - v))
    top.set_xlabel("fraction of 'texture' decisions")
    ax.grid(axis="y", visible=False)
    fig.tight_layout()
    legend_outside(fig, ax)
    return fig


def consistency_matrix_plot(matrix: pd.DataFrame, shared: pd.DataFrame, kinds: pd.Series):
    """Error consistency kappa for every pair of observers as an annotated heat map (humans first); kappa is
    computed within each condition x level and pooled over them (:mod:`analysis.consistency`).
    ``shared`` holds how many trials each pair has in common: kappa on a few trials is noise, so
    the reader sees the count in the title when every pair shares the same trials, else in each cell.
    A pair that shares trials but has no kappa (an observer without errors) reads "undefined", not a colour."""
    order = sorted(matrix.index, key=lambda o: (kinds.get(o) != "human", o))
    m = matrix.loc[order, order]
    n = shared.loc[order, order]
    counts = sorted({int(v) for v in n.to_numpy().ravel() if not np.isnan(v)})
    size = max(4.5, 0.45 * len(order) + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    lim = max(0.1, float(np.nanmax(np.abs(m.to_numpy()))) if m.notna().any().any() else 1.0)
    im = ax.imshow(m.to_numpy(dtype=float), cmap="RdBu_r", vmin=-lim, vmax=lim)
    ax.set_xticks(range(len(order)), order, rotation=60, ha="right")
    ax.set_yticks(range(len(order)), order)
    for label in ax.get_xticklabels() + ax.get_yticklabels():
        label.set_fontweight("bold" if kinds.get(label.get_text()) == "human" else "normal")
        label.set_fontstyle("normal" if kinds.get(label.get_text()) == "human" else "italic")
    n_humans = sum(kinds.get(o) == "human" for o in order)
    if 0 < n_humans < len(order):  # a frame between the people and the models
        for edge in (ax.axhline, ax.axvline):
            edge(n_humans - 0.5, color=HUMAN, lw=1.6)
    annotated = len(order) <= 24
    if annotated:
        for i in range(len(order)):
            for j in range(len(order)):
                v, k = m.iat[i, j], n.iat[i, j]
                if np.isnan(v) and (i == j or np.isnan(k)):
                    continue
                text = f"{v:.2f}" if not np.isnan(v) else "undef."
                text = text if len(counts) <= 1 else f"{text}\nn={int(k)}"
                ax.text(j, i, text, ha="center", va="center", fontsize=7 if len(counts) <= 1 else 6,
                        color="grey" if np.isnan(v) else "white" if abs(v) > 0.6 * lim else "black")
    fig.colorbar(im, ax=ax, shrink=0.8, label="error consistency kappa")
    shared_text = f"{counts[0]} shared trials per pair" if len(counts) == 1 else \
        f"shared trials ({counts[0]}-{counts[-1]} per pair{', n in each cell' if annotated else ''})" if counts \
        else "shared trials"
    ax.set_title(f"Error consistency (Cohen's kappa within each condition x level, pooled over them)\non {shared_text}"
                 + ("; people in bold, models in italics" if 0 < n_humans < len(order) else ""))
    ax.grid(False)
    ax.spines[:].set_visible(True)
    fig.tight_layout()
    return fig


def oddity_plot(oddity: pd.DataFrame):
    """Oddity accuracy per observer with Wilson CIs and the chance line (the test trials' mean 1/k): humans black diamonds, each model
    its own colour and marker (analysis.figure_style); test trials filled, catch trials hollow and to the right."""
    kinds = oddity.drop_duplicates("observer").set_index("observer")["observer_kind"]
    observers = sorted(kinds.index, key=lambda o: (kinds[o] != "human", o))
    styles = series_styles([o for o in observers if kinds[o] != "human"])
    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(observers) + 2), 3.6))
    for role, shift in (("test", 0.0), ("catch", 0.18)):
        sub = oddity[oddity["role"] == role].groupby("observer").agg(k=("k", "sum"), n=("n", "sum"))
        for observer, row in sub.iterrows():
            acc = row["k"] / row["n"]
            lo, hi = wilson_ci(row["k"], row["n"])
            style = marker_only(style_of(observer, kinds[observer], styles))
            if role == "catch":
                style["mfc"] = "white"
            label = ("humans" if kinds[observer] == "human" else observer) if role == "test" else "_catch"
            ax.errorbar(observers.index(observer) + shift, acc, yerr=[[max(acc - lo, 0)], [max(hi - acc, 0)]],
                        ecolor="#777777", capsize=3, ms=7, ls="none", label=label, **style)
    test = oddity[oddity["role"] == "test"]
    chance = float((test["chance"] * test["n"]).sum() / test["n"].sum()) if len(test) else float(oddity["chance"].mean())
    ax.axhline(chance, color="#999999", ls="--", lw=1, label=f"chance ({chance:.3g})")
    ax.set_xticks(range(len(observers)), observers, rotation=45, ha="right")
    ax.set_xlim(-0.6, len(observers) - 0.4)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("oddity accuracy (fraction of odd images picked)")
    ax.set_xlabel("observer")
    ax.set_title("filled: test trials; hollow, to the right: catch trials", fontsize=9)
    fig.tight_layout()
    legend_outside(fig, ax)
    return fig


def cue_decomposition_plot(cd: pd.DataFrame):
    """S_cd against R_cd per observer (Heinert et al., Tab. I quantities): 0.5 separates shape from texture bias."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    styles = series_styles(cd.loc[cd["observer_kind"] == "model", "observer"])
    first_human = True
    for row in cd.itertuples():
        human = row.observer_kind == "human"
        label = ("humans" if first_human else "_human") if human else row.observer
        first_human = first_human and not human
        ax.plot(row.S_cd, row.R_cd, ls="none", ms=7, label=label,
                **marker_only(style_of(row.observer, row.observer_kind, styles)))
    ax.axvline(0.5, color="#999999", ls=":", lw=1)
    ax.set_xlabel("cue-decomposition shape bias S_cd (0: texture, 1: shape)")
    ax.set_ylabel("cue-decomposition robustness R_cd = (Q_S + Q_T) / 2 Q_O")
    fig.tight_layout()
    legend_outside(fig, ax)
    return fig


def cd_plot(result, humans: tuple[str, ...] = (), title: str | None = None):
    """The critical-difference diagram in the report's series colours: ``humans`` black, every other
    method its own palette colour (analysis.figure_style); ``title`` says what the blocks are."""
    from .ranking import cd_diagram

    methods = [str(m) for m in result.average_ranks.index]
    colours = {m: style["color"] for m, style in series_styles([m for m in methods if m not in humans]).items()} \
        | {m: HUMAN for m in methods if m in humans}
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.28 * result.n_methods))
    cd_diagram(result, ax=ax, colours=colours)
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(False)
    fig.tight_layout()
    return fig


def _fit_style(observer: str, kind: str, fit: str, styles: dict) -> dict:
    """Pooled humans bold black diamonds, single people thin translucent black diamonds, each model its own
    colour and marker (analysis.figure_style)."""
    if fit == "pooled":
        return {"color": HUMAN, "lw": 2.4, "alpha": 1.0, "marker": "D", "ms": 5}
    if kind == "human":
        return {"color": HUMAN, "lw": 0.9, "alpha": 0.45, "marker": "D", "ms": 3}
    return {"color": styles[observer]["color"], "lw": 1.6, "alpha": 1.0, "marker": styles[observer]["marker"], "ms": 5}


def _fit_label(observer: str, kind: str, fit: str, pooled: bool) -> str:
    """One legend entry for the people (on the pooled fit when there is one), one per model."""
    if kind != "human":
        return observer
    if pooled:
        return "humans: pooled (bold), each person (thin)" if fit == "pooled" else "_person"
    return "humans"


def psychometric_curves(points: pd.DataFrame, curves: pd.DataFrame, thresholds: pd.DataFrame,
                        reference: pd.DataFrame | None = None):
    """Observed accuracies of every observer with their fitted psychometric functions (psignifit), one panel per
    condition with humans and models on the same axes. Every observer's points are drawn: filled where a curve
    was fitted, hollow where not (too few levels: the fits table's ``note`` says why). Each threshold
    is a vertical tick at its accuracy with its 95 % credible interval as a horizontal bar; the dotted line is
    chance. ``reference`` (published relative accuracies with the originals' accuracy,
    :func:`analysis.reference.burgert2025_humans`) adds grey stars at relative accuracy x original accuracy
    where its parameters sit on the panel's axis."""
    conditions = sorted(points["condition"].unique())
    cols = min(3, len(conditions))
    rows = int(np.ceil(len(conditions) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.9 * rows + 0.9), squeeze=False)
    styles = series_styles(points.loc[points["observer_kind"] == "model", "observer"].unique())
    for ax, condition in zip(axes.flat, conditions):
        here = points[points["condition"] == condition]
        pooled = (here["fit"] == "pooled").any()
        fits = thresholds[thresholds["condition"] == condition].set_index(["observer", "fit"])
        hollow = False
        for (observer, kind, fit), own in here.groupby(["observer", "observer_kind", "fit"], sort=False):
            style = _fit_style(observer, kind, fit, styles)
            label = _fit_label(observer, kind, fit, pooled)
            curve = curves[(curves["observer"] == observer) & (curves["condition"] == condition)
                           & (curves["fit"] == fit)]
            fitted = len(curve) > 0
            hollow = hollow or not fitted
            line = "-" if kind == "human" else "--"
            ax.plot(own["x"], own["accuracy"], ls="none", marker=style["marker"], ms=style["ms"],
                    color=style["color"], mfc=style["color"] if fitted else "white", alpha=style["alpha"])
            if fitted:
                ax.plot(curve["x"], curve["accuracy"], color=style["color"], lw=style["lw"], alpha=style["alpha"],
                        ls=line)
            ax.plot([], [], color=style["color"], marker=style["marker"], mfc=style["color"], ls=line,
                    lw=style["lw"], label=label)  # the legend shows the series as fitted, in any panel
            row = fits.loc[(observer, fit)] if (observer, fit) in fits.index else None
            if row is not None and (kind == "model" or fit == "pooled") and _brackets(row):
                level = row["guess_rate"] + (row["reference_accuracy"] - row["guess_rate"]) / 2
                ax.errorbar([row["threshold_halfway"]], [level],
                            xerr=[[row["threshold_halfway"] - row["threshold_halfway_ci_low"]],
                                  [row["threshold_halfway_ci_high"] - row["threshold_halfway"]]],
                            color=style["color"], marker="|", ms=14, mew=2, capsize=3, lw=1.2)
        axis = here["axis"].iloc[0]
        if reference is not None:
            _draw_published_accuracy(ax, reference, condition, axis)
        ax.axhline(fits["guess_rate"].iloc[0] if len(fits) else 0, color="#999999", ls=":", lw=1)
        x = here["x"]
        pad = 0.05 * (x.max() - x.min()) or 0.5
        ax.set_xlim(x.min() - pad, x.max() + pad)
        ax.set_ylim(0, 1.02)
        few = here["level"].nunique() < MIN_LEVELS
        ax.set_title(condition.replace("_", " ") + (f"  (too few levels: {here['level'].nunique()}, no fit)" if few
                                                    else "  (hollow: not fitted)" if hollow else ""))
        ax.set_xlabel(UNITS.get(axis, axis))
        integer_ticks(ax, axis, x)
    for ax in axes.flat[len(conditions):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy (fraction correct)")
    fig.tight_layout()
    legend_outside(fig, axes)
    return fig


def _brackets(row) -> bool:
    """A threshold whose credible interval is defined and contains it (else no error bar is drawn)."""
    get = row.get if isinstance(row, pd.Series) else lambda name: getattr(row, name)
    values = [get("threshold_halfway_ci_low"), get("threshold_halfway"), get("threshold_halfway_ci_high")]
    return all(np.isfinite(v) for v in values) and values[0] <= values[1] <= values[2]


def _draw_published_accuracy(ax, reference: pd.DataFrame, condition: str, axis: str) -> None:
    from .reference import BURGERT2025_LABEL

    original = reference.loc[reference["feature"] == "original", "accuracy"].iloc[0]
    for row in reference[reference["condition"] == condition].itertuples():
        if axis in row.params:
            ax.plot([row.params[axis]], [row.relative_accuracy * original], marker="*", ms=13, color=REFERENCE,
                    ls="none", label=f"{BURGERT2025_LABEL} (relative x original accuracy)")


def threshold_comparison(thresholds: pd.DataFrame):
    """Each model's threshold with its 95 % credible interval against the pooled human one (red band),
    one panel per condition; single participants as small dots. None when no threshold was fitted."""
    halfway = thresholds["threshold_halfway"]
    fitted = thresholds[halfway.notna() & np.isfinite(halfway.astype(float))]
    fitted = fitted[np.array([_brackets(row) for row in fitted.itertuples()], dtype=bool)]
    conditions = sorted(fitted["condition"].unique())
    if not conditions:
        return None
    observers = sorted(fitted.loc[fitted["observer_kind"] == "model", "observer"].unique())
    order = ([o for o in fitted.loc[fitted["fit"] == "pooled", "observer"].unique()]
             + (["single participants"] if (fitted["fit"] == "individual").any()
                and (fitted["observer_kind"] == "human").any() else []) + observers)
    styles = series_styles(observers)
    cols = min(3, len(conditions))
    rows_of_panels = int(np.ceil(len(conditions) / cols))
    fig, axes = plt.subplots(rows_of_panels, cols, figsize=(4.4 * cols + 1.5, (0.45 * len(order) + 1.4) * rows_of_panels),
                             squeeze=False, sharey=True)
    for ax, condition in zip(axes.flat, conditions):
        rows = fitted[fitted["condition"] == condition]
        for row in rows.itertuples():
            single = row.observer_kind == "human" and row.fit == "individual"
            y = order.index("single participants" if single else row.observer)
            colour = HUMAN if row.observer_kind == "human" else styles[row.observer]["color"]
            if single:
                ax.plot(row.threshold_halfway, y, ".", color=HUMAN, alpha=0.5)
                continue
            ax.errorbar(row.threshold_halfway, y, xerr=[[row.threshold_halfway - row.threshold_halfway_ci_low],
                                                         [row.threshold_halfway_ci_high - row.threshold_halfway]],
                        fmt="D" if row.observer_kind == "human" else styles[row.observer]["marker"], color=colour,
                        capsize=3)
            if row.fit == "pooled":
                ax.axvspan(row.threshold_halfway_ci_low, row.threshold_halfway_ci_high, color=HUMAN, alpha=0.12, lw=0)
        ax.set_title(condition.replace("_", " "))
        ax.set_xlabel(f"half-way threshold, {UNITS.get(rows['axis'].iloc[0], rows['axis'].iloc[0])}")
        integer_ticks(ax, rows["axis"].iloc[0])
    for ax in axes.flat[len(conditions):]:
        ax.set_visible(False)
    axes[0, 0].set_yticks(range(len(order)), order)
    axes[0, 0].invert_yaxis()
    for ax in axes[1:, 0]:
        ax.tick_params(labelleft=True)
    fig.tight_layout()
    return fig


def adaptive_thresholds(adaptive: pd.DataFrame, fixed: pd.DataFrame | None = None):
    """QUEST+ posterior thresholds with 95 % credible intervals, one panel per adaptive condition, beside the
    psychometric-fit thresholds of the fixed-level trials on the same stimulus axis, one row per observer and
    estimate. Humans are black diamonds on solid whiskers, each model its own colour and marker on dashed
    whiskers (analysis.figure_style); QUEST+ estimates are hollow, fits filled; each row names its ``label``
    (prior-only, censored, extrapolated: :mod:`analysis.sections.adaptive`). The two are different
    definitions: QUEST+'s t is the midpoint of its own model ψ = γ + (1 − γ − λ)(1 − Φ((x − t)/s)), the fit's
    the half-way point to chance from the originals."""
    conditions = sorted(adaptive["condition"].unique())
    fits = fixed[fixed["condition"].isin(conditions)] if fixed is not None and len(fixed) else None
    fits = fits[np.array([_brackets(r) for r in fits.itertuples()], dtype=bool)] if fits is not None else None
    estimates = [adaptive.assign(definition="QUEST+", value=adaptive["quest_threshold"], low=adaptive["ci_low"],
                                 high=adaptive["ci_high"])]
    if fits is not None and len(fits):
        estimates.append(fits.assign(definition="half-way fit", value=fits["threshold_halfway"],
                                     low=fits["threshold_halfway_ci_low"], high=fits["threshold_halfway_ci_high"]))
    table = pd.concat(estimates, ignore_index=True)
    table = table[np.isfinite(table["value"].astype(float))]
    labels = table["label"].fillna("") if "label" in table else pd.Series("", index=table.index)
    table = table.assign(row=[f"{r.observer} · {r.definition}" + (f" [{tag}]" if tag else "")
                              for r, tag in zip(table.itertuples(), labels)])
    rows = list(dict.fromkeys(table.sort_values(["observer_kind", "fit", "observer", "definition"],
                                                ascending=[True, False, True, False])["row"]))
    styles = series_styles(table.loc[table["observer_kind"] == "model", "observer"].unique())
    fig, axes = plt.subplots(1, len(conditions), figsize=(4.8 * len(conditions) + 1.5, 0.36 * len(rows) + 2.0),
                             squeeze=False, sharey=True)
    for ax, condition in zip(axes[0], conditions):
        for r in table[table["condition"] == condition].itertuples():
            human = r.observer_kind == "human"
            style = marker_only(style_of(r.observer, r.observer_kind, styles))
            if r.definition == "QUEST+":
                style["mfc"] = "white"
            bars = ax.errorbar(r.value, rows.index(r.row),
                               xerr=[[max(r.value - r.low, 0)], [max(r.high - r.value, 0)]], capsize=3,
                               ms=6 if r.fit == "individual" else 8, **style)
            bars[-1][0].set_linestyle("-" if human else "--")
        shown = table[table["condition"] == condition].drop_duplicates("observer")
        for r in shown.itertuples():  # one legend entry per series, filled, with its whisker style
            human = r.observer_kind == "human"
            ax.plot([], [], ls="-" if human else "--", label="humans" if human else r.observer,
                    **marker_only(style_of(r.observer, r.observer_kind, styles)))
        axis = adaptive.loc[adaptive["condition"] == condition, "axis"].iloc[0]
        ax.set_title(condition.replace("_", " "))
        ax.set_xlabel(f"threshold, {UNITS.get(axis, axis)}")
        integer_ticks(ax, axis)
    axes[0, 0].set_yticks(range(len(rows)), rows)
    axes[0, 0].invert_yaxis()
    fig.suptitle("hollow: QUEST+ posterior threshold (adaptive block); filled: half-way threshold of the "
                 "fixed-level fit (a different definition)\n[prior-only]: the answers rule out no threshold on the "
                 "grid; [censored]: only a bound beyond the grid; [extrapolated]: beyond the tested grid", fontsize=9)
    fig.tight_layout()
    legend_outside(fig, axes)
    return fig


def palette() -> np.ndarray:
    """(256, 3) uint8 colours, one per label value: tab20 repeating, the ignore index 255 black."""
    colours = (np.array([plt.get_cmap("tab20")(k % 20)[:3] for k in range(256)]) * 255).astype(np.uint8)
    colours[255] = 0
    return colours


def label_mask_examples(panels: dict):
    """Each titled picture above its label mask drawn in the :func:`palette`; ``panels`` maps a title to its
    (H, W, 3) picture and (H, W) mask, left to right."""
    colours = palette()
    fig, axes = plt.subplots(2, len(panels), figsize=(3 * len(panels), 6), squeeze=False)
    for k, (title, (picture, mask)) in enumerate(panels.items()):
        axes[0, k].imshow(picture)
        axes[1, k].imshow(colours[mask])
        axes[0, k].set_title(title.replace("_", " "))
        for ax in axes[:, k]:
            ax.set_axis_off()
    fig.tight_layout()
    return fig
