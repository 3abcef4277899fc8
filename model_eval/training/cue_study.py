"""The training half of a cue-reliance study: fine-tune an ImageNet model with several algorithms,
several runs each, and measure every selected checkpoint on the same trials as any other observer.

A study directory is prepared once by ``stimuli.cue_training_sets`` (photos, their structure-disrupted
versions, two experiments, in the files ``cuebench.studies`` names; ``cuebench train-cues`` runs it). A job
(algorithm x run) fine-tunes from the offline ImageNet weights on ``photos.npz`` with a head over
the n classes of the training photos (2n for DiSTinguish: each class and its disrupted twin), as
Wen et al. (2024, App. A.2) train "simple 10-class supervised learning"; it selects the epoch with
the best n-way validation accuracy (BiasBed; a DiSTinguish model answers with each class's logit
plus its disrupted twin's), saves that checkpoint with the ImageNet index of each class and lets
it answer both experiments through ``cuebench eval``'s ``evaluate_experiment``
(``NAME:checkpoint``), so DiST accuracy and shape bias come from the stored responses like any
observer's. Loaded that way, the n answers sit at their ImageNet indices and the other classes
are never answered; cue-conflict trials are decided over the 16-class categories the n classes
fall into (``CUE_MAPPING_FILE``). Jobs run through ``jobs.run_job`` on the configured executor,
each writing its own result file; a re-run skips finished jobs.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cuebench.expdir import atomic_write, canonical_json
from cuebench.studies import (CUE_EXPERIMENTS as EXPERIMENTS, CUE_MAPPING_FILE as MAPPING_FILE,
                              CUE_PHOTOS_FILE as DATA_FILE, CUE_TRAINING_TABLE as TABLE_FILE, StudyDir)

from .jobs import RUNS_DIR, Runtime, TrainingError, resolve_device, union_table, write_rows

if TYPE_CHECKING:
    from .algorithms import AlgorithmOptions, OptimizerRequest
    from .ood_eval import OodPlan

CHECKPOINTS_DIR = "training/checkpoints"
COLUMNS = ("algorithm", "run", "seed", "epoch", "split", "accuracy", "n_images", "train_loss", "selected",
           "selectable", "observer", "checkpoint", "job_id", "algorithm_options", "optimizer", "epoch_observer")
"""One row per job, epoch and split (val, test: top-1 accuracy over the study's n classes on held-out
original photos; with an out-of-distribution schedule also one per set and evaluated epoch, ``ood_eval``,
whose ``epoch_observer`` answered it); ``selected`` marks the best-validation epoch, whose checkpoint
answered the trials as ``observer``; ``selectable`` whether model selection may pick the epoch (InfoDrop's
``shi`` protocol: its fine-tuning epochs only); ``algorithm_options`` the algorithm's options, defaults
included, as JSON; ``optimizer`` the optimiser's name, lr, weight decay and momentum, as JSON. The table is
the per-epoch log ``cuebench selection`` reads."""


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
    optimizer: str = "adam"
    """The optimiser ``lr`` and ``weight_decay`` belong to; ``lr`` is Adam's default until settled per
    algorithm (``plan_cue_jobs``)."""

    def identity(self) -> dict:
        """What names a job: the fields, Adam (the only optimiser before there was a choice) left out, so
        earlier jobs keep their names and an SGD run is named apart."""
        fields = asdict(self)
        if fields["optimizer"] == "adam":
            del fields["optimizer"]
        return fields

    def key(self) -> str:
        return hashlib.sha256(canonical_json(self.identity()).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class CueJob:
    study_dir: str
    algorithm: str
    run: int = 0
    config: CueConfig = CueConfig()
    runtime: Runtime = Runtime()
    options: tuple[tuple[str, Any], ...] = ()
    """The algorithm's options that differ from its defaults, as sorted (name, value) pairs."""
    ood: "OodPlan | None" = None
    """The out-of-distribution sets answered during training and when (``ood_eval``); None: none."""

    @property
    def job_id(self) -> str:
        key = self.config.key()
        extra = {**({"options": dict(self.options)} if self.options else {}),
                 **({"ood": self.ood.identity()} if self.ood else {})}
        if extra:  # without them the name is the configuration's, as jobs were named before either existed
            key = hashlib.sha256(canonical_json({**self.config.identity(), **extra}).encode()).hexdigest()[:8]
        return f"cues--{self.config.model}--{self.algorithm}--r{self.run}--{key}"

    @property
    def result_path(self) -> Path:
        return Path(self.study_dir) / RUNS_DIR / f"{self.job_id}.csv"

    @property
    def seed(self) -> int:
        return self.config.seed * 1000 + self.run

    def execute(self, progress: bool = False) -> Path:
        return train_and_evaluate(self, progress)


def plan_cue_jobs(study_dir: str | Path, algorithms: list[str], runs: int, config: CueConfig = CueConfig(),
                  runtime: Runtime = Runtime(), options: dict[str, "AlgorithmOptions"] | None = None,
                  optimizer: "OptimizerRequest | None" = None, ood: "OodPlan | None" = None) -> list[CueJob]:
    """Every (algorithm x run) job; ``options``: validated options per algorithm (defaults for the others);
    ``optimizer``: what the command asked for, settled per algorithm (SGD for SagNet unless another is
    named; Adam's lr is ``config.lr``); ``ood``: out-of-distribution sets answered during training."""
    from .algorithms import ALGORITHMS, OptimizerRequest

    for name in algorithms:
        ALGORITHMS.get(name)  # an unknown name fails here, in one line with "did you mean"
    if runs < 1 or config.epochs < 1 or config.batch_size < 1:
        raise TrainingError("--runs, --epochs and --batch-size must be >= 1")
    folder = StudyDir(study_dir)
    if folder.kind != "cue":
        raise TrainingError(f"{folder.file('cue')} is missing: prepare the study first")
    study = folder.load("cue")  # read through its schema: a malformed file names the file and the field
    if study.classes is None:
        raise TrainingError(f"{folder.file('cue')} was prepared for a 1000-way head by an earlier version; its jobs "
                            "trained another model than the n-class one trained now: use a new study directory")
    if study.input_size != config.input_size:
        raise TrainingError(f"{folder.file('cue')}: the study's images are {study.input_size} px, the training "
                            f"asks for --input-size {config.input_size}")
    changed = {name: tuple(sorted(o.changed().items())) for name, o in (options or {}).items()}
    request = optimizer or OptimizerRequest()
    configs = {}
    for name in algorithms:
        settled = request.settle(ALGORITHMS[name], adam_lr=config.lr)
        configs[name] = replace(config, optimizer=settled.name, lr=settled.lr, weight_decay=settled.weight_decay)
    return [CueJob(str(study_dir), a, r, configs[a], runtime, changed.get(a, ()), ood) for a in algorithms
            for r in range(runs)]


def ood_request(study_dir: str | Path, every: int | None, schedule: str | None, experiments: list[str | Path],
                epochs: int) -> "OodPlan | None":
    """What ``--ood-every`` / ``--ood-schedule`` and ``--ood-set`` ask for, checked before the study is prepared:
    the schedule within the run and each named experiment built; None when no schedule is given. Sets of the 16
    entry-level classes are answered with the study's mapping, as its cue-conflict trials are."""
    from .ood_eval import OodSchedule, experiment_set, plan

    if every is None and schedule is None:
        if experiments:
            raise TrainingError("--ood-set needs a schedule: --ood-every N or --ood-schedule EPOCHS")
        return None
    mapping = Path(study_dir) / MAPPING_FILE
    return plan(OodSchedule.parse(every, schedule), [experiment_set(path, mapping) for path in experiments], epochs)


def study_ood_plan(study_dir: str | Path, request: "OodPlan") -> "OodPlan":
    """The prepared study's own DiST and cue-conflict experiments, then the requested sets, on its schedule."""
    from .ood_eval import experiment_set, plan

    study = Path(study_dir)
    return plan(request.schedule, [experiment_set(study / name, study / MAPPING_FILE) for name in EXPERIMENTS]
                + list(request.sets))


def subset_head(model, classes: np.ndarray, width: int) -> None:
    """A ``width``-way head (n = len(classes), or 2n for DiSTinguish) in place of the 1000-way one:
    row k starts as the pretrained row of ImageNet class ``classes[k]`` (the fine-tuned model begins
    with what it knew of the class); DiSTinguish's rows n..2n-1, the disrupted twins, start from
    timm's default initialisation."""
    import torch

    old = model.get_classifier()
    index = torch.as_tensor(np.asarray(classes, dtype=np.int64), device=old.weight.device)
    model.reset_classifier(width)
    new = model.get_classifier()
    with torch.no_grad():
        new.weight[:len(index)] = old.weight[index]
        new.bias[:len(index)] = old.bias[index]


def head_labels(labels: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """ImageNet indices -> positions in ``classes`` (-1 for a class the head does not have)."""
    position = {int(c): k for k, c in enumerate(classes)}
    return np.array([position.get(int(label), -1) for label in labels], dtype=np.int64)


def train_and_evaluate(job: CueJob, progress: bool = False) -> Path:
    """Fine-tune an n-way (DiSTinguish: 2n-way) head and the network, select the best-validation epoch,
    save its checkpoint, let it answer the study's experiments, and write the job's rows."""
    if job.result_path.is_file():
        return job.result_path
    import torch
    from tqdm import tqdm

    from ..evaluate import evaluate_experiment
    from ..models import load_model
    from .algorithms import ALGORITHMS
    from .algorithms.distinguish import distinguish_labels
    from .ood_eval import answer_sets, forget_unfinished

    if job.runtime.threads:
        torch.set_num_threads(job.runtime.threads)
    device = resolve_device(job.runtime.device)
    cfg, study = job.config, Path(job.study_dir)
    data = np.load(study / DATA_FILE)
    classes = data["classes"]
    n = len(classes)
    torch.manual_seed(job.seed)
    loaded = load_model(cfg.model, device)
    model = loaded.model
    mean = torch.tensor(loaded.data_config["mean"], device=device).view(1, 3, 1, 1)
    std = torch.tensor(loaded.data_config["std"], device=device).view(1, 3, 1, 1)
    algorithm_class = ALGORITHMS[job.algorithm]
    width = algorithm_class.output_classes(n)
    subset_head(model, classes, width)
    x_train = torch.from_numpy(data["train_images"])
    y_train = torch.from_numpy(head_labels(data["train_labels"], classes))
    if width != n:
        disrupted = torch.from_numpy(data["disrupted_images"])
        mask = torch.cat([torch.zeros(len(x_train), dtype=torch.bool), torch.ones(len(disrupted), dtype=torch.bool)])
        y_train = distinguish_labels(torch.cat([y_train, y_train]), mask, n)
        x_train = torch.cat([x_train, disrupted])
    model.to(device)
    algorithm = algorithm_class(model, lr=cfg.lr, weight_decay=cfg.weight_decay, seed=job.seed, amp=job.runtime.amp,
                                optimizer=cfg.optimizer, **dict(job.options))
    options = algorithm.options.model_dump(mode="json")
    optimizer = algorithm.settings.as_dict()

    def normalise(batch):
        return (batch.to(device).permute(0, 3, 1, 2).float() / 255.0 - mean) / std

    @torch.no_grad()
    def accuracy(split: str) -> float:
        """Top-1 over the n classes (a photo of a class the head lacks counts as wrong)."""
        model.eval()
        images = torch.from_numpy(data[f"{split}_images"])
        labels = torch.from_numpy(head_labels(data[f"{split}_labels"], classes))
        pred = torch.cat([algorithm_class.answer_logits(model(normalise(b)), n).argmax(1).cpu()
                          for b in images.split(job.runtime.eval_batch_size)])
        return float((pred == labels).float().mean())

    twin_head = {"original_classes": n} if width != n else {}

    def checkpoint_bytes(state: dict, epoch: int) -> bytes:
        """A checkpoint of ``state`` in the layout ``cuebench eval`` loads (``NAME:path``)."""
        buf = io.BytesIO()
        torch.save({"state_dict": state, "imagenet_indices": [int(c) for c in classes], **twin_head,
                    "algorithm": job.algorithm, "algorithm_options": options, "optimizer": optimizer,
                    "epoch": epoch}, buf)
        return buf.getvalue()

    def ood_rows(state: dict, epoch: int, losses: list[float]) -> list[dict]:
        """The sets answered by ``state``; torch's random state is restored after loading the answering
        model, so a run trains the same with a schedule as without."""
        with torch.random.fork_rng(devices=[torch.device(device).index or 0] if device.startswith("cuda") else []):
            answered = answer_sets(job.ood, cfg.model, checkpoint_bytes(state, epoch), study, job.job_id, device)
        return [{**common, "epoch": epoch, "train_loss": float(np.mean(losses)),
                 "selectable": algorithm.selectable(epoch, cfg.epochs), **row} for row in answered]

    if job.ood:
        forget_unfinished(study, job.job_id)
    common = {"algorithm": job.algorithm, "run": job.run, "seed": job.seed, "job_id": job.job_id,
              "algorithm_options": json.dumps(options, sort_keys=True),
              "optimizer": json.dumps(optimizer, sort_keys=True)}
    shuffle = torch.Generator().manual_seed(job.seed)
    rows, best, best_state, best_epoch, best_losses, evaluated = [], -1.0, None, None, [], set()
    for epoch in tqdm(range(1, cfg.epochs + 1), desc=job.job_id, unit="epoch", disable=not progress):
        algorithm.start_epoch(epoch, cfg.epochs)
        losses = [algorithm.update(normalise(x_train[b]), y_train[b].to(device))
                  for b in torch.randperm(len(y_train), generator=shuffle).split(cfg.batch_size)]
        scores = {split: accuracy(split) for split in ("val", "test")}
        selectable = algorithm.selectable(epoch, cfg.epochs)
        if selectable and scores["val"] > best:
            best, best_epoch, best_losses = scores["val"], epoch, losses
            best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        for split, value in scores.items():
            rows.append({**common, "epoch": epoch, "split": split, "accuracy": value,
                         "n_images": len(data[f"{split}_labels"]), "train_loss": float(np.mean(losses)),
                         "selectable": selectable})
        if job.ood and job.ood.schedule.due(epoch, cfg.epochs):
            rows += ood_rows(model.state_dict(), epoch, losses)
            evaluated.add(epoch)
    if job.ood and best_epoch not in evaluated:  # best-val selection needs the selected epoch's scores
        rows += ood_rows(best_state, best_epoch, best_losses)
    checkpoint = study / CHECKPOINTS_DIR / f"{job.job_id}.pth"
    atomic_write(checkpoint, checkpoint_bytes(best_state, best_epoch))
    observer = None
    for name in EXPERIMENTS:
        mapping = study / MAPPING_FILE if name == "cue_conflict" else None
        summary = evaluate_experiment(study / name, [f"{cfg.model}:{checkpoint}"], device=device, progress=False,
                                      mapping_file=mapping)
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

