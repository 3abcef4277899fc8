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


CUE_STUDY = {"photos": "photos", "dist": "dist", "cue_conflict": "cc", "input_size": 64, "seed": 0,
             "disruption": {"method": "gram", "feature_net": "vgg19", "dist_steps": 10, "lbfgs_iterations": 200,
                            "noise_scale": 1.0, "size": 224, "quality": {"checked": True}},
             "splits": {"train": ["a"], "val": ["b"]}, "classes": [82, 907],
             "cue_conflict_categories": ["bird", "bottle"], "cue_conflict_images": 4}


def test_cue_studies_of_both_formats_read_and_a_study_is_written_from_its_schema(tmp_path):
    """Studies prepared before the disruption was recorded kept synthesis_steps instead; both read, a file with
    neither or both is refused naming file and field, and a saved study holds exactly its given fields."""
    from cuebench.studies import CueStudy

    folder = StudyDir(tmp_path / "new")
    written = folder.save(CueStudy(**CUE_STUDY))
    assert json.loads(written.read_text()) == CUE_STUDY
    assert folder.study().disruption.dist_steps == 10 and folder.study().synthesis_steps is None
    old = {k: v for k, v in CUE_STUDY.items() if k != "disruption"} | {"synthesis_steps": 10}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "cue_study.json").write_text(json.dumps(old))
    assert StudyDir(tmp_path / "old").study().synthesis_steps == 10
    for name, data, problem in (("neither", {k: v for k, v in old.items() if k != "synthesis_steps"},
                                 "'disruption': is missing"),
                                ("both", {**CUE_STUDY, "synthesis_steps": 10}, "'synthesis_steps': is given beside")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "cue_study.json").write_text(json.dumps(data))
        with pytest.raises(SchemaError, match=rf"{name}/cue_study.json: field {problem}"):
            StudyDir(tmp_path / name).study()
    with pytest.raises(SchemaError, match="field 'input_size': must be > 0"):
        CueStudy(**{**CUE_STUDY, "input_size": 0})


def test_a_folder_is_one_kind_of_study(tmp_path):
    from cuebench.studies import CueStudy

    write_study(tmp_path)
    with pytest.raises(StudyError, match="holds study.json already; a study directory is one kind of study"):
        StudyDir(tmp_path).save(CueStudy(**CUE_STUDY))
    (tmp_path / "cue_study.json").write_text(json.dumps(CUE_STUDY))
    with pytest.raises(StudyError, match="holds both study.json and cue_study.json"):
        StudyDir(tmp_path).study()
