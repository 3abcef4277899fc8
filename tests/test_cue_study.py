"""The cue-reliance training study: a reduced real run (DiST originals, cue-conflict images, all five
algorithms, 1 epoch), its report, and a DiSTinguish checkpoint answering trials through ``cuebench eval``."""

from __future__ import annotations

import shutil
import sqlite3

import pandas as pd
import pytest
import torch

from cuebench.cli import main
from model_eval.models import load_model
from model_eval.training.cue_study import ALGORITHM_ORDER, TrainingError, read_photos, split_photos
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


def test_a_distinguish_checkpoint_answers_with_its_original_classes(tmp_path):
    model = build_model("tf_efficientnet_lite0", num_classes=2000)
    path = tmp_path / "distinguish.pth"
    torch.save({"state_dict": model.state_dict(), "original_classes": 1000}, path)
    loaded = load_model(f"tf_efficientnet_lite0:{path}")
    assert loaded.model.get_classifier().out_features == 1000
    torch.testing.assert_close(loaded.model.get_classifier().weight, model.get_classifier().weight[:1000])
    torch.save({"state_dict": model.state_dict()}, tmp_path / "plain.pth")
    with pytest.raises(Exception, match="wrong shape"):
        load_model(f"tf_efficientnet_lite0:{tmp_path / 'plain.pth'}")


@pytest.mark.slow
@pytest.mark.shared
def test_reduced_study_trains_five_algorithms_and_writes_the_report(tmp_path, shared):
    out = tmp_path / "study"
    code = main(["train-cues", str(out), "--photos", str(shared / "data" / "dist"), "--dist",
                 str(shared / "data" / "dist"), "--cue-conflict",
                 str(shared / "data" / "geirhos2019" / "stimuli" / "cue-conflict"), "--runs", "1", "--epochs", "1",
                 "--max-photos", "6", "--max-trials", "3", "--cue-per-class", "1", "--input-size", "32",
                 "--batch-size", "8", "--device", "cpu"])
    assert code == 0
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
