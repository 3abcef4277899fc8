"""Paired t-tests of humans against each model per condition and level (Burgert et al. 2025)."""

from __future__ import annotations

from .. import comparison
from .base import Section, register


@register
class TTests(Section):
    """Paired two-sided t-tests human vs model per condition and level, with Cohen's d and power."""

    name = "ttests"
    title = "Human vs model t-tests"
    order = 80
    metrics = {"ttests": "ttests"}
    needs = "humans and models"

    def compute(self, result, scored, options, n_choices):
        kinds = set(scored["observer_kind"])
        if kinds != {"human", "model"}:
            return f"human vs model t-tests need both humans and models; only {', '.join(sorted(kinds))} here"
        try:
            tests = comparison.paired_ttests(scored, options.pairing, options.correction)
        except comparison.ComparisonError as err:
            return str(err)
        result.tables["ttests"] = tests
        if not len(tests):
            return "human vs model t-tests need >= 2 paired units per condition and level; none has"
        return None
