"""Adaptive (QUEST+) blocks: each observer's posterior threshold, and per kind the population mean of the
observers' thresholds, beside the fixed-level fits.

People differ in their thresholds, so the observers' posteriors are no repeated measurements of one value:
pooling them by inverse variance (a fixed-effect model) claims a precision about one common threshold that
nobody has (with a between-observer SD of 1.5 grid units its interval covered the population mean in 7 of 12
simulated studies). The population row is the mean of the observers' posterior medians with a Student-t interval
over observers, extended to observers whose threshold lies beyond the tested grid
(:mod:`analysis.population_threshold`): a person who answers at chance at the easiest level has a threshold somewhere below it, and enters as censored (their
likelihood of the threshold), neither as an arbitrary point nor left out (leaving them out dropped the lowest
thresholds: +0.31 grid units at 3 alternatives, 20 answers, mean 4 and SD 1.5 on the grid 2-16).

Three labels say what a number is (column ``label``, and in ``note`` and the figure), read from each observer's
likelihood of the threshold (:func:`analysis.population_threshold.observer_likelihood`, on thresholds over the tested
grid and one span beyond each end):

- ``prior-only``: the answers rule out no threshold on the tested grid (the likelihood stays within the 95 %
  likelihood-ratio bound e^(−χ²₁,₀.₉₅ / 2) ≈ 0.147 of its maximum everywhere on the grid: a block of a few answers,
  or a model at chance after a few answers, its flat lapse prior explaining chance at any threshold); listed, left
  out of the population mean, so two such observers never pool into an interval narrower than either one's;
- ``censored``: the likelihood stays within that bound out to the end of the thresholds evaluated, where it is flat:
  the answers say only that the threshold lies below (or above) some value, as for a person answering at chance
  under the people's lapse prior; pooled as censored;
- ``extrapolated``: a threshold or interval bound outside the tested grid (QUEST+'s parameter space reaches a
  quarter of the grid's span beyond each end, :func:`cuebench.adaptive.plan_for_grid`).

A person who does not do the task (at chance although their threshold lies mid-grid) reads as censored below the
grid and pulls the mean down: catch trials and the exclusion rules (:mod:`analysis.exclusions`,
``max_catch_errors``) remove such people before any section runs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from cuebench.adaptive import beta_weights, plan_for_grid, stimulus_axis

from .. import plots
from ..load import has_posterior, params_of
from ..population_threshold import observer_likelihood, population_mean, threshold_axis
from ..psychometric import MIN_LEVELS, quest_estimates
from .base import Section, record_method

LIKELIHOOD_BOUND = float(np.exp(-stats.chi2.ppf(0.95, 1) / 2))
"""e^(−χ²₁,₀.₉₅ / 2) ≈ 0.147: thresholds whose likelihood is within this factor of the maximum are not ruled out
at the 95 % level (likelihood-ratio test of one parameter)."""
PRIOR_ONLY, CENSORED, EXTRAPOLATED = "prior-only", "censored", "extrapolated"
POPULATION = "population mean"
COLUMNS = ["observer", "observer_kind", "condition", "axis", "fit", "quest_threshold", "ci_low", "ci_high", "trials",
           "observers", "between_sd", "accuracy", "lapse_prior", "label", "note"]


def level_values(scored: pd.DataFrame, condition: str) -> tuple[str, dict[int, float]]:
    """A condition's stimulus axis and each tested level's value (:func:`cuebench.adaptive.stimulus_axis`)."""
    grid = scored[scored["condition"] == condition].dropna(subset=["level"]).drop_duplicates("level")
    return stimulus_axis({int(r.level): params_of(r.params) for r in grid.itertuples()})


def grid_of(scored: pd.DataFrame, condition: str) -> tuple[str, np.ndarray]:
    """A condition's stimulus axis and its tested values."""
    axis, values = level_values(scored, condition)
    return axis, np.array(sorted(values.values()))


def extrapolation(row, values: np.ndarray) -> str:
    """Says which of threshold and interval lie outside the tested grid [values.min(), values.max()], else ''."""
    low, high = float(values.min()), float(values.max())
    bounds = (("threshold", row["quest_threshold"]), ("interval", row["ci_low"]), ("interval", row["ci_high"]))
    outside = [name for name, value in bounds if np.isfinite(value) and not low <= value <= high]
    if not outside:
        return ""
    return f"{EXTRAPOLATED}: {' and '.join(dict.fromkeys(outside))} beyond the tested grid [{low:g}, {high:g}]"


def plans_of(scored: pd.DataFrame, n_choices: int, plans: dict | None) -> dict[str, dict]:
    """Per adaptive condition, the plan's ``values``, ``spreads``, ``lapses`` and ``guess_rate``: the experiment's
    own (``plans``, as :func:`analysis.design_record.experiment_record` keeps them, or ``AdaptivePlan.to_dict()``),
    else :func:`cuebench.adaptive.plan_for_grid`'s default over the levels answered, guess rate 1/C; none where fewer
    than :data:`MIN_LEVELS` levels were answered (no grid to tell thresholds apart: every observer is a point)."""
    plans = dict(plans or {})
    adaptive = scored[has_posterior(scored["adaptive"])]
    for condition in adaptive["condition"].unique():
        axis, values = level_values(scored, condition)
        if condition not in plans and len(values) >= MIN_LEVELS:
            plans[condition] = plan_for_grid(condition, sorted(values), [values[lv] for lv in sorted(values)], axis,
                                             1 / n_choices, 1, people_lapse_prior=None).to_dict()
    return plans


def observer_likelihoods(scored: pd.DataFrame, estimates: pd.DataFrame, plans: dict[str, dict]) -> list:
    """Each estimate's likelihood of the threshold (:func:`analysis.population_threshold.observer_likelihood`) on
    the :func:`~analysis.population_threshold.threshold_axis` of its plan's grid, from the block's answers, with the
    lapse prior the run used (the estimate's ``lapse_prior_beta``); None for a condition without a plan."""
    adaptive = scored[has_posterior(scored["adaptive"])]
    values = {condition: level_values(scored, condition)[1] for condition in estimates["condition"].unique()}
    blocks = dict(iter(adaptive.groupby(["observer", "condition"])))
    out = []
    for row in estimates.itertuples():
        plan, block = plans.get(row.condition), blocks[(row.observer, row.condition)]
        if plan is None:
            out.append(None)
            continue
        shown = [values[row.condition][int(level)] for level in block["level"]]
        out.append(observer_likelihood(shown, block["correct"].astype(bool),
                                       threshold_axis(plan["values"]), plan["spreads"], plan["lapses"],
                                       beta_weights(plan["lapses"], row.lapse_prior_beta),
                                       plan["guess_rate"]))
    return out


def information(likelihood: np.ndarray | None, values) -> tuple[str, str]:
    """(label, note) of what an observer's likelihood says (module docstring): ``prior-only``, ``censored`` or ''
    (also without a likelihood)."""
    if likelihood is None:
        return "", ""
    thresholds = threshold_axis(values)
    tested = (thresholds >= np.min(values)) & (thresholds <= np.max(values))
    plausible = thresholds[likelihood >= LIKELIHOOD_BOUND]
    if likelihood[tested].min() >= LIKELIHOOD_BOUND:
        return PRIOR_ONLY, (f"{PRIOR_ONLY}: the answers rule out no threshold on the tested grid (likelihood within "
                            f"{LIKELIHOOD_BOUND:.3g} of its maximum throughout); left out of the population mean")
    if plausible[0] == thresholds[0]:
        return CENSORED, (f"{CENSORED}: the answers say only that the threshold lies below {plausible[-1]:.3g} "
                          "(likelihood flat below the grid); pooled as censored")
    if plausible[-1] == thresholds[-1]:
        return CENSORED, (f"{CENSORED}: the answers say only that the threshold lies above {plausible[0]:.3g} "
                          "(likelihood flat above the grid); pooled as censored")
    return "", ""


def tested_values(plans: dict, answered: dict, condition: str) -> np.ndarray:
    """A condition's grid values: its plan's (:func:`plans_of`), else the values of the levels ``answered``."""
    plan = plans.get(condition)
    return np.asarray(plan["values"] if plan else answered[condition], dtype=float)


def final_posteriors(scored: pd.DataFrame, n_choices: int, plans: dict | None = None) -> tuple[pd.DataFrame, list]:
    """Per observer and adaptive condition, QUEST+'s posterior after the observer's last answer
    (:func:`analysis.psychometric.quest_estimates`), on the condition's stimulus axis, with the block's accuracy
    and the labels of the module docstring; and each row's likelihood of the threshold (:func:`observer_likelihoods`,
    ``plans`` as :func:`plans_of` takes them), for :func:`population_means`."""
    estimates = quest_estimates(scored)
    plans = plans_of(scored, n_choices, plans) if len(estimates) else {}
    likelihoods = observer_likelihoods(scored, estimates, plans)
    axes = {condition: grid_of(scored, condition) for condition in estimates["condition"].unique()}
    answered = {condition: values for condition, (_, values) in axes.items()}
    accuracy = scored[has_posterior(scored["adaptive"])].groupby(["observer", "condition"])["correct"].mean()
    rows = []
    for row, likelihood in zip(estimates.to_dict("records"), likelihoods):
        values = tested_values(plans, answered, row["condition"])
        labels, notes = [], []
        label, note = information(likelihood, values)
        if label:
            labels.append(label)
            notes.append(note)
        extrapolated = extrapolation(row, values)
        if extrapolated:
            labels.append(EXTRAPOLATED)
            notes.append(extrapolated)
        rows.append({**row, "axis": axes[row["condition"]][0], "fit": "individual", "observers": 1,
                     "accuracy": float(accuracy[(row["observer"], row["condition"])]), "label": ", ".join(labels),
                     "note": "; ".join(notes)})
    return pd.DataFrame(rows, columns=COLUMNS), likelihoods


def population_means(per_observer: pd.DataFrame, likelihoods: list, plans: dict[str, dict],
                     answered: dict[str, np.ndarray] | None = None) -> pd.DataFrame:
    """Per kind and condition, the population mean threshold (:func:`analysis.population_threshold.population_mean`):
    observers located inside the grid as their posterior medians, censored ones with their ``likelihoods`` (one per
    row of ``per_observer``, as :func:`final_posteriors` returns them); prior-only observers are left out, and fewer
    than two located observers give no row; ``answered``: the tested values of conditions without a plan. The
    interval is open (±inf, no number) where the posterior of the mean does not fall off within the likelihoods'
    reach."""
    rows = []
    table = per_observer.reset_index(drop=True)
    for (kind, condition), g in table.groupby(["observer_kind", "condition"]):
        pooled = g[~g["label"].str.contains(PRIOR_ONLY)]
        censored = pooled["label"].str.contains(CENSORED)
        points = pooled.loc[~censored, "quest_threshold"].astype(float)
        if len(points) < 2:
            continue
        count, values = len(pooled), tested_values(plans, answered or {}, condition)
        estimate = population_mean(values, points, np.array([likelihoods[i] for i in pooled.index[censored]]))
        row = {"observer": f"{kind}s ({POPULATION})", "observer_kind": kind, "condition": condition,
               "axis": g["axis"].iloc[0], "fit": POPULATION, "quest_threshold": estimate.mean,
               "ci_low": estimate.ci_low, "ci_high": estimate.ci_high, "trials": int(pooled["trials"].sum()),
               "observers": count, "between_sd": estimate.between_sd, "accuracy": np.nan,
               "lapse_prior": ", ".join(sorted(pooled["lapse_prior"].dropna().astype(str).unique()))}
        left_out = len(g) - count
        notes = [f"{POPULATION} of {count} observers' QUEST+ thresholds, t-interval over observers"
                 + (f" with {int(censored.sum())} censored beyond the grid" if censored.any() else "")
                 + (f"; {left_out} prior-only observer{'s' if left_out > 1 else ''} left out" if left_out else "")]
        if not estimate.identified:
            notes.append("not identified: the posterior of the mean does not fall off beyond the tested grid, "
                         "its 95 % interval is open")
        extrapolated = extrapolation(row, values)
        if extrapolated:
            notes.append(extrapolated)
        rows.append({**row, "label": EXTRAPOLATED if extrapolated else "", "note": "; ".join(notes)})
    return pd.DataFrame(rows, columns=COLUMNS)


def method_record(table: pd.DataFrame) -> dict:
    """What the section did, for the methods paragraph (``summary["adaptive"]["method"]``)."""
    individual = table[table["fit"] == "individual"]
    population = table[table["fit"] == POPULATION]

    def group(row):
        return individual[(individual["observer_kind"] == row.observer_kind)
                          & (individual["condition"] == row.condition)]

    return {
        "procedure": "QUEST+ (Watson 2017), psi = gamma + (1 - gamma - lambda)(1 - Phi((x - t)/s)), gamma = 1/C",
        "per-observer estimate": "posterior median of t after the last answer, central 95 % credible interval",
        "lapse priors": {kind: sorted(rows["lapse_prior"].dropna().astype(str).unique())
                         for kind, rows in individual.groupby("observer_kind")},
        "pooling": "population mean: thresholds t ~ N(mu, sigma), flat prior on mu and 1/sigma on sigma; observers "
                   "located in the grid enter as their posterior medians (the Student-t interval over observers), "
                   "observers whose likelihood of t (spread and lapse integrated over the plan's grids and the run's "
                   "lapse prior) is flat beyond the grid as censored; posterior median of mu and central 95 % "
                   "interval (not inverse-variance pooling, which assumes one common threshold)",
        "population means": [{"observer_kind": r.observer_kind, "condition": r.condition,
                              "observers": int(r.observers), "identified": bool(np.isfinite(r.quest_threshold)),
                              **{key: int(group(r)["label"].str.contains(label).sum())
                                 for key, label in (("censored", CENSORED), ("prior-only left out", PRIOR_ONLY))}}
                             for r in population.itertuples()],
        "prior-only rule": f"likelihood within {LIKELIHOOD_BOUND:.3g} of its maximum over the whole tested grid "
                           "(95 % likelihood-ratio bound): listed, not pooled",
        "observers": int(individual["observer"].nunique()),
        "prior-only observers": int(individual["label"].str.contains(PRIOR_ONLY).sum()),
        "censored observers": int(individual["label"].str.contains(CENSORED).sum()),
        "extrapolated rows": int(table["label"].str.contains(EXTRAPOLATED).sum()),
    }


def method_sentence(record: dict) -> str:
    """The methods sentence of the section, from what :func:`method_record` recorded."""
    sentence = (f"QUEST+ thresholds (Watson 2017) are each of {record['observers']} observer(s)' posterior median "
                "after the last answer with a central 95 % credible interval (lapse prior: "
                + "; ".join(f"{kind}s {' and '.join(priors)}" for kind, priors in record["lapse priors"].items())
                + ").")
    populations = record["population means"]
    if not populations:
        return sentence + " No population mean was estimated (fewer than two observers of a kind told QUEST+ " \
                          "anything about their threshold)."
    pooled = ", ".join(f"{p['observers']} {p['observer_kind']}s on {p['condition'].replace('_', ' ')}"
                       + ("" if p["identified"] else " (not identified: open interval)") for p in populations)
    sentence += (f" Population means ({pooled}) are the Student-t interval over observers (the posterior of the mean "
                 "under a normal population with a flat prior on the mean and 1/SD on the between-observer SD)")
    censored = sum(p["censored"] for p in populations)
    left_out = sum(p["prior-only left out"] for p in populations)
    if censored:
        sentence += (f", in which {censored} observer(s) whose answers placed the threshold only beyond the tested "
                     "grid count as censored (their likelihood of the threshold, not a point)")
    if left_out:
        sentence += (f"; {left_out} observer(s) whose answers ruled out no threshold on the grid are listed as "
                     "prior-only and not pooled")
    return sentence + "."


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
        plans = {plan["condition"]: plan for plan in (result.summary.get("design") or {}).get("adaptive", [])}
        plans = plans_of(scored, n_choices, plans)
        per, likelihoods = final_posteriors(scored, n_choices, plans)
        answered = {condition: grid_of(scored, condition)[1] for condition in per["condition"].unique()}
        both = (pd.concat([per, population_means(per, likelihoods, plans, answered)], ignore_index=True) if len(per)
                else per)
        result.tables["adaptive_thresholds"] = both
        record = method_record(both)
        record_method(result, self.name, method_sentence(record), **record)
        if not both["quest_threshold"].notna().any():
            return "adaptive blocks have answers but no posterior threshold yet"
        return None

    def figures(self, analysis, reference):
        fixed = analysis.tables.get("thresholds")
        return {"adaptive": plots.adaptive_thresholds(analysis.tables["adaptive_thresholds"], fixed)}
