"""Error consistency between every pair of observers (Geirhos et al. 2020), per condition x level."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import consistency, plots
from .base import Section, record_method


class ErrorConsistency(Section):
    """Cohen's kappa of trial-by-trial correctness for every pair of observers, within each condition x level and
    pooled over those cells (a stratified kappa); the human-human mean as the reference."""

    name = "consistency"
    title = "Error consistency"
    order = 60
    metrics = {"error-consistency": "error_consistency", "error-consistency-cells": "error_consistency_cells"}
    needs = "two observers"

    def compute(self, result, scored, options, n_choices):
        observers = scored["observer"].nunique()
        if observers < 2:
            return f"error consistency needs >= 2 observers; {observers} so far"
        cells = consistency.cell_kappas(scored)
        pairs = consistency.pair_kappas(cells, n_boot=options.n_boot, seed=options.seed)
        if not len(pairs):
            return "error consistency needs >= 2 observers who answered the same trials; none share any"
        result.tables["error_consistency"] = pairs
        result.tables["error_consistency_cells"] = cells
        humans = pairs[pairs["pair"] == "human-human"]
        people = sorted(set(humans["observer_a"]) | set(humans["observer_b"]))
        reference = consistency.mean_over_pairs(consistency.pair_matrix(humans, people, "kappa"))
        result.summary["consistency"] = {
            "human_human_kappa": ({k: None if pd.isna(v) else v for k, v in reference.items()} if reference["pairs"]
                                  else None)}
        n_cells = int(cells[["condition", "level"]].drop_duplicates().shape[0])
        used = cells[cells["n_shared"] >= consistency.MIN_SHARED_PER_CELL]
        n_used = int(used[["condition", "level"]].drop_duplicates().shape[0])
        undefined = int(pairs["kappa"].isna().sum())
        human_pairs = int(humans["kappa"].notna().sum())
        jackknife = reference["observers"] >= consistency.MIN_JACKKNIFE_OBSERVERS and bool(
            np.isfinite(reference["ci_low"]))
        human_sentence = (
            f" The human-human mean over {human_pairs} pair(s) has a leave-one-observer-out jackknife t-interval."
            if jackknife else
            f" The human-human mean rests on {human_pairs} pair(s) of {reference['observers']} people and has no "
            f"interval (a jackknife over people needs >= {consistency.MIN_JACKKNIFE_OBSERVERS})." if human_pairs
            else " No two people share a trial in a cell, so there is no human-human reference.")
        record_method(
            result, "consistency",
            f"Error consistency (Geirhos et al. 2020; kappa = (c_obs - c_exp) / (1 - c_exp)) was computed for "
            f"{len(pairs)} observer pair(s) on the trials both answered, within each condition x level cell with >= "
            f"{consistency.MIN_SHARED_PER_CELL} shared trials ({n_used} of {n_cells} cell(s)), chance agreement "
            f"estimated within each cell over pairs of distinct trials, and pooled over the cells as a stratified "
            f"kappa (sum of agreement beyond chance over sum of its maximum; {undefined} pair(s) undefined); pair "
            f"intervals resample trials within each cell ({options.n_boot} percentile bootstrap resamples)."
            + human_sentence,
            kappa_unit="condition x level", kappa_average="stratified: sum_c n_c (c_obs - c_exp) / sum_c n_c "
            "(1 - c_exp), c_exp per cell from distinct-trial pairs", min_shared_per_cell=consistency.MIN_SHARED_PER_CELL,
            cells=n_cells, cells_used=n_used, pairs=int(len(pairs)), pairs_undefined=undefined,
            human_pairs=human_pairs,
            pair_interval=f"percentile bootstrap over trials within each cell, {options.n_boot} resamples",
            human_human_interval=("leave-one-observer-out jackknife t-interval (pairs share observers)" if jackknife
                                  else None),
            pooled_kappa="kappa_pooled column only, over all conditions and levels")
        if len(pairs) and pairs["kappa"].isna().all():
            return ("error consistency undefined for every pair: kappa needs observers who are neither always right "
                    "nor always wrong within a condition x level")
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
