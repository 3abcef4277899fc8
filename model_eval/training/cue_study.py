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
fall into (``CUE_MAPPING_FILE``). The loop, the log, the checkpoint and the out-of-distribution sets are
the training-study base's (``jobs.StudyJob``); this kind says what it trains on and what its checkpoint declares.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cuebench.studies import (CUE_EXPERIMENTS as EXPERIMENTS, CUE_MAPPING_FILE as MAPPING_FILE,
                              CUE_PHOTOS_FILE as DATA_FILE, CUE_TRAINING_TABLE as TABLE_FILE, StudyDir)

from .jobs import Runtime, StudyConfig, StudyJob, TrainingData, TrainingError, resolve_device

if TYPE_CHECKING:
    from .algorithms import AlgorithmOptions, OptimizerRequest
    from .ood_eval import OodPlan

COLUMNS = ("algorithm", "run", "seed", "epoch", "split", "accuracy", "n_images", "train_loss", "selected",
           "selectable", "observer", "checkpoint", "job_id", "algorithm_options", "optimizer", "epoch_observer")
"""One row per job, epoch and split (val, test: top-1 accuracy over the study's n classes on held-out
original photos; with an out-of-distribution schedule also one per set and evaluated epoch, ``ood_eval``,
whose ``epoch_observer`` answered it); ``selected`` marks the best-validation epoch, whose checkpoint
answered the trials as ``observer``; ``selectable`` whether model selection may pick the epoch (InfoDrop's
``shi`` protocol: its fine-tuning epochs only); ``algorithm_options`` the algorithm's options, defaults
included, as JSON; ``optimizer`` the optimiser's name, lr, weight decay and momentum, as JSON. The table is
the per-epoch log ``cuebench selection`` reads."""


@dataclass(frozen=True, kw_only=True)
class CueConfig(StudyConfig):
    """How every job of a study trains; ``lr`` is Adam's default until settled per algorithm (``plan_cue_jobs``)."""

    model: str = "tf_efficientnet_lite0"
    epochs: int = 3
    batch_size: int = 16
    lr: float | None = 1e-4

    def identity(self) -> dict:
        """What names a job: the fields, Adam (the only optimiser before there was a choice) left out, so earlier
        jobs keep their names and an SGD run is named apart; the algorithm's changed options and the
        out-of-distribution plan when there are any (the algorithm names the job in words)."""
        fields = {k: v for k, v in asdict(self).items()
                  if k not in ("algorithm", "options", "ood", "weights", "freeze")}
        if fields["optimizer"] == "adam":
            del fields["optimizer"]
        if self.options:
            fields["options"] = dict(self.options)
        if self.ood is not None:
            fields["ood"] = self.ood.identity()
        return fields


@dataclass(frozen=True, kw_only=True)
class CueJob(StudyJob):
    """Cue-reliance studies (Wen et al. 2024): ImageNet models fine-tuned per algorithm, answering DiST and cue conflict."""

    kind = "cue"
    data_name = "a cue study"
    columns = COLUMNS
    table_file = TABLE_FILE
    pattern = "cues--*.csv"
    sort_by = ["algorithm", "run", "epoch", "split"]
    disrupted_twins = True

    config: CueConfig = CueConfig()

    @property
    def job_id(self) -> str:
        c = self.config
        return f"cues--{c.model}--{c.algorithm}--r{self.run}--{c.key()}"

    def load_data(self) -> TrainingData:
        """The training photos (with their disrupted twins for DiSTinguish, labelled n..2n-1), and the held-out
        photos as positions in the head (-1: a class the head lacks, which counts as wrong)."""
        import torch

        from .algorithms import ALGORITHMS
        from .algorithms.distinguish import distinguish_labels

        data = np.load(Path(self.study_dir) / DATA_FILE)
        classes = data["classes"]
        n = len(classes)
        x_train = torch.from_numpy(data["train_images"])
        y_train = torch.from_numpy(head_labels(data["train_labels"], classes))
        if ALGORITHMS[self.config.algorithm].output_classes(n) != n:
            disrupted = torch.from_numpy(data["disrupted_images"])
            mask = torch.cat([torch.zeros(len(x_train), dtype=torch.bool), torch.ones(len(disrupted), dtype=torch.bool)])
            y_train = distinguish_labels(torch.cat([y_train, y_train]), mask, n)
            x_train = torch.cat([x_train, disrupted])
        evaluated = {split: (torch.from_numpy(data[f"{split}_images"]),
                             torch.from_numpy(head_labels(data[f"{split}_labels"], classes))) for split in ("val", "test")}
        return TrainingData((x_train, y_train), evaluated, n, [int(c) for c in classes], channels_last=True)

    def build_model(self, data: TrainingData, device: str):
        """The offline ImageNet model with an n-way (DiSTinguish: 2n-way) head started from its ImageNet rows."""
        from ..models import load_model
        from .algorithms import ALGORITHMS

        loaded = load_model(self.config.model, device)
        subset_head(loaded.model, np.asarray(data.classes), ALGORITHMS[self.config.algorithm].output_classes(data.n_classes))
        return loaded.model.to(device), (loaded.data_config["mean"], loaded.data_config["std"])

    def predict(self, algorithm, x, data: TrainingData):
        """The n answer logits' argmax (a DiSTinguish model answers with each class's logit plus its twin's)."""
        import torch

        algorithm.model.eval()
        with torch.no_grad():
            return type(algorithm).answer_logits(algorithm.model(x), data.n_classes).argmax(1)

    def row(self, algorithm) -> dict:
        return {**super().row(algorithm),
                "algorithm_options": json.dumps(algorithm.options.model_dump(mode="json"), sort_keys=True),
                "optimizer": json.dumps(algorithm.settings.as_dict(), sort_keys=True)}

    def checkpoint_record(self, state: dict, epoch: int, algorithm, data: TrainingData) -> dict:
        """A checkpoint in the layout ``cuebench eval`` loads (``NAME:path``): the ImageNet index of each row, and a
        twin head's width."""
        width = type(algorithm).output_classes(data.n_classes)
        twin_head = {"original_classes": data.n_classes} if width != data.n_classes else {}
        return {"state_dict": state, "imagenet_indices": data.classes, **twin_head,
                "algorithm": self.config.algorithm, "algorithm_options": algorithm.options.model_dump(mode="json"),
                "optimizer": algorithm.settings.as_dict(), "epoch": epoch}

    def finish(self, rows: list[dict], best_epoch: int | None) -> None:
        """The selected checkpoint answers the study's experiments, as ``cuebench eval`` would."""
        from ..evaluate import evaluate_experiment

        super().finish(rows, best_epoch)
        study, observer = Path(self.study_dir), None
        for name in EXPERIMENTS:
            mapping = study / MAPPING_FILE if name == "cue_conflict" else None
            summary = evaluate_experiment(study / name, [f"{self.config.model}:{self.checkpoint}"],
                                          device=resolve_device(self.runtime.device), progress=False,
                                          mapping_file=mapping)
            observer = summary.runs[0].observer
        for row in rows:
            row["observer"] = observer


def plan_cue_jobs(study_dir: str | Path, algorithms: list[str], runs: int, config: CueConfig = CueConfig(),
                  runtime: Runtime = Runtime(), options: dict[str, "AlgorithmOptions"] | None = None,
                  optimizer: "OptimizerRequest | None" = None, ood: "OodPlan | None" = None) -> list[CueJob]:
    """Every (algorithm x run) job; ``options``: validated options per algorithm (defaults for the others);
    ``optimizer``: what the command asked for, settled per algorithm (SGD for SagNet unless another is
    named; Adam's lr is ``config.lr``); ``ood``: out-of-distribution sets answered during training."""
    from .algorithms import ALGORITHMS, OptimizerRequest

    for name in algorithms:
        CueJob.check_plan(replace(config, algorithm=name), runs)
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
    request = optimizer or OptimizerRequest()
    configs = {name: config.trained_with(name, (options or {}).get(name), request.settle(ALGORITHMS[name],
                                                                                         adam_lr=config.lr), ood=ood)
               for name in algorithms}
    return [CueJob(study_dir=str(study_dir), run=run, config=configs[name], runtime=runtime)
            for name in algorithms for run in range(runs)]


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
