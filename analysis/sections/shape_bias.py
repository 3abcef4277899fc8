"""Shape bias of a cue-conflict design (Geirhos et al. 2019)."""

from __future__ import annotations

from .. import metrics, plots
from ..reference import GEIRHOS2019_LABEL, geirhos2019_shape_bias as reference_table
from ..tables import html_table
from .base import Section


def conflicting(scored):
    """Trials whose texture class differs from the shape class: the only ones that measure shape bias."""
    return scored["texture_category"].notna() & (scored["texture_category"] != scored["category"])


class ShapeBias(Section):
    """Shape bias = shape / (shape + texture) decisions on cue-conflict images (Geirhos et al. 2019)."""

    name = "shape-bias"
    title = "Shape bias"
    order = 30
    metrics = {"shape-bias": "shape_bias", "shape-bias-category": "shape_bias_by_category"}
    summary_tables = ("shape_bias",)
    metric_columns = {"shape-bias": ("observer", "shape_bias", "n_shape", "n_texture")}
    needs = "cue-conflict trials (texture_category != category)"

    def applies(self, scored):
        return bool(scored["texture_category"].notna().any())

    def compute(self, result, scored, options, n_choices):
        if not conflicting(scored).any():
            return "shape bias needs cue-conflict images whose texture class differs from the shape class; none"
        overall = metrics.shape_bias(scored)
        result.tables["shape_bias"] = overall
        result.tables["shape_bias_by_category"] = metrics.shape_bias(scored, by_category=True)
        undefined = overall.loc[overall["n_shape"] + overall["n_texture"] == 0, "observer"].tolist()
        if undefined:
            return (f"shape bias undefined for {', '.join(map(str, undefined))}: no answer named the shape or the "
                    f"texture class")
        return None

    def figures(self, analysis, reference):
        t = analysis.tables
        if not t["shape_bias"]["shape_bias"].notna().any():
            return {}
        published = reference_table() if reference else None
        return {"shape_bias": plots.shape_bias_plot(t["shape_bias_by_category"], t["shape_bias"], published)}

    def references(self, analysis, reference):
        """The shape biases of Geirhos et al. 2019's released data, whichever reference was asked for."""
        if reference is None:
            return {}
        return {"shape_bias_reference": html_table(reference_table()), "shape_bias_label": GEIRHOS2019_LABEL}
