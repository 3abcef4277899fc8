"""Accuracy on Geirhos et al.'s edge maps and silhouettes, beside BiasBed's ResNet-50 training algorithms."""

from __future__ import annotations

from functools import cache, partial

from .. import reference
from . import Benchmark, Cell, Metric, Published, PublishedSet


GEIRHOS_OBJECTS = "950537233bdd65fe2c42fdb7dd1e90bf5dc848db0f48e44dbdc9e675318cfc89"
"""The image list of Geirhos et al.'s 160 edge maps and 160 silhouettes (the same 160 object names)."""
BIASBED_RULE = "the mean logit over each class's ImageNet classes, argmax (BiasBed's released mappings.py)"
"""How BiasBed turns 1,000 outputs into 16 classes: their paper does not say; their code averages logits, where
cuebench's 16class-mean averages softmax probabilities, so the two can pick different classes."""


@cache
def published(column: str, images: str) -> tuple[Published, ...]:
    """Table 2: BiasBed's ResNet-50 training algorithms (mean over 10 runs, best validation checkpoint)."""
    table = reference.load("biasbed_table2")
    return (Published(("biasbed_table2",), PublishedSet(images, 160, GEIRHOS_OBJECTS), BIASBED_RULE,
                      models=tuple(zip(table["algorithm"], table[column] / 100))),)


class _Originals(Benchmark):
    """Edge maps and silhouettes as BiasBed counts them: each of the 160 images classified once, as it is (a
    labelled set, no image held out for an attention check: no person takes part)."""

    design = "labelled-set"
    decision_rule = "16class-mean"
    column = ""
    images = ""

    @property
    def options(self) -> dict:
        return {"condition": self.name, "attention": 0}

    def metrics(self, scored):
        kind = self.name.removesuffix("s")
        images = Cell("images", lambda t: (t["role"] == "test") & (t["condition"] == self.name))
        return [Metric(f"{kind}_accuracy", f"accuracy on {self.name} (16 classes)", (images,), lambda p: p,
                       partial(published, self.column, self.images))]


class Edges(_Originals):
    """Accuracy on Geirhos et al.'s 160 edge maps (BiasBed, Table 2)."""

    name = "edges"
    shared = "data/geirhos2019/stimuli/edges"
    column = "edge"
    images = "Geirhos et al.'s edge maps"


class Silhouettes(_Originals):
    """Accuracy on Geirhos et al.'s 160 filled silhouettes (BiasBed, Table 2)."""

    name = "silhouettes"
    shared = "data/geirhos2019/stimuli/silhouettes"
    column = "silhouette"
    images = "Geirhos et al.'s filled silhouettes"
