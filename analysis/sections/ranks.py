"""Mean ranks of the methods over condition x level blocks, with the Friedman / Iman-Davenport statistic and the
Nemenyi critical difference (BiasBed; Demšar 2006) as descriptive numbers.

The Friedman test needs independent blocks: BiasBed ranks algorithms over distinct data sets. The condition x level
cells of one study show the same images to the same observers, so their rankings go together and the test's p-value
would be too small; the report therefore labels the statistic and the critical-difference diagram descriptive
(:data:`DESCRIPTIVE`). ``cuebench selection`` ranks over data sets and keeps the test."""

from __future__ import annotations

import pandas as pd

from .. import plots
from ..ranking import RankTestError, friedman_nemenyi
from .base import Section, record_method

HUMANS_MEAN = "humans (mean)"
DESCRIPTIVE = ("descriptive: the condition x level blocks share images and observers, so they are not the "
               "independent data sets the Friedman test assumes; its p-values and the Nemenyi critical difference "
               "are no test here")
BLOCK = ["condition", "level"]
"""The blocks of the rank test: one accuracy per condition x level and method, as BiasBed ranks methods on data
sets. A finer block (condition x level x category) holds a trial or two per method, whose 0/1 "accuracies" tie
in most blocks and rank noise."""


def friedman_scores(scored: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Accuracy per block (:data:`BLOCK`) and method (each model, the humans' mean; individual humans when there
    are no models), and the number of trials behind each score; blocks or methods with gaps are dropped."""
    cells = scored.assign(level=scored["level"].astype("Float64").fillna(-1).astype(int))
    per = cells.groupby([*BLOCK, "observer", "observer_kind"], as_index=False)["correct"].agg(["mean", "size"])
    if (per["observer_kind"] == "model").any():
        humans = per[per["observer_kind"] == "human"].groupby(BLOCK, as_index=False).agg(
            mean=("mean", "mean"), size=("size", "sum")).assign(observer=HUMANS_MEAN)
        per = pd.concat([per[per["observer_kind"] == "model"], humans], ignore_index=True)
    table = per.pivot_table(index=BLOCK, columns="observer", values="mean")
    table = table.loc[:, table.notna().mean() >= 0.5].dropna()
    trials = per.pivot_table(index=BLOCK, columns="observer", values="size").reindex(index=table.index,
                                                                                    columns=table.columns)
    names = [" / ".join(map(str, ix)) for ix in table.index]
    table.index = trials.index = names
    return table, trials


class Ranks(Section):
    """Mean ranks over condition x level blocks; Friedman, Iman-Davenport F and Nemenyi as descriptive numbers."""

    name = "ranks"
    title = "Rank tests"
    order = 85
    metrics = {"friedman": "friedman_ranks", "nemenyi": "nemenyi_p"}
    summary_tables = ("friedman_ranks",)
    p_value_tables = ("nemenyi_p",)
    needs = "two methods and two blocks"

    def compute(self, result, scored, options, n_choices):
        scores, trials = friedman_scores(scored)
        try:
            fr = friedman_nemenyi(scores, higher_is_better=True, alpha=options.alpha)
        except RankTestError as err:
            return f"rank tests skipped: {err}"
        result.friedman = fr
        result.tables["friedman_ranks"] = fr.table()
        result.tables["nemenyi_p"] = fr.nemenyi_p.reset_index(names="method")
        result.tables["friedman_scores"] = scores.reset_index(names="block")
        result.summary["friedman"] = fr.summary() | {"inference": DESCRIPTIVE}
        record_method(
            result, "ranks",
            f"{fr.n_methods} methods were ranked by their mean rank over {fr.n_blocks} condition x level block(s), "
            f"each score a method's accuracy in the block (at least {int(trials.min().min())} trial(s) per score); "
            "the Friedman statistic with the Iman-Davenport correction and the Nemenyi critical difference (Demsar "
            f"2006; alpha {options.alpha}) are reported as descriptive, not as a test, because the blocks share "
            "images and observers.",
            block_unit="condition x level", score="accuracy of each method in each block (people: the mean of their "
            "accuracies)", blocks=fr.n_blocks, methods=fr.n_methods, inference=DESCRIPTIVE,
            fewest_trials_per_score=int(trials.min().min()), alpha=options.alpha)
        return fr.note or None

    def figures(self, analysis, reference):
        return {"cd": plots.cd_plot(analysis.friedman, humans=(HUMANS_MEAN,),
                                    title="mean ranks over condition x level blocks (descriptive: the blocks share "
                                          "images and observers)")}
