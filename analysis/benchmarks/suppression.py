"""Relative accuracy under Burgert et al.'s four feature suppressions, beside their Table 3."""

from __future__ import annotations

from functools import cache, partial

from .. import reference
from . import Benchmark, Cell, Metric, Published, PublishedSet, condition_is


IMAGENET16 = PublishedSet("Burgert et al. 2025's ImageNet16 set (50 validation images per class, not distributed)",
                          800)


@cache
def published(feature: str) -> tuple[Published, ...]:
    """Table 3: 20 people and 12 models on their 800 images, the models decided by summed softmax > 0.5
    (Sec. 5, model evaluation)."""
    table = reference.load("burgert2025_table3")
    human = table[table["observer_kind"] == "human"][feature].iloc[0]
    models = table[table["observer_kind"] == "model"]
    return (Published(("burgert2025_table3",), IMAGENET16, "16class-burgert", human=float(human),
                      human_label=reference.label("burgert2025_table3"),
                      models=tuple(zip(models["observer"], models[feature]))),)


def relative(originals, suppressed):
    """Relative accuracy A_sup / A_orig (Burgert et al. 2025, Sec. 5.1)."""
    return suppressed / originals


class Suppression(Benchmark):
    """Relative accuracy per suppressed feature at Burgert et al.'s settings (summed softmax > 0.5)."""

    name = "suppression"
    design = "suppression"
    options = {"grid": "human", "attention": 0}   # no person takes part: every photo is a test photo
    decision_rule = "16class-burgert"

    def metrics(self, scored):
        originals = Cell("original", condition_is("original"))
        return [Metric(f"relative_accuracy_{feature}", f"accuracy with {feature.replace('_', ' ')} suppressed / on "
                       "the originals, Burgert et al. 2025",
                       (originals, Cell(f"{condition} {setting}", condition_is(condition, **setting))),
                       relative, partial(published, feature), directions=(-1, 1))
                for feature, (condition, setting) in reference.BURGERT2025_FEATURES.items()]
