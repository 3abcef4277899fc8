"""Out-of-distribution sets answered during ``train-cues`` on a schedule of epochs, and BiasBed's model
selection (``cuebench selection``) made from the log it writes: a tiny real run (three classes of DiST
originals, one Edge image per class, 32 px, two epochs), run as the user runs it."""

from __future__ import annotations

import contextlib
import io
import shutil
import sqlite3

import pandas as pd
import pytest

from cuebench_app.cli import main
from model_eval.training.jobs import TrainingError
from model_eval.training.ood_eval import OodSchedule, OodSet, experiment_set, plan
from support import three_class_photos


def test_schedules_name_the_epochs_they_answer_at(tmp_path):
    every = OodSchedule.parse(every=2)
    assert [e for e in range(1, 8) if every.due(e, 7)] == [2, 4, 6] and every.text() == "every 2"
    listed = OodSchedule.parse(listed="5, 1,last")
    assert [e for e in range(1, 11) if listed.due(e, 10)] == [1, 5, 10] and listed.text() == "1,5,last"
    for every, listed, message in ((None, "1,x", "'x' is not an epoch"), (None, "0", "'0' is not an epoch"),
                                   (None, " , ", "names no epoch"), (0, None, "--ood-every must be >= 1"),
                                   (1, "1", "not both")):
        with pytest.raises(TrainingError, match=message):
            OodSchedule.parse(every, listed)
    with pytest.raises(TrainingError, match="names epoch 12, but the run trains 10"):
        OodSchedule.parse(listed="12").check(10)
    with pytest.raises(TrainingError, match="no experiment.json there; build the set first"):
        experiment_set(tmp_path / "edges")
    for names in (("edges", "edges"), ("val",)):
        with pytest.raises(TrainingError, match=f"set name {names[0]!r} is used twice or is a split"):
            plan(every, [OodSet(name, name) for name in names])


def run(cwd, *argv) -> tuple[int, str]:
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        patch.chdir(cwd)
        code = main(list(argv))
    return code, out.getvalue()


@pytest.mark.slow
@pytest.mark.shared
def test_train_cues_answers_the_ood_sets_every_epoch_and_selection_reads_its_log(tmp_path, shared):
    three_class_photos(shared, tmp_path / "photos")
    edges = shared / "data/geirhos2019/stimuli/edges"
    for folder in ("bird", "bottle", "cat"):  # one Edge image of each trained category, and one of another
        (tmp_path / "edges" / folder).mkdir(parents=True)
        shutil.copy(sorted((edges / folder).glob("*.png"))[0], tmp_path / "edges" / folder)
    assert run(tmp_path, "stimuli", "build", "--design", "labelled-set", "--images", "edges", "--out", "exp/edges",
               "--workers", "1", "--attention", "0")[0] == 0
    argv = ["train-cues", "study", "--photos", "photos", "--dist", str(shared / "data/dist"),
            "--cue-conflict", str(shared / "data/geirhos2019/stimuli/cue-conflict"), "--algorithms", "erm",
            "--runs", "1", "--epochs", "2", "--max-trials", "3", "--cue-per-class", "1", "--input-size", "32",
            "--batch-size", "8", "--device", "cpu", "--synthesis-steps", "2", "--synthesis-size", "64",
            "--no-quality-gate"]
    code, said = run(tmp_path, *argv, "--ood-set", "exp/edges")
    assert code == 2 and "--ood-set needs a schedule" in said and not (tmp_path / "study").exists()
    code, said = run(tmp_path, *argv, "--ood-schedule", "1,3")
    assert code == 2 and "names epoch 3, but the run trains 2" in said
    assert run(tmp_path, *argv, "--ood-every", "1", "--ood-set", "exp/edges")[0] == 0
    log = pd.read_csv(tmp_path / "study/cue_training.csv")
    splits = {"val", "test", "dist", "cue_conflict", "edges"}
    for (algorithm, epoch), rows in log.groupby(["algorithm", "epoch"]):
        assert set(rows["split"]) == splits, (algorithm, epoch)
    ood = log[~log["split"].isin(["val", "test"])]
    assert ood["epoch_observer"].str.match(r"tf_efficientnet_lite0:file-[0-9a-f]{12}$").all()
    assert ood.set_index("split")["n_images"].groupby(level=0).first().to_dict() == {
        "cue_conflict": 2, "dist": 3, "edges": 3}

    # every OOD accuracy counted again from the answers in the job's own store
    for _, row in ood.iterrows():
        store = tmp_path / "study/training/ood" / f"{row['job_id']}.sqlite"
        with sqlite3.connect(store) as conn:
            answers = conn.execute("SELECT correct FROM responses WHERE observer = ? AND role = 'test' AND "
                                   "experiment = ?", (row["epoch_observer"], row["split"])).fetchall()
        assert len(answers) == row["n_images"]
        assert row["accuracy"] == pytest.approx(sum(c for (c,) in answers) / len(answers))
    # the selected epoch answers the study's cue-conflict experiment as the selected checkpoint does
    selected = ood[ood["selected"] & (ood["split"] == "cue_conflict")]
    for _, row in selected.iterrows():
        with sqlite3.connect(tmp_path / "study/cue_conflict/responses.sqlite") as conn:
            answers = conn.execute("SELECT correct FROM responses WHERE observer = ? AND role = 'test'",
                                   (row["observer"],)).fetchall()
        assert row["accuracy"] == pytest.approx(sum(c for (c,) in answers) / len(answers))
    assert not list((tmp_path / "study/training/ood").glob("*.pth"))  # the epochs' checkpoint files are gone

    assert run(tmp_path, "selection", "study/cue_training.csv", "--select", "best-val", "--select", "last-1",
               "--select", "oracle", "--last", "2", "--out", "sel")[0] == 0
    table = pd.read_csv(tmp_path / "sel/selection.csv").set_index(["selection", "algorithm", "split"])
    for _, row in log[log["selected"] & (log["split"] != "val")].iterrows():
        assert table.loc[("best-val", row["algorithm"], row["split"]), "mean"] == pytest.approx(row["accuracy"])
    for (algorithm, split), rows in log[log["split"] != "val"].groupby(["algorithm", "split"]):
        assert table.loc[("last-1", algorithm, split), "mean"] == pytest.approx(rows.loc[rows["epoch"] == 2,
                                                                                          "accuracy"].iloc[0])
        assert table.loc[("oracle", algorithm, split), "mean"] == pytest.approx(rows["accuracy"].max())
    assert table.xs("oracle", level="selection")["oracle"].all()
    assert "edges best-val" in (tmp_path / "sel/selection.tex").read_text()
