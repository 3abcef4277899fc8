"""Oddity accuracy on the DiST triplets of Wen et al. 2024, beside their models (measured on their 2,400
triplets) and people."""

from __future__ import annotations

from functools import cache

from .. import reference
from . import Benchmark, Cell, Metric, Published, PublishedSet


DIST_RELEASE = PublishedSet("Wen et al. 2024's released DiST triplets", 2400,
                            "97d3c614033c0e58b33a00b4f197218eae6d28557ef8a7d2101cf50653b272b1")
"""What Wen et al.'s models were measured on: their evaluation script (``src/eval.py``) scores every triplet of
their repository's ``data/`` (github.com/starsky77/DiST, commit d055ab0: 2,400 originals; the paper: "2400
original images"). The hash is :func:`~analysis.benchmarks.image_list_hash` of the 2,400 originals' names
without extension, as ``git ls-tree`` lists ``data/original``; the 400 triplets in the shared data are a subset."""


@cache
def published() -> tuple[Published, ...]:
    """Wen et al.'s models (Table 1, and the Fig. 5 values the text states) on their 2,400 triplets with Eq. 2's
    rule; their people (32 people, 16,800 trials) on triplets the paper does not name."""
    fig5 = reference.load("dist_fig5").set_index("observer")
    table1 = reference.load("dist_table1")
    models = {m: v / 100 for m, v in zip(table1["model"], table1["dist_accuracy_percent"])}
    models.update({m: r["dist_accuracy_percent"] / 100 for m, r in fig5.iterrows() if r["observer_kind"] == "model"})
    return (Published(("dist_table1", "dist_fig5"), DIST_RELEASE, "oddity", models=tuple(models.items())),
            Published(("dist_fig5",), PublishedSet("triplets the paper does not name", None), "oddity",
                      human=fig5.loc["Humans", "dist_accuracy_percent"] / 100,
                      human_label=reference.label("dist_fig5") + ": 32 people, 16,800 trials"))


class Dist(Benchmark):
    """Oddity accuracy on Wen et al.'s 400 DiST triplets (their Eq. 2 rule; chance 1/3)."""

    name = "dist"
    design = "dist-import"
    shared = "data/dist"
    layout = "dist"
    decision_rule = "oddity"

    def metrics(self, scored):
        oddity = Cell("triplets", lambda t: (t["trial_type"] == "oddity") & (t["role"] == "test"), counted="triplets")
        return [Metric("dist_accuracy", "oddity accuracy on DiST triplets (chance 1/3), Wen et al.", (oddity,),
                       lambda p: p, published)]
