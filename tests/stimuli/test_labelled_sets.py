"""Any labelled image set as a study (``--design labelled-set``), answered by models (ImageNet-1k through the
label set, or the set's own head from a checkpoint) and people, and suppression grids on a set's own classes.

Everything runs as the user runs it: the documented commands as subprocesses in a temp folder, with
relative paths."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from cuebench.expdir import ExperimentDir
from cuebench.labels import IMAGENET16

from support import cuebench_in_process as cuebench, fill_consent

GEIRHOS_SETS = ("edges", "silhouettes")


def first_of_each_class(source: Path, target: Path) -> Path:
    """A subset of a class-folder set: the first image (by name) of every class."""
    for folder in sorted(p for p in source.iterdir() if p.is_dir()):
        (target / folder.name).mkdir(parents=True)
        first = sorted(folder.glob("*.png"))[0]
        shutil.copy(first, target / folder.name / first.name)
    return target


@pytest.mark.shared
@pytest.mark.slow
def test_geirhos_edge_and_silhouette_sets_import_with_their_raw_data_names(shared, tmp_path):
    from cuebench_app.cli import main

    for name in GEIRHOS_SETS:
        source = shared / f"data/geirhos2019/stimuli/{name}"
        assert main(["stimuli", "build", "--design", "labelled-set", "--images", str(source), "--out",
                     str(tmp_path / name), "--workers", "1"]) == 0
        exp = ExperimentDir(tmp_path / name).load()
        tests = [t for t in exp.trials if t.role == "test"]
        # the published set stays whole: no image held out for an attention check unless --attention asks
        assert len(tests) == len(exp.trials) == 160 and exp.label_set.labels == IMAGENET16
        assert pd.Series([t.category for t in tests]).value_counts().to_dict() == {c: 10 for c in IMAGENET16}
        files = sorted(p.stem for p in source.glob("*/*.png"))
        assert sorted(t.source_image for t in tests) == files  # the raw data's last image-name token
        assert {t.condition for t in tests} == {name} and all(t.correct == t.category for t in tests)
        assert exp.trial(f"{name}--airplane1").category == "airplane"


@pytest.mark.shared
def test_a_study_of_the_edge_set_with_people_keeps_all_160_images_and_checks_on_photos_outside_it(shared, tmp_path):
    """Built as a study with people (a practice trial, Burgert et al.'s attention check every 100 trials), the
    published set stays whole: 160 test trials, one per image, and the practice and attention trials show the
    bundled check photos, none of them an edge image by name or by pixels."""
    source = shared / "data/geirhos2019/stimuli/edges"
    cuebench(tmp_path, "stimuli", "build", "--design", "labelled-set", "--images", str(source), "--out", "study",
             "--practice", "1", "--attention", "100", "--workers", "2")
    exp = ExperimentDir(tmp_path / "study").load()
    tests = [t for t in exp.trials if t.role == "test"]
    files = sorted(p.stem for p in source.glob("*/*.png"))
    assert len(files) == 160 and sorted(t.source_image for t in tests) == files
    checks = [t for t in exp.trials if t.role != "test"]
    assert sorted(t.role for t in checks) == ["attention", "practice"]
    assert {t.source_image for t in checks} == {"check/chelsea", "check/clock"}
    edge_pixels = {np.asarray(Image.open(p).convert("RGB")).tobytes() for p in source.glob("*/*.png")}
    study = ExperimentDir(tmp_path / "study")
    assert not any(np.asarray(Image.open(study.stimulus_path(exp.stimuli[t.stimuli[0]]))).tobytes() in edge_pixels
                   for t in checks)


@pytest.fixture(scope="module")
def answered_edges(shared, tmp_path_factory):
    """An Edge study (one image per class) answered by efficientnet-lite0 and by a simulated web participant,
    exported in the model-vs-human raw format."""
    from experiment_server.simulate import ClientLog, ServerProcess, SimulatedParticipant, free_port

    root = tmp_path_factory.mktemp("edges-study")
    first_of_each_class(shared / "data/geirhos2019/stimuli/edges", root / "images" / "edges")
    cuebench(root, "stimuli", "build", "--design", "labelled-set", "--images", "images/edges", "--out", "study",
             "--workers", "1", "--attention", "0")
    cuebench(root, "eval", "--experiment", "study", "--model", "tf_efficientnet_lite0", "--device", "cpu", "--quiet")
    server = ServerProcess(fill_consent(root / "study"), free_port())
    server.start()
    try:
        SimulatedParticipant(server.port, {"code": "person1"}, ClientLog()).run()
    finally:
        server.stop()
    cuebench(root, "export", "study", "--format", "mvh", "--out", "mvh")
    return root


@pytest.mark.shared
@pytest.mark.slow
def test_edge_study_accuracy_of_a_model_and_a_person_matches_the_exported_answers(answered_edges):
    root = answered_edges
    exported = pd.concat([pd.read_csv(f) for f in sorted((root / "mvh").glob("*.csv"))])
    tests = exported[exported["condition"].str.startswith("edges:")]
    assert set(tests["subj"].str.startswith("tf_efficientnet_lite0")) == {True, False}
    by_hand = {subj: sum(a == c for a, c in zip(rows["object_response"], rows["category"])) / len(rows)
               for subj, rows in tests.groupby("subj")}
    assert all(len(rows) == 16 for _, rows in tests.groupby("subj"))
    cuebench(root, "analyze", "study", "--metric", "accuracy", "--out", "accuracy.csv")
    table = pd.read_csv(root / "accuracy.csv")
    reported = dict(zip(table["observer"], table["accuracy"]))
    assert set(reported) == set(by_hand)
    for subj, value in by_hand.items():
        assert reported[subj] == pytest.approx(value)
    person = next(s for s in by_hand if not s.startswith("tf_efficientnet"))
    assert by_hand[person] == pytest.approx(1 / 16)  # the simulated person always clicks the first label
    assert by_hand["tf_efficientnet_lite0:pypi"] > 1 / 16  # ImageNet-1k through the 16-class mapping


RAW_SUBJECTS = ("subject-01", "subject-02", "subject-03")


def raw_answer(subject: int, k: int, cls: str) -> str:
    """A known answer pattern for raw-data subject ``subject`` on the ``k``-th class: right unless (k + subject) is a
    multiple of 3 (subject 1) or 4 (others), so people differ from each other and from the model."""
    wrong = (k + subject) % (3 if subject == 1 else 4) == 0
    return ("oven" if cls == "knife" else "knife") if wrong else cls


@pytest.mark.shared
@pytest.mark.slow
@pytest.mark.validates("collected and published raw answers paired on one cell",
                       definition="raw rows of an image the experiment shows in the same condition take its level "
                                  "and trial id (analysis.load.onto_experiment_cells) | Geirhos et al. 2019 raw-data "
                                  "format",
                       source="docs/labelled_sets.md",
                       reference="scipy.stats.ttest_rel of per-image human mean vs model correctness; Geirhos et "
                                 "al.'s kappa (chance over pairs of distinct trials) and leave-one-out Pearson ceilings "
                                 "by hand with numpy, from the export and the raw files",
                       tolerance="1e-9")
def test_study_answers_and_geirhos_raw_data_pair_on_the_same_cells(answered_edges):
    """Raw-data CSVs of the same images (Geirhos et al.'s format, in a folder named after the set, condition ``0``)
    land on the study's cells: `cuebench analyze study raw/edges` pairs the model's answers with the raw people in
    the t-test, error consistency and noise ceilings, which equal independent computations."""
    from scipy import stats

    from analysis.load import load_responses

    root = answered_edges
    raw = root / "raw" / "edges"
    raw.mkdir(parents=True)
    classes = sorted(IMAGENET16)
    for s, subject in enumerate(RAW_SUBJECTS, start=1):
        with (raw / f"edges_{subject}_session_1.csv").open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["subj", "session", "trial", "rt", "object_response", "category", "condition", "imagename"])
            for k, cls in enumerate(classes):
                writer.writerow([subject, 1, k + 1, 0.9, raw_answer(s, k, cls), cls, 0,
                                 f"{k + 1:04d}_edg_s{s:02d}_0_{cls}_00_{cls}1.png"])
    together = load_responses([root / "study", raw])
    tests = together[together["role"] == "test"]
    cells = {o: set(zip(rows["condition"], rows["level"].fillna(-1), rows["trial_id"]))
             for o, rows in tests.groupby("observer")}
    assert cells["subject-01"] == cells["tf_efficientnet_lite0:pypi"] == {("edges", -1, f"edges--{c}1")
                                                                           for c in classes}

    # correctness per image, by hand from the exported answers and the raw files' known answers
    exported = pd.concat([pd.read_csv(f) for f in sorted((root / "mvh").glob("*.csv"))])
    exported = exported[exported["condition"].str.startswith("edges:")]
    image = exported["imagename"].str.rsplit("_", n=1).str[-1].str.removesuffix(".png")
    right = pd.DataFrame({"observer": exported["subj"], "image": image,
                          "correct": (exported["object_response"] == exported["category"]).astype(float)})
    right = pd.concat([right] + [pd.DataFrame({"observer": subject, "image": [f"{c}1" for c in classes],
                                               "correct": [float(raw_answer(s, k, c) == c)
                                                           for k, c in enumerate(classes)]})
                                 for s, subject in enumerate(RAW_SUBJECTS, start=1)])
    matrix = right.pivot(index="image", columns="observer", values="correct")
    model = "tf_efficientnet_lite0:pypi"
    people = [o for o in matrix.columns if o != model]
    assert len(people) == 4  # the web participant and the three raw-data subjects

    cuebench(root, "analyze", "study", "raw/edges", "--metric", "ttests", "--out", "ttests.csv")
    ttest = pd.read_csv(root / "ttests.csv").set_index("observer").loc[model]
    expected = stats.ttest_rel(matrix[people].mean(axis=1), matrix[model])
    assert ttest["n"] == 16 and ttest["condition"] == "edges"
    assert ttest["t"] == pytest.approx(expected.statistic, abs=1e-9)
    assert ttest["p"] == pytest.approx(expected.pvalue, abs=1e-9)

    def kappa(a: np.ndarray, b: np.ndarray) -> float:
        """Geirhos et al.'s kappa, chance agreement estimated over pairs of distinct trials (docs/analysis.md)."""
        n, right_a, right_b = len(a), a.sum(), b.sum()
        c_obs = np.mean(a == b)
        c_exp = (right_a * right_b - np.sum(a * b) + (n - right_a) * (n - right_b) - np.sum((1 - a) * (1 - b))) / (
            n * (n - 1))
        return (c_obs - c_exp) / (1 - c_exp)

    cuebench(root, "analyze", "study", "raw/edges", "--metric", "error-consistency", "--out", "kappa.csv")
    pairs = pd.read_csv(root / "kappa.csv")
    for subject in RAW_SUBJECTS:
        row = pairs[((pairs["observer_a"] == model) & (pairs["observer_b"] == subject))
                    | ((pairs["observer_a"] == subject) & (pairs["observer_b"] == model))].iloc[0]
        assert row["n_shared"] == 16
        assert row["kappa"] == pytest.approx(kappa(matrix[model].to_numpy(), matrix[subject].to_numpy()), abs=1e-9)

    cuebench(root, "analyze", "study", "raw/edges", "--metric", "noise-ceiling", "--out", "ceiling.csv")
    ceiling = pd.read_csv(root / "ceiling.csv")
    human = ceiling[(ceiling["group"] == "human") & (ceiling["measure"] == "accuracy")].iloc[0]
    values = matrix[people].to_numpy()
    lower = np.mean([np.corrcoef(values[:, j], np.delete(values, j, axis=1).mean(axis=1))[0, 1]
                     for j in range(len(people))])
    assert human["observers"] == human["observers_in_group"] == 4 and human["items"] == 16 and human["cells"] == 1
    assert human["lower"] == pytest.approx(lower, abs=1e-9)

    cuebench(root, "analyze", "study", "raw/edges", "--metric", "accuracy", "--out", "both.csv")
    table = pd.read_csv(root / "both.csv").set_index("observer")
    assert set(table["condition"]) == {"edges"}
    assert table.loc["subject-01", "accuracy"] == pytest.approx(matrix["subject-01"].mean())


def split_photos(photos, root: Path) -> Path:
    """The bundled photos as a two-class set whose classes name no ImageNet class."""
    classes = {"striped thing": ("chelsea", "coffee", "rocket"), "T-rex_2.0": ("motorcycle", "astronaut", "camera")}
    for cls, names in classes.items():
        (root / cls).mkdir(parents=True)
        for name in names:
            Image.fromarray(photos[name]).resize((64, 64)).save(root / cls / f"{name}.png")
    return root


@pytest.mark.slow
def test_suppression_on_a_set_of_its_own_classes_answered_by_the_sets_own_head(photos, tmp_path):
    """``--design suppression --images SET`` on classes no ImageNet class names: the label set is the set's
    own, chance is 1/C of its C = 2 classes, and a checkpoint that declares ``class_names`` answers it."""
    import torch

    from model_eval.torch_compat import import_timm

    split_photos(photos, tmp_path / "set")
    cuebench(tmp_path, "stimuli", "build", "--design", "suppression", "--images", "set", "--conditions", "grayscale",
             "--out", "study", "--workers", "1", "--attention", "0")
    exp = ExperimentDir(tmp_path / "study").load()
    assert exp.label_set.labels == ("T-rex_2.0", "striped thing") and exp.label_set.imagenet_indices == {}
    model = import_timm().create_model("test_resnet", num_classes=2)
    torch.save({"state_dict": model.state_dict(), "class_names": ["striped thing", "T-rex_2.0"]},
               tmp_path / "own-head.pth")
    cuebench(tmp_path, "eval", "--experiment", "study", "--model", "test_resnet:own-head.pth", "--device", "cpu",
             "--quiet")
    cuebench(tmp_path, "analyze", "study", "--metric", "relative-accuracy", "--out", "relative.csv")
    cuebench(tmp_path, "analyze", "study", "--metric", "accuracy", "--out", "accuracy.csv")
    accuracy = pd.read_csv(tmp_path / "accuracy.csv").set_index(["condition", "level"])["accuracy"]
    relative = pd.read_csv(tmp_path / "relative.csv")
    a_orig = accuracy["original", -1]
    assert len(relative) == 5  # grayscale's five blends
    for row in relative.itertuples():
        a_sup = accuracy[row.condition, row.level]
        assert row.relative_accuracy == pytest.approx(a_sup / a_orig)
        if a_orig > 1 / 2:  # chance 1/C with the set's own C = 2
            assert row.chance_corrected == pytest.approx((a_sup - 1 / 2) / (a_orig - 1 / 2))
        else:
            assert pd.isna(row.chance_corrected)
    assert "C = 2 answer choices" in cuebench(tmp_path, "analyze", "study", "--metric", "methods")


def test_a_checkpoint_declares_its_own_classes_in_a_state_dict_or_safetensors_metadata(tmp_path):
    import json

    import torch
    from safetensors.torch import save_file

    from model_eval.models import WeightsMismatch, load_model
    from model_eval.torch_compat import import_timm

    state = import_timm().create_model("test_resnet", num_classes=3).state_dict()
    save_file(state, tmp_path / "head.safetensors", metadata={"class_names": json.dumps(["a", "b", "c"])})
    loaded = load_model(f"test_resnet:{tmp_path / 'head.safetensors'}")
    assert loaded.classes == ("a", "b", "c") and "own head over 3" in loaded.head
    for bad, message in (({"class_names": ["a", "a", "c"]}, "names a class twice"),
                         ({"class_names": ["a", "b", "c"], "imagenet_indices": [1, 2, 3]}, "declares both")):
        torch.save({"state_dict": state, **bad}, tmp_path / "bad.pth")
        with pytest.raises(WeightsMismatch, match=message):
            load_model(f"test_resnet:{tmp_path / 'bad.pth'}")


@pytest.mark.validates("model-confidence curation of an image set",
                       definition="per class the K unsuppressed ('original') test images with the model's highest "
                                  "score for their true class, flagged where the model answered wrongly",
                       source="Burgert et al. 2025, Sec. 5.1 ('the most confidently predicted samples')",
                       reference="hand-chosen scores of a scripted model, stored in two orders", tolerance="exact")
def test_curation_keeps_the_originals_a_model_is_most_confident_on_in_any_storage_order(photos, tmp_path):
    from cuebench.responses import ResponseStore, trial_row

    split_photos(photos, tmp_path / "set")
    cuebench(tmp_path, "stimuli", "build", "--design", "suppression", "--images", "set", "--conditions", "grayscale",
             "--out", "study", "--workers", "1", "--attention", "0")
    shutil.copytree(tmp_path / "study", tmp_path / "resumed")
    exp = ExperimentDir(tmp_path / "study").load()
    confidence = {"chelsea": .9, "coffee": .95, "rocket": .5, "motorcycle": .4, "astronaut": .8, "camera": .3}
    other = {"striped thing": "T-rex_2.0", "T-rex_2.0": "striped thing"}

    def row(i, t):
        original = t.condition == "original"
        wrong = original and t.source_image.endswith("coffee")  # scored high for its class, answered the other
        score = confidence[t.source_image.split("/")[-1]] if original else 0.333  # full grayscale: unsure of all
        return trial_row(exp, t, observer="m:x", observer_kind="model", session=1, trial_index=i,
                         response=other[t.correct] if wrong else t.correct, model_outputs={t.correct: score})

    tests = [t for t in exp.trials if t.role == "test"]
    assert {t.condition for t in tests} == {"original", "grayscale"}
    for folder, order in (("study", tests), ("resumed", sorted(tests, key=lambda t: t.condition != "grayscale"))):
        with ResponseStore(tmp_path / folder / "responses.sqlite") as store:
            store.write_many([row(i, t) for i, t in enumerate(order)])
        out = cuebench(tmp_path, "curate", folder, "--model", "m:x", "--per-class", "2", "--out", f"{folder}.csv")
        curated = pd.read_csv(tmp_path / f"{folder}.csv")
        curated.index = curated["source_image"].str.split("/").str[-1]
        assert sorted(curated.index) == ["astronaut", "chelsea", "coffee", "motorcycle"]
        assert curated["confidence"].to_dict() == {"chelsea": .9, "coffee": .95, "astronaut": .8, "motorcycle": .4}
        assert curated["correct"].to_dict() == {"chelsea": True, "coffee": False, "astronaut": True,
                                                "motorcycle": True}
        assert "1 listed image(s) the model answered wrongly (correct = False): striped thing/coffee" in out
        assert "fewer than --per-class" not in out
    out = cuebench(tmp_path, "curate", "resumed", "--model", "m:x", "--per-class", "3", "--only-correct",
                   "--out", "correct.csv")
    curated = pd.read_csv(tmp_path / "correct.csv")
    names = sorted(curated["source_image"].str.split("/").str[-1])
    assert names == ["astronaut", "camera", "chelsea", "motorcycle", "rocket"]
    assert "warning: class 'striped thing' has 2 image(s), fewer than --per-class 3" in out
    assert "T-rex_2.0" not in out and "wrongly" not in out
    cuebench(tmp_path, "stimuli", "build", "--design", "suppression", "--images", "set", "--only", "correct.csv",
             "--conditions", "grayscale", "--out", "curated-study", "--workers", "1", "--attention", "0")
    built = ExperimentDir(tmp_path / "curated-study").load()
    assert {t.source_image for t in built.trials} == set(curated["source_image"])
    # a labelled set's one condition is named after its folder: its answers are the unsuppressed ones
    cuebench(tmp_path, "stimuli", "build", "--design", "labelled-set", "--images", "set", "--out", "plain",
             "--workers", "1", "--attention", "0")
    plain = ExperimentDir(tmp_path / "plain").load()
    with ResponseStore(tmp_path / "plain" / "responses.sqlite") as store:
        store.write_many([trial_row(plain, t, observer="m:x", observer_kind="model", session=1, trial_index=i,
                                    response=t.correct, model_outputs={t.correct: confidence[t.source_image]})
                          for i, t in enumerate(t for t in plain.trials if t.role == "test")])
    out = cuebench(tmp_path, "curate", "plain", "--model", "m:x", "--per-class", "1", "--out", "plain.csv")
    assert "scored on condition 'set'" in out
    assert sorted(pd.read_csv(tmp_path / "plain.csv")["source_image"]) == ["astronaut", "coffee"]
