"""Segmentation metrics from the response table's per-image confusion matrices (Heinert et al.,
paper 000, Sec. IV-B, Tables III-VI).

A ``segment`` row stores its image's confusion matrix as ``model_outputs["confusion"]``: a list of
``[true class, predicted class, pixels]`` for every non-empty cell, ignored pixels left out
(``model_eval.decisions.SegmentConfusion``), and the same for the pixels near a mask edge under
``confusion_near_edges``. Summing these cells over a set of images is exactly the data set's
accumulated confusion matrix, from which

    IoU_c = TP_c / (TP_c + FP_c + FN_c),   mIoU = mean of IoU_c over the classes with TP + FP + FN > 0

(Everingham et al. 2015; mmsegmentation's ``mean_iou``: a class neither labelled nor predicted in
the images is left out of the mean). A prediction outside the label set (``other``) is a false
negative of the true class and no class of its own. Q_O, Q_S and Q_T are the mIoU on the original,
EED shape-cue and texture-cue images; S_cd and R_cd follow from them by Eqs. 3-5
(``metrics.cue_decomposition_scores``), once per texture-cue level of a Voronoi sweep.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from . import metrics
from .metrics import MetricError

OTHER = "other"
GROUP = ["observer", "observer_kind", "condition", "level"]


def _outputs(value) -> dict:
    return value if isinstance(value, dict) else json.loads(value) if isinstance(value, str) and value else {}


def confusion_cells(segments: pd.DataFrame, field: str = "confusion") -> pd.DataFrame:
    """One row per stored confusion cell: ``observer, observer_kind, condition, level, cells, trial_id,
    true, predicted, pixels`` (``cells``: the texture cue's Voronoi sites, where it has them)."""
    rows = []
    for row in segments.itertuples(index=False):
        outputs = _outputs(row.model_outputs)
        if field not in outputs:
            raise MetricError(f"segment trial {row.trial_id} of {row.observer} has no {field!r} in its model outputs")
        params = _outputs(row.params)
        for true, predicted, pixels in outputs[field]:
            rows.append((row.observer, row.observer_kind, row.condition, _known(row.level), _known(params.get("cells")),
                         row.trial_id, true, predicted, pixels))
    return pd.DataFrame(rows, columns=GROUP + ["cells", "trial_id", "true", "predicted", "pixels"])


def _known(value) -> int:
    """A level or site count, -1 for none (so that grouping keeps the rows; ``_public`` turns it back)."""
    return -1 if value is None or pd.isna(value) else int(value)


def _public(table: pd.DataFrame) -> pd.DataFrame:
    """Level and site count -1 shown as empty."""
    out = table.copy()
    for column in ("level", "cells", "texture_level"):
        if column in out:
            out[column] = out[column].where(out[column] >= 0)
    return out


def class_iou(cells: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """IoU per class from accumulated confusion cells, grouped by ``by``: ``by + class, tp, fp, fn, iou``
    (iou empty where the class was neither labelled nor predicted)."""
    keys = [k for k in by if k in cells.columns]
    hit = cells[cells["true"] == cells["predicted"]].groupby(keys + ["true"])["pixels"].sum()
    labelled = cells.groupby(keys + ["true"])["pixels"].sum()
    predicted = cells[cells["predicted"] != OTHER].groupby(keys + ["predicted"])["pixels"].sum()
    predicted.index = predicted.index.set_names(keys + ["true"])
    table = pd.concat({"tp": hit, "labelled": labelled, "predicted": predicted}, axis=1).fillna(0)
    table.index = table.index.set_names(keys + ["class"])
    table = table.reset_index()
    table["fp"] = table["predicted"] - table["tp"]
    table["fn"] = table["labelled"] - table["tp"]
    union = table["tp"] + table["fp"] + table["fn"]
    table["iou"] = (table["tp"] / union).where(union > 0)
    return table[keys + ["class", "tp", "fp", "fn", "iou"]]


def mean_iou(per_class: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """mIoU: the mean of the defined class IoUs per group, with the number of classes it averages."""
    keys = [k for k in by if k in per_class.columns]
    return per_class.groupby(keys, as_index=False).agg(mIoU=("iou", "mean"), classes=("iou", "count"))


def segmentation_quality(segments: pd.DataFrame) -> pd.DataFrame:
    """mIoU per observer, condition and level, with the images and labelled pixels behind it."""
    cells = confusion_cells(segments)
    keys = GROUP + ["cells"]
    quality = mean_iou(class_iou(cells, keys), keys)
    counts = cells.groupby(keys, as_index=False).agg(images=("trial_id", "nunique"), pixels=("pixels", "sum"))
    return _public(quality.merge(counts, on=keys, how="left"))


def seg_cue_decomposition(quality: pd.DataFrame, model_set: list[str] | None = None) -> pd.DataFrame:
    """Q_O, Q_S, Q_T as mIoU and S_cd, R_cd (Heinert et al. Eqs. 3-5, Table III), one block per
    texture-cue level (Voronoi sites ``cells``) of a sweep; s and t are the model set's means of Q_S and Q_T."""
    cue = quality[quality["condition"].isin(metrics.CUE_CONDITIONS)]
    missing = [c for c in metrics.CUE_CONDITIONS if c not in set(cue["condition"])]
    if missing:
        raise MetricError(f"segmentation cue decomposition needs trials of conditions {list(metrics.CUE_CONDITIONS)};"
                          f" none for {missing}")
    base = cue[cue["condition"] != "texture_cue"].pivot_table(index=["observer", "observer_kind"], columns="condition",
                                                              values="mIoU")
    base = base.rename(columns={"original": "Q_O", "shape_cue": "Q_S"}).reset_index()
    blocks = []
    texture = cue[cue["condition"] == "texture_cue"]
    for (level, cells), part in texture.groupby([texture["level"].fillna(-1), texture["cells"].fillna(-1)]):
        q = base.merge(part[["observer", "mIoU"]].rename(columns={"mIoU": "Q_T"}), on="observer")
        blocks.append(metrics.cue_decomposition_scores(q, model_set).assign(texture_level=level, cells=cells))
    columns = ["observer", "observer_kind", "texture_level", "cells", "Q_O", "Q_S", "Q_T", "s", "t", "S_cd", "R_cd",
               "note"]
    return _public(pd.concat(blocks, ignore_index=True)[columns])


ONE_MODEL = ("the only model in the model set for this class: its S_cd = 0.5 by construction (s and t are its own "
             "Q_S and Q_T), so it is left out")


def per_class_cue_decomposition(cells: pd.DataFrame, model_set: list[str] | None = None) -> pd.DataFrame:
    """S_cd and R_cd per class (beyond the paper): the class's IoU on original, EED and texture-cue images in
    place of mIoU, s and t the model set's means for that class; one block per texture-cue level (Voronoi
    sites ``cells``) of a sweep, as :func:`seg_cue_decomposition` and the summary, named by ``texture_level``
    and ``cells``. S_cd compares a model with the set's mean, so the only model of a one-model set gets 0.5
    whatever it does: its S_cd is left empty with ``note`` saying so (R_cd does not depend on the set)."""
    cue = cells[cells["condition"].isin(metrics.CUE_CONDITIONS)]
    fixed, texture = cue[cue["condition"] != "texture_cue"], cue[cue["condition"] == "texture_cue"]
    blocks = []
    for (level, sites), part in texture.groupby(["level", "cells"]):
        per_class = class_iou(pd.concat([fixed, part]), ["observer", "observer_kind", "condition"])
        wide = per_class.pivot_table(index=["observer", "observer_kind", "class"], columns="condition", values="iou")
        wide = wide.rename(columns=metrics.CUE_CONDITIONS).reset_index()
        if not {"Q_O", "Q_S", "Q_T"} <= set(wide.columns):
            continue
        for name, rows in wide.groupby("class"):
            rows = rows.dropna(subset=["Q_O", "Q_S", "Q_T"])
            members = None if model_set is None else [m for m in model_set if m in set(rows["observer"])] or None
            n_members = len(members) if members else int((rows["observer_kind"] == "model").sum())
            if rows.empty or n_members == 0:
                continue
            scores = metrics.cue_decomposition_scores(rows, members)
            if n_members == 1:  # the sole member against itself; any other observer is still compared with it
                sole = members[0] if members else rows.loc[rows["observer_kind"] == "model", "observer"].iloc[0]
                own = scores["observer"] == sole
                scores.loc[own, "S_cd"] = np.nan
                scores.loc[own, "note"] = [f"{n}; {ONE_MODEL}" if n else ONE_MODEL for n in scores.loc[own, "note"]]
            blocks.append(scores.assign(texture_level=level, cells=sites))
    if not blocks:
        raise MetricError("no class has IoUs on original, shape-cue and texture-cue images")
    return _public(pd.concat(blocks, ignore_index=True)[
        ["observer", "observer_kind", "texture_level", "cells", "class", "Q_O", "Q_S", "Q_T", "S_cd", "R_cd", "note"]])


def boundary_breakdown(segments: pd.DataFrame) -> pd.DataFrame:
    """mIoU of the pixels near a mask edge and of the rest (beyond the paper: EED keeps edges, so a
    shape-cue model's errors should sit away from them), per observer, condition and level."""
    keys = GROUP + ["cells"]
    every = confusion_cells(segments)
    near = confusion_cells(segments, "confusion_near_edges")
    merged = every.merge(near, on=keys + ["trial_id", "true", "predicted"], how="left", suffixes=("", "_near"))
    inside = merged.assign(pixels=merged["pixels"] - merged["pixels_near"].fillna(0))
    out = mean_iou(class_iou(every, keys), keys)
    for name, cells in (("mIoU_near_edges", near), ("mIoU_inside", inside[inside["pixels"] > 0])):
        part = mean_iou(class_iou(cells, keys), keys).rename(columns={"mIoU": name}).drop(columns="classes")
        out = out.merge(part, on=keys, how="left")
    return _public(out.drop(columns="classes"))


def rank_correlations(predictors: pd.DataFrame, robustness: pd.DataFrame) -> pd.DataFrame:
    """Spearman rank correlation of each per-model metric with each relative robustness column over the
    models both tables hold (Heinert et al. Tables V and VI: rows are metrics, columns corruptions and Mean;
    :func:`metrics.robustness_rank_correlations`)."""
    return metrics.robustness_rank_correlations(predictors, robustness, ("spearman",)).drop(columns="method")


def cue_predictors(quality: pd.DataFrame, cue: pd.DataFrame) -> pd.DataFrame:
    """The per-model metrics Tables V-VI rank: mIoU on originals, EED and each Voronoi N, S_cd and R_cd per N
    (columns ``mIoU_original``, ``mIoU_EED``, ``mIoU_Vor32``, ``S_cd_Vor32``, ``R_cd_Vor32``, ...)."""
    models = quality[quality["observer_kind"] == "model"]
    out = models[models["condition"] == "original"][["observer", "mIoU"]].rename(columns={"mIoU": "mIoU_original"})
    shape = models[models["condition"] == "shape_cue"][["observer", "mIoU"]].rename(columns={"mIoU": "mIoU_EED"})
    out = out.merge(shape, on="observer", how="outer")
    for row_cells, part in cue.groupby(cue["cells"].fillna(-1)):
        label = f"Vor{int(row_cells)}" if row_cells >= 0 else "texture"
        texture = part[["observer", "Q_T", "S_cd", "R_cd"]].rename(columns={
            "Q_T": f"mIoU_{label}", "S_cd": f"S_cd_{label}", "R_cd": f"R_cd_{label}"})
        out = out.merge(texture, on="observer", how="outer")
    return out
