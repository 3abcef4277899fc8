"""The DiagViB-6 factor-study kind (Eulig et al. 2021): one job per (study, pair, dataset sample, run).

A job trains a model (timm, or torchvision's for an architecture timm lacks such as AlexNet; from scratch, or
from ImageNet weights with a new head and optionally a frozen backbone: ``training.starting``) to predict the
entry's target factor and logs the validation and test splits after every epoch; model selection happens
afterwards, from the logged curve (``analysis.factor_studies``), so no checkpoint is kept. ``training.csv`` is
the union of the jobs' rows.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
import numpy as np

from cuebench.studies import FACTOR_TRAINING_TABLE, StudyDir, load_split

from .jobs import (SCRATCH_NORMALISATION, Runtime, StudyConfig, StudyJob, TrainingData, TrainingError,
                   runtime_from_arguments)
from .starting import SCRATCH, weights_label

COLUMNS = ("study", "target", "correlated", "pair", "dataset_sample", "shortcut_class", "model", "algorithm", "run",
           "seed", "epoch", "split", "accuracy", "per_class_accuracy", "n_images", "train_loss",
           "train_images_per_s", "job_id", "algorithm_options", "optimizer")
"""The training table: one row per job, epoch and evaluated split. ``accuracy`` is the mean
per-class accuracy (Eulig et al. 2021, Sec. 3.4); ``per_class_accuracy`` a JSON list in
the order of the entry's selected target classes; ``algorithm_options`` the algorithm's
options, defaults included, as JSON; ``optimizer`` the optimiser's name, lr, weight decay and
momentum, as JSON."""


@dataclass(frozen=True, kw_only=True)
class FactorConfig(StudyConfig):
    """How every job of one ``cuebench train`` call on a factor study trains."""

    def identity(self) -> dict:
        """What names the job: the fields, with the changed options. pAdaIN's p keeps the name and place it had
        as the field ``padain_p``, and Adam, the only optimiser before there was a choice, is left out (so job
        names of earlier runs still match; an SGD run is named apart)."""
        identity = {k: v for k, v in asdict(self).items() if k not in ("options", "optimizer", "weights", "freeze",
                                                                        "ood")}
        if self.optimizer != "adam":
            identity["optimizer"] = self.optimizer
        if self.weights != SCRATCH or self.freeze:  # named apart; runs from scratch keep their names
            identity.update(weights=self.weights, freeze=self.freeze)
        options = dict(self.options)
        identity["padain_p"] = options.pop("p", 0.01) if self.algorithm == "padain" else 0.01
        if options:
            identity["options"] = options
        return identity

    @property
    def model_label(self) -> str:
        """The model as the training table and the factor-study report name it: the architecture from scratch,
        ``NAME:WEIGHTS`` from weights, ``NAME:WEIGHTS (frozen backbone)`` with only the head trained, so a
        baseline is never pooled with the same architecture trained another way."""
        if self.weights == SCRATCH:
            return self.model
        return f"{self.model}:{weights_label(self.weights)}" + (" (frozen backbone)" if self.freeze else "")


@dataclass(frozen=True, kw_only=True)
class FactorJob(StudyJob):
    """DiagViB-6 factor studies (Eulig et al. 2021): a model per study, factor pair, dataset sample and run."""

    kind = "factor"
    data_name = "a DiagViB-6 study"
    folder_hint = "a DiagViB-6 study directory (study.json, made by 'cuebench stimuli build --design diagvib')"
    columns = COLUMNS
    table_file = FACTOR_TRAINING_TABLE
    sort_by = ["study", "target", "correlated", "dataset_sample", "model", "algorithm", "run", "epoch", "split"]
    keeps_checkpoint = False
    own_arguments = frozenset({"studies"})

    study: str
    target: str
    correlated: str
    dataset_sample: int
    shortcut_class: int | None
    files: dict = field(hash=False)
    config: FactorConfig = FactorConfig()

    @property
    def job_id(self) -> str:
        c = self.config
        return (f"{self.study}--{self.target}--{self.correlated}--s{self.dataset_sample}--{c.model}--{c.algorithm}"
                f"--r{self.run}--{c.key()}")

    @classmethod
    def from_arguments(cls, args) -> list["FactorJob"]:
        studies = [s.strip() for s in args.studies.split(",")] if args.studies else None
        return plan_jobs(args.study_dir, cls.config_from_arguments(args, FactorConfig), args.runs,
                         runtime_from_arguments(args), studies)

    def load_data(self) -> TrainingData:
        root = Path(self.study_dir)
        data = {split: load_tensors(root / self.files[split], self.config.input_size)
                for split in ("train", "val", "test")}
        return TrainingData(data["train"], {"val": data["val"], "test": data["test"]}, n_classes=3)

    def build_model(self, data: TrainingData, device: str):
        model, normalisation = super().build_model(data, device)
        return model, SCRATCH_NORMALISATION if self.config.weights == SCRATCH else normalisation

    def score(self, pred, y) -> dict:
        per_class = class_accuracies(pred.numpy(), y.numpy())
        return {"accuracy": mean_class_accuracy(per_class), "per_class_accuracy": json.dumps(per_class)}

    def row(self, algorithm) -> dict:
        return {**super().row(algorithm), "study": self.study, "target": self.target, "correlated": self.correlated,
                "pair": f"{self.target}-{self.correlated}", "dataset_sample": self.dataset_sample,
                "shortcut_class": -1 if self.shortcut_class is None else self.shortcut_class,
                "model": self.config.model_label,
                "algorithm_options": json.dumps(algorithm.options.model_dump(mode="json"), sort_keys=True),
                "optimizer": json.dumps(algorithm.settings.as_dict(), sort_keys=True)}


def plan_jobs(study_dir: str | Path, config: FactorConfig, runs: int, runtime: Runtime = Runtime(),
              studies: list[str] | None = None) -> list[FactorJob]:
    """Every (entry x run) job of a study directory, optionally limited to some studies."""
    FactorJob.check_plan(config, runs)
    folder = StudyDir(study_dir)
    if folder.kind != "factor":
        raise TrainingError(f"{folder.file('factor')} does not exist; build a study with "
                            "'cuebench stimuli build --design diagvib ...' first")
    entries = [e for e in folder.load("factor").entries if studies is None or e.study in studies]
    if not entries:
        raise TrainingError(f"{folder.file('factor')} has no entries"
                            + (f" for studies {', '.join(studies)}" if studies else ""))
    for e in entries:
        for relative in e.files.values():
            folder.split_file(relative)  # refuses a split file outside the folder before any job starts
    return [FactorJob(study_dir=str(folder.root), study=e.study, target=e.target, correlated=e.correlated,
                     dataset_sample=e.dataset_sample, shortcut_class=e.shortcut_class, files=dict(e.files), run=run,
                     config=config, runtime=runtime)
            for e in entries for run in range(runs)]


def load_tensors(path: Path, input_size: int):
    """A split as (uint8 NCHW images at ``input_size``, int64 labels); resized once, with antialiasing."""
    import torch
    from torch.nn import functional as F

    if not path.is_file():
        raise TrainingError(f"split file {path} is missing; rebuild the study")
    split = load_split(path)
    images = torch.from_numpy(split.images).permute(0, 3, 1, 2).contiguous()
    if images.shape[-1] != input_size:
        chunks = [F.interpolate(c.float(), size=(input_size, input_size), mode="bilinear", antialias=True,
                                align_corners=False).round().clamp(0, 255).to(torch.uint8)
                  for c in images.split(1024)]
        images = torch.cat(chunks)
    return images, torch.from_numpy(split.label)


def class_accuracies(pred: np.ndarray, label: np.ndarray, n_classes: int = 3) -> list[float | None]:
    """Accuracy per class (None for a class absent from the split)."""
    return [float(np.mean(pred[label == k] == k)) if np.any(label == k) else None for k in range(n_classes)]


def mean_class_accuracy(per_class: list[float | None]) -> float:
    """Mean per-class accuracy over the classes present (Eulig et al. 2021, Sec. 3.4: acc_ij)."""
    present = [a for a in per_class if a is not None]
    return float(np.mean(present)) if present else float("nan")
