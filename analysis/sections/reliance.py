"""Reliance profiles of a suppression design: relative and chance-corrected accuracy per suppressed cue."""

from __future__ import annotations

import pandas as pd

from .. import metrics, plots
from .. import reference as published
from ..tables import html_table, level_parameters, with_parameters
from .accuracy import group_intervals_text, interval_counts
from .base import Section, record_method

NOT_SUPPRESSION = ("original", "attention", "practice")


def suppressed_conditions(scored) -> set[str]:
    """Classification conditions other than the originals, the cue-decomposition cues and cue-conflict
    images (whatever a data set calls them: they carry a texture class)."""
    classify = scored[(scored["trial_type"] == "classify") & scored["texture_category"].isna()]
    return set(classify["condition"]) - set(NOT_SUPPRESSION) - set(metrics.CUE_CONDITIONS)


def burgert_reference(analysis, reference: str | None) -> dict:
    """Burgert et al. 2025's Table 3 for the report (its table and label), when it was asked for and the
    experiment suppressed the cues it reports; else nothing."""
    if reference != "burgert2025" or not published.burgert2025_applies(suppressed_conditions(analysis.cleaned.scored)):
        return {}
    return {"reference_table": html_table(reference_wide()), "reference_label": published.BURGERT2025_LABEL}


def reference_wide() -> pd.DataFrame:
    """Burgert et al. 2025 Table 3 laid out as published: one row per observer, one column per feature."""
    table = published.burgert2025_table3()
    wide = table[table["feature"] != "original"].pivot(index="observer", columns="feature", values="relative_accuracy")
    wide = wide[list(published.BURGERT2025_FEATURES)]
    wide["original_accuracy"] = table[table["feature"] == "original"].set_index("observer")["accuracy"]
    wide = wide.loc[table["observer"].unique()]
    wide.columns.name = None
    return wide.reset_index()


def empty_ratios_note(rel) -> str | None:
    """One line naming the observers whose relative or chance-corrected accuracy is empty, and why."""
    parts = []
    for reason in (metrics.NO_BASELINE, metrics.AT_CHANCE):
        who = sorted(rel.loc[rel["note"] == reason, "observer"].astype(str).unique())
        if who:
            parts.append(f"{', '.join(who)}: {reason}")
    return "; ".join(parts) or None


class Reliance(Section):
    """Relative accuracy A_sup / A_orig per suppressed cue and level (Burgert et al. 2025)."""

    name = "reliance"
    title = "Reliance profiles"
    order = 10
    metrics = {"relative-accuracy": "relative_accuracy", "reliance": "group_relative_accuracy"}
    summary_tables = ("group_relative_accuracy",)
    needs = "'original' and suppression trials"
    depends = ("accuracy",)

    def applies(self, scored):
        return bool(suppressed_conditions(scored)) and scored["level"].notna().any()

    def compute(self, result, scored, options, n_choices):
        classify = metrics.accuracy(scored[scored["trial_type"] == "classify"])
        if "original" not in set(classify["condition"]):
            return "relative accuracy needs 'original' trials as the baseline; none in these responses"
        rel = metrics.relative_accuracy(classify, n_choices)
        names = level_parameters(scored)
        groups = {value: metrics.group_accuracy(rel, value, seed=options.seed, n_boot=options.n_boot)
                  for value in ("relative_accuracy", "chance_corrected")}
        result.tables["relative_accuracy"] = with_parameters(rel, names)
        result.tables["group_relative_accuracy"] = with_parameters(groups["relative_accuracy"], names)
        result.tables["group_chance_corrected"] = with_parameters(groups["chance_corrected"], names)
        counts = interval_counts(*groups.values())
        record_method(
            result, self.name,
            f"Reliance on each suppressed cue is the relative accuracy A_sup / A_orig and the chance-corrected "
            f"(A_sup - 1/C) / (A_orig - 1/C) with C = {n_choices} (Burgert et al. 2025, Sec. 5), per observer "
            f"against the observer's accuracy on the original images; the mean over the observers of a kind "
            f"carries {group_intervals_text(counts, options.n_boot)}.",
            n_choices=n_choices, baseline=metrics.BASELINE, bootstrap_resamples=options.n_boot, **counts)
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

    references = staticmethod(burgert_reference)
