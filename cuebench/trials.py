"""The trial model: what every observer, human or model, is shown and asked.

One typed, versioned, JSON-serialisable definition of stimuli, trials, label sets and
experiments (DESIGN.md, "Trial schema"). Runners (web, PsychoPy) and model evaluation
read the same objects, so a trial means the same thing to everybody who answers it.
Loading validates every field and names the file and field that is wrong.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import CuebenchError

SCHEMA_VERSION = 1
TRIAL_TYPES = ("classify", "oddity")
ROLES = ("test", "practice", "catch", "attention")
SCORED_ROLES = ("test",)
NOT_CLEAR = "not clear"


class SchemaError(CuebenchError, ValueError):
    """A definition is malformed; the message names the file (if any) and the field."""

    def __init__(self, field_path: str, problem: str, source: str | Path | None = None):
        self.field_path = field_path
        self.problem = problem
        self.source = str(source) if source is not None else None
        where = f"{self.source}: " if self.source else ""
        super().__init__(f"{where}field '{field_path}': {problem}")


def _require(data: dict, key: str, kind: type | tuple, path: str, optional: bool = False):
    if key not in data or data[key] is None:
        if optional:
            return None
        raise SchemaError(f"{path}.{key}" if path else key, "is missing")
    value = data[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) and kind is not bool and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise SchemaError(f"{path}.{key}" if path else key, f"expected {kind}, got a boolean")
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise SchemaError(f"{path}.{key}" if path else key, f"expected {names}, got {type(value).__name__} {value!r}")
    return value


def _check_unknown(data: dict, cls: type, path: str) -> None:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SchemaError(f"{path}.{unknown[0]}" if path else unknown[0], f"unknown field (known: {', '.join(sorted(known))})")


@dataclass(frozen=True)
class Timing:
    """Phase durations in milliseconds; runners convert them to frames at the measured refresh rate.

    ``None`` for a phase means the phase is skipped; ``response_window=None`` means unlimited.
    ``response_window`` is counted from stimulus onset when ``response_from_onset`` is true
    (DiST: answer within 2000 ms of onset), otherwise from response-screen onset.
    """

    fixation: int | None = 300
    stimulus: int = 200
    mask: int | None = 200
    response_window: int | None = None
    iti: int = 500
    response_from_onset: bool = False

    @classmethod
    def from_dict(cls, data: Any, path: str = "timing") -> "Timing":
        if not isinstance(data, dict):
            raise SchemaError(path, f"expected an object, got {type(data).__name__}")
        _check_unknown(data, cls, path)
        values = {}
        for name in ("fixation", "mask", "response_window"):
            v = _require(data, name, int, path, optional=True) if name in data else getattr(cls, name)
            if v is not None and v < 0:
                raise SchemaError(f"{path}.{name}", f"must be >= 0 ms, got {v}")
            values[name] = v
        values["stimulus"] = _require(data, "stimulus", int, path) if "stimulus" in data else cls.stimulus
        if values["stimulus"] <= 0:
            raise SchemaError(f"{path}.stimulus", f"must be > 0 ms, got {values['stimulus']}")
        values["iti"] = _require(data, "iti", int, path) if "iti" in data else cls.iti
        values["response_from_onset"] = bool(data.get("response_from_onset", False))
        return cls(**values)


CLASSIFY_TIMING = Timing()
"""Burgert et al. 2025: fixation 300 ms, image 200 ms, pink-noise mask 200 ms."""
ODDITY_TIMING = Timing(fixation=500, stimulus=800, mask=None, response_window=2000, response_from_onset=True)
"""Wen et al. 2024 (DiST): triplet for 800 ms, answer within 2000 ms of onset."""


@dataclass(frozen=True)
class Stimulus:
    """One image file in the experiment's content-addressed store, with its provenance."""

    id: str
    path: str
    source_image: str | None = None
    transform: str = "original"
    params: dict = field(default_factory=dict)
    seed: int | None = None
    software_version: str = ""
    width: int | None = None
    height: int | None = None

    @classmethod
    def from_dict(cls, data: Any, path: str) -> "Stimulus":
        if not isinstance(data, dict):
            raise SchemaError(path, "expected an object")
        _check_unknown(data, cls, path)
        return cls(
            id=_require(data, "id", str, path),
            path=_require(data, "path", str, path),
            source_image=_require(data, "source_image", str, path, optional=True),
            transform=_require(data, "transform", str, path, optional=True) or "original",
            params=_require(data, "params", dict, path, optional=True) or {},
            seed=_require(data, "seed", int, path, optional=True),
            software_version=_require(data, "software_version", str, path, optional=True) or "",
            width=_require(data, "width", int, path, optional=True),
            height=_require(data, "height", int, path, optional=True),
        )


@dataclass(frozen=True)
class Trial:
    """One question put to an observer.

    ``classify``: ``choices`` are labels and ``correct`` is a label. ``oddity``: ``choices``
    are 1-based positions as strings (``"1"``, ``"2"``, ``"3"``) and ``correct`` is the
    position of the odd image. ``attention`` trials carry an ``instruction`` shown before
    the image and their ``correct`` is the instructed answer; ``catch`` and ``attention``
    trials never enter accuracy.
    """

    trial_id: str
    trial_type: str
    role: str
    stimuli: tuple[str, ...]
    choices: tuple[str, ...]
    correct: str | None
    condition: str = "original"
    params: dict = field(default_factory=dict)
    level: int | None = None
    source_image: str | None = None
    category: str | None = None
    texture_category: str | None = None
    timing: Timing | None = None
    instruction: str | None = None
    mask_seed: int | None = None

    def __post_init__(self):
        if self.timing is None:
            object.__setattr__(self, "timing", ODDITY_TIMING if self.trial_type == "oddity" else CLASSIFY_TIMING)

    @property
    def scored(self) -> bool:
        return self.role in SCORED_ROLES

    def to_dict(self) -> dict:
        data = asdict(self)
        data["stimuli"] = list(self.stimuli)
        data["choices"] = list(self.choices)
        return data

    @classmethod
    def from_dict(cls, data: Any, path: str) -> "Trial":
        if not isinstance(data, dict):
            raise SchemaError(path, "expected an object")
        _check_unknown(data, cls, path)
        trial_type = _require(data, "trial_type", str, path)
        if trial_type not in TRIAL_TYPES:
            raise SchemaError(f"{path}.trial_type", f"must be one of {TRIAL_TYPES}, got {trial_type!r}")
        role = _require(data, "role", str, path)
        if role not in ROLES:
            raise SchemaError(f"{path}.role", f"must be one of {ROLES}, got {role!r}")
        stim = _require(data, "stimuli", list, path)
        if not stim or not all(isinstance(s, str) for s in stim):
            raise SchemaError(f"{path}.stimuli", "must be a non-empty list of stimulus ids")
        choices = _require(data, "choices", list, path)
        if not choices or not all(isinstance(c, str) for c in choices):
            raise SchemaError(f"{path}.choices", "must be a non-empty list of strings")
        if trial_type == "oddity" and choices != [str(i + 1) for i in range(len(stim))]:
            raise SchemaError(f"{path}.choices", f"an oddity trial's choices are the positions 1..{len(stim)}")
        correct = _require(data, "correct", str, path, optional=True)
        if correct is not None and correct not in choices:
            raise SchemaError(f"{path}.correct", f"{correct!r} is not one of the choices")
        level = _require(data, "level", int, path, optional=True)
        timing = Timing.from_dict(data["timing"], f"{path}.timing") if data.get("timing") is not None else None
        return cls(
            trial_id=_require(data, "trial_id", str, path),
            trial_type=trial_type,
            role=role,
            stimuli=tuple(stim),
            choices=tuple(choices),
            correct=correct,
            condition=_require(data, "condition", str, path, optional=True) or "original",
            params=_require(data, "params", dict, path, optional=True) or {},
            level=level,
            source_image=_require(data, "source_image", str, path, optional=True),
            category=_require(data, "category", str, path, optional=True),
            texture_category=_require(data, "texture_category", str, path, optional=True),
            timing=timing,
            instruction=_require(data, "instruction", str, path, optional=True),
            mask_seed=_require(data, "mask_seed", int, path, optional=True),
        )


@dataclass(frozen=True)
class LabelSet:
    """The answer labels of a classification experiment and their display order.

    ``imagenet_indices`` maps each label to the ImageNet-1k classes a model's decision
    aggregates over (model-vs-human's 16-class lists, or a user mapping file).
    """

    name: str
    labels: tuple[str, ...]
    display_order: str = "alphabetical"
    not_clear: bool = True
    imagenet_indices: dict = field(default_factory=dict)

    def displayed(self) -> list[str]:
        """Labels in the order a response screen shows them, "not clear" last."""
        ordered = sorted(self.labels) if self.display_order == "alphabetical" else list(self.labels)
        return ordered + ([NOT_CLEAR] if self.not_clear else [])

    def to_dict(self) -> dict:
        data = asdict(self)
        data["labels"] = list(self.labels)
        return data

    @classmethod
    def from_dict(cls, data: Any, path: str = "label_set") -> "LabelSet":
        if not isinstance(data, dict):
            raise SchemaError(path, "expected an object")
        _check_unknown(data, cls, path)
        labels = _require(data, "labels", list, path)
        if not labels or not all(isinstance(x, str) and x for x in labels):
            raise SchemaError(f"{path}.labels", "must be a non-empty list of non-empty strings")
        if len(set(labels)) != len(labels):
            raise SchemaError(f"{path}.labels", "contains duplicates")
        order = _require(data, "display_order", str, path, optional=True) or "alphabetical"
        if order not in ("alphabetical", "given"):
            raise SchemaError(f"{path}.display_order", f"must be 'alphabetical' or 'given', got {order!r}")
        mapping = _require(data, "imagenet_indices", dict, path, optional=True) or {}
        for label, idx in mapping.items():
            if not isinstance(idx, list) or not all(isinstance(i, int) and 0 <= i < 1000 for i in idx):
                raise SchemaError(f"{path}.imagenet_indices.{label}", "must be a list of ImageNet indices 0..999")
        return cls(
            name=_require(data, "name", str, path),
            labels=tuple(labels),
            display_order=order,
            not_clear=bool(data.get("not_clear", True)),
            imagenet_indices=mapping,
        )


@dataclass(frozen=True)
class Schedule:
    """Blocks, breaks and the insertion of catch and attention trials into each sequence.

    ``catch_every=10`` puts one catch trial after every 10 test trials (DiST);
    ``attention_every=100`` one attention trial after every 100 (Burgert et al.).
    """

    break_every: int | None = 100
    catch_every: int | None = None
    attention_every: int | None = None
    practice_first: bool = True
    shuffle: bool = True

    @classmethod
    def from_dict(cls, data: Any, path: str = "schedule") -> "Schedule":
        if not isinstance(data, dict):
            raise SchemaError(path, "expected an object")
        _check_unknown(data, cls, path)
        values = {}
        for name in ("break_every", "catch_every", "attention_every"):
            v = _require(data, name, int, path, optional=True)
            if v is not None and v <= 0:
                raise SchemaError(f"{path}.{name}", f"must be a positive number of trials, got {v}")
            values[name] = v
        values["practice_first"] = bool(data.get("practice_first", True))
        values["shuffle"] = bool(data.get("shuffle", True))
        return cls(**values)


@dataclass(frozen=True)
class AssignmentPlan:
    """A Latin square of condition arms over participant groups.

    ``arms`` are the conditions that rotate; group ``g`` sees source image ``i`` (in
    ``images`` order) under arm ``(i + g) mod len(arms)``, so each participant sees each
    image once, in one condition, and with equal group sizes every image x condition cell
    gets the same number of participants (Burgert et al. 2025, five conditions over groups
    of five). ``groups[g]`` lists that group's test trial ids. One arm means everybody
    sees every test trial.
    """

    arms: tuple[str, ...]
    images: tuple[str, ...]
    groups: tuple[tuple[str, ...], ...]

    def to_dict(self) -> dict:
        return {"arms": list(self.arms), "images": list(self.images), "groups": [list(g) for g in self.groups]}

    @classmethod
    def from_dict(cls, data: Any, path: str = "assignment") -> "AssignmentPlan":
        if not isinstance(data, dict):
            raise SchemaError(path, "expected an object")
        _check_unknown(data, cls, path)
        arms = _require(data, "arms", list, path)
        groups = _require(data, "groups", list, path)
        if not groups or not all(isinstance(g, list) for g in groups):
            raise SchemaError(f"{path}.groups", "must be a non-empty list of trial-id lists")
        return cls(arms=tuple(arms), images=tuple(_require(data, "images", list, path)),
                   groups=tuple(tuple(g) for g in groups))


@dataclass
class Experiment:
    """A whole experiment: label set, stimuli, trials, schedule, assignment and provenance."""

    name: str
    design: str
    label_set: LabelSet
    stimuli: dict[str, Stimulus]
    trials: list[Trial]
    schedule: Schedule = field(default_factory=Schedule)
    assignment: AssignmentPlan | None = None
    provenance: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def trial(self, trial_id: str) -> Trial:
        return self.trials_by_id()[trial_id]

    def trials_by_id(self) -> dict[str, Trial]:
        cache = getattr(self, "_by_id", None)
        if cache is None or len(cache) != len(self.trials):
            cache = {t.trial_id: t for t in self.trials}
            object.__setattr__(self, "_by_id", cache)
        return cache

    def trials_with_role(self, role: str) -> list[Trial]:
        return [t for t in self.trials if t.role == role]

    def to_dict(self) -> dict:
        return {
            "schema_version": self.schema_version,
            "name": self.name,
            "design": self.design,
            "label_set": self.label_set.to_dict(),
            "schedule": asdict(self.schedule),
            "assignment": self.assignment.to_dict() if self.assignment else None,
            "provenance": self.provenance,
            "stimuli": {sid: asdict(s) for sid, s in sorted(self.stimuli.items())},
            "trials": [t.to_dict() for t in self.trials],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls, data: Any, source: str | Path | None = None) -> "Experiment":
        try:
            return cls._from_dict(data)
        except SchemaError as err:
            raise SchemaError(err.field_path, err.problem, source) from None

    @classmethod
    def _from_dict(cls, data: Any) -> "Experiment":
        if not isinstance(data, dict):
            raise SchemaError("(top level)", "expected a JSON object")
        _check_unknown(data, cls, "")
        version = _require(data, "schema_version", int, "")
        if version > SCHEMA_VERSION:
            raise SchemaError("schema_version", f"{version} is newer than this cuebench understands ({SCHEMA_VERSION})")
        stim_data = _require(data, "stimuli", dict, "")
        stimuli = {sid: Stimulus.from_dict(s, f"stimuli.{sid}") for sid, s in stim_data.items()}
        for sid, s in stimuli.items():
            if s.id != sid:
                raise SchemaError(f"stimuli.{sid}.id", f"does not match its key ({s.id!r})")
        trial_data = _require(data, "trials", list, "")
        trials = [Trial.from_dict(t, f"trials[{i}]") for i, t in enumerate(trial_data)]
        seen: set[str] = set()
        for i, t in enumerate(trials):
            if t.trial_id in seen:
                raise SchemaError(f"trials[{i}].trial_id", f"duplicate id {t.trial_id!r}")
            seen.add(t.trial_id)
            for sid in t.stimuli:
                if sid not in stimuli:
                    raise SchemaError(f"trials[{i}].stimuli", f"unknown stimulus id {sid!r}")
        label_set = LabelSet.from_dict(_require(data, "label_set", dict, ""))
        for i, t in enumerate(trials):
            if t.trial_type == "classify":
                allowed = set(label_set.displayed())
                bad = [c for c in t.choices if c not in allowed]
                if bad:
                    raise SchemaError(f"trials[{i}].choices", f"{bad[0]!r} is not in the label set")
        assignment = None
        if data.get("assignment") is not None:
            assignment = AssignmentPlan.from_dict(data["assignment"])
            for g, group in enumerate(assignment.groups):
                for tid in group:
                    if tid not in seen:
                        raise SchemaError(f"assignment.groups[{g}]", f"unknown trial id {tid!r}")
        return cls(
            name=_require(data, "name", str, ""),
            design=_require(data, "design", str, ""),
            label_set=label_set,
            stimuli=stimuli,
            trials=trials,
            schedule=Schedule.from_dict(data.get("schedule") or {}),
            assignment=assignment,
            provenance=_require(data, "provenance", dict, "", optional=True) or {},
            schema_version=version,
        )

    @classmethod
    def load(cls, path: str | Path) -> "Experiment":
        path = Path(path)
        if path.is_dir():
            path = path / "experiment.json"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SchemaError("(file)", "no such file; is this an experiment directory?", path) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise SchemaError("(json)", f"not valid JSON at line {err.lineno} column {err.colno}: {err.msg}", path) from None
        return cls.from_dict(data, source=path)
