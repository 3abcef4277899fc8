"""Psychometric thresholds of a suppression design with an ordered grid of levels."""

from __future__ import annotations

from .. import plots, psychometric
from .. import reference as published
from .base import Section, register
from .reliance import suppressed_conditions


@register
class Thresholds(Section):
    """Psychometric fits (psignifit) per observer and condition, thresholds with credible intervals."""

    name = "thresholds"
    title = "Psychometric thresholds"
    order = 20
    metrics = {"thresholds": "thresholds"}
    needs = "suppression trials on an ordered grid of levels"

    def applies(self, scored):
        return bool(suppressed_conditions(scored)) and scored["level"].notna().any()

    def compute(self, result, scored, options, n_choices):
        classify = scored[scored["trial_type"] == "classify"]
        try:
            fits = psychometric.psychometric_fits(classify, n_choices, seed=options.seed)
        except psychometric.PsychometricError as err:
            return str(err)
        result.tables["thresholds"] = fits.table
        result.tables["psychometric_curves"] = fits.curves
        result.tables["psychometric_points"] = fits.points
        return None

    def figures(self, analysis, reference):
        t = analysis.tables
        if not len(t["psychometric_curves"]):
            return {}
        ref = published.burgert2025_humans() if reference == "burgert2025" else None
        out = {"psychometric": plots.psychometric_curves(t["psychometric_points"], t["psychometric_curves"],
                                                         t["thresholds"], ref)}
        comparison = plots.threshold_comparison(t["thresholds"])
        if comparison is not None:
            out["thresholds"] = comparison
        return out
