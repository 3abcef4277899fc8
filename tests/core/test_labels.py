"""Folder labels found among the ImageNet-1k classes at build time, stored in experiment.json,
used by ``cuebench eval`` without ``--mapping``; ``cuebench labels search`` for the researcher.

Expected indices are the ImageNet-1k class order every timm model uses (e.g. model-vs-human's
16-class lists: cat 281-285, truck 555/569/717/864/867; 849 teapot, 817 sports car)."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from cuebench_app.cli import main
from cuebench.expdir import ExperimentDir
from cuebench.labels import imagenet_mapping, matching_classes
from cuebench.responses import ResponseStore


def test_a_label_names_the_classes_it_heads():
    assert [c.index for c in matching_classes("teapot")] == [849]
    assert {281, 282, 283, 284, 285} <= {c.index for c in matching_classes("cat")}
    assert {555, 569, 717, 864, 867} <= {c.index for c in matching_classes("trucks")}  # plural, head noun
    assert [c.index for c in matching_classes("sports_car")] == [817]
    assert imagenet_mapping(["teapot", "qwerty-not-a-class"]) == {"teapot": [849]}


def test_labels_search_prints_candidates_with_indices(capsys):
    assert main(["labels", "search", "tabby"]) == 0
    out = capsys.readouterr().out
    assert "281" in out and "tabby cat" in out
    assert main(["labels", "search", "notaclassname"]) == 2
    assert "no ImageNet-1k class has 'notaclassname'" in capsys.readouterr().err


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
    import shutil

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
