"""Oddity accuracy of a DiST design (Wen et al. 2024)."""

from __future__ import annotations

from .. import metrics, plots
from .base import Section


class Oddity(Section):
    """Fraction of triplets whose odd image was picked (chance 1/3), catch trials apart."""

    name = "oddity"
    title = "Oddity (DiST)"
    order = 50
    summary_tables = ("oddity",)
    metrics = {"oddity": "oddity"}
    needs = "oddity trials"

    def applies(self, scored):
        return bool((scored["trial_type"] == "oddity").any())

    def compute(self, result, scored, options, n_choices):
        result.tables["oddity"] = metrics.oddity_accuracy(scored, result.cleaned.catch)
        return None

    def figures(self, analysis, reference):
        return {"oddity": plots.oddity_plot(analysis.tables["oddity"])}
