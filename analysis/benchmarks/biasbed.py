"""Accuracy on Geirhos et al.'s edge maps and silhouettes, beside BiasBed's ResNet-50 training algorithms."""

from __future__ import annotations

from functools import cache, partial

from .. import reference
from . import Benchmark, Cell, Metric, Published, PublishedSet


@cache
def published(column: str) -> Published:
    table = reference.load("biasbed_table2")
    return Published(("biasbed_table2",), models=tuple(zip(table["algorithm"], table[column] / 100)))


class _Originals(Benchmark):
    """Edge maps and silhouettes as BiasBed counts them: each of the 160 images classified once, as it is (a
    labelled set, no image held out for an attention check: no person takes part)."""

    design = "labelled-set"
    decision_rule = "16class-mean"
    column = ""

    @property
    def options(self) -> dict:
        return {"condition": self.name, "attention": 0}

    def metrics(self, scored):
        kind = self.name.removesuffix("s")
        images = Cell("images", lambda t: (t["role"] == "test") & (t["condition"] == self.name))
        return [Metric(f"{kind}_accuracy", f"accuracy on {self.name} (16 classes)", (images,), lambda p: p,
                       partial(published, self.column))]


class Edges(_Originals):
    """Accuracy on Geirhos et al.'s 160 edge maps (BiasBed, Table 2)."""

    name = "edges"
    shared = "data/geirhos2019/stimuli/edges"
    column = "edge"
    published_set = PublishedSet("Geirhos et al.'s edge maps", 160,
                                 "950537233bdd65fe2c42fdb7dd1e90bf5dc848db0f48e44dbdc9e675318cfc89")


class Silhouettes(_Originals):
    """Accuracy on Geirhos et al.'s 160 filled silhouettes (BiasBed, Table 2)."""

    name = "silhouettes"
    shared = "data/geirhos2019/stimuli/silhouettes"
    column = "silhouette"
    published_set = PublishedSet("Geirhos et al.'s filled silhouettes", 160,
                                 "950537233bdd65fe2c42fdb7dd1e90bf5dc848db0f48e44dbdc9e675318cfc89")
