"""Out-of-distribution sets answered during training, on a schedule of epochs, so that BiasBed's model
selection (best validation, last-n epochs, oracle; ``analysis.selection``) is made afterwards from the log.

BiasBed (Kalischek et al. 2023, Sec. 5, Fig. 2, Tables 1-2) tests every algorithm "on Silhouette, Edge and
Cue-Conflict after every epoch"; ``--ood-every 1`` does that, ``--ood-schedule 1,5,10,last`` names the epochs.
At each such epoch the model's weights are written as a checkpoint in the layout the job saves anyway and
answer every out-of-distribution experiment through ``evaluate_experiment`` -- the path of ``cuebench eval``
-- into the job's own response store (``training/ood/<job id>.sqlite``), so the experiments' own stores hold
only the selected checkpoints' answers while every epoch's answers stay inspectable by observer id. The
epoch's checkpoint file is removed once it has answered (one per epoch would fill the disk); its answers
and its observer id (``NAME:file-<sha256>``) remain. The epoch that model selection picks is always
evaluated, on the schedule or not, so that the best-validation selection has a score on every set.

Each experiment gives one log row per evaluated epoch: ``split`` is the experiment's name, ``accuracy`` the
share of its scored (test) trials answered correctly -- on cue-conflict trials the shape class, as BiasBed
scores that set -- ``n_images`` the trials counted, ``epoch_observer`` the epoch's observer id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cuebench.expdir import ExperimentDir, atomic_write
from cuebench.labels import IMAGENET16

from .starting import TrainingError

OOD_DIR = "training/ood"
RESERVED_SPLITS = ("val", "test", "train")
"""Split names of the training log's own photos; an out-of-distribution set may not take them."""


@dataclass(frozen=True)
class OodSchedule:
    """The epochs the out-of-distribution sets are answered at: every ``every``-th epoch, the listed
    ``epochs``, and the last one when ``last``."""

    every: int = 0
    epochs: tuple[int, ...] = ()
    last: bool = False

    @classmethod
    def parse(cls, every: int | None = None, listed: str | None = None) -> "OodSchedule":
        """``--ood-every N`` or ``--ood-schedule 1,5,10,last`` (one of them)."""
        if every is not None and listed is not None:
            raise TrainingError("give --ood-every or --ood-schedule, not both")
        if every is not None:
            if every < 1:
                raise TrainingError(f"--ood-every must be >= 1, got {every}")
            return cls(every=every)
        items = [item.strip() for item in (listed or "").split(",") if item.strip()]
        if not items:
            raise TrainingError(f"--ood-schedule {listed!r} names no epoch: use e.g. 1,5,10,last")
        wrong = [item for item in items if item != "last" and not re.fullmatch(r"[1-9]\d*", item)]
        if wrong:
            raise TrainingError(f"--ood-schedule: {wrong[0]!r} is not an epoch (1, 2, ...) or 'last'")
        return cls(epochs=tuple(sorted({int(i) for i in items if i != "last"})), last="last" in items)

    def check(self, epochs: int) -> None:
        """Refuse an epoch the run does not reach."""
        beyond = [e for e in self.epochs if e > epochs] + ([self.every] if self.every > epochs else [])
        if beyond:
            raise TrainingError(f"the out-of-distribution schedule names epoch {beyond[0]}, but the run trains "
                                f"{epochs} epoch(s)")

    def due(self, epoch: int, epochs: int) -> bool:
        return bool((self.every and epoch % self.every == 0) or epoch in self.epochs or (self.last and epoch == epochs))

    def text(self) -> str:
        """As the command line writes it (part of a job's identity)."""
        if self.every:
            return f"every {self.every}"
        return ",".join([*map(str, self.epochs), *(["last"] if self.last else [])])


@dataclass(frozen=True)
class OodSet:
    """One out-of-distribution experiment: its name (the log's ``split``), folder, and the label mapping a
    subset head answers it with (None: the experiment's own label set)."""

    name: str
    experiment: str
    mapping: str | None = None


@dataclass(frozen=True)
class OodPlan:
    schedule: OodSchedule
    sets: tuple[OodSet, ...]

    def identity(self) -> dict:
        """What a job's name takes from the plan: the schedule and the sets' names."""
        return {"schedule": self.schedule.text(), "sets": [s.name for s in self.sets]}


def experiment_set(path: str | Path, mapping_16class: str | Path | None = None) -> OodSet:
    """An experiment folder as an out-of-distribution set named by the folder; a set of the 16 entry-level
    classes is answered with ``mapping_16class`` (a subset head's trained classes per category) when given."""
    expdir = ExperimentDir(path)
    if not expdir.experiment_file.is_file():
        raise TrainingError(f"--ood-set {path}: no experiment.json there; build the set first, e.g. "
                            f"'cuebench stimuli build --design labelled-set --images IMAGES --out {path}'")
    experiment = expdir.load()
    if not any(t.role == "test" for t in experiment.trials):
        raise TrainingError(f"--ood-set {path}: the experiment has no test trials to score")
    sixteen = tuple(experiment.label_set.labels) == IMAGENET16
    return OodSet(Path(path).name, str(path), str(mapping_16class) if sixteen and mapping_16class else None)


def plan(schedule: OodSchedule, sets: list[OodSet], epochs: int | None = None) -> OodPlan:
    """A checked plan: the schedule within a run of ``epochs`` (when given), every set named once and apart
    from the photos' splits."""
    if epochs is not None:
        schedule.check(epochs)
    names = [s.name for s in sets]
    taken = sorted({n for n in names if names.count(n) > 1} | (set(names) & set(RESERVED_SPLITS)))
    if taken:
        raise TrainingError(f"out-of-distribution set name {taken[0]!r} is used twice or is a split of the training "
                            f"photos ({', '.join(RESERVED_SPLITS)}): put the experiment in a folder of another name")
    return OodPlan(schedule, tuple(sets))


def store_path(study_dir: str | Path, job_id: str) -> Path:
    return Path(study_dir) / OOD_DIR / f"{job_id}.sqlite"


def answer_sets(ood: OodPlan, architecture: str, checkpoint: bytes, study_dir: str | Path, job_id: str,
                device: str) -> list[dict]:
    """The rows of one epoch: ``checkpoint`` (the bytes of a checkpoint of ``architecture``) answers every set
    into the job's store; per set its name, accuracy over the scored trials, trials counted and observer id."""
    from ..evaluate import evaluate_experiment

    path = Path(study_dir) / OOD_DIR / f"{job_id}.pth"
    atomic_write(path, checkpoint)
    rows = []
    try:
        for ood_set in ood.sets:
            summary = evaluate_experiment(ood_set.experiment, [f"{architecture}:{path}"], device=device,
                                          progress=False, mapping_file=ood_set.mapping,
                                          database=str(store_path(study_dir, job_id)))
            observer = summary.runs[0].observer
            cells = [c for c in summary.accuracy if c["model"] == observer]
            n = sum(c["n"] for c in cells)
            rows.append({"split": ood_set.name, "accuracy": sum(c["correct"] for c in cells) / n if n else float("nan"),
                         "n_images": n, "epoch_observer": observer})
    finally:
        path.unlink(missing_ok=True)
    return rows


def forget_unfinished(study_dir: str | Path, job_id: str) -> None:
    """Remove what an interrupted run of the job left in its store (the job's rows are written only when it
    finishes, so a store without them belongs to no row)."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{store_path(study_dir, job_id)}{suffix}").unlink(missing_ok=True)
