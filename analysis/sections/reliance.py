"""Reliance profiles of a suppression design: relative and chance-corrected accuracy per suppressed cue."""

from __future__ import annotations

from .. import metrics, plots
from .. import reference as published
from .base import Section, register

NOT_SUPPRESSION = ("original", "attention", "practice")


def suppressed_conditions(scored) -> set[str]:
    """Classification conditions other than the originals, the cue-decomposition cues and cue-conflict
    images (whatever a data set calls them: they carry a texture class)."""
    classify = scored[(scored["trial_type"] == "classify") & scored["texture_category"].isna()]
    return set(classify["condition"]) - set(NOT_SUPPRESSION) - set(metrics.CUE_CONDITIONS)


def empty_ratios_note(rel) -> str | None:
    """One line naming the observers whose relative or chance-corrected accuracy is empty, and why."""
    parts = []
    for reason in (metrics.NO_BASELINE, metrics.AT_CHANCE):
        who = sorted(rel.loc[rel["note"] == reason, "observer"].astype(str).unique())
        if who:
            parts.append(f"{', '.join(who)}: {reason}")
    return "; ".join(parts) or None


@register
class Reliance(Section):
    """Relative accuracy A_sup / A_orig per suppressed cue and level (Burgert et al. 2025)."""

    name = "reliance"
    title = "Reliance profiles"
    order = 10
    metrics = {"relative-accuracy": "relative_accuracy", "reliance": "group_relative_accuracy"}
    needs = "'original' and suppression trials"
    depends = ("accuracy",)

    def applies(self, scored):
        return bool(suppressed_conditions(scored)) and scored["level"].notna().any()

    def compute(self, result, scored, options, n_choices):
        classify = metrics.accuracy(scored[scored["trial_type"] == "classify"])
        if "original" not in set(classify["condition"]):
            return "relative accuracy needs 'original' trials as the baseline; none in these responses"
        rel = metrics.relative_accuracy(classify, n_choices)
        result.tables["relative_accuracy"] = rel
        result.tables["group_relative_accuracy"] = metrics.group_accuracy(rel, "relative_accuracy", seed=options.seed)
        result.tables["group_chance_corrected"] = metrics.group_accuracy(rel, "chance_corrected", seed=options.seed)
        return empty_ratios_note(rel)

    def figures(self, analysis, reference):
        t = analysis.tables
        scored = analysis.cleaned.scored
        levels = scored.assign(level=scored["level"].fillna(-1).astype(int))
        levels = levels.drop_duplicates(["condition", "level"])[["condition", "level", "params"]]
        burgert = reference == "burgert2025" and published.burgert2025_applies(suppressed_conditions(scored))
        ref = published.burgert2025_humans() if burgert else None
        rel = t["relative_accuracy"][t["relative_accuracy"]["condition"].isin(suppressed_conditions(scored))]
        out = {"reliance": plots.reliance_profiles(rel, t["group_relative_accuracy"], levels, ref),
               "reliance_chance": plots.reliance_profiles(rel, t["group_chance_corrected"], levels, None,
                                                          value="chance_corrected")}
        if burgert:
            out["reference"] = plots.reference_bars(published.burgert2025_table3())
        return out
