"""Model-confidence curation of an image set (Burgert et al. 2025, App. A: "the 50 images per class a model is
most confident on"), from a model's stored answers to a labelled-set experiment.

Every classification answer of a model stores its score for every label (``model_outputs``: the mean or sum
of the label's ImageNet probabilities, or its own head's probability). The confidence of an image is the
model's score for the image's true class; per class the ``per_class`` most confident images are kept (ties in
the order of the image names). The list (``category, source_image, confidence, rank``) is what
``cuebench stimuli build --only LIST`` builds a study from.
"""

from __future__ import annotations

import json

import pandas as pd

from cuebench.errors import CuebenchError


class CurationError(CuebenchError):
    """The responses hold no scores of the model asked for."""


def most_confident(responses: pd.DataFrame, observer: str, per_class: int) -> pd.DataFrame:
    """The ``per_class`` test images of each class with the highest score of ``observer`` for their true class."""
    if per_class < 1:
        raise CurationError(f"--per-class must be >= 1, got {per_class}")
    rows = responses[(responses["observer"] == observer) & (responses["role"] == "test")
                     & (responses["trial_type"] == "classify")]
    if rows.empty:
        known = sorted(responses.loc[responses["observer_kind"] == "model", "observer"].astype(str).unique())
        raise CurationError(f"no classification answers of {observer!r}; models here: {', '.join(known) or 'none'}")
    outputs = rows["model_outputs"].map(lambda o: json.loads(o) if isinstance(o, str) and o else (o or {}))
    confidence = [scores.get(category) for scores, category in zip(outputs, rows["category"])]
    if all(c is None for c in confidence):
        raise CurationError(f"{observer!r} stored no score per label (model_outputs) to curate by")
    table = pd.DataFrame({"category": rows["category"].to_numpy(), "source_image": rows["source_image"].to_numpy(),
                          "confidence": pd.to_numeric(pd.Series(confidence), errors="coerce").to_numpy()})
    table = table.drop_duplicates(["category", "source_image"]).sort_values(
        ["category", "confidence", "source_image"], ascending=[True, False, True], kind="stable")
    table["rank"] = table.groupby("category").cumcount() + 1
    return table[table["rank"] <= per_class].reset_index(drop=True)
