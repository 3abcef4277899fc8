"""Training jobs on a DiagViB-6 study directory: plan them, run one, collect the table.

A job is one (study, pair, dataset sample, run) with a training configuration. It
trains a model (timm, or torchvision's for an architecture timm lacks such as AlexNet; from
scratch, or from ImageNet weights with a new head and optionally a frozen backbone:
``training.starting``) to predict the target factor and evaluates on the
validation and test splits after every epoch (BiasBed, Kalischek et al. 2023: model
selection happens afterwards, from the logged curve). Each finished job writes its rows
to ``training/runs/<job id>.csv`` atomically, so jobs on any executor never write the
same file, an interrupted job leaves nothing half-written, and a re-run skips the jobs
whose file exists. ``training.csv`` is rebuilt from those files.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cuebench.csvsafe import frame_csv
from cuebench.studies import FACTOR_TRAINING_TABLE as TABLE_FILE, StudyDir, load_split
from cuebench.expdir import atomic_write, canonical_json

from .starting import TrainingError, build_model, check_start, data_config, starting_model, weights_label

if TYPE_CHECKING:
    from .algorithms import AlgorithmOptions, OptimizerSettings

RUNS_DIR = "training/runs"
COLUMNS = ("study", "target", "correlated", "pair", "dataset_sample", "shortcut_class", "model", "algorithm", "run",
           "seed", "epoch", "split", "accuracy", "per_class_accuracy", "n_images", "train_loss",
           "train_images_per_s", "job_id", "algorithm_options", "optimizer")
"""The training table: one row per job, epoch and evaluated split. ``accuracy`` is the mean
per-class accuracy (Eulig et al. 2021, Sec. 3.4); ``per_class_accuracy`` a JSON list in
the order of the entry's selected target classes; ``algorithm_options`` the algorithm's
options, defaults included, as JSON; ``optimizer`` the optimiser's name, lr, weight decay and
momentum, as JSON."""


@dataclass(frozen=True)
class TrainConfig:
    """How every job of one ``cuebench train`` call trains (part of each job's identity)."""

    model: str = "resnet18"
    algorithm: str = "erm"
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.0
    input_size: int = 128
    seed: int = 0
    options: tuple[tuple[str, Any], ...] = ()
    """The algorithm's options that differ from its defaults, as sorted (name, value) pairs."""
    optimizer: str = "adam"
    """The optimiser ``lr`` and ``weight_decay`` belong to (settled by ``OptimizerRequest.settle``)."""
    weights: str = "scratch"
    """``scratch`` (random initialisation) or the WEIGHTS of ``model:WEIGHTS`` to start from, with a new head."""
    freeze: bool = False
    """Train the new head only (Eulig et al. 2021's RN50-IN: frozen convolutional layers)."""

    def key(self) -> str:
        """Hash of what names the job: the fields, with the changed options. pAdaIN's p keeps the
        name and place it had as the field ``padain_p``, and Adam, the only optimiser before there was
        a choice, is left out (so job names of earlier runs still match; an SGD run is named apart)."""
        identity = {k: v for k, v in asdict(self).items() if k not in ("options", "optimizer", "weights", "freeze")}
        if self.optimizer != "adam":
            identity["optimizer"] = self.optimizer
        if self.weights != "scratch" or self.freeze:  # named apart; runs from scratch keep their names
            identity.update(weights=self.weights, freeze=self.freeze)
        options = dict(self.options)
        identity["padain_p"] = options.pop("p", 0.01) if self.algorithm == "padain" else 0.01
        if options:
            identity["options"] = options
        return hashlib.sha256(canonical_json(identity).encode()).hexdigest()[:8]

    @property
    def model_label(self) -> str:
        """The model as the training table and the factor-study report name it: the architecture from scratch,
        ``NAME:WEIGHTS`` from weights, ``NAME:WEIGHTS (frozen backbone)`` with only the head trained, so a
        baseline is never pooled with the same architecture trained another way."""
        if self.weights == "scratch":
            return self.model
        return f"{self.model}:{weights_label(self.weights)}" + (" (frozen backbone)" if self.freeze else "")

    def algorithm_options(self) -> dict:
        """The algorithm's options as its constructor takes them (the changed ones)."""
        return dict(self.options)

    @classmethod
    def with_options(cls, options: "AlgorithmOptions | None" = None, optimizer: "OptimizerSettings | None" = None,
                     **fields) -> "TrainConfig":
        """A configuration whose ``options`` are the changed ones of a validated options model, and whose
        ``optimizer``, ``lr`` and ``weight_decay`` are the settled ``optimizer`` (when given)."""
        changed = options.changed() if options is not None else {}
        if optimizer is not None:
            fields.update(optimizer=optimizer.name, lr=optimizer.lr, weight_decay=optimizer.weight_decay)
        return cls(**fields, options=tuple(sorted(changed.items())))


@dataclass(frozen=True)
class Runtime:
    """Where a job runs; not part of its identity (the same job on CPU or GPU fills the same row)."""

    device: str = "auto"
    amp: bool = False
    threads: int | None = None
    eval_batch_size: int = 512


@dataclass(frozen=True)
class TrainJob:
    study_dir: str
    study: str
    target: str
    correlated: str
    dataset_sample: int
    shortcut_class: int | None
    files: dict = field(hash=False)
    run: int = 0
    config: TrainConfig = TrainConfig()
    runtime: Runtime = Runtime()

    @property
    def job_id(self) -> str:
        c = self.config
        return (f"{self.study}--{self.target}--{self.correlated}--s{self.dataset_sample}--{c.model}--{c.algorithm}"
                f"--r{self.run}--{c.key()}")

    @property
    def result_path(self) -> Path:
        return Path(self.study_dir) / RUNS_DIR / f"{self.job_id}.csv"

    @property
    def seed(self) -> int:
        return self.config.seed * 1000 + self.run


def plan_jobs(study_dir: str | Path, config: TrainConfig, runs: int, runtime: Runtime = Runtime(),
              studies: list[str] | None = None) -> list[TrainJob]:
    """Every (entry x run) job of a study directory, optionally limited to some studies."""
    check_factor_algorithm(config.algorithm)
    check_start(config.model, config.weights, config.freeze)
    if runs < 1 or config.epochs < 1 or config.batch_size < 1 or config.input_size < 8:
        raise TrainingError("--runs, --epochs and --batch-size must be >= 1 and --input-size >= 8")
    study_dir = StudyDir(study_dir)
    if study_dir.kind != "factor":
        raise TrainingError(f"{study_dir.file('factor')} does not exist; build a study with "
                            "'cuebench stimuli build --design diagvib ...' first")
    entries = [e for e in study_dir.load("factor").entries if studies is None or e.study in studies]
    if not entries:
        raise TrainingError(f"{study_dir.file('factor')} has no entries"
                            + (f" for studies {', '.join(studies)}" if studies else ""))
    for e in entries:
        for relative in e.files.values():
            study_dir.split_file(relative)  # refuses a split file outside the folder before any job starts
    return [TrainJob(str(study_dir.root), e.study, e.target, e.correlated, e.dataset_sample, e.shortcut_class,
                     dict(e.files), run, config, runtime)
            for e in entries for run in range(runs)]


def check_factor_algorithm(name: str) -> None:
    """Refuse an algorithm that needs more than a DiagViB-6 study has (plan and run alike)."""
    from .algorithms import ALGORITHMS

    if ALGORITHMS[name].output_classes(3) != 3:
        raise TrainingError(f"algorithm {name!r} trains on images with a second label set (DiSTinguish: "
                            "structure-disrupted twins of every class), which a DiagViB-6 study does not have; "
                            "use 'cuebench train-cues' for it")


def resolve_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise TrainingError(f"--device {name}: no CUDA device is available here")
    return name


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


SCRATCH_NORMALISATION = ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
"""Mean and sd a model trained from scratch is fed with: about zero mean and unit spread (fixed,
data-independent); a model started from weights is fed as it was trained (its data config)."""


def to_input(batch, device: str, normalisation=SCRATCH_NORMALISATION):
    """uint8 NCHW -> float, normalised by ``(mean, sd)`` per channel."""
    import torch

    mean, sd = (torch.tensor(v, device=device).view(1, 3, 1, 1) for v in normalisation)
    return (batch.to(device, non_blocking=True).float() / 255.0 - mean) / sd


def class_accuracies(pred: np.ndarray, label: np.ndarray, n_classes: int = 3) -> list[float | None]:
    """Accuracy per class (None for a class absent from the split)."""
    return [float(np.mean(pred[label == k] == k)) if np.any(label == k) else None for k in range(n_classes)]


def mean_class_accuracy(per_class: list[float | None]) -> float:
    """Mean per-class accuracy over the classes present (Eulig et al. 2021, Sec. 3.4: acc_ij)."""
    present = [a for a in per_class if a is not None]
    return float(np.mean(present)) if present else float("nan")


def run_job(job: TrainJob, progress: bool = False) -> Path:
    """Train and evaluate one job (skipped when its result file exists); return the result file.
    Jobs of other kinds (``cue_study.CueJob``) carry their own ``execute``, so every executor runs them too."""
    if not isinstance(job, TrainJob):
        return job.execute(progress)
    if job.result_path.is_file():
        return job.result_path
    check_factor_algorithm(job.config.algorithm)
    import torch
    from tqdm import tqdm

    from .algorithms import ALGORITHMS

    if job.runtime.threads:
        torch.set_num_threads(job.runtime.threads)
    device = resolve_device(job.runtime.device)
    cfg = job.config
    root = Path(job.study_dir)
    data = {split: load_tensors(root / job.files[split], cfg.input_size) for split in ("train", "val", "test")}
    torch.manual_seed(job.seed)
    model = starting_model(cfg.model, cfg.weights, cfg.freeze, 3, device).to(device)
    if cfg.weights == "scratch":
        normalisation = SCRATCH_NORMALISATION
    else:
        normalisation = tuple(tuple(data_config(model)[k]) for k in ("mean", "std"))
    algorithm = ALGORITHMS[cfg.algorithm](model, lr=cfg.lr, weight_decay=cfg.weight_decay, seed=job.seed,
                                          amp=job.runtime.amp, optimizer=cfg.optimizer, **cfg.algorithm_options())
    options = json.dumps(algorithm.options.model_dump(mode="json"), sort_keys=True)
    optimizer = json.dumps(algorithm.settings.as_dict(), sort_keys=True)
    shuffle = torch.Generator().manual_seed(job.seed)
    x_train, y_train = data["train"]
    rows = []
    for epoch in tqdm(range(1, cfg.epochs + 1), desc=job.job_id, unit="epoch", disable=not progress):
        algorithm.start_epoch(epoch, cfg.epochs)
        order = torch.randperm(len(y_train), generator=shuffle)
        losses, start = [], time.perf_counter()
        for batch in order.split(cfg.batch_size):
            losses.append(algorithm.update(to_input(x_train[batch], device, normalisation),
                                           y_train[batch].to(device)))
        speed = len(order) / (time.perf_counter() - start)
        for split in ("val", "test"):
            x, y = data[split]
            pred = torch.cat([algorithm.predict(to_input(xb, device, normalisation)).cpu()
                              for xb in x.split(job.runtime.eval_batch_size)]).numpy()
            per_class = class_accuracies(pred, y.numpy())
            rows.append({"study": job.study, "target": job.target, "correlated": job.correlated,
                         "pair": f"{job.target}-{job.correlated}", "dataset_sample": job.dataset_sample,
                         "shortcut_class": -1 if job.shortcut_class is None else job.shortcut_class,
                         "model": cfg.model_label, "algorithm": cfg.algorithm, "run": job.run, "seed": job.seed,
                         "epoch": epoch, "split": split, "accuracy": mean_class_accuracy(per_class),
                         "per_class_accuracy": json.dumps(per_class), "n_images": len(y),
                         "train_loss": float(np.mean(losses)), "train_images_per_s": speed, "job_id": job.job_id,
                         "algorithm_options": options, "optimizer": optimizer})
    write_rows(job.result_path, rows)
    return job.result_path


def write_rows(path: Path, rows: list[dict], columns: tuple[str, ...] = COLUMNS) -> None:
    """One job's rows as its result file, written atomically (the file marks the job finished)."""
    import pandas as pd

    buf = io.StringIO()
    pd.DataFrame(rows, columns=list(columns)).to_csv(buf, index=False)
    atomic_write(path, buf.getvalue().encode("utf-8"))


def union_table(root: Path, pattern: str, sort_by: list[str], table_file: str, what: str) -> Path:
    """``table_file`` = the rows of every finished job whose result file matches ``pattern``, sorted; atomic."""
    import pandas as pd

    files = sorted((root / RUNS_DIR).glob(pattern))
    if not files:
        raise TrainingError(f"{root / RUNS_DIR} holds no finished {what}")
    table = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
    table = table.sort_values(sort_by, kind="stable")
    out = root / table_file
    atomic_write(out, frame_csv(table))
    return out


def assemble_table(study_dir: str | Path) -> Path:
    """``training.csv`` = every finished job's rows, sorted; written atomically."""
    return union_table(Path(study_dir), "*.csv", ["study", "target", "correlated", "dataset_sample", "model",
                                                  "algorithm", "run", "epoch", "split"], TABLE_FILE, "jobs")
