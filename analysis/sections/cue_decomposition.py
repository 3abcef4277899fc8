"""Cue-decomposition shape bias S_cd and robustness R_cd (Heinert et al.)."""

from __future__ import annotations

from .. import metrics, plots
from .base import Section


PREDICTORS = {"Q_O": "accuracy_original", "Q_S": "accuracy_EED", "Q_T": "accuracy_texture_cue", "S_cd": "S_cd",
              "R_cd": "R_cd"}
"""The per-model metrics ranked against relative robustness (Heinert et al. Tables II and X: the accuracies that
make up the cue-decomposition metrics, S_cd and R_cd), with the cue-conflict shape bias where the study has
cue-conflict trials."""


def robustness_predictors(scored, cue):
    """One row per model: :data:`PREDICTORS` from the cue-decomposition table, and ``shape_bias_cue_conflict``
    (Geirhos et al. 2019) where some trial pits a shape class against another texture class."""
    out = cue[cue["observer_kind"] == "model"][["observer", *PREDICTORS]].rename(columns=PREDICTORS)
    conflict = scored["texture_category"].notna() & (scored["texture_category"] != scored["category"])
    if conflict.any():
        bias = metrics.shape_bias(scored)[["observer", "shape_bias"]]
        out = out.merge(bias.rename(columns={"shape_bias": "shape_bias_cue_conflict"}), on="observer", how="left")
    return out


class CueDecomposition(Section):
    """S_cd and R_cd from accuracies on original, EED shape-cue and Voronoi texture-cue images."""

    name = "cue-decomposition"
    title = "Cue decomposition"
    order = 40
    summary_tables = ("cue_decomposition",)
    metrics = {"cue-decomposition": "cue_decomposition", "relative-robustness": "relative_robustness",
               "robustness-correlations": "robustness_correlations"}
    needs = "original, shape_cue and texture_cue trials"

    def applies(self, scored):
        return bool({"shape_cue", "texture_cue"} & set(scored["condition"]))

    def compute(self, result, scored, options, n_choices):
        try:
            cue = metrics.cue_decomposition(scored, options.model_set)
        except metrics.MetricError as err:
            return str(err)
        result.tables["cue_decomposition"] = cue
        if scored["condition"].isin(metrics.HEINERT_CORRUPTIONS).any():  # Table I (right): the same formula as mIoU's
            try:
                robustness = metrics.relative_robustness(metrics.accuracy(scored))
            except metrics.MetricError as err:
                return str(err)
            result.tables["relative_robustness"] = robustness
            models = robustness[robustness["observer_kind"] == "model"]
            if len(models) < 3:
                return f"rank correlations with relative robustness need >= 3 models; {len(models)} answered"
            result.tables["robustness_correlations"] = metrics.robustness_rank_correlations(
                robustness_predictors(scored, cue), models)
        return None

    def figures(self, analysis, reference):
        cd = analysis.tables["cue_decomposition"]
        if not cd[["S_cd", "R_cd"]].notna().all(axis=1).any():
            return {}
        return {"cue_decomposition": plots.cue_decomposition_plot(cd)}
