"""One row per observer with every scalar metric, and rank correlations between metrics over models."""

from __future__ import annotations

import pandas as pd

from .. import comparison
from .base import Section


class Observers(Section):
    """Per-observer summary of every scalar metric; Spearman correlations between them over >= 3 models."""

    name = "observers"
    title = "Per observer"
    order = 95
    metrics = {"observers": "observer_summary", "correlations": "rank_correlations"}
    per_observer = "observer_summary"
    needs = "scored trials"
    depends = ("shape-bias", "cue-decomposition", "reliance", "consistency")

    def compute(self, result, scored, options, n_choices):
        out = scored.groupby(["observer", "observer_kind"], as_index=False).agg(accuracy=("correct", "mean"),
                                                                               trials=("correct", "size"))
        t = result.tables
        if "shape_bias" in t:
            out = out.merge(t["shape_bias"][["observer", "shape_bias"]], on="observer", how="left")
        if "cue_decomposition" in t:
            out = out.merge(t["cue_decomposition"][["observer", "Q_O", "Q_S", "Q_T", "S_cd", "R_cd"]], on="observer",
                            how="left")
        if "relative_accuracy" in t:
            rel = t["relative_accuracy"].groupby(["observer", "condition"])["relative_accuracy"].mean().unstack()
            out = out.merge(rel.add_prefix("relative_").reset_index(), on="observer", how="left")
        if "error_consistency" in t:
            pairs = t["error_consistency"][["observer_a", "observer_b", "kappa"]]
            both_ways = pd.concat([pairs, pairs.rename(columns={"observer_a": "observer_b",
                                                                "observer_b": "observer_a"})])
            humans = set(scored.loc[scored["observer_kind"] == "human", "observer"])
            with_humans = both_ways[both_ways["observer_b"].isin(humans)]
            out["kappa_with_humans"] = out["observer"].map(with_humans.groupby("observer_a")["kappa"].mean())
        t["observer_summary"] = out
        models = out[out["observer_kind"] == "model"]
        metric_cols = [c for c in out.columns if c not in ("observer", "observer_kind", "trials")]
        if len(models) < 3:
            return None
        rows = [comparison.rank_correlation(models, a, b) for i, a in enumerate(metric_cols)
                for b in metric_cols[i + 1:]]
        t["rank_correlations"] = pd.DataFrame(rows)
        return None
