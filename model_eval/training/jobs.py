"""One training study, whatever it trains on: the configuration, the job, the loop, the per-epoch log, the
best-validation checkpoint and the out-of-distribution sets answered on a schedule.

A study kind is a ``StudyJob`` subclass registered by name in ``STUDY_KINDS`` (entry point group
``cuebench.study_kinds``): it says what one job trains on (``load_data``), how a job is named (``job_id``), what
its table holds (``columns``, ``row``) and what its checkpoint declares; everything else is this loop. A job
trains a model from its algorithm's ``update`` step, evaluates the validation and test splits after every epoch
(BiasBed, Kalischek et al. 2023: model selection is made from the logged curve), keeps the best-validation epoch
among those its algorithm lets be picked (BiasBed's selection) as a checkpoint when the kind keeps one, and writes
its rows to ``training/runs/<job id>.csv`` atomically, so jobs on any executor never write the same file, an
interrupted job leaves nothing half-written, and a re-run skips the jobs whose file exists. The kind's table is
the union of those files (``assemble``).
"""

from __future__ import annotations

import hashlib
import io
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from cuebench.csvsafe import frame_csv
from cuebench.expdir import atomic_write, canonical_json
from cuebench.registry import Registry

from .starting import SCRATCH, TrainingError, build_model, check_start, data_config, starting_model

if TYPE_CHECKING:
    from .algorithms import AlgorithmOptions, OptimizerSettings
    from .ood_eval import OodPlan

__all__ = ["STUDY_KINDS", "StudyConfig", "StudyJob", "Runtime", "TrainingData", "TrainingError", "build_model",
           "run_job", "study_kind_of"]

STUDY_KINDS: Registry[type["StudyJob"]] = Registry("study-kinds", entry_point_group="cuebench.study_kinds")
"""Training-study kinds by name (``cuebench list study-kinds``); a new one is a ``StudyJob`` subclass in one module
with an entry point in ``cuebench.study_kinds`` (docs/extending.md)."""

RUNS_DIR = "training/runs"
CHECKPOINTS_DIR = "training/checkpoints"


@dataclass(frozen=True)
class Runtime:
    """Where a job runs; not part of its identity (the same job on CPU or GPU fills the same row)."""

    device: str = "auto"
    amp: bool = False
    threads: int | None = None
    eval_batch_size: int = 512


@dataclass(frozen=True, kw_only=True)
class StudyConfig:
    """How every job of one call trains (part of each job's identity, ``identity``)."""

    model: str = "resnet18"
    algorithm: str = "erm"
    epochs: int = 10
    batch_size: int = 128
    lr: float | None = 1e-3
    weight_decay: float | None = 0.0
    input_size: int = 128
    seed: int = 0
    options: tuple[tuple[str, Any], ...] = ()
    """The algorithm's options that differ from its defaults, as sorted (name, value) pairs."""
    optimizer: str = "adam"
    """The optimiser ``lr`` and ``weight_decay`` belong to (settled by ``OptimizerRequest.settle``; ``auto``: the
    algorithm's own, with its defaults where ``lr`` or ``weight_decay`` is None)."""
    weights: str = SCRATCH
    """``scratch`` (random initialisation) or the WEIGHTS of ``model:WEIGHTS`` to start from, with a new head."""
    freeze: bool = False
    """Train the new head only (Eulig et al. 2021's RN50-IN: frozen convolutional layers)."""
    ood: "OodPlan | None" = None
    """The out-of-distribution sets answered during training and when (``ood_eval``); None: none."""

    def identity(self) -> dict:
        """What names a job: every field that differs from what a run of the kind does by default, so a field added
        later leaves the names of earlier jobs as they were (a kind with names from before overrides this)."""
        fields = {k: v for k, v in asdict(self).items() if k not in ("options", "ood")}
        if self.options:
            fields["options"] = dict(self.options)
        if self.ood is not None:
            fields["ood"] = self.ood.identity()
        return fields

    def key(self) -> str:
        return hashlib.sha256(canonical_json(self.identity()).encode()).hexdigest()[:8]

    def algorithm_options(self) -> dict:
        """The algorithm's options as its constructor takes them (the changed ones)."""
        return dict(self.options)

    def trained_with(self, algorithm: str, options: "AlgorithmOptions | None" = None,
                     optimizer: "OptimizerSettings | None" = None, **fields) -> "StudyConfig":
        """This configuration for ``algorithm``: the changed ones of its validated ``options`` and, when given, the
        settled ``optimizer``'s name, lr and weight decay."""
        if optimizer is not None:
            fields.update(optimizer=optimizer.name, lr=optimizer.lr, weight_decay=optimizer.weight_decay)
        changed = options.changed() if options is not None else {}
        return replace(self, algorithm=algorithm, options=tuple(sorted(changed.items())), **fields)


@dataclass
class TrainingData:
    """What a job trains and evaluates on: uint8 images (NCHW, or NHWC with ``channels_last``) and int64 labels
    of the training split and of each evaluated split (``val`` selects; ``test`` when the kind has one), and the
    number of classes the head answers over."""

    train: tuple
    evaluated: dict[str, tuple]
    n_classes: int
    classes: list = field(default_factory=list)
    """What each of the head's rows stands for, as the kind's checkpoint declares it (names, ImageNet indices)."""
    channels_last: bool = False


SCRATCH_NORMALISATION = ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
"""Mean and sd a model trained from scratch is fed with: about zero mean and unit spread (fixed,
data-independent); a model started from weights is fed as it was trained (its data config)."""


def to_input(batch, device: str, normalisation=SCRATCH_NORMALISATION, channels_last: bool = False):
    """uint8 NCHW (or NHWC with ``channels_last``) -> float NCHW, normalised by ``(mean, sd)`` per channel."""
    import torch

    mean, sd = (torch.tensor(v, device=device).view(1, 3, 1, 1) for v in normalisation)
    batch = batch.to(device, non_blocking=True)
    if channels_last:
        batch = batch.permute(0, 3, 1, 2)
    return (batch.float() / 255.0 - mean) / sd


def resolve_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise TrainingError(f"--device {name}: no CUDA device is available here")
    return name


@dataclass(frozen=True, kw_only=True)
class StudyJob:
    """One seeded run of a study kind: what it trains on (the subclass's fields), how (``config``) and where
    (``runtime``). A subclass overrides only what its kind does differently."""

    kind: ClassVar[str]
    """The name the kind is registered under (``STUDY_KINDS``): what executors and commands dispatch by."""
    data_name: ClassVar[str] = "the training set"
    """What the kind trains on, in words, for errors (``a DiagViB-6 study``)."""
    columns: ClassVar[tuple[str, ...]]
    """The kind's table: one row per job, epoch and evaluated split."""
    table_file: ClassVar[str]
    pattern: ClassVar[str] = "*.csv"
    """The result files of the kind's jobs in ``training/runs`` (their job ids' prefix)."""
    sort_by: ClassVar[list[str]]
    disrupted_twins: ClassVar[bool] = False
    """Whether the data holds structure-disrupted twins of every class, which DiSTinguish trains on."""
    keeps_checkpoint: ClassVar[bool] = True
    """Whether the best-validation epoch is saved as ``training/checkpoints/<job id>.pth`` (else selection is made
    afterwards, from the log)."""
    drops_single_image_batches: ClassVar[bool] = False
    """Whether a batch of one image is left out of an epoch of several (batch norm cannot train on one image)."""
    takes_algorithm_options: ClassVar[bool] = True
    """Whether ``cuebench train`` takes ``--algorithm-option`` for the kind (else it is refused: the defaults train)."""
    own_arguments: ClassVar[frozenset[str]] = frozenset()
    """The options of ``cuebench train`` that only some kinds take (``studies``, ``out``: ``KIND_ARGUMENTS``) which
    this kind takes; the others given are refused (``model_eval.train_cli``)."""
    folder_hint: ClassVar[str | None] = None
    """What ``cuebench train FOLDER`` trains as this kind, in words (None: the kind has a command of its own)."""

    study_dir: str
    """The folder the job's result file, checkpoint and executor logs go to."""
    run: int = 0
    config: StudyConfig = StudyConfig()
    runtime: Runtime = Runtime()

    @property
    def job_id(self) -> str:
        c = self.config
        return f"{self.kind}--{c.model}--{c.algorithm}--r{self.run}--{c.key()}"

    @property
    def result_path(self) -> Path:
        return Path(self.study_dir) / RUNS_DIR / f"{self.job_id}.csv"

    @property
    def checkpoint(self) -> Path:
        return Path(self.study_dir) / CHECKPOINTS_DIR / f"{self.job_id}.pth"

    @property
    def seed(self) -> int:
        return self.config.seed * 1000 + self.run

    # --- what a kind says about itself ---------------------------------------------------------------------------

    @classmethod
    def claims(cls, folder: Path) -> bool:
        """Whether ``cuebench train FOLDER`` trains this kind: by default a folder whose stored study file is of the
        kind's name (``cuebench.studies.StudyDir.kind``); a kind with a command of its own claims nothing."""
        from cuebench.studies import StudyDir

        return cls.folder_hint is not None and StudyDir(folder).kind == cls.kind

    @classmethod
    def check_plan(cls, config: StudyConfig, runs: int) -> None:
        """Refuse before any job what no job of this kind could do as asked."""
        cls.check_algorithm(config.algorithm)
        if runs < 1 or config.epochs < 1 or config.batch_size < 1 or config.input_size < 8:
            raise TrainingError("--runs, --epochs and --batch-size must be >= 1 and --input-size >= 8")
        check_start(config.model, config.weights, config.freeze)

    @classmethod
    def check_algorithm(cls, name: str) -> None:
        """An unknown algorithm fails in one line with "did you mean"; one that needs disrupted twins fails on
        data without them."""
        from .algorithms import ALGORITHMS

        if not cls.disrupted_twins and ALGORITHMS[name].output_classes(3) != 3:
            raise TrainingError(f"algorithm {name!r} trains on images with a second label set (DiSTinguish: "
                                f"structure-disrupted twins of every class), which {cls.data_name} does not have; "
                                "use 'cuebench train-cues' for it")

    @classmethod
    def from_arguments(cls, args) -> list["StudyJob"]:
        """The jobs ``cuebench train FOLDER`` asks for (``model_eval.train_cli``)."""
        return cls.plan(args.study_dir, cls.config_from_arguments(args), args.runs, runtime_from_arguments(args))

    @classmethod
    def config_from_arguments(cls, args, config_type: type[StudyConfig] = StudyConfig) -> StudyConfig:
        """The configuration of ``cuebench train``'s arguments: the algorithm's options validated and the optimiser
        settled for it (Adam's lr being ``config_type``'s)."""
        from .algorithms import ALGORITHMS, OptimizerRequest, parse_algorithm_options

        options = parse_algorithm_options(list(args.algorithm_option), [args.algorithm])[args.algorithm]
        settled = OptimizerRequest(args.optimizer, args.lr, args.weight_decay).settle(
            ALGORITHMS[args.algorithm], adam_lr=config_type.lr)
        return config_type(model=args.model, epochs=args.epochs, batch_size=args.batch_size, input_size=args.input_size,
                           seed=args.seed, weights=args.weights, freeze=args.freeze_backbone).trained_with(
            args.algorithm, options, settled)

    @classmethod
    def plan(cls, folder, config: StudyConfig, runs: int, runtime: Runtime = Runtime()) -> list["StudyJob"]:
        """Every run of the kind on ``folder`` (a kind with more than runs per folder overrides this)."""
        cls.check_plan(config, runs)
        return [cls(study_dir=str(folder), run=run, config=config, runtime=runtime) for run in range(runs)]

    @classmethod
    def assemble(cls, study_dir: str | Path, jobs: list["StudyJob"] | None = None) -> list[Path]:
        """The kind's table: every finished job's rows in ``study_dir``, sorted, written atomically (a kind with more
        outputs adds them)."""
        import pandas as pd

        root = Path(study_dir)
        files = sorted((root / RUNS_DIR).glob(cls.pattern))
        if not files:
            raise TrainingError(f"{root / RUNS_DIR} holds no finished {cls.kind} jobs")
        table = pd.concat([pd.read_csv(f) for f in files], ignore_index=True).sort_values(cls.sort_by, kind="stable")
        atomic_write(root / cls.table_file, frame_csv(table))
        return [root / cls.table_file]

    @staticmethod
    def wrote(outputs: list[Path]) -> str:
        """What ``cuebench train`` says it wrote."""
        return "wrote " + " and ".join(map(str, outputs))

    # --- what a job trains on and how it is scored ---------------------------------------------------------------

    def load_data(self) -> TrainingData:
        raise NotImplementedError(f"study kind {self.kind!r} does not say what it trains on (load_data)")

    def build_model(self, data: TrainingData, device: str):
        """(model on ``device``, (mean, sd) it is fed with): ``config.model`` over the data's classes from scratch or
        from weights with a new head (``starting``), fed as ``cuebench eval`` feeds it."""
        cfg = self.config
        model = starting_model(cfg.model, cfg.weights, cfg.freeze, data.n_classes, device).to(device)
        settings = data_config(model)
        return model, (settings["mean"], settings["std"])

    def predict(self, algorithm, x, data: TrainingData):
        """The class each image of ``x`` is answered with."""
        return algorithm.predict(x)

    def score(self, pred, y) -> dict:
        """An evaluated split's columns: ``accuracy``, the top-1 share of right answers."""
        return {"accuracy": float((pred == y).float().mean())}

    def row(self, algorithm) -> dict:
        """The columns every row of the job shares."""
        return {"algorithm": self.config.algorithm, "run": self.run, "seed": self.seed, "job_id": self.job_id}

    def checkpoint_record(self, state: dict, epoch: int, algorithm, data: TrainingData) -> dict:
        """What the checkpoint of ``state`` holds besides it, for ``cuebench eval --model NAME:CHECKPOINT``."""
        return {"state_dict": state, "epoch": epoch}

    def finish(self, rows: list[dict], best_epoch: int | None) -> None:
        """After the checkpoint is saved: mark the selected epoch and the checkpoint in every row."""
        for row in rows:
            row.update(selected=row["epoch"] == best_epoch,
                       checkpoint=str(self.checkpoint.relative_to(self.study_dir)))

    # --- the loop ------------------------------------------------------------------------------------------------

    def execute(self, progress: bool = False) -> Path:
        """Train and evaluate (skipped when the result file exists); return the result file."""
        if self.result_path.is_file():
            return self.result_path
        self.check_algorithm(self.config.algorithm)
        import torch
        from tqdm import tqdm

        from .algorithms import ALGORITHMS

        if self.runtime.threads:
            torch.set_num_threads(self.runtime.threads)
        device = resolve_device(self.runtime.device)
        cfg = self.config
        data = self.load_data()
        torch.manual_seed(self.seed)
        model, normalisation = self.build_model(data, device)
        algorithm = ALGORITHMS[cfg.algorithm](model, lr=cfg.lr, weight_decay=cfg.weight_decay, seed=self.seed,
                                              amp=self.runtime.amp, optimizer=cfg.optimizer, **cfg.algorithm_options())
        common = self.row(algorithm)

        def inputs(x):
            return to_input(x, device, normalisation, data.channels_last)

        def checkpoint_bytes(state: dict, epoch: int) -> bytes:
            buf = io.BytesIO()
            torch.save(self.checkpoint_record(state, epoch, algorithm, data), buf)
            return buf.getvalue()

        def ood_rows(state: dict, epoch: int, losses: list[float]) -> list[dict]:
            """The sets answered by ``state``; torch's random state is restored after loading the answering
            model, so a run trains the same with a schedule as without."""
            from .ood_eval import answer_sets

            with torch.random.fork_rng(devices=[torch.device(device).index or 0] if device.startswith("cuda") else []):
                answered = answer_sets(cfg.ood, cfg.model, checkpoint_bytes(state, epoch), self.study_dir, self.job_id,
                                       device)
            return [{**common, "epoch": epoch, "train_loss": float(np.mean(losses)),
                     "selectable": algorithm.selectable(epoch, cfg.epochs), **row} for row in answered]

        if cfg.ood:
            from .ood_eval import forget_unfinished

            forget_unfinished(self.study_dir, self.job_id)
        shuffle = torch.Generator().manual_seed(self.seed)
        x_train, y_train = data.train
        rows, best, best_state, best_epoch, best_losses, evaluated = [], -1.0, None, None, [], set()
        for epoch in tqdm(range(1, cfg.epochs + 1), desc=self.job_id, unit="epoch", disable=not progress):
            algorithm.start_epoch(epoch, cfg.epochs)
            batches = torch.randperm(len(y_train), generator=shuffle).split(cfg.batch_size)
            start = time.perf_counter()
            losses = [algorithm.update(inputs(x_train[b]), y_train[b].to(device)) for b in batches
                      if len(b) > 1 or len(batches) == 1 or not self.drops_single_image_batches]
            speed = len(y_train) / (time.perf_counter() - start)
            scores = {}
            for split, (x, y) in data.evaluated.items():
                pred = torch.cat([self.predict(algorithm, inputs(b), data).cpu()
                                  for b in x.split(self.runtime.eval_batch_size)])
                scores[split] = self.score(pred, y)
            selectable = algorithm.selectable(epoch, cfg.epochs)
            if self.keeps_checkpoint and selectable and scores["val"]["accuracy"] > best:
                best, best_epoch, best_losses = scores["val"]["accuracy"], epoch, losses
                best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
            rows += [{**common, "epoch": epoch, "split": split, **score, "n_images": len(data.evaluated[split][1]),
                      "train_loss": float(np.mean(losses)), "train_images_per_s": speed, "selectable": selectable}
                     for split, score in scores.items()]
            if cfg.ood and cfg.ood.schedule.due(epoch, cfg.epochs):
                rows += ood_rows(model.state_dict(), epoch, losses)
                evaluated.add(epoch)
        if cfg.ood and best_epoch not in evaluated:  # best-val selection needs the selected epoch's scores
            rows += ood_rows(best_state, best_epoch, best_losses)
        if self.keeps_checkpoint:
            atomic_write(self.checkpoint, checkpoint_bytes(best_state, best_epoch))
            self.finish(rows, best_epoch)
        write_rows(self.result_path, rows, self.columns)
        return self.result_path


def run_job(job: StudyJob, progress: bool = False) -> Path:
    """Run one job of any kind: what every executor calls."""
    return job.execute(progress)


def runtime_from_arguments(args) -> Runtime:
    return Runtime(device=args.device, amp=args.amp)


def study_kind_of(folder: str | Path) -> type[StudyJob]:
    """The one registered kind that claims ``folder`` for ``cuebench train``; none or several is an error naming
    the kinds."""
    kinds = STUDY_KINDS.working()
    claiming = [kind for _, kind in kinds if kind.claims(Path(folder))]
    if len(claiming) == 1:
        return claiming[0]
    known = "; ".join(f"{name}: {kind.folder_hint}" for name, kind in kinds if kind.folder_hint)
    if claiming:
        raise TrainingError(f"{folder} is a study of several kinds ({', '.join(k.kind for k in claiming)}); "
                            "its kind would be a guess")
    raise TrainingError(f"{folder} is no study 'cuebench train' knows ({known})")


def write_rows(path: Path, rows: list[dict], columns: tuple[str, ...]) -> None:
    """One job's rows as its result file, written atomically (the file marks the job finished)."""
    import pandas as pd

    buf = io.StringIO()
    pd.DataFrame(rows, columns=list(columns)).to_csv(buf, index=False)
    atomic_write(path, buf.getvalue().encode("utf-8"))
