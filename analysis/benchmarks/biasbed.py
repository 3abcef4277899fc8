"""Accuracy on Geirhos et al.'s edge maps and silhouettes, beside BiasBed's ResNet-50 training algorithms."""

from __future__ import annotations

from functools import cache, partial

from .. import reference
from . import Benchmark, Cell, Metric, Published, PublishedSet, condition_is


@cache
def published(column: str) -> Published:
    table = reference.load("biasbed_table2")
    return Published(("biasbed_table2",), models=tuple(zip(table["algorithm"], table[column] / 100)))


class _Originals(Benchmark):
    """Edge maps and silhouettes are classified as they are (the design's originals); grayscale is the one
    suppression that leaves their pixels alone, so its trials cost no new stimuli."""

    design = "suppression"
    options = {"conditions": "grayscale"}
    decision_rule = "16class-mean"
    column = ""

    def metrics(self, scored):
        kind = self.name.removesuffix("s")
        return [Metric(f"{kind}_accuracy", f"accuracy on {self.name} (16 classes)",
                       (Cell("originals", condition_is("original")),), lambda p: p, partial(published, self.column))]


class Edges(_Originals):
    """Accuracy on Geirhos et al.'s 160 edge maps (BiasBed, Table 2)."""

    name = "edges"
    shared = "data/geirhos2019/stimuli/edges"
    column = "edge"
    published_set = PublishedSet("Geirhos et al.'s edge maps", 160,
                                 "b9eec320e1c4124bb44746c5cf0bc26d9acaf818907a250ead32c736fcaa46a7")


class Silhouettes(_Originals):
    """Accuracy on Geirhos et al.'s 160 filled silhouettes (BiasBed, Table 2)."""

    name = "silhouettes"
    shared = "data/geirhos2019/stimuli/silhouettes"
    column = "silhouette"
    published_set = PublishedSet("Geirhos et al.'s filled silhouettes", 160,
                                 "b9eec320e1c4124bb44746c5cf0bc26d9acaf818907a250ead32c736fcaa46a7")
