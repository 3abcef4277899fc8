"""The DiagViB-6 training harness: algorithms, jobs, executors, and a small real CPU run."""

from __future__ import annotations

import argparse
import importlib.util
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from cuebench_app.cli import main
from model_eval import train_cli
from model_eval.training.algorithms import ALGORITHMS
from model_eval.training.algorithms.padain import PAdaIN, candidate_layers, permute_adain
from cuebench.executors import ExecutorError
from cuebench.registry import UnknownName
from model_eval.training.executors import run_jobs
from model_eval.training.factor_study import (COLUMNS, FactorConfig, class_accuracies,
                                              mean_class_accuracy, plan_jobs)
from model_eval.training.jobs import TrainingError, build_model


def train(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    train_cli.register(parser.add_subparsers())
    args = parser.parse_args(["train", *argv])
    return args.func(args)


def test_permute_adain_swaps_channel_statistics():
    torch.manual_seed(0)
    x = torch.randn(4, 3, 8, 8) * torch.tensor([1.0, 2.0, 3.0]).view(1, 3, 1, 1) + 5
    perm = torch.tensor([2, 0, 3, 1])
    y = permute_adain(x, perm)
    torch.testing.assert_close(y.mean(dim=(2, 3)), x.mean(dim=(2, 3))[perm], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(y.std(dim=(2, 3), unbiased=False), x.std(dim=(2, 3), unbiased=False)[perm],
                               atol=1e-3, rtol=1e-3)
    x_norm = (x - x.mean(dim=(2, 3), keepdim=True)) / x.std(dim=(2, 3), keepdim=True)
    y_norm = (y - y.mean(dim=(2, 3), keepdim=True)) / y.std(dim=(2, 3), keepdim=True)
    torch.testing.assert_close(y_norm, x_norm, atol=1e-3, rtol=1e-3)  # content is kept


def test_padain_acts_with_probability_p_and_erm_learns():
    torch.manual_seed(0)
    x, y = torch.randn(8, 3, 16, 16), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    always = PAdaIN(build_model("test_resnet"), p=1.0, seed=1)
    assert len(candidate_layers(always.model)) >= 3
    for _ in range(5):
        always.update(x, y)
    assert always.swaps == 5
    never = PAdaIN(build_model("test_resnet"), p=0.0, seed=1)
    never.update(x, y)
    assert never.swaps == 0
    erm = ALGORITHMS["erm"](build_model("test_resnet"), lr=3e-3, seed=0)
    losses = [erm.update(x, y) for _ in range(25)]
    assert losses[-1] < 0.5 * losses[0]
    assert erm.predict(x).shape == (8,)


def test_accuracy_is_the_mean_over_classes_present():
    pred, label = np.array([0, 0, 1, 1, 2, 0]), np.array([0, 0, 1, 2, 2, 2])
    per_class = class_accuracies(pred, label)
    assert per_class == [1.0, 1.0, pytest.approx(1 / 3)]
    assert mean_class_accuracy(per_class) == pytest.approx((1 + 1 + 1 / 3) / 3)
    assert class_accuracies(np.array([0]), np.array([0])) == [1.0, None, None]
    assert mean_class_accuracy([1.0, None, None]) == 1.0


def write_study(root, entries: list[dict]) -> None:
    """A study.json with the header the diagvib design writes (cuebench.studies.FactorStudy)."""
    (root / "study.json").write_text(json.dumps({
        "format": "cuebench-diagvib-study", "version": 1, "seed": 0, "sizes": {}, "digits": "mnist",
        "factor_space": {}, "studies": [], "pairs": [], "dataset_samples": [], "entries": entries}))


def test_plan_jobs_checks_its_inputs(tmp_path):
    with pytest.raises(TrainingError, match="study.json does not exist"):
        plan_jobs(tmp_path, FactorConfig(), runs=1)
    write_study(tmp_path, [])
    with pytest.raises(UnknownName, match="unknown algorithm 'mixstyle'"):
        plan_jobs(tmp_path, FactorConfig(algorithm="mixstyle"), runs=1)
    with pytest.raises(TrainingError, match="'distinguish' .* a DiagViB-6 study does not have; use 'cuebench train-cues'"):
        plan_jobs(tmp_path, FactorConfig(algorithm="distinguish"), runs=1)
    with pytest.raises(TrainingError, match="no entries"):
        plan_jobs(tmp_path, FactorConfig(), runs=1)


def test_train_picks_the_kind_the_folder_is_and_names_the_kinds_for_any_other(tmp_path):
    from model_eval.training.jobs import study_kind_of

    (tmp_path / "factor").mkdir()
    write_study(tmp_path / "factor", [])
    (tmp_path / "set" / "train" / "cat").mkdir(parents=True)
    assert study_kind_of(tmp_path / "factor").kind == "factor"
    assert study_kind_of(tmp_path / "set").kind == "labelled-set"
    with pytest.raises(TrainingError, match=r"is no study 'cuebench train' knows \(.*factor: a DiagViB-6 study "
                                            r"directory .*labelled-set: a labelled set"):
        train([str(tmp_path / "nothing")])
    (tmp_path / "factor" / "train" / "cat").mkdir(parents=True)
    with pytest.raises(TrainingError, match="a study of several kinds"):
        study_kind_of(tmp_path / "factor")


def test_unknown_or_missing_executor_is_a_clear_error(tmp_path):
    with pytest.raises(ExecutorError, match="unknown executor"):
        run_jobs([], executor="dask")
    for name in ("ray", "submitit"):
        if importlib.util.find_spec(name) is None:
            job = _fake_job(tmp_path)
            with pytest.raises(ExecutorError, match=f"needs the '{name}' package"):
                run_jobs([job], executor=name)


def _fake_job(tmp_path):
    write_study(tmp_path, [{"study": "ZSO", "target": "hue", "correlated": "shape", "dataset_sample": 0,
                            "shortcut_class": None, "selected": {}, "selected_index": {}, "design_train": [],
                            "design_test": [], "files": {}, "cooccurrence": {}}])
    return plan_jobs(tmp_path, FactorConfig(), runs=1)[0]


def test_job_identity_follows_the_training_configuration(tmp_path):
    job = _fake_job(tmp_path)
    longer = replace(job, config=replace(job.config, epochs=job.config.epochs + 1))
    assert job.job_id != longer.job_id
    assert job.job_id == _fake_job(tmp_path).job_id
    assert job.job_id.startswith("ZSO--hue--shape--s0--resnet18--erm--r0--")


def test_run_job_refuses_distinguish_as_plan_jobs_does(tmp_path):
    from model_eval.training.jobs import run_job

    job = _fake_job(tmp_path)
    with pytest.raises(TrainingError, match="'distinguish' .* a DiagViB-6 study does not have"):
        run_job(replace(job, config=replace(job.config, algorithm="distinguish")))
    assert not job.result_path.exists()


def test_algorithm_options_name_jobs_and_earlier_job_names_stay_the_same(tmp_path, capsys):
    import hashlib

    from cuebench.expdir import canonical_json
    from model_eval.training.algorithms import AlgorithmError, parse_algorithm_options

    def former_key(**changes) -> str:  # the job key before typed options: every field, padain_p included
        fields = {"model": "resnet18", "algorithm": "erm", "epochs": 10, "batch_size": 128, "lr": 1e-3,
                  "weight_decay": 0.0, "input_size": 128, "padain_p": 0.01, "seed": 0, **changes}
        return hashlib.sha256(canonical_json(fields).encode()).hexdigest()[:8]

    assert FactorConfig().key() == former_key()
    padain = parse_algorithm_options(["p=0.05"], ["padain"])["padain"]
    assert FactorConfig().trained_with("padain", padain).key() == former_key(algorithm="padain", padain_p=0.05)
    default = parse_algorithm_options([], ["infodrop"])["infodrop"]
    biasbed = parse_algorithm_options(["test_protocol=biasbed"], ["infodrop"])["infodrop"]
    assert FactorConfig().trained_with("infodrop", default).key() == former_key(algorithm="infodrop")
    assert FactorConfig().trained_with("infodrop", biasbed).key() != former_key(algorithm="infodrop")
    write_study(tmp_path, [])
    assert train([str(tmp_path), "--algorithm", "infodrop", "--algorithm-option", "help"]) == 0
    assert "infodrop.test_protocol=shi  (one of shi, biasbed;" in capsys.readouterr().out
    with pytest.raises(AlgorithmError, match="padain option p: must be <= 1.0"):
        train([str(tmp_path), "--algorithm", "padain", "--padain-p", "2"])
    with pytest.raises(AlgorithmError, match="'x=1': no algorithm trained here has it"):
        train([str(tmp_path), "--algorithm", "erm", "--algorithm-option", "x=1"])


def test_an_option_of_another_study_kind_is_refused_in_one_line(tmp_path):
    """``--out`` (a labelled set's) on a DiagViB-6 study, ``--studies`` (a DiagViB-6 study's) on a labelled set and
    ``--padain-p`` with another algorithm than pAdaIN would be silently ignored: they are refused before any job,
    naming what takes them."""
    (tmp_path / "study").mkdir()
    write_study(tmp_path / "study", [])
    (tmp_path / "set" / "train" / "cat").mkdir(parents=True)
    with pytest.raises(TrainingError, match=r"^--out is an option of a labelled set, not of a DiagViB-6 study: "
                                            r"leave it out$"):
        train([str(tmp_path / "study"), "--out", str(tmp_path / "runs")])
    with pytest.raises(TrainingError, match=r"^--studies is an option of a DiagViB-6 study, not of a labelled set: "
                                            r"leave it out$"):
        train([str(tmp_path / "set"), "--studies", "ZSO"])
    with pytest.raises(TrainingError, match=r"^--padain-p is pAdaIN's swap probability, and --algorithm erm has none: "):
        train([str(tmp_path / "study"), "--padain-p", "0.05"])
    assert not (tmp_path / "runs").exists() and not (tmp_path / "study" / "training").exists()


@pytest.mark.slow
def test_small_cpu_run_reproduces_shortcut_learning(tmp_path):
    """Eulig et al. 2021, Sec. 5: hue is predicted near-perfectly without shortcuts (ZSO), while under
    ZGO with hue as the shortcut, shape's out-of-distribution accuracy falls below chance."""
    study = tmp_path / "study"
    common = ["stimuli", "build", "--design", "diagvib", "--out", str(study), "--diagvib-digits", "sklearn-digits",
              "--sizes", "600,150,300", "--diagvib-human-trials", "2"]
    assert main([*common, "--study", "ZSO", "--target", "hue", "--correlated", "shape"]) == 0
    assert main([*common, "--study", "ZGO", "--target", "shape", "--correlated", "hue"]) == 0
    options = ["--model", "test_resnet", "--runs", "2", "--epochs", "4", "--input-size", "64", "--batch-size", "32",
               "--lr", "3e-3", "--workers", "2"]
    assert train([str(study), *options]) == 0
    import pandas as pd

    table = pd.read_csv(study / "training.csv")
    assert list(table.columns) == list(COLUMNS) and table["algorithm_options"].eq("{}").all()
    assert len(table) == 2 * 2 * 4 * 2  # entries x runs x epochs x splits
    last = table[(table["epoch"] == 4) & (table["split"] == "test")].groupby("study")["accuracy"].mean()
    assert last["ZSO"] > 0.9
    assert last["ZGO"] < 1 / 3
    runs = sorted((study / "training" / "runs").glob("*.csv"))
    stamps = [f.stat().st_mtime_ns for f in runs]
    assert train([str(study), *options]) == 0  # a re-run skips finished jobs
    assert [f.stat().st_mtime_ns for f in runs] == stamps

    from analysis.factor_studies import factor_aggregates, load_training_table, select_epochs, write_study_report

    aggregates = factor_aggregates(select_epochs(load_training_table(study)))
    zgo = aggregates[aggregates["study"] == "ZGO"].iloc[0]
    assert zgo["FAAvg"] < 1 / 3 and zgo["FAMin"] == zgo["FAAvg"]
    report = write_study_report(study, tmp_path / "report")
    assert "data:image/png;base64," in report.read_text()


@pytest.mark.slow
def test_factor_study_trains_the_seed_baselines_it_is_asked_for(tmp_path, monkeypatch):
    """docs/diagvib.md's baselines on a DiagViB-6 study, as documented: torchvision's AlexNet from scratch and RN50-IN
    (`--model resnet50 --weights torchvision --freeze-backbone`; random weights saved where the torch hub cache keeps
    torchvision's file, which cannot be downloaded here) each train and are named apart in training.csv; a frozen
    backbone without weights is refused before any job runs."""
    import pandas as pd

    from model_eval.observers.torchvision_models import hub_checkpoints, import_torchvision, weights_filename

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    hub_checkpoints().mkdir(parents=True)
    torch.save(import_torchvision().models.get_model("resnet50", weights=None).state_dict(),
               hub_checkpoints() / weights_filename("resnet50"))
    study = tmp_path / "study"
    assert main(["stimuli", "build", "--design", "diagvib", "--out", str(study), "--diagvib-digits", "sklearn-digits",
                 "--sizes", "48,24,24", "--diagvib-human-trials", "2", "--study", "ZSO", "--target", "hue",
                 "--correlated", "shape"]) == 0
    common = [str(study), "--runs", "1", "--epochs", "1", "--input-size", "64", "--batch-size", "16"]
    with pytest.raises(TrainingError, match="--freeze-backbone keeps the backbone's weights fixed"):
        train([*common, "--model", "resnet50", "--freeze-backbone"])
    assert not (study / "training").exists()
    assert train([*common, "--model", "alexnet"]) == 0
    assert train([*common, "--model", "resnet50", "--weights", "torchvision", "--freeze-backbone"]) == 0
    table = pd.read_csv(study / "training.csv")
    assert table.groupby("model")["job_id"].nunique().to_dict() == {
        "alexnet": 1, "resnet50:torchvision (frozen backbone)": 1}
    assert table["accuracy"].between(0, 1).all() and len(table) == 2 * 2  # models x splits, one epoch
