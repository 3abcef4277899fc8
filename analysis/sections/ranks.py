"""Friedman / Iman-Davenport test with Nemenyi post-hoc over blocks (BiasBed; Demšar 2006)."""

from __future__ import annotations

import pandas as pd

from .. import plots
from ..ranking import RankTestError, friedman_nemenyi
from .base import Section, register

HUMANS_MEAN = "humans (mean)"


def friedman_scores(scored: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per block (condition x level x category) and method (each model, the humans' mean;
    individual humans when there are no models); blocks or methods with gaps are dropped."""
    cells = scored.assign(level=scored["level"].fillna(-1).astype(int), category=scored["category"].fillna("-"))
    per = cells.groupby(["condition", "level", "category", "observer", "observer_kind"], as_index=False)["correct"].mean()
    if (per["observer_kind"] == "model").any():
        humans = per[per["observer_kind"] == "human"].groupby(["condition", "level", "category"], as_index=False)[
            "correct"].mean().assign(observer=HUMANS_MEAN)
        per = pd.concat([per[per["observer_kind"] == "model"], humans], ignore_index=True)
    table = per.pivot_table(index=["condition", "level", "category"], columns="observer", values="correct")
    table = table.loc[:, table.notna().mean() >= 0.5].dropna()
    table.index = [" / ".join(map(str, ix)) for ix in table.index]
    return table


@register
class Ranks(Section):
    """Friedman test, Iman-Davenport F and Nemenyi post-hoc over condition x level x category blocks."""

    name = "ranks"
    title = "Rank tests"
    order = 85
    metrics = {"friedman": "friedman_ranks", "nemenyi": "nemenyi_p"}
    needs = "two methods and two blocks"

    def compute(self, result, scored, options, n_choices):
        try:
            fr = friedman_nemenyi(friedman_scores(scored), higher_is_better=True, alpha=options.alpha)
        except RankTestError as err:
            return f"rank tests skipped: {err}"
        result.friedman = fr
        result.tables["friedman_ranks"] = fr.table()
        result.tables["nemenyi_p"] = fr.nemenyi_p.reset_index(names="method")
        result.summary["friedman"] = fr.summary()
        return fr.note or None

    def figures(self, analysis, reference):
        return {"cd": plots.cd_plot(analysis.friedman, humans=(HUMANS_MEAN,))}
