"""Error consistency between every pair of observers (Geirhos et al. 2020)."""

from __future__ import annotations

from .. import consistency, metrics, plots
from .base import Section, register


@register
class ErrorConsistency(Section):
    """Cohen's kappa of trial-by-trial correctness for every pair of observers."""

    name = "consistency"
    title = "Error consistency"
    order = 60
    metrics = {"error-consistency": "error_consistency"}
    needs = "two observers"

    def compute(self, result, scored, options, n_choices):
        observers = scored["observer"].nunique()
        if observers < 2:
            return f"error consistency needs >= 2 observers; {observers} so far"
        pairs = consistency.error_consistency(scored, n_boot=options.n_boot, seed=options.seed)
        result.tables["error_consistency"] = pairs
        humans = pairs.loc[pairs["pair"] == "human-human", "kappa"].dropna()
        if len(humans):
            mean, lo, hi = metrics.t_ci(humans)
            if len(humans) < metrics.MIN_T_OBSERVERS:
                lo = hi = None
            result.summary["human_human_kappa"] = {"mean": mean, "t_ci_low": lo, "t_ci_high": hi,
                                                   "pairs": int(len(humans))}
        if pairs["kappa"].isna().all():
            return ("error consistency undefined for every pair: kappa needs observers who are neither always right "
                    "nor always wrong")
        return None

    def figures(self, analysis, reference):
        pairs = analysis.tables["error_consistency"]
        if not pairs["kappa"].notna().any():
            return {}
        kinds = analysis.cleaned.scored.drop_duplicates("observer").set_index("observer")["observer_kind"]
        observers = list(kinds.index)
        return {"consistency": plots.consistency_matrix_plot(consistency.pair_matrix(pairs, observers, "kappa"),
                                                             consistency.pair_matrix(pairs, observers, "n_shared"),
                                                             kinds)}
