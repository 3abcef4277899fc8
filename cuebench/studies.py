"""Study directories: what a training study folder holds, as a typed contract every stage reads.

Two kinds besides experiment directories: a DiagViB-6 **factor study** (``study.json``:
the generated splits of every study x factor pair x dataset sample, written by the
``diagvib`` design, read by training and the report) and a **cue study** (``cue_study.json``:
the photos' splits and the experiments a ``train-cues`` run evaluates). ``StudyDir`` writes a study
file only from its schema object (``save``) and reads it only through the schema (``load``,
``study``: errors name the file and field), and gives the split files, never one outside the folder.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from .errors import CuebenchError, SchemaError
from .expdir import atomic_write
from .trials import Model

FACTOR_STUDY_FILE = "study.json"
CUE_STUDY_FILE = "cue_study.json"
FACTOR_STUDY_FORMAT = "cuebench-diagvib-study"
FACTOR_TRAINING_TABLE = "training.csv"
"""A factor study's training table: a row per job, epoch and split (written by ``model_eval``, read by ``analysis``)."""
CUE_PHOTOS_FILE = "photos.npz"
"""A cue study's photos, split and resized, and the disrupted training images (written by ``stimuli``, trained on by
``model_eval``)."""
CUE_MAPPING_FILE = "cue_conflict_mapping.json"
"""Label -> ImageNet indices with which a cue study's checkpoints answer the cue-conflict trials (the 16-class
categories the trained classes fall into)."""
CUE_EXPERIMENTS = ("dist", "cue_conflict")
"""A cue study's experiment folders (the design each is built with is the builder's, ``stimuli.cue_training_sets``)."""
CUE_TRAINING_TABLE = "cue_training.csv"
"""A cue study's training table: a row per job, epoch and split (written by ``model_eval``, read by ``analysis``)."""
StudyKind = Literal["factor", "cue"]


class StudyError(CuebenchError):
    """A study directory is missing, malformed or points outside itself."""


class FactorStudyEntry(Model):
    """One (study, target factor, correlated factor, dataset sample) of a factor study and its split files."""

    study: str
    target: str
    correlated: str
    dataset_sample: int = Field(ge=0)
    selected: dict[str, list[str]]
    """The three classes of every factor this dataset sample uses."""
    selected_index: dict[str, list[int]]
    design_train: list[list[float]]
    """Relative frequency of each (target class, correlated class) cell in training and validation."""
    design_test: list[list[int]]
    shortcut_class: int | None = None
    files: dict[str, str]
    """Split name -> ``.npz`` path relative to the study directory."""
    cooccurrence: dict[str, list[list[int]]]


class FactorStudy(Model):
    """``study.json`` of a DiagViB-6 factor study (Eulig et al. 2021)."""

    format: Literal["cuebench-diagvib-study"]
    version: Literal[1]
    seed: int
    sizes: dict[str, int]
    digits: str
    factor_space: dict
    studies: list[str]
    pairs: list[tuple[str, str]]
    dataset_samples: list[int]
    entries: list[FactorStudyEntry]
    provenance: dict = Field(default_factory=dict)


class CueDisruption(Model):
    """How a cue study's structure-disrupted training images were made (Gram synthesis as DiST's own) and
    how their quality check went."""

    method: Literal["gram"]
    feature_net: str
    dist_steps: float = Field(gt=0)
    """The synthesis steps in DiST's own count (``lbfgs_iterations`` / 20, ``STEPS_PER_DIST_STEP``)."""
    lbfgs_iterations: int = Field(ge=1)
    """Synthesis steps: L-BFGS iterations, the one step of ``stimuli.texture_synthesis``."""
    noise_scale: float = Field(gt=0)
    size: int = Field(gt=0)
    """Side in pixels the images were synthesised at."""
    quality: dict
    """``checked`` (whether the gate refused bad images) and the LV/HFE numbers against DiST's."""


class CueStudy(Model):
    """``cue_study.json`` of a cue-training study: where its data came from, how the photos were split and how
    the disrupted images were made."""

    photos: str
    dist: str
    cue_conflict: str
    input_size: int = Field(gt=0)
    seed: int
    synthesis_steps: int | None = Field(None, ge=0)
    """What studies prepared before ``disruption`` was recorded kept instead: the synthesis steps."""
    disruption: CueDisruption | None = None
    splits: dict[str, list[str]]
    classes: list[int] | None = None
    """ImageNet indices of the head's rows (the training photos' classes); None in studies prepared for a
    1000-way head, which the n-class training refuses."""
    cue_conflict_categories: list[str] | None = None
    """The 16-class categories holding trained classes: the cue-conflict trials kept."""
    cue_conflict_images: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _says_how_images_were_disrupted(self) -> "CueStudy":
        if self.disruption is None and self.synthesis_steps is None:
            raise SchemaError("disruption", "is missing")
        if self.disruption is not None and self.synthesis_steps is not None:
            raise SchemaError("synthesis_steps", "is given beside disruption; only studies prepared before the "
                                                 "disruption was recorded have it")
        return self


STUDY_FILES: dict[StudyKind, tuple[str, type[Model]]] = {
    "factor": (FACTOR_STUDY_FILE, FactorStudy),
    "cue": (CUE_STUDY_FILE, CueStudy),
}
"""Each kind of study: its file and its schema."""


class StudyDir:
    """A study folder: its kind, its validated study file and its split files."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @property
    def kind(self) -> StudyKind | None:
        """``factor`` or ``cue`` by the study file the folder holds; None for any other folder. A folder holding
        both is refused: its kind would be a guess."""
        kinds = [kind for kind, (name, _) in STUDY_FILES.items() if (self.root / name).is_file()]
        if len(kinds) > 1:
            raise StudyError(f"{self.root} holds both {' and '.join(STUDY_FILES[k][0] for k in kinds)}; a study "
                             "directory is one kind of study")
        return kinds[0] if kinds else None

    def study(self) -> FactorStudy | CueStudy | None:
        """The folder's study, read through its schema (errors name the file and field); None when it holds none."""
        kind = self.kind
        return self.load(kind) if kind else None

    def file(self, kind: StudyKind) -> Path:
        return self.root / STUDY_FILES[kind][0]

    def save(self, study: FactorStudy | CueStudy) -> Path:
        """Write ``study`` (a schema object, so validated when made) as its kind's file, atomically; a field left
        unset is left out, so a re-saved older study keeps its own fields."""
        kind = next(k for k, (_, schema) in STUDY_FILES.items() if isinstance(study, schema))
        other = [name for k, (name, _) in STUDY_FILES.items() if k != kind and (self.root / name).is_file()]
        if other:
            raise StudyError(f"{self.root} holds {other[0]} already; a study directory is one kind of study")
        path = self.file(kind)
        atomic_write(path, (json.dumps(study.model_dump(mode="json", exclude_unset=True), indent=1) + "\n")
                     .encode("utf-8"))
        return path

    def load(self, kind: StudyKind):
        """The study file, validated; a missing, unreadable or malformed one raises naming the file."""
        path = self.file(kind)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise StudyError(f"{path} does not exist; is {self.root} a {kind} study directory?") from None
        except (OSError, UnicodeDecodeError) as err:
            raise StudyError(f"{path} cannot be read: {err}") from None
        except json.JSONDecodeError as err:
            raise SchemaError("(json)", f"not valid JSON at line {err.lineno} column {err.colno}: {err.msg}",
                              path) from None
        return STUDY_FILES[kind][1].from_dict(data, source=path)

    def split_file(self, relative: str) -> Path:
        """A split file named in the study file; refused when it (or a symlink) leads outside the folder."""
        path = self.root / relative
        if Path(relative).is_absolute() or not path.resolve().is_relative_to(self.root.resolve()):
            raise StudyError(f"{self.file('factor')}: split file {relative!r} lies outside the study directory")
        return path


@dataclass
class SplitData:
    """One generated (or re-read) split: images, labels and the table of factor values."""

    images: np.ndarray
    label: np.ndarray
    column: np.ndarray
    table: dict[str, np.ndarray]


def save_split(path: Path, split: SplitData, recipe: str) -> None:
    """Write a split as a compressed .npz next to its final name, then rename (never half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez_compressed(fh, images=split.images, label=split.label.astype(np.int8),
                                column=split.column.astype(np.int8), recipe=np.array(recipe), **split.table)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_split(path: Path, with_images: bool = True) -> SplitData:
    """Read a split written by ``save_split``."""
    try:
        with np.load(path) as data:
            table = {k: data[k] for k in data.files if k not in ("images", "label", "column", "recipe")}
            return SplitData(data["images"] if with_images else np.empty((0,)), data["label"].astype(np.int64),
                             data["column"].astype(np.int64), table)
    except (OSError, ValueError, KeyError) as err:
        raise StudyError(f"cannot read split file {path}: {err}") from None


def split_recipe(path: Path) -> str | None:
    """The recipe a split file was made from, or None when there is no readable one."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as data:
            return str(data["recipe"])
    except (OSError, ValueError, KeyError):
        return None
