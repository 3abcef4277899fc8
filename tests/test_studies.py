"""Study directories as the contract reads them: kind from the study file, schema errors naming
file and field, split files that cannot lie outside the folder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cuebench.errors import SchemaError
from cuebench.studies import SplitData, StudyDir, StudyError, load_split, save_split

ENTRY = {"study": "ZGO", "target": "shape", "correlated": "hue", "dataset_sample": 0,
         "selected": {"shape": ["0", "1", "2"], "hue": ["red", "green", "blue"]},
         "selected_index": {"shape": [0, 1, 2], "hue": [0, 1, 2]},
         "design_train": [[1 / 3, 0, 0], [0, 1 / 3, 0], [0, 0, 1 / 3]],
         "design_test": [[0, 1, 1], [1, 0, 1], [1, 1, 0]], "shortcut_class": None,
         "files": {"train": "data/zgo/train.npz"}, "cooccurrence": {"train": [[2, 0, 0], [0, 2, 0], [0, 0, 2]]}}


def write_study(root, entry=ENTRY):
    root.mkdir(parents=True, exist_ok=True)
    (root / "study.json").write_text(json.dumps({
        "format": "cuebench-diagvib-study", "version": 1, "seed": 0, "sizes": {"train": 6}, "digits": "mnist",
        "factor_space": {}, "studies": ["ZGO"], "pairs": [["shape", "hue"]], "dataset_samples": [0],
        "entries": [entry], "provenance": {}}))


def test_kind_comes_from_the_study_file(tmp_path):
    write_study(tmp_path / "factor")
    (tmp_path / "cue").mkdir()
    (tmp_path / "cue" / "cue_study.json").write_text(json.dumps({
        "photos": "photos", "dist": "dist", "cue_conflict": "cc", "input_size": 64, "seed": 0,
        "synthesis_steps": 10, "splits": {"train": ["a"]}}))
    assert StudyDir(tmp_path / "factor").kind == "factor"
    assert StudyDir(tmp_path / "cue").kind == "cue" and StudyDir(tmp_path / "cue").load("cue").input_size == 64
    assert StudyDir(tmp_path).kind is None
    study = StudyDir(tmp_path / "factor").load("factor")
    assert study.entries[0].target == "shape" and study.sizes == {"train": 6}


def test_a_malformed_study_names_file_and_field(tmp_path):
    write_study(tmp_path, {**ENTRY, "dataset_sample": -1})
    with pytest.raises(SchemaError, match=r"study.json: field 'entries\[0\].dataset_sample': must be >= 0"):
        StudyDir(tmp_path).load("factor")


def test_split_files_stay_inside_and_round_trip(tmp_path):
    write_study(tmp_path)
    split = SplitData(np.zeros((2, 4, 4, 3), np.uint8), np.array([0, 1]), np.array([1, 0]), {"hue": np.array([3, 4])})
    path = StudyDir(tmp_path).split_file("data/zgo/train.npz")
    save_split(path, split, "recipe")
    again = load_split(path)
    assert np.array_equal(again.label, [0, 1]) and np.array_equal(again.table["hue"], [3, 4])
    with pytest.raises(StudyError, match="outside the study directory"):
        StudyDir(tmp_path).split_file("../../etc/passwd")
    (tmp_path / "data" / "link.npz").symlink_to(tmp_path.parent / "elsewhere.npz")
    with pytest.raises(StudyError, match="outside the study directory"):
        StudyDir(tmp_path).split_file("data/link.npz")
