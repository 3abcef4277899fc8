"""Model-confidence curation of an image set (Burgert et al. 2025, Sec. 5.1: the 50 images per class were
"selected based on the most confidently predicted samples in the ImageNet validation set by a ResNet50"), from
a model's stored answers to a labelled-set or suppression experiment.

Every classification answer of a model stores its score for every label (``model_outputs``: the mean or sum
of the label's ImageNet probabilities, or its own head's probability). Only the answers to the unsuppressed
images are used (:func:`unsuppressed_condition`: ``original`` in a suppression study, a labelled set's one
condition): a suppressed version says how the model copes with the suppression, not how representative the
image is, and the order rows are stored in (a resumed or sharded evaluation) must not decide which version
is scored. The confidence of an image is the model's score for the image's true
class (the mean over repeated answers); per class the ``per_class`` most confident images are kept (ties in
the order of the image names). ``correct`` flags whether the model's answers to the image named its class, so
an image scored high for its class but answered wrongly is not passed off as "confidently predicted". The
list (``category, source_image, confidence, correct, rank``) is what ``cuebench stimuli build --only LIST``
builds a study from.
"""

from __future__ import annotations

import json

import pandas as pd

from cuebench.errors import CuebenchError

ORIGINAL = "original"


class CurationError(CuebenchError):
    """The responses hold no scores of the model asked for."""


def unsuppressed_condition(answers: pd.DataFrame, condition: str | None = None) -> str:
    """The condition whose answers are the unsuppressed images: ``condition`` if given, else ``original``
    where the answers hold it, else the answers' only condition (a labelled set's, named after its folder)."""
    conditions = sorted(answers["condition"].astype(str).unique())
    if condition is None:
        if ORIGINAL in conditions or len(conditions) == 1:
            return ORIGINAL if ORIGINAL in conditions else conditions[0]
        raise CurationError(f"no {ORIGINAL!r} condition among {', '.join(conditions)}: name the unsuppressed one "
                            "with --condition")
    if condition not in conditions:
        raise CurationError(f"no answers to condition {condition!r}; conditions here: {', '.join(conditions)}")
    return condition


def model_answers(responses: pd.DataFrame, observer: str) -> pd.DataFrame:
    """``observer``'s answers to classification test trials; an error naming the models here if none."""
    answers = responses[(responses["observer"] == observer) & (responses["role"] == "test")
                        & (responses["trial_type"] == "classify")]
    if answers.empty:
        known = sorted(responses.loc[responses["observer_kind"] == "model", "observer"].astype(str).unique())
        raise CurationError(f"no classification answers of {observer!r}; models here: {', '.join(known) or 'none'}")
    return answers


def most_confident(answers: pd.DataFrame, condition: str, per_class: int, only_correct: bool = False) -> pd.DataFrame:
    """The ``per_class`` images of each class answered under ``condition`` (the unsuppressed one) with the
    highest score for their true class (``only_correct``: among the images the model answered correctly)."""
    if per_class < 1:
        raise CurationError(f"--per-class must be >= 1, got {per_class}")
    rows = answers[answers["condition"] == condition]
    outputs = rows["model_outputs"].map(lambda o: json.loads(o) if isinstance(o, str) and o else (o or {}))
    confidence = [scores.get(category) for scores, category in zip(outputs, rows["category"])]
    if all(c is None for c in confidence):
        raise CurationError(f"{rows['observer'].iloc[0]!r} stored no score per label (model_outputs) to curate by")
    table = pd.DataFrame({"category": rows["category"].to_numpy(), "source_image": rows["source_image"].to_numpy(),
                          "confidence": pd.to_numeric(pd.Series(confidence), errors="coerce").to_numpy(),
                          "correct": (rows["response"] == rows["category"]).to_numpy()})
    table = (table.groupby(["category", "source_image"], as_index=False)
             .agg(confidence=("confidence", "mean"), correct=("correct", "all")))
    if only_correct:
        table = table[table["correct"]]
    table = table.sort_values(["category", "confidence", "source_image"], ascending=[True, False, True],
                              kind="stable")
    table["rank"] = table.groupby("category").cumcount() + 1
    return table[table["rank"] <= per_class].reset_index(drop=True)


def short_classes(curated: pd.DataFrame, per_class: int, classes) -> dict[str, int]:
    """Classes (of ``classes``) with fewer than ``per_class`` images in the list, and how many they have
    (Burgert et al. added images by hand to such classes: airplane, knife, oven)."""
    counts = curated.groupby("category").size().reindex(sorted(set(classes)), fill_value=0)
    return {str(c): int(n) for c, n in counts[counts < per_class].items()}
