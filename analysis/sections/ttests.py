"""Paired t-tests of humans against each model per condition and level (Burgert et al. 2025, App. F)."""

from __future__ import annotations

from .. import comparison
from ..tables import level_parameters, with_parameters
from .base import Section, record_method

PAIRED_BY = {"item": "by item (each image x condition trial: the people's mean correctness on it against the "
                     "model's)",
             "group": "by participant group (a group's mean accuracy against the model's on that group's trials)"}


class TTests(Section):
    """Paired two-sided t-tests human vs model per condition and level, with the effect sizes d_z and d_av."""

    name = "ttests"
    title = "Human vs model t-tests"
    order = 80
    summary_tables = ("ttests",)
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
        tests["significant"] = (tests["p_corr"] < options.alpha).where(tests["p_corr"].notna())
        result.tables["ttests"] = with_parameters(tests, level_parameters(scored))
        ran = tests[tests["p"].notna()]
        if not len(ran):
            return "human vs model t-tests need >= 2 paired units per condition and level; none has"
        units = ran["n"].astype(int)
        pairs = f"{units.min()} pairs" if units.min() == units.max() else f"{units.min()} to {units.max()} pairs"
        record_method(
            result, self.name,
            f"Each model was compared with the people by {len(ran)} two-sided paired t-test(s), one per model, "
            f"condition and level, paired {PAIRED_BY[options.pairing]} ({pairs} per test), with "
            f"{options.correction} correction over all {len(ran)} tests at alpha {options.alpha:g}; "
            f"effect sizes are d_z = t / sqrt(n), the mean difference over the differences' SD, and d_av, the mean "
            f"difference over the mean of the two sides' SDs (Lakens 2013); no post-hoc power is given.",
            tests=len(ran), pairing=options.pairing, pairs_min=int(units.min()), pairs_max=int(units.max()),
            correction=options.correction, alpha=options.alpha, effect_sizes=["d_z", "d_av"])
        return None
