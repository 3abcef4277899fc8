"""The cue-reliance training study: a reduced real run (DiST originals, cue-conflict images, all five
algorithms, 1 epoch), its report, and a DiSTinguish checkpoint answering trials through ``cuebench eval``."""

from __future__ import annotations

import json
import shutil
import sqlite3

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from cuebench.app.cli import main
from model_eval.imagenet16 import IMAGENET16_INDICES
from model_eval.models import WeightsMismatch, load_model
from analysis.cue_study import ALGORITHM_ORDER
from cuebench.app.train_cues import (TrainingError, check_disruption, dist_reference_band, read_photos, split_photos,
                                     texture_ratios)
from model_eval.training.jobs import build_model


def test_photos_need_imagenet_labels(tmp_path):
    with pytest.raises(TrainingError, match="labels.csv"):
        read_photos(tmp_path)
    (tmp_path / "labels.csv").write_text("image,imagenet_index\nmissing.jpg,3\n")
    with pytest.raises(TrainingError, match="no image 'missing'"):
        read_photos(tmp_path)
    photos = [(f"p{i}", None, i) for i in range(10)]
    splits = split_photos(photos, seed=0)
    assert sorted(sum(splits.values(), [])) == photos and all(splits.values())


def test_a_distinguish_checkpoint_folds_its_twin_rows_into_the_original_classes(tmp_path):
    model = build_model("tf_efficientnet_lite0", num_classes=2000)
    path = tmp_path / "distinguish.pth"
    torch.save({"state_dict": model.state_dict(), "original_classes": 1000}, path)
    loaded = load_model(f"tf_efficientnet_lite0:{path}")
    head, trained = loaded.model.get_classifier(), model.get_classifier()
    assert head.out_features == 1000
    torch.testing.assert_close(head.weight, trained.weight[:1000] + trained.weight[1000:])
    torch.testing.assert_close(head.bias, trained.bias[:1000] + trained.bias[1000:])
    torch.save({"state_dict": model.state_dict()}, tmp_path / "plain.pth")
    with pytest.raises(Exception, match="wrong shape"):
        load_model(f"tf_efficientnet_lite0:{tmp_path / 'plain.pth'}")
    plain = build_model("tf_efficientnet_lite0", num_classes=1000)
    torch.save({"state_dict": plain.state_dict(), "original_classes": 1000}, tmp_path / "n_rows.pth")
    torch.testing.assert_close(load_model(f"tf_efficientnet_lite0:{tmp_path / 'n_rows.pth'}").model.get_classifier().weight,
                               plain.get_classifier().weight)  # already n rows: nothing to fold
    torch.save({"state_dict": model.state_dict(), "original_classes": 900}, tmp_path / "odd.pth")
    with pytest.raises(WeightsMismatch, match="2000 rows; original_classes 900 needs 900, or 2 x 900"):
        load_model(f"tf_efficientnet_lite0:{tmp_path / 'odd.pth'}")


@pytest.mark.shared
def test_disrupted_images_that_look_like_noise_are_refused_with_the_numbers(shared):
    release = shared / "data" / "dist"
    band = dist_reference_band(release, limit=20)
    assert band.shape == (2, 2) and (band[:, 0] < 1).all() and (band[:, 0] < band[:, 1]).all()
    names = sorted(p.name for p in (release / "original").iterdir())[20:26]
    originals = np.stack([np.asarray(Image.open(release / "original" / n).convert("RGB")) for n in names])
    own = np.stack([np.asarray(Image.open(release / "set1" / n).convert("RGB")) for n in names])
    report = check_disruption(texture_ratios(originals, own), band)  # DiST's own images pass
    assert set(report) == {"LV_ratio_median", "HFE_ratio_median", "LV_dist_band", "HFE_dist_band", "passed"}
    assert report["passed"] is True
    noise = np.random.default_rng(0).integers(0, 256, originals.shape, dtype=np.uint8)
    with pytest.raises(TrainingError, match=r"LV ratio median \d+\.\d+ outside DiST's 5-95 % band"):
        check_disruption(texture_ratios(originals, noise), band)
    assert check_disruption(texture_ratios(originals, noise), band, refuse=False)["passed"] is False
    flat = np.full_like(originals, 128)
    with pytest.raises(TrainingError, match="HFE ratio median 0.00"):
        check_disruption(texture_ratios(originals, flat), band)
    checker = np.indices((224, 224)).sum(axis=0) % 2 * 2 - 1  # +-1, all its energy at the Nyquist corner
    pattern = np.stack([100 + 20 * checker] * 3, axis=-1).astype(np.uint8)
    doubled = np.stack([100 + 40 * checker] * 3, axis=-1).astype(np.uint8)
    # by hand: block variances x4; HFE = AC/(DC + AC) power = 20^2/(100^2 + 20^2) -> 40^2/(100^2 + 40^2)
    np.testing.assert_allclose(texture_ratios(pattern[None], doubled[None]),
                               [[4.0, (1600 / 11600) / (400 / 10400)]], rtol=1e-9)


@pytest.mark.slow
def test_cuebench_eval_answers_a_distinguish_checkpoint_with_the_summed_logits(tmp_path, photos):
    images = tmp_path / "images"
    for label, photo in (("cat", "chelsea"), ("dog", "coffee")):
        (images / label).mkdir(parents=True)
        Image.fromarray(photos[photo]).save(images / label / f"{photo}.png")
    experiment = tmp_path / "exp"
    assert main(["stimuli", "build", "--design", "suppression", "--conditions", "grayscale", "--images", str(images),
                 "--out", str(experiment), "--workers", "1"]) == 0
    n, cat, dog = 1000, IMAGENET16_INDICES["cat"][0], IMAGENET16_INDICES["dog"][0]
    state = build_model("test_resnet", num_classes=2 * n).state_dict()
    state["fc.weight"] = torch.zeros_like(state["fc.weight"])  # every answer comes from the biases
    bias = torch.zeros(2 * n)
    bias[dog], bias[n + cat], bias[n + dog] = 5.0, 3.0, -4.0  # the disrupted rows vote for cat
    state["fc.bias"] = bias
    checkpoint = tmp_path / "distinguish.pth"
    torch.save({"state_dict": state, "original_classes": n}, checkpoint)

    def mean_rule(logits: np.ndarray) -> str:  # 16class-mean by hand: softmax, mean over each class's indices
        p = np.exp(logits - logits.max())
        p /= p.sum()
        return max(IMAGENET16_INDICES, key=lambda label: p[list(IMAGENET16_INDICES[label])].mean())

    b = bias.numpy().astype(np.float64)
    assert mean_rule(b[:n]) == "dog"  # what the first n logits alone answer
    expected = mean_rule(b[:n] + b[n:])
    assert expected == "cat"
    assert main(["eval", "--experiment", str(experiment), "--model", f"test_resnet:{checkpoint}", "--quiet",
                 "--device", "cpu"]) == 0
    with sqlite3.connect(experiment / "responses.sqlite") as conn:
        answers = [r for (r,) in conn.execute(
            "SELECT response FROM responses WHERE observer_kind = 'model' AND role = 'test'")]
    assert len(answers) == 12 and set(answers) == {expected}  # 2 images x (original + 5 grayscale levels)


@pytest.mark.slow
@pytest.mark.shared
def test_reduced_study_trains_five_algorithms_and_writes_the_report(tmp_path, shared, capsys):
    out = tmp_path / "study"
    argv = ["train-cues", str(out), "--photos", str(shared / "data" / "dist"), "--dist", str(shared / "data" / "dist"),
            "--cue-conflict", str(shared / "data" / "geirhos2019" / "stimuli" / "cue-conflict"), "--runs", "1",
            "--epochs", "1", "--max-photos", "6", "--max-trials", "3", "--cue-per-class", "1", "--input-size", "32",
            "--batch-size", "8", "--device", "cpu", "--synthesis-steps", "1", "--synthesis-size", "64"]
    with pytest.warns(UserWarning, match="the network being trained"):
        assert main(argv) == 2  # 20 L-BFGS iterations from unit noise: noise, not texture
    assert "outside DiST's 5-95 % band" in capsys.readouterr().err and not out.exists()
    with pytest.warns(UserWarning, match="the network being trained"):
        assert main([*argv, "--no-quality-gate"]) == 0
    disruption = json.loads((out / "cue_study.json").read_text())["disruption"]
    quality = disruption["quality"]
    assert disruption["feature_net"] == "tf_efficientnet_lite0" and quality["checked"] is False
    assert quality["passed"] is False and quality["LV_ratio_median"] > quality["LV_dist_band"][1]
    assert (disruption["dist_steps"], disruption["lbfgs_iterations"], disruption["size"]) == (1, 20, 64)
    runs = pd.read_csv(out / "reports" / "cue_runs.csv")
    assert list(runs["algorithm"]) == list(ALGORITHM_ORDER)
    assert runs["dist_trials"].eq(3).all() and runs["dist_accuracy"].between(0, 1).all()
    assert runs["shape_bias"].between(0, 1).all() and runs["original_accuracy"].between(0, 1).all()
    assert (out / "reports" / "cue_summary.csv").is_file() and (out / "reports" / "cue_report.html").is_file()
    html = (out / "reports" / "cue_report.html").read_text()
    assert "Difference from ERM per measure" in html and "no rank test, 1 matched run(s) as blocks" in html
    assert (out / "reports" / "cue_effects.csv").is_file()
    table = pd.read_csv(out / "cue_training.csv")
    checkpoint = out / table.loc[table["algorithm"] == "distinguish", "checkpoint"].iloc[0]
    saved = torch.load(checkpoint, weights_only=True)
    assert saved["original_classes"] == 1000 and saved["state_dict"]["classifier.weight"].shape[0] == 2000
    fresh = tmp_path / "dist_again"
    shutil.copytree(out / "dist", fresh, ignore=shutil.ignore_patterns("responses.sqlite*"))
    assert main(["eval", "--experiment", str(fresh), "--model", f"tf_efficientnet_lite0:{checkpoint}",
                 "--quiet", "--device", "cpu"]) == 0
    with sqlite3.connect(fresh / "responses.sqlite") as conn:
        answers = conn.execute("SELECT decision_rule, response FROM responses WHERE observer_kind = 'model'").fetchall()
    assert answers and {rule for rule, _ in answers} == {"oddity"} and {r for _, r in answers} <= {"1", "2", "3"}
