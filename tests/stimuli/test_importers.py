"""Importers of the published stimulus sets in ../shared, and export of answers to them."""

import csv
from collections import Counter

import pytest

from cuebench_app.cli import main
from cuebench.expdir import ExperimentDir
from cuebench.labels import IMAGENET16
from cuebench.responses import ResponseStore, trial_row

pytestmark = pytest.mark.shared


@pytest.fixture(scope="module")
def cue_conflict(shared, tmp_path_factory):
    out = tmp_path_factory.mktemp("cc")
    src = shared / "data/geirhos2019/stimuli/cue-conflict"
    assert main(["stimuli", "build", "--design", "cue-conflict-import", "--images", str(src), "--out", str(out)]) == 0
    return ExperimentDir(out)


def test_cue_conflict_import_has_1280_trials_with_shape_and_texture(cue_conflict):
    exp = cue_conflict.load()
    assert len(exp.trials) == 1280
    assert exp.label_set.labels == IMAGENET16
    t = exp.trial("cue-conflict--airplane1-bicycle2")
    assert (t.category, t.texture_category, t.correct) == ("airplane", "bicycle", "airplane")
    assert Counter(t.category for t in exp.trials) == {c: 80 for c in IMAGENET16}
    same = [t for t in exp.trials if t.params["same_class"]]
    assert len(same) == 80 and all(t.category == t.texture_category for t in same)
    assert all(cue_conflict.stimulus_path(exp.stimuli[t.stimuli[0]]).is_file() for t in exp.trials[:50])


def test_dist_import_has_400_balanced_oddity_trials(shared, tmp_path):
    assert main(["stimuli", "build", "--design", "dist-import", "--images", str(shared / "data/dist"),
                 "--out", str(tmp_path)]) == 0
    exp = ExperimentDir(tmp_path).load()
    assert len(exp.trials) == 400 and {t.trial_type for t in exp.trials} == {"oddity"}
    positions = Counter(t.correct for t in exp.trials)
    assert set(positions) == {"1", "2", "3"} and max(positions.values()) - min(positions.values()) <= 1
    for t in exp.trials[:20]:
        original = exp.stimuli[t.stimuli[int(t.correct) - 1]]
        assert original.params == {"version": "original"} and original.source_image == t.source_image
    assert exp.trial("dist--ILSVRC2012_val_00000064").category == "European green lizard"


def test_dist_import_shows_practice_catch_and_attention_on_triplets_outside_the_release(shared, tmp_path, capsys):
    """DiST's protocol with the release kept whole: a catch trial after every 10 standard trials (the original, its
    mirror image and one disrupted version; the disrupted one is correct), practice triplets and attention checks,
    all on triplets of --check-images; without it, or with the release's own triplets there, refused."""
    from support import dist_subset

    images = dist_subset(shared / "data/dist", tmp_path / "dist", 11)
    checks = dist_subset(shared / "data/dist", tmp_path / "checks", 4, skip=11)
    study = ["stimuli", "build", "--design", "dist-import", "--images", str(images), "--practice", "1",
             "--catch-every", "10", "--attention", "10", "--workers", "1"]
    assert main([*study, "--out", str(tmp_path / "x")]) == 2
    assert "1 practice (--practice) + 1 catch (--catch-every) + 1 attention (--attention) trial(s) show triplets " \
           "from outside the release (its 11 are all standard trials): give --check-images DIR" in capsys.readouterr().err
    assert main([*study, "--out", str(tmp_path / "x"), "--check-images", str(images)]) == 2
    assert "is the release's" in capsys.readouterr().err and not (tmp_path / "x").exists()
    assert main([*study, "--out", str(tmp_path / "x"), "--check-images", str(checks)]) == 0
    exp = ExperimentDir(tmp_path / "x").load()
    by_role = Counter(t.role for t in exp.trials)
    # all 11 triplets standard trials: 11 // 10 = 1 catch and 1 attention check, 1 practice, on 3 of the 4 others
    assert by_role == {"test": 11, "practice": 1, "catch": 1, "attention": 1}
    assert (exp.schedule.catch_every, exp.schedule.attention_every) == (10, 10)
    released = sorted(p.stem for p in (images / "original").iterdir())
    assert sorted(t.source_image for t in exp.trials if t.role == "test") == released
    others = {f"check/{p.stem}" for p in (checks / "original").iterdir()}
    assert {t.source_image for t in exp.trials if t.role != "test"} < others
    (catch,) = exp.trials_with_role("catch")
    versions = [exp.stimuli[s].transform for s in catch.stimuli]
    assert sorted(versions) == ["mirror", "original", "texture synthesis (DiST release)"]
    assert versions[int(catch.correct) - 1] == "texture synthesis (DiST release)"
    (attention,) = exp.trials_with_role("attention")
    assert attention.instruction.endswith(f"please press {attention.correct}.")


def test_export_mvh_and_csv_round_trip(cue_conflict, tmp_path):
    exp = cue_conflict.load()
    with ResponseStore(cue_conflict.responses_file) as store:
        store.write_many([trial_row(exp, t, observer="model:x", observer_kind="model", session=1, trial_index=i,
                                    response=t.texture_category) for i, t in enumerate(exp.trials[:30])])
    assert main(["export", str(cue_conflict.root), "--format", "mvh", "--out", str(tmp_path / "mvh")]) == 0
    files = list((tmp_path / "mvh").glob("*.csv"))
    assert [f.name for f in files] == [f"{exp.name}_model-x_session_1.csv"]
    rows = list(csv.DictReader(files[0].open()))
    assert list(rows[0]) == ["subj", "session", "trial", "rt", "object_response", "category", "condition", "imagename"]
    assert len(rows) == 30 and rows[0]["rt"] == "NaN"
    for r in rows:  # the texture class is recoverable the model-vs-human way
        texture = "".join(ch for ch in r["imagename"].rsplit("-", 1)[-1].removesuffix(".png") if not ch.isdigit())
        assert r["object_response"] == texture
    assert main(["export", str(cue_conflict.root), "--format", "csv", "--out", str(tmp_path / "all.csv")]) == 0
    assert len(list(csv.DictReader((tmp_path / "all.csv").open()))) == 30
