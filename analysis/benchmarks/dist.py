"""Oddity accuracy on the DiST triplets of Wen et al. 2024, beside their people and models."""

from __future__ import annotations

from functools import cache

from .. import reference
from . import Benchmark, Cell, Metric, Published, PublishedSet


@cache
def published() -> Published:
    fig5 = reference.load("dist_fig5").set_index("observer")
    table1 = reference.load("dist_table1")
    models = {m: v / 100 for m, v in zip(table1["model"], table1["dist_accuracy_percent"])}
    models.update({m: r["dist_accuracy_percent"] / 100 for m, r in fig5.iterrows() if r["observer_kind"] == "model"})
    return Published(("dist_fig5", "dist_table1"), human=fig5.loc["Humans", "dist_accuracy_percent"] / 100,
                     human_label=reference.label("dist_fig5") + ": 32 people, 16,800 trials",
                     models=tuple(models.items()))


class Dist(Benchmark):
    """Oddity accuracy on Wen et al.'s 400 DiST triplets (their Eq. 2 rule; chance 1/3)."""

    name = "dist"
    design = "dist-import"
    shared = "data/dist"
    layout = "dist"
    decision_rule = "oddity"
    published_set = PublishedSet("Wen et al. 2024's DiST triplets (named by their originals)", 400,
                                 "0b611e4f2dfa90bdab4b71be140291e8837a3b73852f489271c70c996d0bcebe")

    def metrics(self, scored):
        oddity = Cell("triplets", lambda t: (t["trial_type"] == "oddity") & (t["role"] == "test"))
        return [Metric("dist_accuracy", "oddity accuracy on DiST triplets (chance 1/3), Wen et al.", (oddity,),
                       lambda p: p, published)]
