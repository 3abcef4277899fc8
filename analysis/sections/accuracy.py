"""Accuracy per observer, condition and level, and across the observers of each kind."""

from __future__ import annotations

from .. import chance, metrics
from ..tables import level_parameters, with_parameters
from .base import Section, record_method


def interval_counts(*groups) -> dict:
    """How many group means got each interval (a t-interval needs MIN_T_OBSERVERS observers, a bootstrap 2)."""
    rows = [g for g in groups if g is not None and len(g)]
    return {"t_intervals": int(sum(g["t_ci_low"].notna().sum() for g in rows)),
            "bootstrap_intervals": int(sum(g["boot_ci_low"].notna().sum() for g in rows))}


def group_intervals_text(counts: dict, n_boot: int) -> str:
    """The clause naming the intervals of means over observers that were actually computed."""
    parts = []
    if counts["t_intervals"]:
        parts.append(f"a t-interval (from {metrics.MIN_T_OBSERVERS} observers of a kind on)")
    if counts["bootstrap_intervals"]:
        parts.append(f"a percentile bootstrap interval ({n_boot} resamples of the observers)")
    return " and ".join(parts) or "no interval (fewer than 2 observers of a kind)"


class Accuracy(Section):
    """Accuracy per observer, condition and level (Wilson CIs), and across observers."""

    name = "accuracy"
    title = "Accuracy"
    order = 90
    summary_tables = ("group_accuracy",)
    metrics = {"accuracy": "accuracy", "group-accuracy": "group_accuracy", "exclusions": "exclusion_summary"}
    needs = "scored trials"

    def compute(self, result, scored, options, n_choices):
        names = level_parameters(scored)
        acc = metrics.accuracy(scored)
        groups = metrics.group_accuracy(acc, seed=options.seed, n_boot=options.n_boot)
        result.tables["accuracy"] = with_parameters(acc, names)
        result.tables["group_accuracy"] = with_parameters(groups, names)
        counts = interval_counts(groups)
        people = scored[scored["observer_kind"] == "human"]
        record_method(
            result, self.name,
            f"Accuracy was scored over {len(people)} test trials of people with C = {n_choices} answer choices "
            f"(chance 1/C; {chance.origin(result.summary.get('n_choices_from', chance.FROM_OPTION))}); each "
            f"observer's accuracy per condition and "
            f"level carries a Wilson 95 % interval, and the mean over the observers of a kind "
            f"{group_intervals_text(counts, options.n_boot)}.",
            people_trials=int(len(people)), model_trials=int(len(scored) - len(people)), n_choices=n_choices,
            n_choices_from=result.summary.get("n_choices_from"),
            bootstrap_resamples=options.n_boot, **counts)
        return None
