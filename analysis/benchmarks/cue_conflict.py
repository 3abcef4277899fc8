"""Shape bias on Geirhos et al.'s cue-conflict images, ranked among their CNNs and compared with their people;
Heinert et al.'s 43 models beside it for context."""

from __future__ import annotations

from functools import cache

import numpy as np
import pandas as pd

from .. import reference
from . import Benchmark, Cell, Metric, Published, PublishedSet


def conflicting(trials: pd.DataFrame) -> pd.Series:
    """Cue-conflict trials whose shape class (``category``) and texture class differ (Geirhos et al. 2019)."""
    return trials["texture_category"].notna() & (trials["texture_category"] != trials["category"])


def shape_decision(trials: pd.DataFrame) -> pd.Series:
    """1 for the shape class, 0 for the texture class, NaN for any other answer (it counts for neither)."""
    return pd.Series(np.select([trials["response"] == trials["category"],
                                trials["response"] == trials["texture_category"]], [1.0, 0.0], np.nan),
                     index=trials.index)


GEIRHOS2019_SET = PublishedSet("Geirhos et al. 2019's cue-conflict set", 1280,
                               "929a9213c0f3cd6597ab6a33e60ab37740287e966c199bd320c24fec3654eb2e")


@cache
def published() -> tuple[Published, ...]:
    """Geirhos et al. 2019's released raw data (10 people, 3 CNNs decided with model-vs-human's 16-class mean
    rule, on the 1,280 images): the ranking reference. Heinert et al.'s Table VIII column (43 models, Eq. 6) is
    context only: their paper computes TP_S / (TP_S + TP_T) "on a cue-conflict ImageNet version" and says neither
    which images nor how 1,000-class outputs became decisions (their VGG16 reads 0.107, Geirhos' VGG-16 0.172)."""
    table = reference.load("geirhos2019_shape_bias")
    humans = table[table["observer_kind"] == "human"]["shape_bias"]
    models = table[table["observer_kind"] == "model"]
    heinert = reference.load("heinert_table8").query("arch != 'trained'")
    return (Published(("geirhos2019_shape_bias",), GEIRHOS2019_SET, "16class-mean",
                      human=round(float(humans.mean()), 3), human_label=reference.label("geirhos2019_shape_bias") + f", mean of {len(humans)} people",
                      human_range=(float(humans.min()), float(humans.max())),
                      models=tuple(zip(models["observer"], models["shape_bias"]))),
            Published(("heinert_table8",), PublishedSet("a cue-conflict ImageNet version the paper does not identify",
                                                        None), None,
                      models=tuple(zip(heinert["model"], heinert["cue_conflict_shape_bias"]))))


class CueConflict(Benchmark):
    """Shape bias on Geirhos et al.'s 1,280 cue-conflict images (16class-mean, as model-vs-human)."""

    name = "cue-conflict"
    design = "cue-conflict-import"
    shared = "data/geirhos2019/stimuli/cue-conflict"
    decision_rule = "16class-mean"

    def metrics(self, scored):
        return [Metric("shape_bias", "shape / (shape + texture) decisions, Geirhos et al. 2019",
                       (Cell("shape decisions", conflicting, shape_decision,
                              "images with a shape or texture decision"),), lambda p: p, published)]
