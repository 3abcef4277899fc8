"""Adaptive (QUEST+) blocks: each observer's posterior threshold, pooled per kind, beside the fixed-level fits."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from cuebench.adaptive import stimulus_axis

from .. import plots
from ..load import params_of
from ..psychometric import has_posterior, quest_estimates
from .base import Section, register

Z95 = stats.norm.ppf(0.975)
COLUMNS = ["observer", "observer_kind", "condition", "axis", "fit", "quest_threshold", "ci_low", "ci_high", "trials",
           "accuracy"]


def final_posteriors(scored: pd.DataFrame) -> pd.DataFrame:
    """Per observer and adaptive condition, QUEST+'s posterior after the observer's last answer
    (:func:`analysis.psychometric.quest_estimates`), on the condition's stimulus axis, with the block's accuracy."""
    estimates = quest_estimates(scored)
    axes, accuracy = [], []
    for row in estimates.itertuples():
        grid = scored[scored["condition"] == row.condition].dropna(subset=["level"]).drop_duplicates("level")
        axes.append(stimulus_axis({int(r.level): params_of(r.params) for r in grid.itertuples()})[0])
        block = scored[(scored["observer"] == row.observer) & (scored["condition"] == row.condition)
                       & has_posterior(scored["adaptive"])]
        accuracy.append(float(block["correct"].mean()))
    return estimates.assign(axis=axes, fit="individual", accuracy=accuracy)[COLUMNS]


def pooled(per_observer: pd.DataFrame) -> pd.DataFrame:
    """Inverse-variance (fixed-effect) pooling of the observers' posteriors per kind and condition: each
    posterior read as normal with sd = (ci_high - ci_low) / (2 z_0.975); pooled mean = sum(w t) / sum(w),
    95 % interval mean +- z_0.975 / sqrt(sum(w)), w = 1 / sd^2 (fixed-effect model, Borenstein et al. 2009, ch. 11).
    Observers with a zero-width interval are left out (no variance to weight by); one observer is not pooled."""
    rows = []
    for (kind, condition), g in per_observer.groupby(["observer_kind", "condition"]):
        sd = (g["ci_high"].astype(float) - g["ci_low"].astype(float)) / (2 * Z95)
        ok = np.isfinite(sd) & (sd > 0) & np.isfinite(g["quest_threshold"].astype(float))
        if ok.sum() < 2:
            continue
        w = 1 / sd[ok] ** 2
        mean = float((w * g.loc[ok, "quest_threshold"].astype(float)).sum() / w.sum())
        half = float(Z95 / np.sqrt(w.sum()))
        rows.append({"observer": f"{kind}s (pooled)", "observer_kind": kind, "condition": condition,
                     "axis": g["axis"].iloc[0], "fit": "pooled",
                     "quest_threshold": mean, "ci_low": mean - half, "ci_high": mean + half,
                     "trials": int(g.loc[ok, "trials"].sum()), "accuracy": np.nan})
    return pd.DataFrame(rows, columns=per_observer.columns)


@register
class Adaptive(Section):
    """QUEST+ posterior thresholds of adaptive blocks, per observer and pooled (Watson 2017)."""

    name = "adaptive"
    title = "Adaptive thresholds (QUEST+)"
    order = 25
    metrics = {"quest-thresholds": "adaptive_thresholds"}
    needs = "answers of adaptive (QUEST+) blocks"
    adaptive_blocks = True

    def applies(self, scored):
        return "adaptive" in scored and bool(has_posterior(scored["adaptive"]).any())

    def compute(self, result, scored, options, n_choices):
        per = final_posteriors(scored)
        both = pd.concat([per, pooled(per)], ignore_index=True) if len(per) else per
        result.tables["adaptive_thresholds"] = both
        if not both["quest_threshold"].notna().any():
            return "adaptive blocks have answers but no posterior threshold yet"
        return None

    def figures(self, analysis, reference):
        fixed = analysis.tables.get("thresholds")
        return {"adaptive": plots.adaptive_thresholds(analysis.tables["adaptive_thresholds"], fixed)}
