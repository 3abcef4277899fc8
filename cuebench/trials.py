"""The trial model: what every observer, human or model, is shown and asked.

One typed, versioned, JSON-serialisable definition of stimuli, trials, label sets and
experiments (DESIGN.md, "Trial schema"). Runners (web, PsychoPy) and model evaluation
read the same objects, so a trial means the same thing to everybody who answers it.

The models are pydantic models: types, ranges and unknown fields are checked by pydantic,
the validators below hold only the rules that relate fields (an answer must be a choice,
a trial's stimuli must exist). ``cuebench schema experiment`` prints the JSON Schema of
experiment.json generated from them. Errors name the file and the field path.

Extending the schema with a new optional field needs no new version: declare the field,
with a default, where it belongs in the file, and files without it keep loading. Only a
change that old files do not satisfy raises ``SCHEMA_VERSION``; loading must then upgrade
the older files, saying so.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, StrictInt, ValidationError, field_validator,
                      model_validator)

from .errors import SchemaError
from .words import LANGUAGE, UnknownWords, check_language
from .trial_types import NOT_CLEAR, TRIAL_TYPES, UnknownTrialType, card

SCHEMA_VERSION = 1
Role = Literal["test", "practice", "catch", "attention"]
ROLES = get_args(Role)
SCORED_ROLES = ("test",)

Milliseconds = Annotated[StrictInt, Field(ge=0)]
TrialCount = Annotated[StrictInt, Field(gt=0)]
ImageNetIndex = Annotated[StrictInt, Field(ge=0, lt=1000)]


class Model(BaseModel):
    """Base of the contract's models: unknown fields refused, immutable, JSON-ready.

    Positional arguments fill the fields in ``positional`` order (declaration order by
    default), so the models are built like the plain records they are. Bad values raise
    ``SchemaError`` naming the field.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True,
                              ser_json_inf_nan="constants")
    positional: ClassVar[tuple[str, ...] | None] = None

    def __init__(self, *args: Any, **fields: Any):
        names = type(self).positional or tuple(type(self).model_fields)
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__} takes at most {len(names)} positional arguments")
        given = dict(zip(names, args))
        twice = sorted(given.keys() & fields.keys())
        if twice:
            raise TypeError(f"{type(self).__name__} got {twice[0]!r} twice")
        try:
            super().__init__(**given, **fields)
        except ValidationError as err:
            raise SchemaError.from_validation(err) from None

    __init__.__pydantic_base_init__ = True  # validating a dict (a loaded file) does not go through __init__

    @classmethod
    def from_dict(cls, data: Any, source: str | Path | None = None):
        """Validate parsed JSON; errors name ``source`` (the file) and the field."""
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise SchemaError.from_validation(err, source) from None

    def to_dict(self) -> dict:
        """The JSON form: lists for tuples, nested models as objects, in field order."""
        return self.model_dump(mode="json")


class Timing(Model):
    """Phase durations in milliseconds; runners convert them to frames at the measured refresh rate.

    ``None`` for a phase means the phase is skipped; ``response_window=None`` means unlimited.
    ``response_window`` is counted from stimulus onset when ``response_from_onset`` is true
    (DiST: answer within 2000 ms of onset), otherwise from response-screen onset.
    """

    fixation: Milliseconds | None = 300
    stimulus: Annotated[StrictInt, Field(gt=0)] = 200
    mask: Milliseconds | None = 200
    response_window: Milliseconds | None = None
    iti: StrictInt = 500
    response_from_onset: bool = False


def standard_timing(trial_type: str) -> Timing:
    """The timing a trial of ``trial_type`` gets when it names none: its card's ``timing`` (the classify card's is
    Burgert et al. 2025's, the oddity card's Wen et al. 2024's)."""
    return Timing(**card(trial_type).timing)


class Stimulus(Model):
    """One image file in the experiment's content-addressed store, with its provenance."""

    id: str
    """Content address: hash of the pixels and the provenance."""
    path: str
    """Relative to the experiment directory, e.g. ``stimuli/<id>.png``."""
    source_image: str | None = None
    transform: str = "original"
    params: dict = Field(default_factory=dict)
    seed: StrictInt | None = None
    software_version: str = ""
    width: StrictInt | None = None
    height: StrictInt | None = None

    @field_validator("path")
    @classmethod
    def _inside_stimuli(cls, path: str) -> str:
        """A file of the experiment's own ``stimuli/`` folder, so no experiment.json can make a
        runner read or serve a file outside the experiment directory."""
        parts = path.split("/")
        if "\\" in path or ":" in path or len(parts) < 2 or parts[0] != "stimuli" \
                or any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"must be a file inside the experiment's stimuli/ folder "
                             f"(e.g. stimuli/<id>.png), got {path!r}")
        return path


class Trial(Model):
    """One question put to an observer.

    The trial type's card (``cuebench.trial_types``) says what its choices are: ``classify``:
    labels, and ``correct`` is a label; ``oddity``: 1-based positions as strings (``"1"``,
    ``"2"``, ``"3"``) and ``correct`` is the position of the odd image; ``segment`` (models
    only): the answer is a class per pixel over the label set, scored against ``label_mask``;
    ``choices`` is ``("label map",)`` and ``correct`` is null. ``attention`` trials carry an ``instruction`` shown before
    the image and their ``correct`` is the instructed answer; ``catch`` and ``attention``
    trials never enter accuracy.
    """

    trial_id: str
    trial_type: str
    """A registered trial type, whose card (``cuebench.trial_types``) says what the trial shows and asks."""
    role: Role
    stimuli: tuple[str, ...] = Field(min_length=1)
    """Stimulus ids, in the order shown (left to right for oddity triplets)."""
    choices: tuple[str, ...] = Field(min_length=1)
    correct: str | None = None
    """One of the choices; null when no answer is right."""
    condition: str = "original"
    params: dict = Field(default_factory=dict)
    level: StrictInt | None = None
    """Position on the condition's parameter grid."""
    source_image: str | None = None
    category: str | None = None
    texture_category: str | None = None
    timing: Timing | None = None
    """Null or absent: the standard timing of the trial type."""
    instruction: str | None = None
    mask_seed: StrictInt | None = None
    # The one field of a single trial type: it stays a field of its own, as the segmentation experiments written so
    # far and the published JSON Schema have it; its card checks it (``Segment.check``) and names it among the
    # trial's stimuli (``TrialTypeCard.references``), so the schema's rules do not name the type.
    label_mask: str | None = None
    """``segment`` trials: the stimulus id of the ground-truth label mask (``cuebench.segmentation``)."""

    @field_validator("trial_type")
    @classmethod
    def _has_a_card(cls, trial_type: str) -> str:
        try:
            card(trial_type)
        except UnknownTrialType as err:
            raise ValueError(str(err)) from None
        return trial_type

    @model_validator(mode="before")
    @classmethod
    def _standard_timing(cls, data: Any) -> Any:
        """No timing: the card's default timing of the trial's type."""
        if isinstance(data, dict) and data.get("timing") is None:
            kind = data.get("trial_type")
            return {**data, "timing": standard_timing(kind) if isinstance(kind, str) and kind in TRIAL_TYPES
                    else Timing()}
        return data

    @model_validator(mode="after")
    def _answers_are_choices(self) -> "Trial":
        problem = card(self.trial_type).check(self)
        if problem is not None:
            raise SchemaError(*problem)
        if self.correct is not None and self.correct not in self.choices:
            raise SchemaError("correct", f"{self.correct!r} is not one of the choices")
        return self

    @property
    def scored(self) -> bool:
        return self.role in SCORED_ROLES

    @property
    def card(self):
        """The card of this trial's type (``cuebench.trial_types``)."""
        return card(self.trial_type)


class LabelSet(Model):
    """The answer labels of a classification experiment and their display order.

    ``imagenet_indices`` maps each label to the ImageNet-1k classes a model's decision
    aggregates over (model-vs-human's 16-class lists, or a user mapping file). ``shown`` names a label
    as the answer buttons show it in the study's language (a German study: "Katze" for ``cat``); answers
    are stored as the label itself.
    """

    name: str
    labels: tuple[Annotated[str, Field(min_length=1)], ...] = Field(json_schema_extra={"minItems": 1})
    """At least one in an experiment (a label set on its own may be empty, e.g. to test a layout)."""
    display_order: Literal["alphabetical", "given"] = "alphabetical"
    not_clear: bool = True
    """Offer the "not clear" answer after the labels."""
    imagenet_indices: dict[str, list[ImageNetIndex]] = Field(default_factory=dict)
    shown: dict[str, Annotated[str, Field(min_length=1)]] = Field(default_factory=dict)
    """Label -> its name on the answer buttons, where that is not the label (written only when some label has
    one): from the language's catalogue for the 16 ImageNet classes, or the researcher's ``--label-names``."""

    @field_validator("labels")
    @classmethod
    def _unique(cls, labels: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(labels)) != len(labels):
            raise ValueError("contains duplicates")
        return labels

    @model_validator(mode="after")
    def _names_are_of_labels(self) -> "LabelSet":
        unknown = sorted(set(self.shown) - set(self.labels))
        if unknown:
            raise ValueError(f"shown names {unknown[0]!r}, which is not one of the labels")
        names = [self.name_of(label) for label in self.labels]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"two labels would show the same name {twice[0]!r}")
        return self

    def name_of(self, label: str) -> str:
        """What the answer button of ``label`` says ("not clear" is the runners' word in the study's language)."""
        return self.shown.get(label, label)

    def displayed(self) -> list[str]:
        """Labels in the order a response screen shows them, "not clear" last: alphabetical, or as given. With
        ``shown`` names, alphabetical is their dictionary order (accents and case aside, so "Bär" stands between
        "Auto" and "Boot"); without, the labels' own order as it always was (a running study keeps its grid)."""
        if self.display_order == "given":
            ordered = list(self.labels)
        else:
            ordered = sorted(self.labels, key=lambda label: _sort_key(self.name_of(label))) if self.shown \
                else sorted(self.labels)
        return ordered + ([NOT_CLEAR] if self.not_clear else [])


def _sort_key(name: str) -> tuple[str, str]:
    """Dictionary order of a name in any Latin-script language: letters without their accents and case first,
    then the name itself to break ties."""
    bare = "".join(c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c))
    return bare.casefold(), name


class Schedule(Model):
    """Blocks, breaks and the insertion of catch and attention trials into each sequence.

    ``catch_every=10`` puts one catch trial after every 10 test trials (DiST);
    ``attention_every=100`` one attention trial after every 100 (Burgert et al.).
    """

    break_every: TrialCount | None = 100
    catch_every: TrialCount | None = None
    attention_every: TrialCount | None = None
    practice_first: bool = True
    shuffle: bool = True


class AssignmentPlan(Model):
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
    groups: tuple[tuple[str, ...], ...] = Field(min_length=1)


PEOPLE_LAPSE_PRIOR = (1.0, 20.0)
"""Beta(a, b) of a person's lapse in a QUEST+ block (:class:`AdaptivePlan`): suits people who rarely lapse (trained
observers in the lab, Wichmann & Hill 2001); people lapsing about 10 % on average are read early under it, and
Beta(1, 10) suits them (compared in docs/adaptive.md)."""


class AdaptivePlan(Model):
    """An adaptive (QUEST+) block over one condition's grid (``cuebench.adaptive`` runs it).

    ``levels`` are grid positions with test trials, ``values`` their stimulus-axis values
    (``axis``, e.g. the patch-shuffle ``grid``), strictly increasing. QUEST+'s parameter space
    spans ``thresholds`` (axis units), ``spreads`` and ``lapses``; the prior over the threshold
    is normal (``prior_mean``, ``prior_sd``) or, without a mean, uniform. The prior over the
    lapses is Beta(``people_lapse_prior``) for people (psignifit's default for a lapse, Schütt et
    al. 2016, Sec. 2.4: people rarely lapse, and a flat prior lets a large lapse trade against a
    late threshold) and flat for models, which may stay far below 100 % on easy images; ``None``:
    flat for people too. A block stops after ``trials`` answers, or earlier once the 95 % credible
    interval is narrower than ``stop_ci_width`` (axis units)."""

    condition: str
    levels: tuple[StrictInt, ...]
    values: tuple[float, ...]
    axis: str
    guess_rate: float = Field(gt=0, lt=1)
    """1/C of the label set."""
    trials: TrialCount
    thresholds: tuple[float, ...] = Field(min_length=1)
    spreads: tuple[Annotated[float, Field(gt=0)], ...] = Field(min_length=1)
    lapses: tuple[Annotated[float, Field(ge=0, lt=1)], ...] = (0.0, 0.03, 0.1, 0.2, 0.3)
    prior_mean: float | None = None
    prior_sd: float | None = Field(None, gt=0)
    people_lapse_prior: tuple[Annotated[float, Field(ge=1)], Annotated[float, Field(gt=0)]] | None = \
        PEOPLE_LAPSE_PRIOR
    """Beta(a, b) over ``lapses`` for people (human and pilot observers), a >= 1 so the density is finite at 0."""
    stop_ci_width: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _a_grid_and_a_prior_on_it(self) -> "AdaptivePlan":
        def problem(field: str, text: str) -> SchemaError:
            return SchemaError(field, f"condition {self.condition!r}: {field} {text}")

        if len(self.levels) < 3 or len(self.levels) != len(self.values):
            raise problem("levels", f"need an ordered grid of at least 3 levels with one value each, got "
                                    f"{len(self.levels)} levels and {len(self.values)} values")
        if any(b <= a for a, b in zip(self.values, self.values[1:])):
            raise problem("values", f"must increase strictly with the level, got {list(self.values)}")
        if any(lapse >= 1 - self.guess_rate for lapse in self.lapses):
            raise problem("lapses", f"must stay below 1 - guess_rate = {1 - self.guess_rate:g}")
        low, high = self.values[0], self.values[-1]
        if self.prior_mean is not None and not low <= self.prior_mean <= high:
            raise problem("prior_mean", f"{self.prior_mean:g} lies outside the grid ({self.axis} {low:g} to {high:g})")
        if self.prior_mean is not None and self.prior_sd is None:
            raise problem("prior_sd", "is needed with a prior mean")
        return self

    def value_of(self, level: int) -> float:
        """The stimulus-axis value of a grid level."""
        return self.values[self.levels.index(level)]


class Experiment(Model):
    """A whole experiment: label set, stimuli, trials, schedule, assignment and provenance.

    Fields are declared in the order experiment.json lists them; positional arguments
    follow ``positional``. Unlike its parts an experiment is mutable (a design adds its
    assignment plan after the trials), and a mutation is not re-validated.
    """

    model_config = ConfigDict(frozen=False)
    positional: ClassVar[tuple[str, ...]] = ("name", "design", "label_set", "stimuli", "trials", "schedule",
                                             "assignment", "provenance", "schema_version")

    schema_version: StrictInt = Field(ge=1, le=SCHEMA_VERSION)
    """Required in a file; code that builds an experiment gets the current version."""
    name: str
    design: str
    language: str = LANGUAGE
    """The language participants read (``cuebench.words``' catalogues: ``en``, ``de``, ...): the runners'
    words, the default texts and ``texts/LANG/``. Written only when not English."""
    label_set: LabelSet
    schedule: Schedule = Field(default_factory=Schedule)
    assignment: AssignmentPlan | None = None
    provenance: dict = Field(default_factory=dict)
    """How the experiment was made: design, options, sources, software version."""
    stimuli: dict[str, Stimulus]
    """Keyed by stimulus id; written sorted by id."""
    trials: list[Trial]
    adaptive: tuple[AdaptivePlan, ...] = ()
    """QUEST+ blocks; their conditions' test trials are shown only through them. Written only when present."""
    _by_id: dict[str, Trial] | None = PrivateAttr(default=None)
    _directory: Path | None = PrivateAttr(default=None)

    def __init__(self, *args: Any, **fields: Any):
        if len(args) < len(self.positional):
            fields.setdefault("schema_version", SCHEMA_VERSION)
        super().__init__(*args, **fields)

    __init__.__pydantic_base_init__ = True

    @field_validator("schema_version", mode="before")
    @classmethod
    def _not_newer(cls, version: Any) -> Any:
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise ValueError(f"{version} is newer than this cuebench understands ({SCHEMA_VERSION}); "
                             "update cuebench to read this file")
        return version

    @field_validator("language")
    @classmethod
    def _known_language(cls, language: str) -> str:
        try:
            return check_language(language)
        except UnknownWords as err:
            raise ValueError(str(err)) from None

    @model_validator(mode="after")
    def _references_resolve(self) -> "Experiment":
        if not self.label_set.labels:
            raise SchemaError("label_set.labels", "must list at least one label")
        for sid, stimulus in self.stimuli.items():
            if stimulus.id != sid:
                raise SchemaError(f"stimuli.{sid}.id", f"does not match its key ({stimulus.id!r})")
        allowed = set(self.label_set.displayed())
        seen: set[str] = set()
        for i, trial in enumerate(self.trials):
            if trial.trial_id in seen:
                raise SchemaError(f"trials[{i}].trial_id", f"duplicate id {trial.trial_id!r}")
            seen.add(trial.trial_id)
            unknown = [sid for sid in (*trial.stimuli, *trial.card.references(trial)) if sid not in self.stimuli]
            if unknown:
                raise SchemaError(f"trials[{i}].stimuli", f"unknown stimulus id {unknown[0]!r}")
            foreign = [c for c in trial.choices if c not in allowed] if trial.card.answers == "labels" else []
            if foreign:
                raise SchemaError(f"trials[{i}].choices", f"{foreign[0]!r} is not in the label set")
        for g, group in enumerate(self.assignment.groups if self.assignment else ()):
            unknown = [tid for tid in group if tid not in seen]
            if unknown:
                raise SchemaError(f"assignment.groups[{g}]", f"unknown trial id {unknown[0]!r}")
        for i, plan in enumerate(self.adaptive):
            missing = [lv for lv in plan.levels if lv not in self.adaptive_trials(plan.condition)]
            if missing:
                raise SchemaError(f"adaptive[{i}].levels", f"condition {plan.condition!r} has no test trial at "
                                                           f"level {missing[0]}")
        return self

    @property
    def directory(self) -> Path | None:
        """The folder this experiment was loaded from (None when built in memory): where its stimuli are."""
        return self._directory

    def trial(self, trial_id: str) -> Trial:
        return self.trials_by_id()[trial_id]

    def trials_by_id(self) -> dict[str, Trial]:
        if self._by_id is None or len(self._by_id) != len(self.trials):
            self._by_id = {t.trial_id: t for t in self.trials}
        return self._by_id

    def trials_with_role(self, role: str) -> list[Trial]:
        return [t for t in self.trials if t.role == role]

    def adaptive_plan(self, condition: str) -> AdaptivePlan:
        for plan in self.adaptive:
            if plan.condition == condition:
                return plan
        raise SchemaError("adaptive", f"experiment {self.name!r} has no adaptive block for condition {condition!r}")

    def adaptive_trials(self, condition: str) -> dict[int, list[str]]:
        """Test trial ids of a condition per grid level: the images an adaptive block can show there."""
        by_level: dict[int, list[str]] = {}
        for t in self.trials:
            if t.role == "test" and t.condition == condition and t.level is not None:
                by_level.setdefault(t.level, []).append(t.trial_id)
        return by_level

    def to_dict(self) -> dict:
        data = super().to_dict()
        data["stimuli"] = dict(sorted(data["stimuli"].items()))
        if not data["adaptive"]:
            del data["adaptive"]  # experiments without adaptive blocks keep their byte-identical file
        if data["language"] == LANGUAGE:
            del data["language"]  # so do English ones
        if not data["label_set"]["shown"]:
            del data["label_set"]["shown"]  # and label sets whose buttons show the labels
        for trial in data["trials"]:
            if trial["label_mask"] is None:
                del trial["label_mask"]  # only segment trials have one; other files keep their bytes
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False, ensure_ascii=False) + "\n"

    @classmethod
    def load(cls, path: str | Path) -> "Experiment":
        path = Path(path)
        if path.is_dir():
            path = path / "experiment.json"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SchemaError("(file)", "no such file; is this an experiment directory?", path) from None
        except UnicodeDecodeError as err:
            raise SchemaError("(file)", f"not UTF-8 text (byte {err.start}: {err.reason})", path) from None
        except OSError as err:
            raise SchemaError("(file)", f"cannot be read: {err.strerror or err}", path) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise SchemaError("(json)", f"not valid JSON at line {err.lineno} column {err.colno}: {err.msg}", path) from None
        experiment = cls.from_dict(data, source=path)
        experiment._directory = path.parent
        return experiment
