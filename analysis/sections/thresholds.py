"""Psychometric thresholds of a suppression design with an ordered grid of levels."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import plots, psychometric
from .. import reference as published
from .base import Section, record_method
from .reliance import burgert_reference, suppressed_conditions


def open_bounds_as_notes(table: pd.DataFrame) -> pd.DataFrame:
    """The fits with every infinite interval bound empty and said in the row's ``note``: the posterior marks
    draws that never reach a target as -inf and draws that never fall to it as +inf
    (:func:`analysis.psychometric.level_at`); a report prints numbers, not infinities."""
    table = table.copy()
    numeric = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])]
    for index, row in table.iterrows():
        said = []
        for column in numeric:
            value = row[column]
            if pd.notna(value) and np.isinf(value):
                side = "below" if value < 0 else "above"
                said.append(f"{column} open {side} (posterior draws that never "
                            f"{'reach' if value < 0 else 'fall to'} the target)")
                table.at[index, column] = np.nan
        if said:
            table.at[index, "note"] = "; ".join(filter(None, [row.get("note") or "", *said]))
    return table


def thresholds_sentence(record: dict) -> str:
    """The methods sentence of the fits in ``record`` (:func:`analysis.psychometric.method_record`): thresholds are
    said to be reported only where a series was fitted; otherwise why none was."""
    if not record["series fitted"]:
        why = "; ".join(f"{n} {reason}" for reason, n in record["series not fitted"].items())
        return (f"Psychometric functions (psignifit 4, Schuett et al. 2016) could be fitted to none of the "
                f"{record['series']} observer x condition series ({why}), so no fixed-level thresholds are reported.")
    return ("Psychometric functions psi(x) = gamma + (1 - gamma - lambda)(1 - F(x)) with a logistic F (psignifit 4, "
            f"Schuett et al. 2016) were fitted to {record['series fitted']} of {record['series']} observer x condition "
            f"series, once with the floor gamma at chance and once free (floor prior: {record['priors']['floor']}), "
            f"the two averaged by their evidence; lapse prior: {record['priors']['lapse']}. Thresholds are the level "
            "where accuracy falls half-way from the originals' accuracy to chance (our definition, on the rescaling "
            "of Burgert et al. 2025, Eq. 11), reported as posterior medians with central 95 % credible intervals; "
            f"{record['half-way thresholds not identified']} half-way threshold(s) whose interval reached beyond the "
            "tested grid (or that never fell half-way) are reported as not identified, without a point value."
            + (f" Where an interval reached beyond the last level, its lower end was set no higher than the last "
               f"level whose accuracy lay above the threshold's with 97.5 % posterior probability (the fall is not in "
               f"the data; {record['half-way lower ends from the data']} half-way interval(s))."
               if record.get("half-way lower ends from the data") else ""))


class Thresholds(Section):
    """Psychometric fits (psignifit) per observer and condition, thresholds with credible intervals."""

    name = "thresholds"
    title = "Psychometric thresholds"
    order = 20
    metrics = {"thresholds": "thresholds"}
    summary_tables = ("thresholds",)
    needs = "suppression trials on an ordered grid of levels"
    adaptive_blocks = True

    def applies(self, scored):
        return bool(suppressed_conditions(scored)) and scored["level"].notna().any()

    def compute(self, result, scored, options, n_choices):
        classify = scored[scored["trial_type"] == "classify"]
        try:
            fits = psychometric.psychometric_fits(classify, n_choices, seed=options.seed)
        except psychometric.PsychometricError as err:
            return str(err)
        result.tables["thresholds"] = open_bounds_as_notes(fits.table)
        result.tables["psychometric_curves"] = fits.curves
        result.tables["psychometric_points"] = fits.points
        record = psychometric.method_record(fits.table)
        record_method(result, self.name, thresholds_sentence(record), **record)
        return None

    def figures(self, analysis, reference):
        t = analysis.tables
        if not len(t["psychometric_points"]):
            return {}
        burgert = reference == "burgert2025" and published.burgert2025_applies(
            suppressed_conditions(analysis.cleaned.scored))
        ref = published.burgert2025_humans() if burgert else None
        out = {"psychometric": plots.psychometric_curves(t["psychometric_points"], t["psychometric_curves"],
                                                         t["thresholds"], ref)}
        comparison = plots.threshold_comparison(t["thresholds"])
        if comparison is not None:
            out["thresholds"] = comparison
        return out

    references = staticmethod(burgert_reference)  # its figure's stars are Table 3's too
