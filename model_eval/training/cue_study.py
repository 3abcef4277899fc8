"""The training half of a cue-reliance study: fine-tune an ImageNet model with several algorithms,
several runs each, and measure every selected checkpoint on the same trials as any other observer.

A study directory is prepared once by the ``train-cues`` workflow of the app layer
(``cuebench.app.train_cues``: photos, their structure-disrupted versions, two experiments). A job
(algorithm x run) fine-tunes from the offline ImageNet weights on ``photos.npz``, selects the epoch
with the best validation accuracy (BiasBed; a DiSTinguish model answers with each class's logit plus
its disrupted twin's), saves that checkpoint and lets it answer both experiments through
``cuebench eval``'s ``evaluate_experiment`` (``NAME:checkpoint``), so DiST accuracy and shape bias
come from the stored responses like any observer's. Jobs run through ``jobs.run_job`` on the
configured executor, each writing its own result file; a re-run skips finished jobs.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from cuebench.expdir import atomic_write, canonical_json
from cuebench.studies import StudyDir
from .jobs import RUNS_DIR, Runtime, TrainingError, resolve_device, union_table, write_rows

DATA_FILE = "photos.npz"
CHECKPOINTS_DIR = "training/checkpoints"
TABLE_FILE = "cue_training.csv"
EXPERIMENTS = {"dist": "dist-import", "cue_conflict": "cue-conflict-import"}
COLUMNS = ("algorithm", "run", "seed", "epoch", "split", "accuracy", "n_images", "train_loss", "selected",
           "observer", "checkpoint", "job_id")
"""One row per job, epoch and split (val, test: top-1 ImageNet accuracy on held-out original
photos); ``selected`` marks the best-validation epoch, whose checkpoint answered the trials as ``observer``."""


@dataclass(frozen=True)
class CueConfig:
    """How every job of a study trains (part of each job's identity)."""

    model: str = "tf_efficientnet_lite0"
    epochs: int = 3
    batch_size: int = 16
    lr: float = 1e-4
    weight_decay: float = 0.0
    input_size: int = 128
    seed: int = 0

    def key(self) -> str:
        return hashlib.sha256(canonical_json(asdict(self)).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class CueJob:
    study_dir: str
    algorithm: str
    run: int = 0
    config: CueConfig = CueConfig()
    runtime: Runtime = Runtime()

    @property
    def job_id(self) -> str:
        return f"cues--{self.config.model}--{self.algorithm}--r{self.run}--{self.config.key()}"

    @property
    def result_path(self) -> Path:
        return Path(self.study_dir) / RUNS_DIR / f"{self.job_id}.csv"

    @property
    def seed(self) -> int:
        return self.config.seed * 1000 + self.run

    def execute(self, progress: bool = False) -> Path:
        return train_and_evaluate(self, progress)


def plan_cue_jobs(study_dir: str | Path, algorithms: list[str], runs: int, config: CueConfig = CueConfig(),
                  runtime: Runtime = Runtime()) -> list[CueJob]:
    from .algorithms import ALGORITHMS

    for name in algorithms:
        ALGORITHMS.get(name)  # an unknown name fails here, in one line with "did you mean"
    if runs < 1 or config.epochs < 1 or config.batch_size < 1:
        raise TrainingError("--runs, --epochs and --batch-size must be >= 1")
    folder = StudyDir(study_dir)
    if folder.kind != "cue":
        raise TrainingError(f"{folder.file('cue')} is missing: prepare the study first")
    study = folder.load("cue")  # read through its schema: a malformed file names the file and the field
    if study.input_size != config.input_size:
        raise TrainingError(f"{folder.file('cue')}: the study's images are {study.input_size} px, the training "
                            f"asks for --input-size {config.input_size}")
    return [CueJob(str(study_dir), a, r, config, runtime) for a in algorithms for r in range(runs)]


def expand_head(model, width: int) -> None:
    """A ``width``-way head whose first rows are the pretrained classifier's (DiSTinguish's upper
    n rows, the disrupted classes, start from timm's default initialisation)."""
    import torch

    old = model.get_classifier()
    model.reset_classifier(width)
    new = model.get_classifier()
    with torch.no_grad():
        new.weight[:old.out_features] = old.weight
        new.bias[:old.out_features] = old.bias


def train_and_evaluate(job: CueJob, progress: bool = False) -> Path:
    """Fine-tune, select the best-validation epoch, save its checkpoint, let it answer the study's
    experiments, and write the job's rows."""
    if job.result_path.is_file():
        return job.result_path
    import torch
    from tqdm import tqdm

    from ..evaluate import evaluate_experiment
    from ..models import load_model
    from .algorithms import ALGORITHMS, distinguish_labels

    if job.runtime.threads:
        torch.set_num_threads(job.runtime.threads)
    device = resolve_device(job.runtime.device)
    cfg, study = job.config, Path(job.study_dir)
    data = np.load(study / DATA_FILE)
    torch.manual_seed(job.seed)
    loaded = load_model(cfg.model, device)
    model = loaded.model
    mean = torch.tensor(loaded.data_config["mean"], device=device).view(1, 3, 1, 1)
    std = torch.tensor(loaded.data_config["std"], device=device).view(1, 3, 1, 1)
    n = model.num_classes
    algorithm_class = ALGORITHMS[job.algorithm]
    x_train, y_train = torch.from_numpy(data["train_images"]), torch.from_numpy(data["train_labels"])
    if algorithm_class.output_classes(n) != n:
        expand_head(model, algorithm_class.output_classes(n))
        disrupted = torch.from_numpy(data["disrupted_images"])
        mask = torch.cat([torch.zeros(len(x_train), dtype=torch.bool), torch.ones(len(disrupted), dtype=torch.bool)])
        y_train = distinguish_labels(torch.cat([y_train, y_train]), mask, n)
        x_train = torch.cat([x_train, disrupted])
    model.to(device)
    algorithm = algorithm_class(model, lr=cfg.lr, weight_decay=cfg.weight_decay, seed=job.seed, amp=job.runtime.amp)

    def normalise(batch):
        return (batch.to(device).permute(0, 3, 1, 2).float() / 255.0 - mean) / std

    @torch.no_grad()
    def accuracy(split: str) -> float:
        model.eval()
        images, labels = torch.from_numpy(data[f"{split}_images"]), torch.from_numpy(data[f"{split}_labels"])
        pred = torch.cat([algorithm_class.answer_logits(model(normalise(b)), n).argmax(1).cpu()
                          for b in images.split(job.runtime.eval_batch_size)])
        return float((pred == labels).float().mean())

    shuffle = torch.Generator().manual_seed(job.seed)
    rows, best, best_state = [], -1.0, None
    for epoch in tqdm(range(1, cfg.epochs + 1), desc=job.job_id, unit="epoch", disable=not progress):
        losses = [algorithm.update(normalise(x_train[b]), y_train[b].to(device))
                  for b in torch.randperm(len(y_train), generator=shuffle).split(cfg.batch_size)]
        scores = {split: accuracy(split) for split in ("val", "test")}
        if scores["val"] > best:
            best, best_state = scores["val"], {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
            best_epoch = epoch
        for split, value in scores.items():
            rows.append({"algorithm": job.algorithm, "run": job.run, "seed": job.seed, "epoch": epoch, "split": split,
                         "accuracy": value, "n_images": len(data[f"{split}_labels"]),
                         "train_loss": float(np.mean(losses)), "job_id": job.job_id})
    checkpoint = study / CHECKPOINTS_DIR / f"{job.job_id}.pth"
    buf = io.BytesIO()
    twin_head = {"original_classes": n} if algorithm_class.output_classes(n) != n else {}
    torch.save({"state_dict": best_state, **twin_head}, buf)
    atomic_write(checkpoint, buf.getvalue())
    observer = None
    for name in EXPERIMENTS:
        summary = evaluate_experiment(study / name, [f"{cfg.model}:{checkpoint}"], device=device, progress=False)
        observer = summary.runs[0].observer
    for row in rows:
        row.update(selected=row["epoch"] == best_epoch, observer=observer,
                   checkpoint=str(checkpoint.relative_to(study)))
    write_rows(job.result_path, rows, COLUMNS)
    return job.result_path


def assemble_table(study_dir: str | Path) -> Path:
    """``cue_training.csv`` = every finished job's rows; written atomically."""
    return union_table(Path(study_dir), "cues--*.csv", ["algorithm", "run", "epoch", "split"], TABLE_FILE,
                       "cue-study jobs")

