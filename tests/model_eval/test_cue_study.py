"""The cue-reliance training study: a reduced real run (DiST originals of three classes, cue-conflict
images of their categories, all five algorithms, 1 epoch), its report, the n-class head, and
checkpoints of every common layout answering trials through ``cuebench eval``."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from conftest import REPO
from support import three_class_photos
from cuebench_app.cli import main
from cuebench.imagenet16 import IMAGENET16_INDICES
from model_eval.models import WeightsMismatch, load_model
from analysis.cue_study import ALGORITHM_ORDER
from cuebench_app.feature_nets import choose_feature_net
from stimuli.cue_training_sets import (CueSetError, check_disruption, dist_reference_band, read_photos, split_photos,
                                       subset_mapping, texture_ratios)
from model_eval.training.algorithms import ALGORITHMS
from model_eval.training.cue_study import head_labels, subset_head
from model_eval.training.jobs import build_model


def test_photos_need_imagenet_labels_and_split_within_each_class(tmp_path):
    with pytest.raises(CueSetError, match="labels.csv"):
        read_photos(tmp_path)
    (tmp_path / "labels.csv").write_text("image,imagenet_index\nmissing.jpg,3\n")
    with pytest.raises(CueSetError, match="no image 'missing'"):
        read_photos(tmp_path)
    photos = [(f"a{i}", None, 7) for i in range(10)] + [(f"b{i}", None, 3) for i in range(4)] + \
        [(f"c{i}", None, 5) for i in range(2)]
    splits = split_photos(photos, seed=0)
    assert sorted(sum(splits.values(), [])) == sorted(photos)
    count = {name: {k: sum(p[2] == k for p in members) for k in (7, 3, 5)} for name, members in splits.items()}
    # by hand: 10 photos -> test round(2.5) = 2, val round(1.5) = 2, train 6; 4 -> 1, 1, 2; 2 -> 0, 0, 2
    assert count == {"test": {7: 2, 3: 1, 5: 0}, "val": {7: 2, 3: 1, 5: 0}, "train": {7: 6, 3: 2, 5: 2}}
    assert split_photos(photos, seed=0) == splits and split_photos(photos, seed=1) != splits
    with pytest.raises(CueSetError, match="no test and no val photo"):
        split_photos([(f"p{i}", None, i) for i in range(10)], seed=0)  # one photo per class: all train


def test_a_subset_head_has_n_rows_or_2n_and_answers_with_n_summed_logits():
    classes = np.array([2, 5, 9])
    pretrained = build_model("test_resnet", num_classes=1000)
    rows = pretrained.get_classifier().weight.detach().clone(), pretrained.get_classifier().bias.detach().clone()
    for name, width in (("erm", 3), ("distinguish", 6)):
        model = build_model("test_resnet", num_classes=1000)
        model.load_state_dict(pretrained.state_dict())
        subset_head(model, classes, ALGORITHMS[name].output_classes(len(classes)))
        head = model.get_classifier()
        assert head.out_features == width and model.num_classes == width
        torch.testing.assert_close(head.weight[:3], rows[0][classes])  # each class starts from its pretrained row
        torch.testing.assert_close(head.bias[:3], rows[1][classes])
        x = torch.randn(2, 3, 32, 32)
        with torch.no_grad():
            logits = model.eval()(x)
        answer = ALGORITHMS[name].answer_logits(logits, 3)
        assert logits.shape == (2, width) and answer.shape == (2, 3)
        if name == "distinguish":
            torch.testing.assert_close(answer, logits[:, :3] + logits[:, 3:])
    assert head_labels(np.array([5, 9, 4, 2]), classes).tolist() == [1, 2, -1, 0]


def test_cue_conflict_trials_are_decided_over_the_categories_the_trained_classes_fall_into():
    imagenette = [0, 217, 482, 491, 497, 566, 569, 571, 574, 701]  # Wen et al.'s ten classes
    mapping, covered = subset_mapping(imagenette)
    assert covered == ["dog", "truck"]  # English springer (217) is a dog, garbage truck (569) a truck
    assert mapping["dog"] == [217] and mapping["truck"] == [569]
    assert mapping["cat"] == IMAGENET16_INDICES["cat"]  # no trained cat: its classes are never answered
    probs = np.zeros(1000)
    probs[[217, 569, 0]] = [0.3, 0.2, 0.5]  # the model's n classes, placed at their indices
    from model_eval.decisions import LabelMapping, decide_classify

    restricted = LabelMapping(mapping, "subset")
    full = LabelMapping(IMAGENET16_INDICES, "model-vs-human")
    labels = sorted(IMAGENET16_INDICES)
    assert decide_classify(probs, labels, restricted, "16class-mean").response == "dog"
    # by hand, model-vs-human's full lists: dog 0.3 / 109 = 0.0028 < truck 0.2 / 8 = 0.025 -- the list sizes decide
    assert decide_classify(probs, labels, full, "16class-mean").response == "truck"


def test_the_feature_network_defaults_to_another_offline_imagenet_network():
    assert choose_feature_net("auto", "tf_efficientnet_lite0") == "tf_efficientnet_lite1"
    assert choose_feature_net("auto", "tf_efficientnet_lite1:pypi") == "tf_efficientnet_lite2"
    assert choose_feature_net("auto", "resnet50") == "tf_efficientnet_lite1"
    assert choose_feature_net("vgg19", "tf_efficientnet_lite0") == "vgg19"
    with pytest.warns(UserWarning, match="the network being trained"):
        assert choose_feature_net("tf_efficientnet_lite0", "tf_efficientnet_lite0") == "tf_efficientnet_lite0"


def test_checkpoints_declare_or_imply_their_head_and_a_misfit_names_both_shapes(tmp_path):
    from safetensors.torch import save_file

    model = build_model("test_resnet", num_classes=2000)
    state = model.state_dict()
    folded = state["fc.weight"][:1000] + state["fc.weight"][1000:], state["fc.bias"][:1000] + state["fc.bias"][1000:]
    layouts = {
        "bare.pth": state,  # torch.save(model.state_dict()): the twin head is inferred from 2000 = 2 x 1000 rows
        "declared.pth": {"state_dict": state, "original_classes": 1000},
        "tensor.pth": {**state, "original_classes": torch.tensor(1000)},  # beside the weights, as a 0-dim tensor
        "lightning.pth": {"epoch": 3, "args": argparse.Namespace(lr=0.1),
                          "state_dict": {f"model.{k}": v for k, v in state.items()}},
        "compiled.pth": {"model": {f"module._orig_mod.{k}": v for k, v in state.items()}},
    }
    for name, content in layouts.items():
        torch.save(content, tmp_path / name)
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "meta.safetensors"),
              metadata={"original_classes": "1000"})
    for name in [*layouts, "meta.safetensors"]:
        loaded = load_model(f"test_resnet:{tmp_path / name}")
        head = loaded.model.get_classifier()
        assert head.out_features == 1000, name
        torch.testing.assert_close((head.weight, head.bias), folded)
        assert loaded.head.startswith("twin head inferred" if name in ("bare.pth", "lightning.pth", "compiled.pth")
                                      else "twin head folded"), (name, loaded.head)
    small = build_model("test_resnet", num_classes=20).state_dict()  # a 10-class DiSTinguish head
    torch.save({"state_dict": small, "original_classes": 10, "imagenet_indices": torch.arange(100, 110)},
               tmp_path / "ten.pth")
    ten = load_model(f"test_resnet:{tmp_path / 'ten.pth'}").model.get_classifier()
    torch.testing.assert_close(ten.bias[100:110], small["fc.bias"][:10] + small["fc.bias"][10:])
    assert torch.isneginf(ten.bias[:100]).all() and torch.isneginf(ten.bias[110:]).all()
    assert (ten.weight[:100] == 0).all()
    torch.save({"state_dict": small}, tmp_path / "undeclared.pth")
    with pytest.raises(WeightsMismatch, match=re.escape("fc.weight has shape (20, 96), test_resnet's has (1000, 96): "
                                                        "a DiSTinguish head of 2 x 1000 rows is folded on loading; "
                                                        "another head declares original_classes")):
        load_model(f"test_resnet:{tmp_path / 'undeclared.pth'}")
    torch.save({"state_dict": state, "original_classes": 900}, tmp_path / "odd.pth")
    with pytest.raises(WeightsMismatch, match=re.escape("fc.weight has shape (2000, 96), but original_classes 900 "
                                                        "needs 900 or 2 x 900 = 1800 rows")):
        load_model(f"test_resnet:{tmp_path / 'odd.pth'}")
    torch.save({"state_dict": state, "original_classes": 2.5}, tmp_path / "float.pth")
    with pytest.raises(WeightsMismatch, match="original_classes must be a positive integer, got 2.5"):
        load_model(f"test_resnet:{tmp_path / 'float.pth'}")
    torch.save(model, tmp_path / "module.pth")  # a whole pickled module: refused, with how to convert it
    with pytest.raises(WeightsMismatch, match="holds a pickled timm.models.resnet.ResNet object.*model.state_dict"):
        load_model(f"test_resnet:{tmp_path / 'module.pth'}")


def test_a_torchvision_checkpoint_with_a_twin_head_is_folded_too(tmp_path):
    from model_eval.observers import load_observer
    from model_eval.observers.torchvision_models import import_torchvision

    trained = import_torchvision().models.get_model("mobilenet_v3_small", weights=None, num_classes=2000)
    torch.save(trained.state_dict(), tmp_path / "twin.pth")
    observer = load_observer(f"mobilenet_v3_small:{tmp_path / 'twin.pth'}", "cpu")
    head = observer.model.classifier[3]
    assert head.out_features == 1000 and observer.provenance["head"].startswith("twin head inferred")
    w, b = trained.classifier[3].weight, trained.classifier[3].bias
    torch.testing.assert_close((head.weight, head.bias), (w[:1000] + w[1000:], b[:1000] + b[1000:]))


@pytest.mark.shared
def test_disrupted_images_that_look_like_noise_are_refused_with_the_numbers(shared):
    release = shared / "data" / "dist"
    band = dist_reference_band(release, limit=20)
    assert band.shape == (2, 2) and (band[:, 0] < 1).all() and (band[:, 0] < band[:, 1]).all()
    names = sorted(p.name for p in (release / "original").iterdir())[20:26]
    originals = np.stack([np.asarray(Image.open(release / "original" / n).convert("RGB")) for n in names])
    own = np.stack([np.asarray(Image.open(release / "set1" / n).convert("RGB")) for n in names])
    report = check_disruption(texture_ratios(originals, own), band)  # DiST's own images pass
    assert set(report) == {"LV_ratio_median", "HFE_ratio_median", "LV_dist_band", "HFE_dist_band",
                           "share_inside_band", "passed"}
    assert report["passed"] is True and report["share_inside_band"] >= 0.5
    noise = np.random.default_rng(0).integers(0, 256, originals.shape, dtype=np.uint8)
    with pytest.raises(CueSetError, match=r"LV ratio median \d+\.\d+ outside DiST's 5-95 % band"):
        check_disruption(texture_ratios(originals, noise), band)
    assert check_disruption(texture_ratios(originals, noise), band, refuse=False)["passed"] is False
    flat = np.full_like(originals, 128)
    with pytest.raises(CueSetError, match="HFE ratio median 0.00"):
        check_disruption(texture_ratios(originals, flat), band)
    # a set whose medians lie inside the bands but most of whose images do not: 3 images at the bands'
    # middle, 2 below and 2 above them -> medians in the middle, 3 of 7 = 43 % inside
    mixed = np.stack([band.mean(axis=1)] * 3 + [band[:, 0] * 0.5] * 2 + [band[:, 1] * 2] * 2)
    with pytest.raises(CueSetError, match=r"^[^;]*\(43% of the images inside both bands, fewer than 50%\)"):
        check_disruption(mixed, band)
    checker = np.indices((224, 224)).sum(axis=0) % 2 * 2 - 1  # +-1, all its energy at the Nyquist corner
    pattern = np.stack([100 + 20 * checker] * 3, axis=-1).astype(np.uint8)
    doubled = np.stack([100 + 40 * checker] * 3, axis=-1).astype(np.uint8)
    # by hand: block variances x4; HFE = AC/(DC + AC) power = 20^2/(100^2 + 20^2) -> 40^2/(100^2 + 40^2)
    np.testing.assert_allclose(texture_ratios(pattern[None], doubled[None]),
                               [[4.0, (1600 / 11600) / (400 / 10400)]], rtol=1e-9)


@pytest.fixture(scope="module")
def grayscale_experiment(tmp_path_factory, photos):
    """A suppression experiment of two photos (cat, dog) and five grayscale levels, built once (no attention
    check: it would hold one of the two photos out of the test trials)."""
    root = tmp_path_factory.mktemp("grayscale")
    for label, photo in (("cat", "chelsea"), ("dog", "coffee")):
        (root / "images" / label).mkdir(parents=True)
        Image.fromarray(photos[photo]).save(root / "images" / label / f"{photo}.png")
    assert main(["stimuli", "build", "--design", "suppression", "--conditions", "grayscale", "--images",
                 str(root / "images"), "--out", str(root / "exp"), "--workers", "1", "--attention", "0"]) == 0
    return root / "exp"


def cuebench_eval(experiment, spec: str) -> subprocess.CompletedProcess:
    """``python -m cuebench eval`` as a researcher runs it, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "cuebench", "eval", "--experiment", str(experiment), "--model", spec,
                           "--quiet", "--device", "cpu"], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize("layout", ["bare state_dict", "declared original_classes"])
def test_cuebench_eval_answers_a_distinguish_checkpoint_with_the_summed_logits(tmp_path, grayscale_experiment, layout):
    experiment = tmp_path / "exp"
    shutil.copytree(grayscale_experiment, experiment, ignore=shutil.ignore_patterns("responses.sqlite*"))
    n, cat, dog = 1000, IMAGENET16_INDICES["cat"][0], IMAGENET16_INDICES["dog"][0]
    state = build_model("test_resnet", num_classes=2 * n).state_dict()
    state["fc.weight"] = torch.zeros_like(state["fc.weight"])  # every answer comes from the biases
    bias = torch.zeros(2 * n)
    bias[dog], bias[n + cat], bias[n + dog] = 5.0, 3.0, -4.0  # the disrupted rows vote for cat
    state["fc.bias"] = bias
    checkpoint = tmp_path / "distinguish.pth"
    torch.save(state if layout == "bare state_dict" else {"state_dict": state, "original_classes": n}, checkpoint)

    def mean_rule(logits: np.ndarray) -> str:  # 16class-mean by hand: softmax, mean over each class's indices
        p = np.exp(logits - logits.max())
        p /= p.sum()
        return max(IMAGENET16_INDICES, key=lambda label: p[list(IMAGENET16_INDICES[label])].mean())

    b = bias.numpy().astype(np.float64)
    assert mean_rule(b[:n]) == "dog"  # what the first n logits alone answer
    expected = mean_rule(b[:n] + b[n:])
    assert expected == "cat"
    done = cuebench_eval(experiment, f"test_resnet:{checkpoint}")
    assert done.returncode == 0, done.stderr[-2000:]
    inferred = [line for line in done.stderr.splitlines() if "twin head inferred" in line]
    assert len(inferred) == (layout == "bare state_dict")  # said once, only when guessed from the shape
    with sqlite3.connect(experiment / "responses.sqlite") as conn:
        rows = conn.execute("SELECT response, device FROM responses WHERE observer_kind = 'model' AND role = 'test'"
                            ).fetchall()
    assert len(rows) == 12 and {r for r, _ in rows} == {expected}  # 2 images x (original + 5 grayscale levels)
    assert json.loads(rows[0][1])["head"].startswith("twin head inferred" if inferred else "twin head folded")


def test_cuebench_eval_names_the_shapes_of_a_checkpoint_that_does_not_fit(tmp_path, grayscale_experiment):
    checkpoint = tmp_path / "three.pth"
    torch.save(build_model("test_resnet", num_classes=3).state_dict(), checkpoint)
    done = cuebench_eval(grayscale_experiment, f"test_resnet:{checkpoint}")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cuebench eval: error: checkpoint ")
    assert "fc.weight has shape (3, 96), test_resnet's has (1000, 96)" in lines[0]
    assert "original_classes" in lines[0] and "imagenet_indices" in lines[0]


@pytest.mark.slow
@pytest.mark.shared
def test_reduced_study_trains_five_algorithms_and_writes_the_report(tmp_path, shared, capsys):
    out = tmp_path / "study"
    photos = three_class_photos(shared, tmp_path / "photos")
    argv = ["train-cues", str(out), "--photos", str(photos), "--dist", str(shared / "data" / "dist"),
            "--cue-conflict", str(shared / "data" / "geirhos2019" / "stimuli" / "cue-conflict"), "--runs", "1",
            "--epochs", "1", "--max-trials", "3", "--cue-per-class", "1", "--input-size", "32",
            "--batch-size", "8", "--device", "cpu", "--dist-steps", "1", "--synthesis-size", "64"]
    assert main(argv) == 2  # 20 synthesis steps (one DiST step) from unit noise: noise, not texture
    err = capsys.readouterr().err
    assert "--dist-steps is deprecated, use --synthesis-steps (1 DiST steps = --synthesis-steps 20)" in err
    assert "at 64 px: LV ratio median" in err and "at 32 px:" in err and not out.exists()
    assert main([*argv, "--no-quality-gate", "--algorithm-option", "padain.p=0.5"]) == 0
    record = json.loads((out / "cue_study.json").read_text())
    disruption, quality = record["disruption"], record["disruption"]["quality"]
    assert record["classes"] == [82, 87, 907] and record["cue_conflict_categories"] == ["bird", "bottle"]
    assert record["cue_conflict_images"] == 2  # one bird with bottle texture, one bottle with bird texture
    assert disruption["feature_net"] == "tf_efficientnet_lite1"  # not the network being trained
    assert quality["checked"] is False and quality["passed"] is False and set(quality["sizes"]) == {"64", "32"}
    at64 = quality["sizes"]["64"]
    assert at64["passed"] is False and at64["LV_ratio_median"] > at64["LV_dist_band"][1]
    assert (disruption["dist_steps"], disruption["lbfgs_iterations"], disruption["size"]) == (1, 20, 64)
    assert {len(v) for v in record["splits"].values()} == {3, 6} and len(record["splits"]["train"]) == 6
    runs = pd.read_csv(out / "reports" / "cue_runs.csv")
    assert list(runs["algorithm"]) == list(ALGORITHM_ORDER)
    assert runs["dist_trials"].eq(3).all() and runs["dist_accuracy"].between(0, 1).all()
    assert runs["shape_bias"].between(0, 1).all() and runs["original_accuracy"].between(0, 1).all()
    assert (runs["n_shape"] + runs["n_texture"]).eq(2).all()  # a 3-class model answers bird or bottle, nothing else
    assert (out / "reports" / "cue_summary.csv").is_file() and (out / "reports" / "cue_report.html").is_file()
    html = (out / "reports" / "cue_report.html").read_text()
    assert "Difference from ERM per measure" in html and "no rank test, 1 matched run(s) as blocks" in html
    assert (out / "reports" / "cue_effects.csv").is_file()
    table = pd.read_csv(out / "cue_training.csv")
    options = table.groupby("algorithm")["algorithm_options"].first().map(json.loads)
    assert options["padain"] == {"p": 0.5} and options["erm"] == {} and options["infodrop"]["test_protocol"] == "shi"
    optimizers = table.groupby("algorithm")["optimizer"].first().map(json.loads)
    assert optimizers["sagnet"] == {"name": "sgd", "lr": 0.004, "momentum": 0.9, "weight_decay": 1e-4}
    assert optimizers["erm"] == {"name": "adam", "lr": 1e-4, "momentum": 0.0, "weight_decay": 0.0}
    checkpoint = out / table.loc[table["algorithm"] == "distinguish", "checkpoint"].iloc[0]
    saved = torch.load(checkpoint, weights_only=True)
    assert saved["original_classes"] == 3 and saved["imagenet_indices"] == [82, 87, 907]
    assert saved["state_dict"]["classifier.weight"].shape[0] == 6  # 2n: three classes and their disrupted twins
    head = load_model(f"tf_efficientnet_lite0:{checkpoint}").model.get_classifier()
    w, b = saved["state_dict"]["classifier.weight"], saved["state_dict"]["classifier.bias"]
    torch.testing.assert_close(head.bias[[82, 87, 907]], b[:3] + b[3:])
    torch.testing.assert_close(head.weight[[82, 87, 907]], w[:3] + w[3:])
    assert torch.isneginf(head.bias).sum() == 997
    fresh = tmp_path / "dist_again"
    shutil.copytree(out / "dist", fresh, ignore=shutil.ignore_patterns("responses.sqlite*"))
    assert main(["eval", "--experiment", str(fresh), "--model", f"tf_efficientnet_lite0:{checkpoint}",
                 "--quiet", "--device", "cpu"]) == 0
    with sqlite3.connect(fresh / "responses.sqlite") as conn:
        answers = conn.execute("SELECT decision_rule, response FROM responses WHERE observer_kind = 'model'").fetchall()
    assert answers and {rule for rule, _ in answers} == {"oddity"} and {r for _, r in answers} <= {"1", "2", "3"}
    with sqlite3.connect(out / "cue_conflict" / "responses.sqlite") as conn:
        answered = {r for (r,) in conn.execute("SELECT response FROM responses WHERE observer_kind = 'model'")}
    assert answered <= {"bird", "bottle"}
