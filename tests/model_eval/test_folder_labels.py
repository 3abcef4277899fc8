"""Folder labels found among the ImageNet-1k classes at build time, stored in experiment.json, used by
``cuebench eval`` without ``--mapping``, and an explicit mapping file overrides them.

Expected indices are the ImageNet-1k class order every timm model uses (e.g. model-vs-human's 16-class lists:
cat 281-285; 849 teapot)."""

from __future__ import annotations

import json
import shutil

import pytest
from PIL import Image

from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore
from cuebench_app.cli import main


@pytest.fixture(scope="module")
def folder_experiment(tmp_path_factory, photos):
    root = tmp_path_factory.mktemp("labels")
    for label, photo in (("cat", "chelsea"), ("teapot", "coffee")):
        (root / "src" / label).mkdir(parents=True)
        Image.fromarray(photos[photo]).save(root / "src" / label / f"{photo}.png")
    assert main(["stimuli", "build", "--design", "suppression", "--images", str(root / "src"),
                 "--out", str(root / "exp"), "--conditions", "grayscale", "--workers", "1"]) == 0
    return root


def test_build_stores_the_mapping_in_experiment_json(folder_experiment, capsys):
    label_set = json.loads((folder_experiment / "exp" / "experiment.json").read_text())["label_set"]
    assert label_set["imagenet_indices"]["teapot"] == [849]
    assert {281, 282, 283, 284, 285} <= set(label_set["imagenet_indices"]["cat"])


@pytest.mark.slow
def test_eval_needs_no_mapping_and_an_explicit_one_overrides(folder_experiment, tmp_path):
    expdir = ExperimentDir(folder_experiment / "exp")
    eval_ = ["eval", "--model", "tf_efficientnet_lite0", "--device", "cpu", "--workers", "0", "--quiet"]
    assert main([*eval_, "--experiment", str(expdir.root)]) == 0
    with ResponseStore(expdir.responses_file) as store:
        rows = store.rows()
    assert len(rows) == len(expdir.load().trials)
    assert {r["device"]["mapping"] for r in rows} == {"label_set:custom"}
    other = tmp_path / "exp"
    shutil.copytree(expdir.root, other)
    (other / "responses.sqlite").unlink()
    (tmp_path / "mapping.json").write_text(json.dumps({"cat": [281], "teapot": [849]}))
    assert main([*eval_, "--experiment", str(other), "--mapping", str(tmp_path / "mapping.json")]) == 0
    with ResponseStore(other / "responses.sqlite") as store:
        assert {r["device"]["mapping"] for r in store.rows()} == {"file:mapping.json"}
