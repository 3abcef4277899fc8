"""Decision rules: how a model's output becomes an answer to a trial.

Classification trials (one image, choose a label):

- ``16class-mean`` (default): softmax over the 1000 ImageNet classes, mean probability over
  each label's ImageNet indices, argmax over the trial's choices (model-vs-human,
  Geirhos et al. 2019/2021, ``ImageNetProbabilitiesTo16ClassesMapping``);
- ``16class-sum``: the same with the sum;
- ``16class-burgert``: the sum, and the model commits to the largest label only when its
  summed probability exceeds 0.5, else answers "not clear" -- so a trial is correct only
  if the true class's sum > 0.5 (Burgert et al. 2025, model evaluation: "summing softmax
  outputs over all ImageNet subclasses mapping to the same entry-level category. Only
  predictions above the threshold of 0.5 were considered correct");
- ``imagenet-top1``: the 1000-way argmax; the answer is the label whose index list holds
  it, or ``imagenet:<index> <description>`` when no label does (always wrong).

The ``16class-*`` names apply to any label set: its labels' ImageNet index lists come from
a mapping file, the experiment's ``label_set.imagenet_indices``, or, for the 16 entry-level
classes, model-vs-human's lists (``imagenet16.py``).

Oddity trials (k images, choose the odd one): ``oddity`` (Wen et al. 2024, DiST, Eq. 2).

Ties: the earliest tied choice in the trial's ``choices`` order wins (``numpy.argmax``
returns the first maximum) -- deterministic and documented, never random.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cuebench.errors import CuebenchError
from cuebench.labels import IMAGENET16_NAME
from cuebench.trials import NOT_CLEAR, LabelSet

from .imagenet16 import IMAGENET16_INDICES

CLASSIFY_RULES = ("16class-mean", "16class-sum", "16class-burgert", "imagenet-top1")
ODDITY_RULE = "oddity"
RULES = CLASSIFY_RULES + (ODDITY_RULE,)
DEFAULT_RULE = "16class-mean"
BURGERT_THRESHOLD = 0.5


class DecisionError(CuebenchError):
    """A decision rule or label mapping cannot be applied as asked."""


@dataclass(frozen=True)
class Decision:
    """A model's answer and the numbers it was decided from (stored as ``model_outputs``)."""

    response: str
    outputs: dict


@dataclass(frozen=True)
class LabelMapping:
    """Label -> ImageNet-1k indices, and where the lists came from (recorded with each answer)."""

    indices: dict[str, list[int]]
    source: str


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise DecisionError(f"unknown decision rule {rule!r}; choose one of {', '.join(RULES)}")
    return rule


def read_mapping_file(path: str | Path) -> dict[str, list[int]]:
    """A label -> ImageNet indices file: JSON ``{"cat": [281, 282]}`` or CSV ``label,imagenet_index`` rows."""
    path = Path(path)
    if not path.is_file():
        raise DecisionError(f"mapping file {path} does not exist")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise DecisionError(f"{path}: not valid JSON at line {err.lineno}: {err.msg}") from None
        if not isinstance(data, dict):
            raise DecisionError(f"{path}: expected an object label -> list of ImageNet indices")
        mapping = data
    else:
        mapping = {}
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames or not {"label", "imagenet_index"} <= set(reader.fieldnames):
                raise DecisionError(f"{path}: needs columns 'label' and 'imagenet_index', has {reader.fieldnames}")
            for line, row in enumerate(reader, start=2):
                try:
                    mapping.setdefault(row["label"], []).append(int(row["imagenet_index"]))
                except ValueError:
                    raise DecisionError(f"{path} line {line}: imagenet_index {row['imagenet_index']!r} "
                                        "is not an integer") from None
    for label, indices in mapping.items():
        if not isinstance(indices, list) or not indices or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 1000 for i in indices):
            raise DecisionError(f"{path}: label {label!r} must map to a non-empty list of ImageNet indices 0..999, "
                                f"got {indices!r}")
    return mapping


def label_mapping(label_set: LabelSet, mapping_file: str | Path | None = None) -> LabelMapping:
    """The ImageNet index lists of a label set: a mapping file, else the label set's own, else model-vs-human's."""
    labels = [label for label in label_set.labels if label != NOT_CLEAR]
    if mapping_file is not None:
        indices, source = read_mapping_file(mapping_file), f"file:{Path(mapping_file).name}"
    elif label_set.imagenet_indices:
        indices, source = dict(label_set.imagenet_indices), f"label_set:{label_set.name}"
    elif label_set.name == IMAGENET16_NAME or set(labels) <= set(IMAGENET16_INDICES):
        indices, source = IMAGENET16_INDICES, "model-vs-human 16-class"
    else:
        raise DecisionError(
            f"label set {label_set.name!r} has no ImageNet indices for its labels ({', '.join(labels[:5])} ...); "
            "give a mapping file (JSON label -> [indices] or CSV label,imagenet_index) with --mapping")
    missing = [label for label in labels if label not in indices]
    if missing:
        raise DecisionError(f"the label mapping ({source}) has no ImageNet indices for label(s) "
                            f"{', '.join(map(repr, missing))} of label set {label_set.name!r}")
    return LabelMapping({label: list(indices[label]) for label in labels}, source)


def aggregate(probs: np.ndarray, indices: list[list[int]], how: str) -> np.ndarray:
    """Per-label mean or sum of ImageNet probabilities: (n, 1000) -> (n, labels).

    model-vs-human (mean, default) and Burgert et al. 2025 (sum)."""
    if how == "mean":
        return np.stack([probs[:, idx].mean(axis=1) for idx in indices], axis=1)
    if how == "sum":
        return np.stack([probs[:, idx].sum(axis=1) for idx in indices], axis=1)
    raise DecisionError(f"unknown aggregation {how!r}")


def decide_classify(probs: np.ndarray, choices: tuple[str, ...] | list[str], mapping: LabelMapping | None,
                    rule: str) -> Decision:
    """The answer to one classification trial from a 1000-way softmax vector."""
    return decide_classify_many(np.asarray(probs).reshape(1, -1), [choices], mapping, rule)[0]


def decide_classify_many(probs: np.ndarray, choices: list, mapping: LabelMapping | None, rule: str) -> list[Decision]:
    """The answers to classification trials from their softmax rows (n, 1000), one choice list per row.

    Each label's mean or sum is computed once for the whole batch; per trial only its own
    choices compete, and ``max`` keeps the first of tied choices, as ``numpy.argmax`` does."""
    probs = np.asarray(probs, dtype=np.float64).reshape(len(choices), -1)
    candidates = [[c for c in trial_choices if c != NOT_CLEAR] for trial_choices in choices]
    if rule == "imagenet-top1":
        return [_top1(row, trial_candidates, mapping) for row, trial_candidates in zip(probs, candidates)]
    if mapping is None:
        raise DecisionError(f"rule {rule} needs ImageNet index lists for the labels")
    labels = list(dict.fromkeys(c for trial_candidates in candidates for c in trial_candidates))
    unknown = [c for c in labels if c not in mapping.indices]
    if unknown:
        raise DecisionError(f"choice {unknown[0]!r} has no ImageNet indices in the mapping ({mapping.source})")
    how = "mean" if rule == "16class-mean" else "sum"
    column = {label: k for k, label in enumerate(labels)}
    decisions = []
    for values, trial_candidates in zip(aggregate(probs, [mapping.indices[c] for c in labels], how).tolist(),
                                        candidates):
        scores = {c: values[column[c]] for c in trial_candidates}
        best = max(trial_candidates, key=scores.__getitem__)
        if rule == "16class-burgert" and not scores[best] > BURGERT_THRESHOLD:
            best = NOT_CLEAR
        decisions.append(Decision(best, scores))
    return decisions


def _top1(probs: np.ndarray, candidates: list[str], mapping: LabelMapping | None) -> Decision:
    top = int(np.argmax(probs))
    order = np.argsort(-probs, kind="stable")[:5]
    outputs = {"top5": [[int(i), float(probs[i])] for i in order]}
    if mapping is not None:
        for label in candidates:
            if top in mapping.indices.get(label, ()):
                return Decision(label, outputs)
    return Decision(f"imagenet:{top} {imagenet_description(top)}", outputs)


def imagenet_description(index: int) -> str:
    from .torch_compat import import_timm

    return import_timm().data.ImageNetInfo().index_to_description(index)


def zscore(features: np.ndarray) -> np.ndarray:
    """Each row standardised to mean 0 and standard deviation 1 over its own dimensions
    (the DiST reference code's normalisation before the cosine distances)."""
    features = np.asarray(features, dtype=np.float64)
    mean = features.mean(axis=1, keepdims=True)
    std = features.std(axis=1, keepdims=True)
    return (features - mean) / np.where(std > 0, std, 1.0)


def mean_cosine_distances(features: np.ndarray) -> np.ndarray:
    """D_i = sum_{j != i} (1 - cos(F_i, F_j)) / N with N = k - 1 other images (Wen et al. 2024, Eq. 2)."""
    z = zscore(features)
    norms = np.linalg.norm(z, axis=1, keepdims=True)
    unit = z / np.where(norms > 0, norms, 1.0)
    distances = 1.0 - unit @ unit.T
    np.fill_diagonal(distances, 0.0)
    return distances.sum(axis=1) / (len(z) - 1)


def decide_oddity(features: np.ndarray) -> Decision:
    """Pick the image (1-based position) with the largest mean cosine distance to the others.

    Wen et al. 2024 take argmax of softmax(D), which is argmax of D."""
    features = np.asarray(features)
    if features.ndim != 2 or len(features) < 3:
        raise DecisionError(f"the oddity rule needs at least 3 feature vectors, got shape {features.shape}")
    d = mean_cosine_distances(features)
    return Decision(str(int(np.argmax(d)) + 1), {str(i + 1): float(v) for i, v in enumerate(d)})
