"""Multi-label sets scored by mean average precision (mAP), with the mAP of random answers as chance
(Burgert et al. 2025, Sec. 5.2 and App. B: "For multi-label classification tasks, we estimate A_chance by
simulating random predictions and computing the expected mean average precision"; their DeepGlobe set).

A multi-label image lists its labels in its ``category`` (``cuebench.labels.category_labels``); a model's
answer stores its score for every label (``model_outputs``). Per observer, condition and level, each label
is a retrieval problem over the images: rank them by the label's score, the images carrying the label are
the relevant ones.

- **Average precision**: with distinct scores, the mean of the precision at the rank of each relevant image
  (Manning, Raghavan & Schuetze 2008, Sec. 8.4; scikit-learn's ``average_precision_score``). Tied scores
  say nothing about the order of the tied images, so they count as every order of them equally likely:
  AP is its expectation over those orders (tie-aware AP, McSherry & Najork 2008), computed exactly. Chance is
  thereby the AP of a model that ties everything, as it is of random scores; scikit-learn instead treats a
  tie as one threshold, which puts an all-tied model at the prevalence R/N, below the random-ranking chance
  for small N. mAP is the mean over the labels with at least one relevant image (a label no image carries
  has no AP).
- **Chance**: the expected AP of a random ranking of N images of which R are relevant, exactly
  E[AP] = (R - 1)/(N - 1) + (N - R) H_N / (N (N - 1)), H_N the N-th harmonic number (Bestgen 2015,
  "Exact expected average precision of the random baseline for system evaluation", PBML 103) -- the
  value Burgert et al.'s simulation estimates; it tends to the label's prevalence R/N as N grows (for
  small N it lies above: one relevant image among four gives 0.52, not 0.25). Chance mAP is its mean
  over the same labels.
- **Reliance** on the chance-0 / original-1 scale (Burgert et al., Sec. 5.2), with mAP for accuracy:
  (mAP_sup - mAP_chance) / (mAP_orig - mAP_chance), the original being the ``original`` condition.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from cuebench.labels import category_labels

from .metrics import BASELINE, MetricError


class MultiLabelError(MetricError):
    """Responses cannot be scored by mAP as asked."""


def average_precision(scores, relevant) -> float:
    """AP of one label: ``scores`` of the images, ``relevant`` whether each carries the label; the expectation
    over every order of tied images (module docstring). With the images in groups of equal score, highest first,
    a group of n images, r of them relevant, after N_before images of which R_before are relevant, adds
    (r / n) sum_{j=1..n} (R_before + 1 + (j - 1)(r - 1)/(n - 1)) / (N_before + j): a relevant image lands at each
    place j alike, with (j - 1)(r - 1)/(n - 1) other relevant ones before it on average. Equals scikit-learn's
    AP without ties, and Bestgen's expected random AP when all tie. NaN when no image is relevant."""
    scores = np.asarray(scores, dtype=float)
    relevant = np.asarray(relevant, dtype=bool)
    total = int(relevant.sum())
    if total == 0:
        return float("nan")
    order = np.argsort(-scores, kind="stable")
    scores, relevant = scores[order], relevant[order]
    starts = np.r_[0, np.flatnonzero(np.diff(scores)) + 1]
    ends = np.r_[starts[1:], len(scores)]
    found = np.r_[0, np.cumsum(relevant)]
    expected = 0.0
    for start, end in zip(starts, ends):
        n, r = end - start, int(found[end] - found[start])
        if r == 0:
            continue
        j = np.arange(1, n + 1)
        others = (j - 1) * (r - 1) / (n - 1) if n > 1 else 0.0
        expected += r / n * np.sum((found[start] + 1 + others) / (start + j))
    return float(expected / total)


def expected_random_ap(n: int, relevant: int) -> float:
    """Exact expected AP of a uniformly random ranking of ``n`` images, ``relevant`` of them relevant
    (Bestgen 2015)."""
    if not 1 <= relevant <= n:
        raise MultiLabelError(f"expected AP needs 1 <= relevant <= n, got relevant={relevant}, n={n}")
    if n == 1:
        return 1.0
    harmonic = float(np.sum(1.0 / np.arange(1, n + 1)))
    return (relevant - 1) / (n - 1) + (n - relevant) * harmonic / (n * (n - 1))


def mean_average_precision(scores: np.ndarray, truth: np.ndarray) -> tuple[float, float, int]:
    """(mAP, chance mAP, labels counted) of an (images x labels) score matrix and 0/1 truth matrix, over
    the labels with at least one relevant image."""
    kept = [k for k in range(truth.shape[1]) if truth[:, k].any()]
    if not kept:
        raise MultiLabelError("no label is carried by any of the images: no average precision")
    aps = [average_precision(scores[:, k], truth[:, k]) for k in kept]
    chance = [expected_random_ap(len(truth), int(truth[:, k].sum())) for k in kept]
    return float(np.mean(aps)), float(np.mean(chance)), len(kept)


def _outputs(value) -> dict:
    return json.loads(value) if isinstance(value, str) and value else (value or {})


def map_table(rows: pd.DataFrame, labels: list[str] | tuple[str, ...]) -> pd.DataFrame:
    """Per model, condition and level: mAP, chance mAP, images and labels counted, from scored
    classification answers with a score per label (``model_outputs``) and the images' labels in
    ``category``. People's answers (one label, no scores) are left out: they rank nothing."""
    answers = rows[(rows["trial_type"] == "classify") & (rows["role"] == "test")
                   & (rows["observer_kind"] == "model" if "observer_kind" in rows else True)]
    out = []
    levels = answers["level"].fillna(-1).astype(int)  # -1: no level, as metrics.accuracy writes it
    for (observer, condition, level), cell in answers.groupby(["observer", "condition", levels], sort=True):
        outputs = [_outputs(o) for o in cell["model_outputs"]]
        missing = sorted({label for o in outputs for label in labels if label not in o})
        if missing:
            raise MultiLabelError(f"observer {observer!r} stored no score for label(s) {', '.join(missing[:3])} "
                                  f"(model_outputs): only a model's answers are scored by mAP")
        scores = np.array([[o[label] for label in labels] for o in outputs], dtype=float)
        truth = np.array([[label in category_labels(c) for label in labels] for c in cell["category"]])
        value, chance, counted = mean_average_precision(scores, truth)
        out.append({"observer": observer, "condition": condition, "level": level,
                    "mAP": value, "chance_mAP": chance, "n_images": len(cell), "n_labels": counted})
    return pd.DataFrame(out, columns=["observer", "condition", "level", "mAP", "chance_mAP", "n_images", "n_labels"])


def map_reliance(table: pd.DataFrame) -> pd.DataFrame:
    """Each suppressed cell's mAP on the chance-0 / original-1 scale against the observer's ``original``
    cell: (mAP_sup - chance) / (mAP_orig - chance), chance being the original cell's chance mAP; empty
    where the original lies at or below chance (the scale is not defined)."""
    original = (table[table["condition"] == BASELINE].set_index("observer")[["mAP", "chance_mAP"]]
                .add_suffix("_original"))
    missing = sorted(set(table["observer"]) - set(original.index))
    if missing:
        raise MultiLabelError(f"no {BASELINE!r} condition answered by {', '.join(missing)}: reliance needs the "
                              "original images' mAP")
    rel = table[table["condition"] != BASELINE].join(original, on="observer")
    above = rel["mAP_original"] - rel["chance_mAP_original"]
    return rel.assign(reliance=((rel["mAP"] - rel["chance_mAP_original"]) / above).where(above > 0))
