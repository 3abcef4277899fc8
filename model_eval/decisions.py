"""Decision rules: how a model's output becomes an answer to a trial.

Each rule is a small class in ``DECISION_RULES`` (``cuebench list decision-rules``) that
reads one kind of observer output (probabilities or features) and answers the trials of
one type; ``DecisionTable`` is the one dispatch from trial type to rule, each type answered by
its card's ``choice_rule`` (``cuebench.trial_types``) unless another rule is asked for.

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
classes, model-vs-human's lists (``cuebench/imagenet16.py``). An observer whose probabilities are over
its own named classes (e.g. the experiment's labels, CLIP-style) maps each label to its own
output (``own_classes_mapping``), so the same rules apply unchanged.

Oddity trials (k images, choose the odd one): ``oddity`` (Wen et al. 2024, DiST, Eq. 2).

Segment trials (a class for every pixel): ``confusion`` stores the image's confusion matrix
against its label mask, from which analysis accumulates mIoU exactly (``SegmentConfusion``).

Ties: the earliest tied choice in the trial's ``choices`` order wins (``numpy.argmax``
returns the first maximum) -- deterministic and documented, never random.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from cuebench.errors import CuebenchError
from cuebench.imagenet16 import IMAGENET16_INDICES
from cuebench.labels import IMAGENET16_NAME
from cuebench.registry import Registry
from cuebench.segmentation import IGNORE
from cuebench.trial_types import TrialTypeCard, cards
from cuebench.trial_types.segment import SEGMENT_ANSWER
from cuebench.trials import NOT_CLEAR, Experiment, LabelSet, Trial

BURGERT_THRESHOLD = 0.5
DECISION_RULES: Registry[type["DecisionRule"]] = Registry("decision-rules")
"""Rule name -> rule class, each declared by an entry point of ``cuebench.decision_rules`` (its ``name`` is the
entry point's); ``cuebench list decision-rules`` shows them."""


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
    classes: tuple[str, ...] | None = None  # names of the outputs when they are not ImageNet-1k's


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


def own_classes_mapping(classes: tuple[str, ...], label_set: LabelSet, observer: str) -> LabelMapping:
    """Each label -> its own output of an observer whose probabilities are over named classes
    (e.g. a CLIP-style model prompted with the experiment's labels): every rule then reads the
    label's probability directly (the mean or sum over one index is that index)."""
    column = {name: k for k, name in enumerate(classes)}
    labels = [label for label in label_set.labels if label != NOT_CLEAR]
    missing = [label for label in labels if label not in column]
    if missing:
        raise DecisionError(f"observer {observer} gives probabilities over {len(classes)} classes without label(s) "
                            f"{', '.join(map(repr, missing))} of label set {label_set.name!r}")
    return LabelMapping({label: [column[label]] for label in labels}, f"observer:{observer}", tuple(classes))


class DecisionRule:
    """One way to turn an observer's outputs into answers to trials of one type."""

    name: str  # its entry point's name (group ``cuebench.decision_rules``), stored with each answer as ``decision_rule``
    trial_type: str  # the trials it answers
    needs: str  # the observer output it reads: "probabilities" or "features"

    def prepare(self, observer, experiment: Experiment, mapping_file: str | Path | None = None
                ) -> LabelMapping | None:
        """What the rule reads besides the outputs, made once per observer and experiment: the label mapping
        of ``observer`` (its ``classes`` and ``observer_id``) on the experiment's labels; None when the rule
        needs none."""
        return None

    def decide(self, trials: list[Trial], outputs: dict[str, np.ndarray], mapping: LabelMapping | None
               ) -> list[Decision]:
        """The answers to ``trials`` from ``outputs`` (stimulus id -> the observer's output for it)."""
        raise NotImplementedError


def rule_named(name: str) -> DecisionRule:
    """The rule registered as ``name``, or the own choice rule of the trial type card that names it
    (``CardRule``), or a DecisionError naming the known ones. A rule stores its ``name`` with every answer, so
    one that calls itself otherwise than its entry point (a subclass that kept its parent's) is refused."""
    if name in DECISION_RULES:
        chosen = DECISION_RULES[name]()
        if getattr(chosen, "name", None) != name:
            raise DecisionError(f"the decision rule {name!r} ({type(chosen).__module__}.{type(chosen).__qualname__}) "
                                f"calls itself {getattr(chosen, 'name', None)!r}: set its name = {name!r}")
        return chosen
    own = {c.choice_rule: c for c in cards().values() if c.decide is not None}
    if name in own:
        return CardRule(own[name])
    raise DecisionError(f"unknown decision rule {name!r}; choose one of "
                        f"{', '.join(sorted({*DECISION_RULES.names(), *own}))}")


def default_rules() -> dict[str, str]:
    """Trial type -> the rule that answers it unless another rule for that trial type is asked for: its card's
    ``choice_rule``."""
    return {name: c.choice_rule for name, c in cards().items()}


class CardRule(DecisionRule):
    """A trial type's own choice rule, carried on its card (``TrialTypeCard.decide``): each trial decided
    from the ``needs`` outputs of its images, stacked in the order shown."""

    def __init__(self, card: TrialTypeCard):
        self.card, self.name, self.trial_type, self.needs = card, card.choice_rule, card.name, card.needs

    def decide(self, trials, outputs, mapping):
        decided = [self.card.decide(t, np.stack([outputs[s] for s in t.stimuli])) for t in trials]
        return [Decision(response, numbers) for response, numbers in decided]


class ClassifyRule(DecisionRule):
    """Classification trials from the probabilities of each trial's one image."""

    trial_type = "classify"
    needs = "probabilities"

    def prepare(self, observer, experiment, mapping_file=None):
        """An observer over its own named classes maps each label to its output; ImageNet-1k
        probabilities use the label set's ImageNet index lists (``label_mapping``)."""
        if observer.classes is not None:
            return own_classes_mapping(observer.classes, experiment.label_set, observer.observer_id)
        return label_mapping(experiment.label_set, mapping_file)

    def decide(self, trials, outputs, mapping):
        probs = np.stack([outputs[t.stimuli[0]] for t in trials]).astype(np.float64)
        return self.decide_rows(probs, [t.choices for t in trials], mapping)

    def decide_rows(self, probs: np.ndarray, choices: list, mapping: LabelMapping | None) -> list[Decision]:
        raise NotImplementedError


class AggregateRule(ClassifyRule):
    """Per-label mean or sum of the probabilities, argmax over each trial's own choices."""

    how = "mean"

    def decide_rows(self, probs, choices, mapping):
        """Each label's mean or sum is computed once for the whole batch; per trial only its own
        choices compete, and ``max`` keeps the first of tied choices, as ``numpy.argmax`` does."""
        if mapping is None:
            raise DecisionError(f"rule {self.name} needs ImageNet index lists for the labels")
        candidates = [[c for c in trial_choices if c != NOT_CLEAR] for trial_choices in choices]
        labels = list(dict.fromkeys(c for trial_candidates in candidates for c in trial_candidates))
        unknown = [c for c in labels if c not in mapping.indices]
        if unknown:
            raise DecisionError(f"choice {unknown[0]!r} has no ImageNet indices in the mapping ({mapping.source})")
        column = {label: k for k, label in enumerate(labels)}
        decisions = []
        for values, trial_candidates in zip(aggregate(probs, [mapping.indices[c] for c in labels], self.how).tolist(),
                                            candidates):
            scores = {c: values[column[c]] for c in trial_candidates}
            decisions.append(Decision(self.commit(max(trial_candidates, key=scores.__getitem__), scores), scores))
        return decisions

    def commit(self, best: str, scores: dict[str, float]) -> str:
        return best


class SixteenClassMean(AggregateRule):
    """Mean probability over each label's ImageNet classes, argmax (model-vs-human, the default)."""

    name = "16class-mean"
    how = "mean"


class SixteenClassSum(AggregateRule):
    """Summed probability over each label's ImageNet classes, argmax."""

    name = "16class-sum"
    how = "sum"


class SixteenClassBurgert(AggregateRule):
    """Summed probability, answered only above 0.5, else "not clear" (Burgert et al. 2025)."""

    name = "16class-burgert"
    how = "sum"

    def commit(self, best, scores):
        return best if scores[best] > BURGERT_THRESHOLD else NOT_CLEAR


class ImagenetTop1(ClassifyRule):
    """The 1000-way argmax; the label whose index list holds it, else the ImageNet class (wrong)."""

    name = "imagenet-top1"

    def prepare(self, observer, experiment, mapping_file=None):
        """Without index lists for the labels, top-1 answers are ImageNet class names."""
        try:
            return super().prepare(observer, experiment, mapping_file)
        except DecisionError:
            return None

    def decide_rows(self, probs, choices, mapping):
        candidates = [[c for c in trial_choices if c != NOT_CLEAR] for trial_choices in choices]
        return [_top1(row, trial_candidates, mapping) for row, trial_candidates in zip(probs, candidates)]


def decide_classify(probs: np.ndarray, choices: tuple[str, ...] | list[str], mapping: LabelMapping | None,
                    rule: str) -> Decision:
    """The answer to one classification trial from a softmax vector, by the rule named ``rule``."""
    classify = rule_named(rule)
    if not isinstance(classify, ClassifyRule):
        raise DecisionError(f"rule {rule!r} does not answer classification trials")
    return classify.decide_rows(np.asarray(probs, dtype=np.float64).reshape(1, -1), [choices], mapping)[0]


def _top1(probs: np.ndarray, candidates: list[str], mapping: LabelMapping | None) -> Decision:
    top = int(np.argmax(probs))
    order = np.argsort(-probs, kind="stable")[:5]
    outputs = {"top5": [[int(i), float(probs[i])] for i in order]}
    if mapping is not None:
        for label in candidates:
            if top in mapping.indices.get(label, ()):
                return Decision(label, outputs)
        if mapping.classes is not None:
            return Decision(f"class:{top} {mapping.classes[top]}", outputs)
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


class Oddity(DecisionRule):
    """The image with the largest mean cosine distance of z-scored features (DiST, Wen et al. 2024)."""

    name = "oddity"

    trial_type = "oddity"
    needs = "features"

    def decide(self, trials, outputs, mapping):
        return [decide_oddity(np.stack([outputs[s] for s in t.stimuli])) for t in trials]


def decide_oddity(features: np.ndarray) -> Decision:
    """Pick the image (1-based position) with the largest mean cosine distance to the others.

    Wen et al. 2024 take argmax of softmax(D), which is argmax of D."""
    features = np.asarray(features)
    if features.ndim != 2 or len(features) < 3:
        raise DecisionError(f"the oddity rule needs at least 3 feature vectors, got shape {features.shape}")
    d = mean_cosine_distances(features)
    return Decision(str(int(np.argmax(d)) + 1), {str(i + 1): float(v) for i, v in enumerate(d)})


OTHER = "other"
"""A predicted class outside the experiment's label set (a wrong answer for every labelled pixel)."""
EDGE_BAND = 3
"""Pixels within this many pixels (chessboard distance) of a label-mask boundary count as near an edge."""


@dataclass(frozen=True)
class SegmentTargets:
    """What the confusion rule reads besides the outputs: the observer's class -> label index
    (``len(labels)`` for a class outside the label set) and where the label masks are."""

    lookup: np.ndarray
    labels: tuple[str, ...]
    experiment: Experiment
    source: str

    def mask(self, trial: Trial) -> np.ndarray:
        from cuebench.segmentation import read_mask_file

        if self.experiment.directory is None:
            raise DecisionError("segment trials are scored against label masks in an experiment folder; load the "
                                "experiment from its folder")
        stimulus = self.experiment.stimuli[trial.label_mask]
        return read_mask_file(self.experiment.directory / stimulus.path)


class SegmentConfusion(DecisionRule):
    """Each image's confusion matrix against its label mask, ignored pixels left out: the counts
    mIoU is accumulated from (Heinert et al. Sec. IV-B; Everingham et al. 2015, Eq. 1 of IoU)."""

    name = "confusion"

    trial_type = "segment"
    needs = "segmentation"

    def prepare(self, observer, experiment, mapping_file=None):
        """The observer's classes matched by name to the label set's; a class of the label set the
        observer lacks is an error, since no pixel of it could ever be right."""
        if observer.classes is None:
            raise DecisionError(f"observer {observer.observer_id} names no classes, so its label maps cannot be "
                                "scored against the masks")
        labels = tuple(experiment.label_set.labels)
        missing = [label for label in labels if label not in observer.classes]
        if missing:
            raise DecisionError(f"observer {observer.observer_id} has no class {missing[0]!r} of label set "
                                f"{experiment.label_set.name!r} ({len(missing)} missing); its classes: "
                                f"{', '.join(observer.classes[:8])} ...")
        index = {label: k for k, label in enumerate(labels)}
        lookup = np.array([index.get(name, len(labels)) for name in observer.classes], dtype=np.int64)
        return SegmentTargets(lookup, labels, experiment, f"observer:{observer.observer_id}")

    def decide(self, trials, outputs, mapping):
        return [self.decide_one(t, outputs[t.stimuli[0]], mapping) for t in trials]

    def decide_one(self, trial: Trial, prediction: np.ndarray, targets: SegmentTargets) -> Decision:
        mask = targets.mask(trial)
        if prediction.size != mask.size:
            raise DecisionError(f"trial {trial.trial_id}: the label map has {prediction.size} pixels, its mask "
                                f"{mask.shape[1]}x{mask.shape[0]}")
        predicted = targets.lookup[prediction.astype(np.int64).reshape(mask.shape)]
        edge = near_edges(mask)
        return Decision(SEGMENT_ANSWER, {"confusion": confusion_triples(mask, predicted, targets.labels),
                                         "confusion_near_edges": confusion_triples(np.where(edge, mask, IGNORE),
                                                                                   predicted, targets.labels),
                                         "edge_band": EDGE_BAND})


def confusion_triples(mask: np.ndarray, predicted: np.ndarray, labels: tuple[str, ...]) -> list[list]:
    """The confusion matrix of one image as ``[true class, predicted class, pixels]`` for every
    non-empty cell, by name (``OTHER`` for a class outside the label set); IGNORE pixels left out."""
    valid = mask != IGNORE
    n = len(labels) + 1
    counts = np.bincount(mask[valid].astype(np.int64) * n + predicted[valid], minlength=len(labels) * n)
    names = (*labels, OTHER)
    return [[names[int(k) // n], names[int(k) % n], int(counts[k])] for k in np.flatnonzero(counts)]


def near_edges(mask: np.ndarray) -> np.ndarray:
    """Pixels within ``EDGE_BAND`` pixels of a place where the mask changes class (ignored pixels count
    as a class, so the rim of an ignored region is an edge too)."""
    import cv2

    change = np.zeros(mask.shape, dtype=np.uint8)
    change[:, 1:] |= mask[:, 1:] != mask[:, :-1]
    change[:, :-1] |= mask[:, 1:] != mask[:, :-1]
    change[1:, :] |= mask[1:, :] != mask[:-1, :]
    change[:-1, :] |= mask[1:, :] != mask[:-1, :]
    kernel = np.ones((2 * EDGE_BAND - 1, 2 * EDGE_BAND - 1), dtype=np.uint8)
    return cv2.dilate(change, kernel) > 0


@dataclass
class DecisionTable:
    """The one dispatch from trial type to decision rule, with the label mapping the rules read."""

    rules: dict[str, DecisionRule]  # trial type -> rule
    mapping: LabelMapping | None

    @classmethod
    def choose(cls, rule_name: str | None, trial_types: set[str]) -> "DecisionTable":
        """The default rule per trial type, ``rule_name`` replacing the default of its own trial type."""
        rules = {kind: rule_named(name) for kind, name in default_rules().items()}
        if rule_name is not None:
            chosen = rule_named(rule_name)
            if chosen.trial_type == "oddity" and "classify" in trial_types:
                others = [n for n, c in DECISION_RULES.items() if c.trial_type == "classify"]
                raise DecisionError(f"rule {rule_name!r} cannot answer classification trials; choose one of "
                                    f"{', '.join(others)} (oddity trials use the oddity rule anyway)")
            rules[chosen.trial_type] = chosen
        unknown = sorted(trial_types - set(rules))
        if unknown:
            raise DecisionError(f"no decision rule answers trials of type {unknown[0]!r}")
        return cls(rules, None)

    def rule_for(self, trial: Trial) -> DecisionRule:
        return self.rules[trial.trial_type]

    def prepared(self, observer, experiment: Experiment, mapping_file: str | Path | None = None) -> "DecisionTable":
        """This table ready for ``observer`` on ``experiment``: the label mapping that the rules of the
        experiment's trial types read (``DecisionRule.prepare``; none when no rule needs one)."""
        kinds = {t.trial_type for t in experiment.trials}
        mappings = [rule.prepare(observer, experiment, mapping_file) for kind, rule in self.rules.items()
                    if kind in kinds]
        return replace(self, mapping=next((m for m in mappings if m is not None), None))

    def asked_instead_of(self, stored_rule: str) -> str | None:
        """The rule this table asks for the trial type that ``stored_rule`` answers (None: ``stored_rule`` is
        not a registered rule)."""
        if stored_rule not in DECISION_RULES:
            return None
        return self.rules[DECISION_RULES[stored_rule].trial_type].name

    def needs(self, trials) -> frozenset[str]:
        """The observer outputs these trials' rules read."""
        return frozenset(self.rule_for(t).needs for t in trials)

    def decide(self, trials: list[Trial], outputs: dict[str, dict[str, np.ndarray]]) -> list[Decision]:
        """Every trial's answer, in order; the trials of one rule decided in one batch.

        ``outputs``: output kind ("probabilities", "features") -> stimulus id -> array."""
        decided: dict[int, Decision] = {}
        for rule in {id(r): r for r in map(self.rule_for, trials)}.values():
            group = [k for k, t in enumerate(trials) if self.rule_for(t) is rule]
            answers = rule.decide([trials[k] for k in group], outputs[rule.needs], self.mapping)
            decided.update(zip(group, answers))
        return [decided[k] for k in range(len(trials))]
