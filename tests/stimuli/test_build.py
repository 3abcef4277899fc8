"""The suppression builder on real photos: determinism, provenance, skip-existing, bad input."""

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cuebench_app.cli import main
from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore, trial_row
from cuebench.images import decode_image
from stimuli.sources import folder_images

CONDITIONS = "patch_shuffle,bilateral,grayscale,channel_shuffle"


def build(out: Path, *extra: str) -> int:
    return main(["stimuli", "build", "--design", "suppression", "--out", str(out), "--workers", "2",
                 "--conditions", CONDITIONS, *extra])


def digests(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((root / "stimuli").glob("*.png"))}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("a") / "exp"
    assert build(out, "--seed", "7") == 0
    return out


def test_same_seed_gives_identical_files_and_another_seed_other_files(built, tmp_path):
    assert build(tmp_path / "b", "--seed", "7") == 0
    assert digests(built) == digests(tmp_path / "b")
    assert (built / "experiment.json").read_bytes() != b""
    assert build(tmp_path / "c", "--seed", "8") == 0
    a, c = ExperimentDir(built).load(), ExperimentDir(tmp_path / "c").load()
    # every photo is tested in both builds (the attention check shows a bundled photo outside them)
    tested = {t.source_image for t in a.trials if t.role == "test"} & \
        {t.source_image for t in c.trials if t.role == "test"}
    of = lambda exp, kinds: {s.id for s in exp.stimuli.values() if s.transform in kinds and s.source_image in tested}
    assert of(a, ("patch_shuffle", "channel_shuffle")).isdisjoint(of(c, ("patch_shuffle", "channel_shuffle")))
    assert of(a, ("bilateral", "grayscale")) == of(c, ("bilateral", "grayscale")) != set()


def test_every_stimulus_records_its_provenance_in_the_manifest_not_the_image(built):
    expdir = ExperimentDir(built)
    exp = expdir.load()
    # all 8 photos tested; the attention check shows the bundled clock, outside the study
    assert len(exp.trials) == 8 * (1 + 15 + 6 + 5 + 1) + 1
    for stim in exp.stimuli.values():
        path = built / stim.path
        with Image.open(path) as im:
            assert im.size == (224, 224) and im.format == "PNG"
            assert im.info == {}  # no text, time or other ancillary chunk: pixels only
        prov = expdir.provenance(stim.id)
        assert prov["transform"] == stim.transform and prov["params"] == stim.params and prov["seed"] == stim.seed
        assert prov["source_origin"] == f"builtin:{stim.source_image.removeprefix('check/')}"
        assert stim.source_image and stim.software_version
    assert exp.provenance["design"] == "suppression" and exp.provenance["options"]["seed"] == 7
    trial = exp.trial("chelsea--patch_shuffle--4")
    assert trial.params == {"grid": 6} and trial.level == 4 and trial.category == "cat"
    assert len(exp.assignment.groups) == 28


def test_rerun_skips_what_exists(built, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    victim = sorted((copy / "stimuli").glob("*.png"))[0]
    victim.unlink()
    before = {p: p.stat().st_mtime_ns for p in (copy / "stimuli").glob("*.png")}
    assert build(copy, "--seed", "7") == 0
    assert victim.exists()
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())


def test_human_grid_rotates_five_conditions(tmp_path):
    assert main(["stimuli", "build", "--design", "suppression", "--grid", "human", "--out", str(tmp_path)]) == 0
    exp = ExperimentDir(tmp_path).load()
    assert exp.assignment.arms == ("bilateral@4", "grayscale@4", "original", "patch_shuffle@1", "patch_shuffle@4")
    assert len(exp.assignment.groups) == 5


def test_corrupt_image_is_named_and_skipped_or_fatal(tmp_path, photos, capsys):
    src = tmp_path / "src"
    for name in ("cat", "flower"):
        (src / name).mkdir(parents=True)
    Image.fromarray(photos["chelsea"]).save(src / "cat" / "chelsea.png")
    Image.fromarray(photos["flower"]).save(src / "flower" / "flower.jpg")
    (src / "cat" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    assert main(["stimuli", "build", "--design", "suppression", "--images", str(src), "--out", str(tmp_path / "x"),
                 "--conditions", "grayscale", "--workers", "1"]) == 2
    assert "broken.png" in capsys.readouterr().err
    assert not (tmp_path / "x" / "experiment.json").exists()
    assert main(["stimuli", "build", "--design", "suppression", "--images", str(src), "--out", str(tmp_path / "y"),
                 "--conditions", "grayscale", "--on-error", "skip"]) == 0
    expdir = ExperimentDir(tmp_path / "y")
    exp = expdir.load()
    # both photos tested; the attention check shows the bundled clock
    assert {t.source_image for t in exp.trials if t.role == "test"} == {"cat/chelsea", "flower/flower"}
    assert [t.source_image for t in exp.trials if t.role != "test"] == ["check/clock"]
    assert "broken" in exp.provenance["skipped_images"][0]
    origins = {expdir.provenance(sid)["source_origin"] for sid in exp.stimuli}
    assert origins == {"cat/chelsea.png", "flower/flower.jpg", "builtin:clock"}  # no path of this machine
    for path in (tmp_path / "y").rglob("*"):
        if path.is_file() and path.suffix in (".json", ".png"):
            assert str(tmp_path).encode() not in path.read_bytes(), path


def test_unknown_condition_and_missing_folder_are_clear_errors(tmp_path, capsys):
    assert main(["stimuli", "build", "--design", "suppression", "--conditions", "blurr",
                 "--out", str(tmp_path / "x")]) == 2
    assert "unknown suppression condition 'blurr'" in capsys.readouterr().err
    assert main(["stimuli", "build", "--design", "suppression", "--images", str(tmp_path / "nope"),
                 "--out", str(tmp_path / "x")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_rebuild_that_would_change_trials_with_responses_is_refused(built, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    exp = ExperimentDir(copy).load()
    with ResponseStore(ExperimentDir(copy).responses_file) as store:
        store.write(trial_row(exp, exp.trials[0], observer="p1", observer_kind="human", session=1, trial_index=0,
                              response="cat"))
    before = sorted(p.relative_to(copy) for p in copy.rglob("*"))
    experiment_bytes = (copy / "experiment.json").read_bytes()
    assert build(copy, "--seed", "9", "--name", "exp") == 2
    assert "already holds 1 responses to experiment 'exp' and this build would change its options seed=7->9" \
        in capsys.readouterr().err
    assert build(copy, "--seed", "7", "--name", "other") == 2
    assert "would change its name 'exp' to 'other'" in capsys.readouterr().err
    assert build(copy, "--seed", "7") == 2  # a copied folder's name is not the experiment's
    assert "give --name exp to rebuild it" in capsys.readouterr().err
    assert sorted(p.relative_to(copy) for p in copy.rglob("*")) == before  # refused before writing anything
    assert (copy / "experiment.json").read_bytes() == experiment_bytes
    assert build(copy, "--seed", "7", "--name", "exp") == 0  # the same build of the same experiment still runs


def test_non_utf8_experiment_file_is_one_line_naming_it_for_every_command(tmp_path, capsys):
    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "experiment.json").write_bytes(b'{"name": "\xff\xfe"}')
    commands = [["eval", "--experiment", str(folder), "--model", "tf_efficientnet_lite0:pypi"],
                ["analyze", str(folder)],
                ["report", str(folder), "--out", str(tmp_path / "report")], ["serve", str(folder)],
                ["lab", "run", str(folder), "--participant", "p1", "--simulate"]]
    ResponseStore(folder / "responses.sqlite").close()
    for argv in commands:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert "experiment.json" in err and "\n" not in err and "Traceback" not in err, (argv, err)


def test_flat_folder_with_labels_csv(tmp_path, photos):
    for name in ("chelsea", "coffee"):
        Image.fromarray(photos[name]).save(tmp_path / f"{name}.png")
    (tmp_path / "labels.csv").write_text("image,category\nchelsea.png,cat\ncoffee,coffee\n")
    images = folder_images(tmp_path, tmp_path / "labels.csv")
    assert [(i.name, i.category) for i in images] == [("chelsea", "cat"), ("coffee", "coffee")]
    assert np.array_equal(images[0].read(), decode_image(tmp_path / "chelsea.png"))
