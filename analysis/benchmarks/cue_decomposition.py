"""Heinert et al.'s cue-decomposition shape bias S_cd and robustness R_cd on the bundled photos."""

from __future__ import annotations

from functools import cache, partial

import numpy as np

from .. import reference
from ..metrics import CUE_CONDITIONS
from . import Benchmark, Cell, Metric, Published, PublishedSet, condition_is

CELLS = tuple(Cell(condition, condition_is(condition)) for condition in CUE_CONDITIONS)
"""Q_O, Q_S, Q_T: accuracy on the originals, the EED shape cue and the Voronoi texture cue."""


HEINERT_SUBSET = PublishedSet("the 16-class ImageNet subset Heinert et al. took from Geirhos et al. (not distributed)",
                              1200)


@cache
def published(column: str) -> tuple[Published, ...]:
    """Table VIII's 43 models on their 1,200 images; the paper does not say how 1,000-class outputs became
    16-class decisions."""
    table = reference.load("heinert_table8").query("arch != 'trained'")
    return (Published(("heinert_table8",), HEINERT_SUBSET, None, models=tuple(zip(table["model"], table[column]))),)


def robustness(q_o, q_s, q_t):
    """R_cd = (Q_S + Q_T) / (2 Q_O) (Heinert et al., eq. 5)."""
    return (q_s + q_t) / (2 * q_o)


def shape_bias_over(s: float, t: float):
    """S_cd = (Q_S/s) / (Q_S/s + Q_T/t) with s and t the mean Q_S and Q_T of a model set (Heinert et al., eqs.
    3-4): the scale is the model set's, so S_cd compares only models normalised over the same set."""
    def formula(q_o, q_s, q_t):
        with np.errstate(invalid="ignore", divide="ignore"):
            return (q_s / s) / (q_s / s + q_t / t)
    return formula


def model_set_scale(scored) -> tuple[list[str], float, float]:
    """The models that answered these stimuli, and their mean Q_S and Q_T."""
    models = scored[scored["observer_kind"] == "model"]
    cues = models[models["condition"].isin(["shape_cue", "texture_cue"])]
    q = cues.groupby(["observer", "condition"])["correct"].mean().unstack()
    q = q.dropna() if {"shape_cue", "texture_cue"} <= set(q.columns) else q.iloc[0:0]
    return list(q.index), float(q["shape_cue"].mean()) if len(q) else np.nan, \
        float(q["texture_cue"].mean()) if len(q) else np.nan


class CueDecomposition(Benchmark):
    """S_cd over the models run on the same photos, and R_cd (Heinert et al., eqs. 3-5)."""

    name = "cue-decomposition"
    design = "cue-decomposition"
    options = {"attention": 0}   # no person takes part: every photo is a test photo
    decision_rule = "16class-mean"

    def metrics(self, scored):
        models, s, t = model_set_scale(scored)
        if len(models) < 2:
            s_cd = Metric("S_cd", "cue-decomposition shape bias, normalised over the models run on these stimuli",
                          CELLS, lambda q_o, q_s, q_t: np.full(np.shape(q_o), np.nan), partial(published, "s_cd"), (0, 1, -1),
                          "S_cd is normalised over the models evaluated on the same stimuli (Heinert et al., eq. 3), "
                          "and only one model answered these, which would make it 0.5 by construction.")
        else:
            s_cd = Metric("S_cd", f"cue-decomposition shape bias, normalised over the {len(models)} models run on "
                          f"these stimuli ({', '.join(models)}; s = {s:.3f}, t = {t:.3f})",
                          CELLS, shape_bias_over(s, t), partial(published, "s_cd"), (0, 1, -1),
                          f"S_cd is normalised over the {len(models)} models evaluated on these stimuli, not over "
                          "Heinert et al.'s 43, so it is not placed among theirs.")
        return [s_cd, Metric("R_cd", "cue-decomposition robustness (Q_S + Q_T) / (2 Q_O), Heinert et al.", CELLS,
                             robustness, partial(published, "r_cd"), directions=(-1, 1, 1))]
