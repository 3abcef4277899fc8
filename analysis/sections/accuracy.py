"""Accuracy per observer, condition and level, and across the observers of each kind."""

from __future__ import annotations

from .. import metrics
from .base import Section, register


@register
class Accuracy(Section):
    """Accuracy per observer, condition and level (Wilson CIs), and across observers."""

    name = "accuracy"
    title = "Accuracy"
    order = 90
    metrics = {"accuracy": "accuracy", "group-accuracy": "group_accuracy", "exclusions": "exclusion_summary"}
    needs = "scored trials"

    def compute(self, result, scored, options, n_choices):
        acc = metrics.accuracy(scored)
        result.tables["accuracy"] = acc
        result.tables["group_accuracy"] = metrics.group_accuracy(acc, seed=options.seed)
        return None
