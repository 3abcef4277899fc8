"""The report's figures (matplotlib, Agg): each function takes result tables and returns a Figure.

Colours: humans are always red (as in Geirhos et al. 2019 and Burgert et al. 2025), a
published reference is grey and dashed, models take the tab10 palette in name order.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .load import params_of  # noqa: E402
from .metrics import wilson_ci  # noqa: E402

HUMAN = "#c0392b"
REFERENCE = "#555555"

plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9,
                     "figure.dpi": 110, "axes.spines.top": False, "axes.spines.right": False})


def model_colours(models) -> dict:
    palette = plt.get_cmap("tab10").colors
    return {m: palette[i % len(palette)] for i, m in enumerate(sorted(models))}


def to_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


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


def level_ticks(levels: pd.DataFrame, condition: str) -> tuple[list[int], list[str], str]:
    """Tick positions (levels) of a condition, labelled by the parameter values that vary across its levels
    (e.g. grid 2, 3, 6 for patch shuffle; d/sigma_color for the bilateral filter), and those parameters' names."""
    rows = levels[levels["condition"] == condition].sort_values("level")
    params = [params_of(p) for p in rows["params"]]
    keys = [k for k in dict.fromkeys(k for p in params for k in p) if len({str(p.get(k)) for p in params}) > 1]
    names = ["/".join(f"{p[k]:g}" if isinstance(p.get(k), (int, float)) else str(p.get(k)) for k in keys) or str(lvl)
             for p, lvl in zip(params, rows["level"])]
    return [int(v) for v in rows["level"]], names, "/".join(keys)


def reliance_profiles(relative: pd.DataFrame, human_group: pd.DataFrame, levels: pd.DataFrame,
                      reference: pd.DataFrame | None = None, value: str = "relative_accuracy"):
    """Relative accuracy vs suppression level, one panel per suppressed cue (Burgert et al. 2025, Fig. 3-4):
    humans as mean with 95 % t-CI band, each model as a line, the published reference as grey markers."""
    conditions = sorted(relative["condition"].unique())
    ncols = min(3, len(conditions))
    nrows = int(np.ceil(len(conditions) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 3.4 * nrows), squeeze=False, sharey=True)
    models = relative.loc[relative["observer_kind"] == "model", "observer"].unique()
    colours = model_colours(models)
    for ax, cond in zip(axes.flat, conditions):
        sub = relative[relative["condition"] == cond]
        for model in sorted(models):
            m = sub[sub["observer"] == model].sort_values("level")
            if len(m):
                ax.plot(m["level"], m[value], "o-", color=colours[model], label=model, lw=1.5, ms=4)
        h = human_group[(human_group["condition"] == cond) & (human_group["observer_kind"] == "human")]
        if len(h):
            h = h.sort_values("level")
            ax.fill_between(h["level"], h["t_ci_low"], h["t_ci_high"], color=HUMAN, alpha=0.18, lw=0)
            ax.plot(h["level"], h[value], "D-", color=HUMAN, lw=2.2, ms=5, label=f"humans (n={int(h['observers'].max())})")
        if reference is not None:
            _draw_reference(ax, reference[reference["condition"] == cond], levels, cond)
        ax.set_title(cond.replace("_", " "))
        ticks, names, varying = level_ticks(levels, cond)
        ax.set_xticks(ticks, names, rotation=30 if max(map(len, names), default=0) > 4 else 0)
        ax.set_xlim(min(ticks) - 0.5, max(ticks) + 0.5)
        ax.set_xlabel(f"suppression level ({varying})" if varying else "suppression level")
        ax.axhline(1.0, color="#999999", lw=0.8, ls=":")
        ax.grid(alpha=0.25)
    for ax in axes.flat[len(conditions):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("chance-corrected accuracy" if value == "chance_corrected" else "relative accuracy (A_sup / A_orig)")
    handles = {}
    for ax in axes.flat:
        for hnd, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, hnd)
    legend_rows = int(np.ceil(len(handles) / 4))
    fig.legend(list(handles.values()), list(handles.keys()), loc="lower center", ncol=min(4, len(handles)),
               frameon=False)
    fig.tight_layout(rect=(0, (0.15 + 0.25 * legend_rows) / fig.get_figheight(), 1, 1))
    return fig


def _draw_reference(ax, ref: pd.DataFrame, levels: pd.DataFrame, cond: str) -> None:
    from .reference import BURGERT2025_LABEL

    for row in ref.itertuples():
        level = reference_level(levels, cond, row.params)
        if level is None:
            ax.axhline(row.relative_accuracy, color=REFERENCE, ls="--", lw=1.2, label=BURGERT2025_LABEL)
            ax.annotate(f"published humans, {row.feature.replace('_', ' ')}: {row.relative_accuracy:.3f}",
                        (0.02, row.relative_accuracy), xycoords=("axes fraction", "data"), fontsize=8,
                        color=REFERENCE, va="bottom")
        else:
            ax.plot([level], [row.relative_accuracy], marker="*", ms=13, color=REFERENCE, ls="none",
                    label=BURGERT2025_LABEL)
            ax.annotate(row.feature.replace("_", " "), (level, row.relative_accuracy), textcoords="offset points",
                        xytext=(6, 4), fontsize=8, color=REFERENCE)


def reference_bars(reference: pd.DataFrame):
    """Published Table 3 of Burgert et al. 2025 as grouped bars (shown when an experiment has no such conditions)."""
    from .reference import BURGERT2025_LABEL

    table = reference[reference["feature"] != "original"].pivot(index="observer", columns="feature",
                                                                 values="relative_accuracy")
    order = ["Humans"] + [o for o in table.index if o != "Humans"]
    table = table.loc[order, ["global_shape", "local_shape", "texture", "color"]]
    fig, ax = plt.subplots(figsize=(10, 3.8))
    width = 0.8 / len(table)
    colours = model_colours([o for o in order if o != "Humans"])
    for i, obs in enumerate(order):
        ax.bar(np.arange(4) + (i - len(order) / 2) * width + width / 2, table.loc[obs], width,
               color=HUMAN if obs == "Humans" else colours[obs], label=obs, edgecolor="white", lw=0.3)
    ax.set_xticks(np.arange(4), [c.replace("_", " ") for c in table.columns])
    ax.set_ylabel("relative accuracy")
    ax.set_ylim(0, 1.05)
    ax.set_title(BURGERT2025_LABEL, fontsize=10)
    ax.legend(ncol=2, fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left", frameon=False)
    fig.tight_layout()
    return fig


def shape_bias_plot(per_category: pd.DataFrame, overall: pd.DataFrame):
    """Geirhos et al. 2019 Fig. 4 style: one row per shape category, x = fraction of shape decisions
    (top) / texture decisions (bottom); humans red diamonds (mean over humans, individuals as small dots),
    each model its own marker; vertical lines mark each observer's overall shape bias."""
    categories = sorted(per_category["category"].unique(), reverse=True)
    y = {c: i for i, c in enumerate(categories)}
    fig, ax = plt.subplots(figsize=(6.5, 0.32 * len(categories) + 2.2))
    humans = per_category[per_category["observer_kind"] == "human"]
    models = sorted(per_category.loc[per_category["observer_kind"] == "model", "observer"].unique())
    colours = model_colours(models)
    markers = "osv^<>pPhX"
    if len(humans):
        ax.scatter(humans["shape_bias"], humans["category"].map(y), s=10, color=HUMAN, alpha=0.35, lw=0)
        mean = humans.groupby("category")["shape_bias"].mean()
        ax.scatter(mean.to_numpy(), mean.index.map(y), marker="D", s=46, color=HUMAN, label="humans (mean)", zorder=3)
        overall_h = overall.loc[overall["observer_kind"] == "human", "shape_bias"].mean()
        ax.axvline(overall_h, color=HUMAN, lw=1.5, ls="--")
    for i, model in enumerate(models):
        m = per_category[per_category["observer"] == model]
        ax.scatter(m["shape_bias"], m["category"].map(y), marker=markers[i % len(markers)], s=38,
                   color=colours[model], label=model, zorder=3, edgecolor="white", lw=0.4)
        ax.axvline(overall.loc[overall["observer"] == model, "shape_bias"].iloc[0], color=colours[model], lw=1.2,
                   ls="--")
    ax.set_yticks(range(len(categories)), categories)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.7, len(categories) - 0.3)
    ax.set_xlabel("fraction of 'shape' decisions  (dashed: overall shape bias)")
    top = ax.secondary_xaxis("top", functions=(lambda v: 1 - v, lambda v: 1 - v))
    top.set_xlabel("fraction of 'texture' decisions")
    ax.grid(axis="x", alpha=0.25)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1 - 0.02 * len(categories) / 16), ncol=3, frameon=False)
    fig.tight_layout()
    return fig


def consistency_matrix_plot(matrix: pd.DataFrame, kinds: pd.Series):
    """Error consistency kappa for every pair of observers as an annotated heat map (humans first)."""
    order = sorted(matrix.index, key=lambda o: (kinds.get(o) != "human", o))
    m = matrix.loc[order, order]
    size = max(4.5, 0.45 * len(order) + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    lim = max(0.1, float(np.nanmax(np.abs(m.to_numpy()))) if m.notna().any().any() else 1.0)
    im = ax.imshow(m.to_numpy(dtype=float), cmap="RdBu_r", vmin=-lim, vmax=lim)
    ax.set_xticks(range(len(order)), order, rotation=60, ha="right")
    ax.set_yticks(range(len(order)), order)
    for label in ax.get_xticklabels() + ax.get_yticklabels():
        if kinds.get(label.get_text()) == "human":
            label.set_color(HUMAN)
    if len(order) <= 24:
        for i in range(len(order)):
            for j in range(len(order)):
                v = m.iat[i, j]
                if not np.isnan(v):
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if abs(v) > 0.6 * lim else "black")
    fig.colorbar(im, ax=ax, shrink=0.8, label="error consistency kappa")
    ax.set_title("Error consistency (Cohen's kappa) on shared trials")
    ax.spines[:].set_visible(True)
    fig.tight_layout()
    return fig


def oddity_plot(oddity: pd.DataFrame):
    """Oddity accuracy per observer with Wilson CIs and the 1/3 chance line; catch trials as hollow markers."""
    observers = sorted(oddity["observer"].unique(), key=lambda o: (oddity.loc[oddity["observer"] == o,
                                                                                "observer_kind"].iloc[0] != "human", o))
    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(observers) + 2), 3.6))
    for role, style in (("test", dict(marker="o", fillstyle="full")), ("catch", dict(marker="s", fillstyle="none"))):
        sub = oddity[oddity["role"] == role].groupby("observer").agg(
            k=("k", "sum"), n=("n", "sum"), kind=("observer_kind", "first"))
        if sub.empty:
            continue
        acc = sub["k"] / sub["n"]
        lo, hi = wilson_ci(sub["k"], sub["n"])
        x = [observers.index(o) + (0.15 if role == "catch" else 0) for o in sub.index]
        colour = [HUMAN if k == "human" else "#2c7fb8" for k in sub["kind"]]
        ax.errorbar(x, acc, yerr=[acc - lo, hi - acc], ls="none", ecolor="#777777", capsize=3)
        for xi, yi, c in zip(x, acc, colour):
            ax.plot(xi, yi, color=c, ms=7, ls="none", **style)
        ax.plot([], [], color="#333333", ls="none", label=f"{role} trials", **style)
    ax.axhline(1 / 3, color="#999999", ls="--", lw=1, label="chance (1/3)")
    ax.set_xticks(range(len(observers)), observers, rotation=45, ha="right")
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("oddity accuracy")
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def cue_decomposition_plot(cd: pd.DataFrame):
    """S_cd against R_cd per observer (Heinert et al., Tab. I quantities): 0.5 separates shape from texture bias."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    colours = model_colours(cd.loc[cd["observer_kind"] == "model", "observer"])
    for row in cd.itertuples():
        colour = HUMAN if row.observer_kind == "human" else colours[row.observer]
        ax.scatter(row.S_cd, row.R_cd, color=colour, s=40)
        ax.annotate(row.observer, (row.S_cd, row.R_cd), textcoords="offset points", xytext=(5, 3), fontsize=8)
    ax.axvline(0.5, color="#999999", ls=":", lw=1)
    ax.set_xlabel("cue-decomposition shape bias S_cd")
    ax.set_ylabel("cue-decomposition robustness R_cd")
    ax.grid(alpha=0.25)
    fig.tight_layout()
    return fig


def cd_plot(result):
    from .ranking import cd_diagram

    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.28 * result.n_methods))
    cd_diagram(result, ax=ax)
    fig.tight_layout()
    return fig


def _fit_style(observer: str, kind: str, fit: str, colours: dict) -> dict:
    """Pooled humans bold red, single people thin translucent red, each model its palette colour."""
    if fit == "pooled":
        return {"color": HUMAN, "lw": 2.4, "alpha": 1.0, "marker": "D", "label": observer}
    if kind == "human":
        return {"color": HUMAN, "lw": 0.9, "alpha": 0.35, "marker": ".", "label": "single participants"}
    return {"color": colours[observer], "lw": 1.6, "alpha": 1.0, "marker": "o", "label": observer}


def psychometric_curves(points: pd.DataFrame, curves: pd.DataFrame, thresholds: pd.DataFrame,
                        reference: pd.DataFrame | None = None):
    """Fitted psychometric functions (psignifit) over the observed accuracies, one panel per condition with
    humans and models on the same axes; each threshold as a vertical tick at its accuracy with its 95 %
    credible interval as a horizontal bar; the dotted line is chance. ``reference`` (published relative
    accuracies with the originals' accuracy, :func:`analysis.reference.burgert2025_humans`) adds grey stars
    at relative accuracy x original accuracy where its parameters sit on the panel's axis."""
    conditions = sorted(curves["condition"].unique())
    cols = min(3, len(conditions))
    rows = int(np.ceil(len(conditions) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.9 * rows + 0.9), squeeze=False)
    colours = model_colours(thresholds.loc[thresholds["observer_kind"] == "model", "observer"].unique())
    for ax, condition in zip(axes.flat, conditions):
        fitted = thresholds[(thresholds["condition"] == condition) & thresholds["threshold_halfway"].notna()]
        for row in fitted.sort_values("fit", ascending=False).itertuples():
            style = _fit_style(row.observer, row.observer_kind, row.fit, colours)
            own = (points["observer"] == row.observer) & (points["condition"] == condition)
            curve = curves[(curves["observer"] == row.observer) & (curves["condition"] == condition)]
            ax.plot(points.loc[own, "x"], points.loc[own, "accuracy"], ls="none", marker=style["marker"], ms=4,
                    color=style["color"], alpha=style["alpha"])
            ax.plot(curve["x"], curve["accuracy"], color=style["color"], lw=style["lw"], alpha=style["alpha"],
                    label=style["label"])
            if row.observer_kind == "model" or row.fit == "pooled":
                level = row.guess_rate + (row.reference_accuracy - row.guess_rate) / 2
                ax.errorbar([row.threshold_halfway], [level],
                            xerr=[[row.threshold_halfway - row.threshold_halfway_ci_low],
                                  [row.threshold_halfway_ci_high - row.threshold_halfway]],
                            color=style["color"], marker="|", ms=14, mew=2, capsize=3, lw=1.2)
        axis = curves.loc[curves["condition"] == condition, "axis"].iloc[0]
        if reference is not None:
            _draw_published_accuracy(ax, reference, condition, axis)
        ax.axhline(fitted["guess_rate"].iloc[0] if len(fitted) else 0, color="#999999", ls=":", lw=1)
        x = points.loc[points["condition"] == condition, "x"]
        ax.set_xlim(x.min() - 0.05 * (x.max() - x.min()), x.max() + 0.05 * (x.max() - x.min()))
        ax.set_ylim(0, 1.02)
        ax.set_title(condition.replace("_", " "))
        ax.set_xlabel(axis)
        ax.grid(alpha=0.25)
    for ax in axes.flat[len(conditions):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy")
    handles = {}
    for ax in axes.flat:
        for hnd, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, hnd)
    fig.legend(list(handles.values()), list(handles.keys()), loc="lower center", ncol=min(4, len(handles)),
               frameon=False)
    fig.tight_layout(rect=(0, 0.9 / fig.get_figheight() * int(np.ceil(len(handles) / 4)), 1, 1))
    return fig


def _draw_published_accuracy(ax, reference: pd.DataFrame, condition: str, axis: str) -> None:
    from .reference import BURGERT2025_LABEL

    original = reference.loc[reference["feature"] == "original", "accuracy"].iloc[0]
    for row in reference[reference["condition"] == condition].itertuples():
        if axis in row.params:
            ax.plot([row.params[axis]], [row.relative_accuracy * original], marker="*", ms=13, color=REFERENCE,
                    ls="none", label=f"{BURGERT2025_LABEL} (relative x original accuracy)")


def threshold_comparison(thresholds: pd.DataFrame):
    """Each model's threshold with its 95 % credible interval against the pooled human one (red band),
    one panel per condition; single participants as small red dots."""
    halfway = thresholds["threshold_halfway"]
    fitted = thresholds[halfway.notna() & np.isfinite(halfway.astype(float))]
    conditions = sorted(fitted["condition"].unique())
    observers = sorted(fitted.loc[fitted["observer_kind"] == "model", "observer"].unique())
    order = ([o for o in fitted.loc[fitted["fit"] == "pooled", "observer"].unique()]
             + (["single participants"] if (fitted["fit"] == "individual").any()
                and (fitted["observer_kind"] == "human").any() else []) + observers)
    colours = model_colours(observers)
    fig, axes = plt.subplots(1, len(conditions), figsize=(4.2 * len(conditions) + 1.5, 0.45 * len(order) + 1.6),
                             squeeze=False, sharey=True)
    for ax, condition in zip(axes[0], conditions):
        rows = fitted[fitted["condition"] == condition]
        for row in rows.itertuples():
            single = row.observer_kind == "human" and row.fit == "individual"
            y = order.index("single participants" if single else row.observer)
            colour = HUMAN if row.observer_kind == "human" else colours[row.observer]
            if single:
                ax.plot(row.threshold_halfway, y, ".", color=HUMAN, alpha=0.5)
                continue
            ax.errorbar(row.threshold_halfway, y, xerr=[[row.threshold_halfway - row.threshold_halfway_ci_low],
                                                         [row.threshold_halfway_ci_high - row.threshold_halfway]],
                        fmt="D" if row.observer_kind == "human" else "o", color=colour, capsize=3)
            if row.fit == "pooled":
                ax.axvspan(row.threshold_halfway_ci_low, row.threshold_halfway_ci_high, color=HUMAN, alpha=0.12, lw=0)
        ax.set_title(condition.replace("_", " "))
        ax.set_xlabel(f"half-way threshold ({rows['axis'].iloc[0]})")
        ax.grid(axis="x", alpha=0.25)
    axes[0, 0].set_yticks(range(len(order)), order)
    axes[0, 0].invert_yaxis()
    fig.tight_layout()
    return fig
