"""Cue-decomposition shape bias S_cd and robustness R_cd (Heinert et al.)."""

from __future__ import annotations

from .. import metrics, plots
from .base import Section, register


@register
class CueDecomposition(Section):
    """S_cd and R_cd from accuracies on original, EED shape-cue and Voronoi texture-cue images."""

    name = "cue-decomposition"
    title = "Cue decomposition"
    order = 40
    metrics = {"cue-decomposition": "cue_decomposition", "relative-robustness": "relative_robustness"}
    needs = "original, shape_cue and texture_cue trials"

    def applies(self, scored):
        return bool({"shape_cue", "texture_cue"} & set(scored["condition"]))

    def compute(self, result, scored, options, n_choices):
        try:
            result.tables["cue_decomposition"] = metrics.cue_decomposition(scored, options.model_set)
        except metrics.MetricError as err:
            return str(err)
        if scored["condition"].isin(metrics.HEINERT_CORRUPTIONS).any():  # Table I (right): the same formula as mIoU's
            try:
                result.tables["relative_robustness"] = metrics.relative_robustness(metrics.accuracy(scored))
            except metrics.MetricError as err:
                return str(err)
        return None

    def figures(self, analysis, reference):
        cd = analysis.tables["cue_decomposition"]
        if not cd[["S_cd", "R_cd"]].notna().all(axis=1).any():
            return {}
        return {"cue_decomposition": plots.cue_decomposition_plot(cd)}
