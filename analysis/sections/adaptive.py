"""Adaptive (QUEST+) blocks: each observer's posterior threshold, and per kind the population mean of the
observers' thresholds, beside the fixed-level fits.

People differ in their thresholds, so the observers' posteriors are no repeated measurements of one value:
pooling them by inverse variance (a fixed-effect model) claims a precision about one common threshold that
nobody has, and with a between-observer SD of 1.5 grid units its interval covered the population mean in 7 of
12 simulated studies. The population row is the mean of the observers' posterior medians with a Student-t
interval over observers, whose spread holds both the differences between people and each one's measurement
error (a random-effects mean with every observer weighted alike).

Two labels say what a number is (column ``label``, and in ``note`` and the figure):

- ``prior-only``: an observer whose answers in the block are not above chance (one-sided binomial p ≥ 0.05
  against 1/C) tells QUEST+ nothing about the threshold; their posterior is the prior, so they are listed but
  left out of the population mean (two such observers would otherwise pool into an interval narrower than
  either one's);
- ``extrapolated``: a threshold or interval bound outside the tested grid (QUEST+'s parameter space reaches a
  quarter of the grid's span beyond each end, :func:`cuebench.adaptive.plan_for_grid`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from cuebench.adaptive import stimulus_axis

from .. import plots
from ..load import has_posterior, params_of
from ..psychometric import quest_estimates
from .base import Section, record_method

CHANCE_ALPHA = 0.05
PRIOR_ONLY, EXTRAPOLATED = "prior-only", "extrapolated"
POPULATION = "population mean"
COLUMNS = ["observer", "observer_kind", "condition", "axis", "fit", "quest_threshold", "ci_low", "ci_high", "trials",
           "observers", "between_sd", "accuracy", "lapse_prior", "label", "note"]


def grid_of(scored: pd.DataFrame, condition: str) -> tuple[str, np.ndarray]:
    """A condition's stimulus axis and its tested values (:func:`cuebench.adaptive.stimulus_axis`)."""
    grid = scored[scored["condition"] == condition].dropna(subset=["level"]).drop_duplicates("level")
    axis, values = stimulus_axis({int(r.level): params_of(r.params) for r in grid.itertuples()})
    return axis, np.array(sorted(values.values()))


def extrapolation(row, values: np.ndarray) -> str:
    """Says which of threshold and interval lie outside the tested grid [values.min(), values.max()], else ''."""
    low, high = float(values.min()), float(values.max())
    outside = [name for name, value in (("threshold", row["quest_threshold"]), ("interval", row["ci_low"]),
                                        ("interval", row["ci_high"])) if not low <= value <= high]
    if not outside:
        return ""
    return f"{EXTRAPOLATED}: {' and '.join(dict.fromkeys(outside))} beyond the tested grid [{low:g}, {high:g}]"


def final_posteriors(scored: pd.DataFrame, n_choices: int) -> pd.DataFrame:
    """Per observer and adaptive condition, QUEST+'s posterior after the observer's last answer
    (:func:`analysis.psychometric.quest_estimates`), on the condition's stimulus axis, with the block's accuracy
    and the labels of the module docstring."""
    estimates = quest_estimates(scored)
    rows = []
    for row in estimates.to_dict("records"):
        axis, values = grid_of(scored, row["condition"])
        block = scored[(scored["observer"] == row["observer"]) & (scored["condition"] == row["condition"])
                       & has_posterior(scored["adaptive"])]
        correct, answers = int(block["correct"].sum()), len(block)
        chance_p = float(stats.binom.sf(correct - 1, answers, 1 / n_choices))
        labels, notes = [], []
        if chance_p >= CHANCE_ALPHA:
            labels.append(PRIOR_ONLY)
            notes.append(f"{PRIOR_ONLY}: {correct} of {answers} answers correct, not above chance 1/{n_choices} "
                         f"(binomial p = {chance_p:.2g}); the posterior is QUEST+'s prior, left out of the "
                         f"population mean")
        extrapolated = extrapolation(row, values)
        if extrapolated:
            labels.append(EXTRAPOLATED)
            notes.append(extrapolated)
        rows.append({**row, "axis": axis, "fit": "individual", "observers": 1, "accuracy": correct / answers,
                     "label": ", ".join(labels), "note": "; ".join(notes)})
    return pd.DataFrame(rows, columns=COLUMNS)


def population_means(per_observer: pd.DataFrame, grids: dict[str, np.ndarray]) -> pd.DataFrame:
    """Per kind and condition, the population mean threshold: the mean of the N observers' posterior medians
    t̄ with the Student-t interval t̄ ± t_{0.975, N−1} · SD / √N over observers (SD the between-observer standard
    deviation of the estimates). Prior-only observers are left out; fewer than two others give no row.
    ``grids``: each condition's tested values, for the ``extrapolated`` label."""
    rows = []
    for (kind, condition), g in per_observer.groupby(["observer_kind", "condition"]):
        informative = g[~g["label"].str.contains(PRIOR_ONLY) & np.isfinite(g["quest_threshold"].astype(float))]
        count = len(informative)
        if count < 2:
            continue
        estimates = informative["quest_threshold"].astype(float)
        mean, sd = float(estimates.mean()), float(estimates.std(ddof=1))
        half = float(stats.t.ppf(0.975, count - 1) * sd / np.sqrt(count))
        row = {"observer": f"{kind}s ({POPULATION})", "observer_kind": kind, "condition": condition,
               "axis": g["axis"].iloc[0], "fit": POPULATION, "quest_threshold": mean, "ci_low": mean - half,
               "ci_high": mean + half, "trials": int(informative["trials"].sum()), "observers": count,
               "between_sd": sd, "accuracy": np.nan,
               "lapse_prior": ", ".join(sorted(informative["lapse_prior"].dropna().astype(str).unique()))}
        left_out = len(g) - count
        notes = [f"{POPULATION} of {count} observers' QUEST+ thresholds, t-interval over observers"
                 + (f"; {left_out} prior-only observer{'s' if left_out > 1 else ''} left out" if left_out else "")]
        extrapolated = extrapolation(row, grids[condition])
        if extrapolated:
            notes.append(extrapolated)
        rows.append({**row, "label": EXTRAPOLATED if extrapolated else "", "note": "; ".join(notes)})
    return pd.DataFrame(rows, columns=COLUMNS)


def method_record(table: pd.DataFrame) -> dict:
    """What the section did, for the methods paragraph (``summary["adaptive"]["method"]``)."""
    individual = table[table["fit"] == "individual"]
    population = table[table["fit"] == POPULATION]
    return {
        "procedure": "QUEST+ (Watson 2017), psi = gamma + (1 - gamma - lambda)(1 - Phi((x - t)/s)), gamma = 1/C",
        "per-observer estimate": "posterior median of t after the last answer, central 95 % credible interval",
        "lapse priors": {kind: sorted(rows["lapse_prior"].dropna().astype(str).unique())
                         for kind, rows in individual.groupby("observer_kind")},
        "pooling": "population mean: mean of the observers' posterior medians, Student-t interval over observers "
                   "(not inverse-variance pooling, which assumes one common threshold)",
        "population means": [{"observer_kind": r.observer_kind, "condition": r.condition,
                              "observers": int(r.observers),
                              "interval": f"t-interval over {int(r.observers)} observers"}
                             for r in population.itertuples()],
        "prior-only rule": f"answers not above chance (one-sided binomial p >= {CHANCE_ALPHA}): listed, not pooled",
        "observers": int(individual["observer"].nunique()),
        "prior-only observers": int(individual["label"].str.contains(PRIOR_ONLY).sum()),
        "extrapolated rows": int(table["label"].str.contains(EXTRAPOLATED).sum()),
    }


class Adaptive(Section):
    """QUEST+ posterior thresholds of adaptive blocks, per observer and as population means (Watson 2017)."""

    name = "adaptive"
    title = "Adaptive thresholds (QUEST+)"
    order = 25
    metrics = {"quest-thresholds": "adaptive_thresholds"}
    needs = "answers of adaptive (QUEST+) blocks"
    adaptive_blocks = True

    def applies(self, scored):
        return "adaptive" in scored and bool(has_posterior(scored["adaptive"]).any())

    def compute(self, result, scored, options, n_choices):
        per = final_posteriors(scored, n_choices)
        grids = {condition: grid_of(scored, condition)[1] for condition in per["condition"].unique()}
        both = pd.concat([per, population_means(per, grids)], ignore_index=True) if len(per) else per
        result.tables["adaptive_thresholds"] = both
        record = method_record(both)
        record_method(
            result, self.name,
            f"QUEST+ thresholds (Watson 2017) are each of {record['observers']} observer(s)' posterior median after "
            "the last answer with a central 95 % credible interval (lapse prior: "
            + "; ".join(f"{kind}s {' and '.join(priors)}" for kind, priors in record["lapse priors"].items())
            + "); population means average the observers' estimates "
            f"with a Student-t interval over observers ({record['prior-only observers']} observer(s) whose answers "
            "were not above chance are listed as prior-only and not pooled).",
            **record)
        if not both["quest_threshold"].notna().any():
            return "adaptive blocks have answers but no posterior threshold yet"
        return None

    def figures(self, analysis, reference):
        fixed = analysis.tables.get("thresholds")
        return {"adaptive": plots.adaptive_thresholds(analysis.tables["adaptive_thresholds"], fixed)}
