"""Segmentation cue decomposition (Heinert et al., paper 000, Sec. IV-B, Tables III-VI): mIoU per
condition, per-class IoU, S_cd and R_cd from mIoU, relative corruption robustness, its rank
correlations, and the beyond-the-paper per-class S_cd and edge / inside breakdown."""

from __future__ import annotations

from pathlib import Path

from cuebench.expdir import ExperimentDir
from cuebench.images import decode_image
from cuebench.segmentation import read_mask_file

from .. import metrics, plots, segmentation
from .base import Section

EXAMPLE_CONDITIONS = ("original", "shape_cue", "texture_cue")
"""The conditions the examples figure shows of one photo: the photo, its EED shape cue and its texture cue."""


def example_panels(sources) -> dict:
    """The first photo of the first experiment among ``sources`` with segment trials: condition -> its stored
    picture and label mask (the texture cue's mask moved with it), for :func:`analysis.plots.label_mask_examples`;
    empty without such an experiment (response files only)."""
    for source in sources:
        folder = ExperimentDir(Path(source))
        if not folder.exists():
            continue
        experiment = folder.load()
        trials = [t for t in experiment.trials if t.trial_type == "segment"]
        if not trials:
            continue
        shown = {}
        for trial in trials:
            if trial.source_image == trials[0].source_image and trial.condition in EXAMPLE_CONDITIONS:
                shown.setdefault(trial.condition, trial)
        return {condition: (decode_image(folder.stimulus_path(experiment.stimuli[trial.stimuli[0]])),
                            read_mask_file(folder.stimulus_path(experiment.stimuli[trial.label_mask])))
                for condition, trial in shown.items()}
    return {}


class Segmentation(Section):
    """Segment trials, scored by their accumulated confusion matrices."""

    name = "segmentation"
    title = "Segmentation: cue decomposition"
    order = 41
    reads_segments = True
    metrics = {"segmentation": "segmentation_miou", "segmentation-classes": "segmentation_class_iou",
               "segmentation-cue-decomposition": "seg_cue_decomposition",
               "segmentation-class-cues": "seg_class_cue_decomposition", "segmentation-edges": "seg_boundaries",
               "segmentation-robustness": "seg_relative_robustness", "segmentation-correlations": "seg_correlations",
               "segmentation-summary": "segmentation_summary"}
    per_observer = "segmentation_summary"
    needs = "segment trials (--design seg-cue-decomposition, evaluated by segmentation models)"

    def applies(self, rows):
        return bool((rows["trial_type"] == "segment").any())

    def compute(self, result, rows, options, n_choices):
        t = result.tables
        quality = segmentation.segmentation_quality(rows)
        t["segmentation_miou"] = quality
        cells = segmentation.confusion_cells(rows)
        originals = cells[cells["condition"] == "original"]
        if not originals.empty:
            t["segmentation_class_iou"] = segmentation.class_iou(originals, ["observer", "observer_kind"])
        t["seg_boundaries"] = segmentation.boundary_breakdown(rows)
        missing = []
        try:
            cue = segmentation.seg_cue_decomposition(quality, options.model_set)
            t["seg_cue_decomposition"] = cue
            t["seg_class_cue_decomposition"] = segmentation.per_class_cue_decomposition(cells, options.model_set)
        except metrics.MetricError as err:
            missing.append(str(err))
            cue = None
        try:
            robustness = metrics.relative_robustness(quality, "mIoU")
            t["seg_relative_robustness"] = robustness
        except metrics.MetricError:
            robustness = None
        if cue is not None:
            predictors = segmentation.cue_predictors(quality, cue)
            summary = predictors.copy()
            summary.insert(1, "observer_kind", "model")
            if robustness is not None:
                models = robustness[robustness["observer_kind"] == "model"]
                summary = summary.merge(models.drop(columns="observer_kind").rename(
                    columns=lambda c: c if c == "observer" else f"robustness_{c}"), on="observer", how="left")
                if len(models) >= 3:
                    t["seg_correlations"] = segmentation.rank_correlations(predictors, models)
            t["segmentation_summary"] = summary  # one row per model: what `cuebench analyze --correlate X Y` ranks
        return "; ".join(missing) or None

    def has_numbers(self, tables):
        return "segmentation_miou" in tables

    def figures(self, analysis, reference):
        out = {}
        cd = analysis.tables.get("seg_cue_decomposition")
        if cd is not None and cd[["S_cd", "R_cd"]].notna().all(axis=1).any():
            first = cd[cd["texture_level"].fillna(-1) == cd["texture_level"].fillna(-1).iloc[0]]
            out["segmentation_cue_decomposition"] = plots.cue_decomposition_plot(first)
        panels = example_panels(getattr(analysis, "sources", []))
        if panels:
            out["segmentation_examples"] = plots.label_mask_examples(panels)
        return out
