"""DiagViB-6 studies: every split's co-occurrence matrix is the paper's design (Eulig et al. 2021, Fig. 3),
and the study directory doubles as a human classify experiment."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cuebench_app.cli import main
from stimuli.diagvib import FACTORS, load_factor_space
from cuebench.studies import load_split
from stimuli.diagvib_studies import (STUDIES, allocate, all_pairs, cooccurrence, derive_seed,
                                     select_classes, split_classes, study_design)
from cuebench.trials import NOT_CLEAR, Experiment

EYE = np.eye(3, dtype=bool)


def design_counts(study: str, seed: int, split: str, n: int):
    design = study_design(study, np.random.default_rng(seed))
    counts = allocate(design.test.astype(float) if split == "test" else design.train, n)
    selected = select_classes(load_factor_space(), 0, 0)
    classes, rows, cols = split_classes(counts, selected, "shape", "hue", np.random.default_rng(seed))
    return design, cooccurrence(rows, cols), classes, selected


def test_zso_is_uniform_in_train_and_test():
    for split in ("train", "test"):
        _, matrix, _, _ = design_counts("ZSO", 1, split, 900)
        assert (matrix == 100).all()


def test_zgo_trains_on_the_diagonal_and_tests_off_it():
    _, train, _, _ = design_counts("ZGO", 1, "train", 900)
    _, test, _, _ = design_counts("ZGO", 1, "test", 600)
    np.testing.assert_array_equal(train, np.diag([300, 300, 300]))
    np.testing.assert_array_equal(test, np.where(EYE, 0, 100))


@pytest.mark.parametrize("c", [1, 2, 3])
def test_cgo_adds_c_combinations_and_keeps_one_unseen_per_row(c):
    for seed in range(10):
        design, train, _, _ = design_counts(f"CGO-{c}", seed, "train", 60 * (3 + c))
        _, test, _, _ = design_counts(f"CGO-{c}", seed, "test", 100 * (6 - c))
        seen = train > 0
        assert (seen & EYE).sum() == 3 and (seen & ~EYE).sum() == c
        assert (train[seen] == 60).all()
        assert ((~seen).sum(axis=1) >= 1).all()  # at least one held-out combination per target class
        np.testing.assert_array_equal(test > 0, ~seen)
        assert (test[test > 0] == 100).all()


def test_chgo_separates_one_shortcut_class_from_a_zso_block():
    for seed in range(6):
        design, train, _, _ = design_counts("CHGO", seed, "train", 500)
        k = design.shortcut_class
        others = [i for i in range(3) if i != k]
        expected = np.zeros((3, 3), int)
        expected[k, k] = 100
        expected[np.ix_(others, others)] = 100
        np.testing.assert_array_equal(train, expected)
        _, test, _, _ = design_counts("CHGO", seed, "test", 400)
        np.testing.assert_array_equal(test > 0, expected == 0)


@pytest.mark.parametrize("f", [5, 10, 20])
def test_fgo_violates_the_correlation_in_f_percent(f):
    _, train, _, _ = design_counts(f"FGO-{f}", 0, "train", 6000)
    off = np.where(EYE, 0, train)
    np.testing.assert_array_equal(off.sum(axis=1) / train.sum(axis=1), [f / 100] * 3)
    assert (off[~EYE] == off[~EYE][0]).all()  # spread evenly over the two off-diagonal cells
    _, test, _, _ = design_counts(f"FGO-{f}", 0, "test", 600)
    np.testing.assert_array_equal(test, np.where(EYE, 0, 100))


def test_split_classes_use_the_selected_classes_and_keep_others_uniform():
    _, matrix, classes, selected = design_counts("ZGO", 3, "train", 3000)
    for factor in FACTORS:
        assert set(np.unique(classes[factor])) <= set(selected[factor])
    counts = np.bincount(classes["texture"], minlength=5)[selected["texture"]]
    assert counts.min() > 850  # the uncorrelated factors are uniform over their three classes


def test_allocate_is_exact_and_sums_to_n():
    counts = allocate(np.array([[1, 1, 0], [0, 1, 0], [0, 0, 1]], float), 10)
    assert counts.sum() == 10 and sorted(counts[counts > 0].tolist()) == [2, 2, 3, 3]
    assert derive_seed("a", 1) == derive_seed("a", 1) != derive_seed("a", 2)
    assert len(all_pairs()) == 30 and len(STUDIES) == 9


def build(out, *extra):
    return main(["stimuli", "build", "--design", "diagvib", "--out", str(out), "--diagvib-digits", "sklearn-digits",
                 "--sizes", "90,18,60", "--diagvib-human-trials", "4", *extra])


def test_build_writes_splits_study_json_and_human_trials(tmp_path):
    out = tmp_path / "study"
    assert build(out, "--study", "ZGO,CHGO", "--target", "shape", "--correlated", "hue", "--dataset-sample", "0,1") == 0
    study = json.loads((out / "study.json").read_text())
    assert study["studies"] == ["CHGO", "ZGO"] and study["dataset_samples"] == [0, 1]
    assert len(study["entries"]) == 4
    for entry in study["entries"]:
        train = load_split(out / entry["files"]["train"])
        assert train.images.shape == (90, 128, 128, 3)
        design = np.array(entry["design_train"]) > 0
        np.testing.assert_array_equal(np.array(entry["cooccurrence"]["train"]) > 0, design)
        np.testing.assert_array_equal(cooccurrence(train.label, train.column), entry["cooccurrence"]["train"])
        shape_names = [load_factor_space().class_names("shape")[i] for i in train.table["class_shape"]]
        assert shape_names == [entry["selected"]["shape"][k] for k in train.label]
    experiment = Experiment.load(out)
    assert len(experiment.trials) == 4 * 4
    trial = experiment.trials[0]
    assert trial.instruction == "Which digit is shown?"
    assert trial.choices[-1] == NOT_CLEAR and trial.correct in trial.choices[:3]
    assert trial.params["split"] == "test" and trial.params["in_training_design"] is False
    assert (out / experiment.stimuli[trial.stimuli[0]].path).is_file()


def test_rebuild_skips_existing_splits_and_adds_studies(tmp_path):
    out = tmp_path / "study"
    assert build(out, "--study", "ZSO", "--target", "hue", "--correlated", "shape") == 0
    split = out / "data/ZSO/hue--shape/sample-0/train.npz"
    stamp = split.stat().st_mtime_ns
    assert build(out, "--study", "ZSO", "--target", "hue", "--correlated", "shape") == 0
    assert split.stat().st_mtime_ns == stamp
    assert build(out, "--study", "ZGO", "--target", "shape", "--correlated", "hue") == 0
    study = json.loads((out / "study.json").read_text())
    assert {(e["study"], e["target"]) for e in study["entries"]} == {("ZSO", "hue"), ("ZGO", "shape")}
    experiment = Experiment.load(out)
    assert {t.params["target"] for t in experiment.trials} == {"hue", "shape"}
    assert {t.instruction for t in experiment.trials} == {"Which digit is shown?", "Which colour is the object?"}


@pytest.mark.parametrize("extra, message", [
    (["--study", "XYZ", "--target", "hue", "--correlated", "shape"], "unknown study"),
    (["--study", "ZSO", "--target", "colour", "--correlated", "shape"], "is not a factor"),
    (["--study", "ZSO", "--target", "hue", "--correlated", "hue"], "must differ"),
    (["--study", "ZSO"], "needs --target and --correlated"),
])
def test_bad_options_exit_2_with_a_clear_message(tmp_path, capsys, extra, message):
    assert build(tmp_path / "x", *extra) == 2
    assert message in capsys.readouterr().err


def test_settings_mismatch_is_refused(tmp_path, capsys):
    out = tmp_path / "study"
    assert build(out, "--study", "ZSO", "--target", "hue", "--correlated", "shape") == 0
    assert main(["stimuli", "build", "--design", "diagvib", "--out", str(out), "--diagvib-digits", "sklearn-digits",
                 "--sizes", "90,18,60", "--seed", "5", "--study", "ZGO", "--target", "hue", "--correlated", "shape"]) == 2
    assert "different 'seed'" in capsys.readouterr().err


def test_same_seed_builds_the_same_study(tmp_path):
    for name in ("a", "b"):
        assert build(tmp_path / name, "--study", "CGO-2", "--target", "texture", "--correlated", "scale") == 0
    split = "data/CGO-2/texture--scale/sample-0/test.npz"
    np.testing.assert_array_equal(load_split(tmp_path / "a" / split).images, load_split(tmp_path / "b" / split).images)
    a, b = Experiment.load(tmp_path / "a"), Experiment.load(tmp_path / "b")
    assert [t.to_dict() for t in a.trials] == [t.to_dict() for t in b.trials] and a.stimuli == b.stimuli
    entries = [json.loads((tmp_path / name / "study.json").read_text())["entries"] for name in ("a", "b")]
    assert entries[0] == entries[1]


def test_a_digit_file_outside_the_working_folder_is_recorded_by_name(tmp_path, monkeypatch):
    """study.json and experiment.json are shared with the study; the researcher's file system is not."""
    rng = np.random.default_rng(0)
    digits = tmp_path / "elsewhere" / "my_mnist.csv"
    digits.parent.mkdir()
    labels = np.repeat(np.arange(10), 12)
    np.savetxt(digits, np.column_stack([labels, rng.integers(0, 256, (len(labels), 784))]), fmt="%d", delimiter=",")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["stimuli", "build", "--design", "diagvib", "--out", "study", "--diagvib-digits", str(digits),
                 "--sizes", "90,18,60", "--diagvib-human-trials", "4", "--study", "ZSO", "--target", "hue",
                 "--correlated", "shape"]) == 0
    study = json.loads((work / "study" / "study.json").read_text())
    experiment = json.loads((work / "study" / "experiment.json").read_text())
    assert study["digits"] == "my_mnist.csv"
    assert experiment["provenance"]["options"]["diagvib_digits"] == "my_mnist.csv"
    assert str(tmp_path) not in (work / "study" / "study.json").read_text() + (work / "study" / "experiment.json").read_text()
