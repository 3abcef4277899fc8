"""Typed build options: the command line generated from each design's options model, provenance with
only the design's own options, refused combinations, and the study options (practice, catch,
attention, timing, stimulus size) on real photos."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image
from pydantic import Field

from cuebench_app.api import build as api_build
from cuebench_app.cli import main
from cuebench.counterbalance import participant_sequence
from cuebench.expdir import ExperimentDir
from stimuli.designs import DESIGNS
from stimuli.designs.corruptions import Corruptions, CorruptionsOptions
from stimuli.designs.cue_conflict_eed import CueConflictOptions
from stimuli.designs.cue_decomposition import CueOptions
from stimuli.designs.diagvib import DiagVibOptions
from stimuli.designs.dist import DistOptions
from stimuli.designs.suppression import SuppressionOptions
from stimuli.options import OptionError

SHUFFLE = ["--design", "suppression", "--conditions", "channel_shuffle", "--workers", "1"]


def build(out: Path, *argv: str) -> int:
    return main(["stimuli", "build", "--out", str(out), *argv])


@pytest.fixture(scope="module")
def shuffled(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("shuffled") / "exp"
    assert build(out, *SHUFFLE) == 0
    return out


def test_provenance_holds_the_designs_own_options_and_the_common_ones(shuffled):
    options = ExperimentDir(shuffled).load().provenance["options"]
    assert options == {"adaptive": [], "conditions": "channel_shuffle", "design": "suppression", "grid": "full",
                       "images": "default", "labels": None, "name": None, "on_error": "fail", "seed": 0}


def test_an_option_added_to_one_design_leaves_another_designs_experiment_json_unchanged(shuffled, tmp_path):
    class WiderOptions(CorruptionsOptions):
        """The corruptions options and one more."""

        new_option: int = Field(3, description="an option only corruptions has")

    class Wider(Corruptions):
        """Corruptions with one more option."""

        Options = WiderOptions


    with DESIGNS.temporarily("corruptions", Wider):
        assert build(tmp_path / "exp", *SHUFFLE) == 0
    assert (tmp_path / "exp" / "experiment.json").read_bytes() == (shuffled / "experiment.json").read_bytes()


def test_the_python_api_writes_what_the_command_writes(shuffled, tmp_path):
    experiment = api_build("suppression", out=tmp_path / "exp", options=SuppressionOptions(conditions="channel_shuffle"),
                           images="default", workers=1)
    assert experiment.name == "exp"
    assert (tmp_path / "exp" / "experiment.json").read_bytes() == (shuffled / "experiment.json").read_bytes()
    with pytest.raises(TypeError, match="takes CorruptionsOptions"):
        api_build("corruptions", out=tmp_path / "x", options=SuppressionOptions())
    with pytest.raises(OptionError, match="--practice: must be >= 0, got -1"):
        api_build("corruptions", out=tmp_path / "x", practice=-1)


def test_cuebench_build_is_the_call_of_the_issue(shuffled, tmp_path, monkeypatch, photos):
    """``cuebench.build("suppression", images=..., options=SuppressionOptions(...))`` builds into a folder named
    after the design; images may be a path."""
    import cuebench

    monkeypatch.chdir(tmp_path)
    experiment = cuebench.build("suppression", images="default", options=SuppressionOptions(conditions="channel_shuffle"))
    assert experiment.name == "suppression"
    built, command = ExperimentDir(tmp_path / "suppression").load(), ExperimentDir(shuffled).load()
    assert built.trials == command.trials and built.stimuli == command.stimuli
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    Image.fromarray(photos["chelsea"]).save(tmp_path / "photos" / "cat" / "chelsea.png")
    one = cuebench.build("suppression", out=tmp_path / "one", images=tmp_path / "photos",
                         options=SuppressionOptions(conditions="channel_shuffle"))
    tests = one.trials_with_role("test")
    assert {t.source_image for t in tests} == {"cat/chelsea"} and len(tests) == 2  # original, channel_shuffle
    with pytest.raises(OptionError, match="--variants: must be >= 2, got 0"):
        cuebench.build("dist", images="default", options=DistOptions(variants=0))


@pytest.mark.parametrize("argv, message", [
    (["--design", "supression"], "unknown design 'supression'; did you mean suppression?"),
    (["--design", "corruptions", "--grid", "human"], "--grid is an option of suppression, not of --design corruptions"),
    (["--design", "suppression", "--grid", "human", "--conditions", "grayscale"],
     "--grid human shows the four settings of Burgert et al.'s human study and takes no --conditions"),
    (["--design", "corruptions", "--workers", "two"], "--workers: expected a whole number, got 'two'"),
    (["--design", "corruptions", "--timing", "flash=100"], "--timing 'flash=100': 'flash=100' is not PHASE=MS"),
    (["--design", "corruptions", "--timing", "stimulus=0"], "--timing 'stimulus=0': field 'stimulus': must be > 0"),
    (["--design", "corruptions", "--viewing-distance", "57"],
     "--viewing-distance needs --stimulus-degrees, --screen-width as well"),
    (["--design", "corruptions", "--practice", "1", "--catch-every", "8"],
     "1 practice (--practice) + 1 catch (--catch-every) trial(s) need as many photos of the study's classes from "
     "outside its images, and the bundled check photos (clock) hold 0: give --check-images DIR"),
    (["--design", "corruptions", "--attention", "1"], "8 attention check(s) (--attention 1) need as many photos from "
     "outside the study's images; the bundled check photos (clock) hold 1 to spare: give --check-images DIR"),
    (["--design", "diagvib", "--all-pairs", "--target", "hue"], "--all-pairs builds every (target, correlated) pair"),
    (["--design", "cue-decomposition", "--practice", "2"],
     "--practice is not available for --design cue-decomposition; designs that take it: corruptions, dist, "
     "dist-import, labelled-set, suppression"),
])
def test_bad_options_are_one_line_errors_before_anything_is_written(tmp_path, capsys, argv, message):
    assert build(tmp_path / "x", *argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob(".x.*"))


@pytest.mark.parametrize("model, values, message", [
    (DistOptions, {"variants": 0}, "--variants: must be >= 2, got 0"),
    (DistOptions, {"variants": 3}, "--variants must be an even number (two versions per oddity trial), got 3"),
    (DistOptions, {"synthesis_steps": 0}, "--synthesis-steps: must be >= 1, got 0"),
    (DistOptions, {"synthesis_batch": 0}, "--synthesis-batch: must be >= 1, got 0"),
    (DistOptions, {"catch_every": -2}, "--catch-every: must be >= 0, got -2"),
    (DistOptions, {"feature_net": "resnet50"}, "--feature-net 'resnet50' has no default layer set"),
    (CueOptions, {"eed_steps": 0}, "--eed-steps: must be >= 1, got 0"),
    (CueOptions, {"eed_batch": 0}, "--eed-batch: must be >= 1, got 0"),
    (CueOptions, {"voronoi_cells": -1}, "--voronoi-cells: must be >= 1, got -1"),
    (CueConflictOptions, {"gamma_shape": 0.9, "gamma_texture": 0.9},
     "blend weights must sum to 1, got --gamma-shape 0.9 + --gamma-texture 0.9"),
    (CueConflictOptions, {"gamma_shape": 0.7}, "blend weights must sum to 1, got --gamma-shape 0.7 + --gamma-texture 0.5"),
    (CueConflictOptions, {"conflict_mode": "sum", "gamma_texture": -1}, "--gamma-texture: must be >= 0.0, got -1"),
    (CueConflictOptions, {"conflict_textures": -1}, "--conflict-textures: must be >= 1, got -1"),
    (DiagVibOptions, {"study": "XYZ", "target": "hue", "correlated": "shape"}, "--study 'XYZ': unknown study 'XYZ'"),
    (DiagVibOptions, {"target": "hue"}, "--design diagvib needs --target and --correlated (or --all-pairs)"),
    (DiagVibOptions, {"target": "colour", "correlated": "hue"}, "--target 'colour' is not a factor"),
    (DiagVibOptions, {"target": "hue", "correlated": "hue"}, "--target and --correlated must differ (both 'hue')"),
    (DiagVibOptions, {"all_pairs": True, "sizes": "10,10"}, "--sizes '10,10' needs three positive numbers"),
    (DiagVibOptions, {"all_pairs": True, "dataset_sample": "one"}, "--dataset-sample 'one' and --sizes"),
    (DiagVibOptions, {"all_pairs": True, "diagvib_human_splits": "test,dev"},
     "--diagvib-human-splits: 'dev' is not one of train, val, test"),
    (DiagVibOptions, {"all_pairs": True, "diagvib_human_trials": -1}, "--diagvib-human-trials: must be >= 0, got -1"),
])
def test_the_options_models_refuse_bad_values_and_combinations_naming_the_option(model, values, message):
    with pytest.raises(OptionError) as refused:
        model(**values)
    assert str(refused.value).startswith(message)


def test_a_valid_combination_is_kept_as_given():
    assert CueConflictOptions(conflict_mode="sum", gamma_texture=2).gammas() == (1.0, 2.0)
    assert CueConflictOptions(gamma_shape=0.25, gamma_texture=0.75).gammas() == (0.25, 0.75)
    options = DiagVibOptions(study="ZSO,CGO-1", target="hue", correlated="shape", dataset_sample="2,0,2",
                             sizes="90,18,60", diagvib_human_splits="train, test")
    assert (options.studies(), options.pairs(), options.samples(), options.split_sizes(), options.human_splits()) == (
        ["ZSO", "CGO-1"], [("hue", "shape")], [0, 2], {"train": 90, "val": 18, "test": 60}, ["train", "test"])
    assert len(DiagVibOptions(all_pairs=True).pairs()) == 6 * 5


@pytest.mark.parametrize("argv, message", [
    (["--design", "dist", "--variants", "3"], "--variants must be an even number"),
    (["--design", "dist", "--catch-every", "-2"], "--catch-every: must be >= 0, got '-2'"),
    (["--design", "cue-decomposition", "--voronoi-cells", "-1"], "--voronoi-cells: must be >= 1, got '-1'"),
    (["--design", "cue-conflict-eed", "--gamma-shape", ".9", "--gamma-texture", ".9"], "blend weights must sum to 1"),
    (["--design", "cue-conflict-eed", "--conflict-textures", "-1"], "--conflict-textures: must be >= 1, got '-1'"),
])
def test_the_command_line_prints_the_models_refusal_in_one_line(tmp_path, capsys, argv, message):
    assert build(tmp_path / "x", *argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cuebench stimuli: error: {message}") and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_help_shows_the_bounds_of_an_option(capsys):
    with pytest.raises(SystemExit):
        main(["stimuli", "build", "--design", "dist", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 2; >= 2)" in text and "(default: 10; >= 0)" in text


def test_help_of_one_design_shows_its_options_only(capsys):
    with pytest.raises(SystemExit) as done:
        main(["stimuli", "build", "--design", "corruptions", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "--corruptions" in text and "--practice" in text
    assert "--grid" not in text and "--eed-steps" not in text and "--synthesis" not in text
    with pytest.raises(SystemExit):
        main(["stimuli", "build", "--help"])
    listing = capsys.readouterr().out
    assert all(name in listing for name in DESIGNS.names())


def test_list_designs_transforms_and_corruptions(capsys):
    for kind, name, summary in (("designs", "dist", "DiST oddity (Wen et al. 2024)"),
                                ("transforms", "bilateral", "Edge-preserving smoothing"),
                                ("corruptions", "phase_noise", "Phase noise")):
        assert main(["list", kind]) == 0
        line = next(li for li in capsys.readouterr().out.splitlines() if li.split()[0] == name)
        assert summary in line


@pytest.fixture(scope="module")
def check_photos(tmp_path_factory) -> Path:
    """A --check-images folder: six bundled photos in their classes, mirrored."""
    from stimuli.sources import default_images
    from support import check_photo_folder

    return check_photo_folder(tmp_path_factory.mktemp("checks"),
                              {image.category: (image.name,) for image in default_images()[:6]})


@pytest.fixture(scope="module")
def study(tmp_path_factory, check_photos) -> Path:
    out = tmp_path_factory.mktemp("study") / "exp"
    assert build(out, "--design", "suppression", "--conditions", "grayscale", "--workers", "2", "--practice", "2",
                 "--catch-every", "4", "--attention", "8", "--check-images", str(check_photos),
                 "--timing", "fixation=500,mask=none,response=3000",
                 "--stimulus-degrees", "4", "--viewing-distance", "57", "--screen-width", "53") == 0
    return out


def test_practice_catch_and_attention_trials_show_check_photos_and_every_photo_is_tested(study):
    exp = ExperimentDir(study).load()
    by_role = {role: [t for t in exp.trials if t.role == role] for role in ("test", "practice", "catch", "attention")}
    # all 8 photos tested, each under 1 + 5 grayscale levels, a person seeing each in one (8 test trials): 2 catch
    # trials (one after every 4) and 1 attention check, on 2 + 2 + 1 of the 6 check photos
    assert (len(by_role["practice"]), len(by_role["catch"]), len(by_role["attention"]), len(by_role["test"])) == \
        (2, 2, 1, 8 * 6)
    assert {t.source_image for t in by_role["test"]} == {
        "chelsea", "coffee", "rocket", "motorcycle", "astronaut", "camera", "china", "flower"}
    held = [t.source_image for t in by_role["practice"] + by_role["catch"] + by_role["attention"]]
    assert len(set(held)) == 5 and all(name.startswith("check/") and name.endswith("-mirrored") for name in held)
    assert all(exp.stimuli[t.stimuli[0]].transform == "original" and t.correct == t.category
               for t in by_role["practice"] + by_role["catch"])
    assert (exp.schedule.catch_every, exp.schedule.attention_every) == (4, 8)
    sequence = participant_sequence(exp, 0, "p1")
    assert [s.block for s in sequence[:2]] == [0, 0] and all(s.block > 0 for s in sequence[2:])
    roles = [exp.trial(s.trial_id).role for s in sequence[2:]]
    assert roles.count("catch") == len([r for r in roles if r == "test"]) // 4 == 2


def test_the_demo_keeps_every_photo_and_checks_attention_on_a_bundled_photo_outside_it(shuffled):
    """The default attention check (one per 100 trials) shows the bundled clock, a photo of none of the demo's
    classes: the demo's only coffee photo stays a test photo."""
    exp = ExperimentDir(shuffled).load()
    assert {t.source_image for t in exp.trials if t.role == "test"} == {
        "chelsea", "coffee", "rocket", "motorcycle", "astronaut", "camera", "china", "flower"}
    (attention,) = exp.trials_with_role("attention")
    assert (attention.source_image, attention.category) == ("check/clock", "clock")
    assert attention.instruction.startswith("Attention check: the next image shows a clock.")


def test_no_person_sees_a_check_photo_among_their_test_photos_and_checks_vary(tmp_path, check_photos):
    """Over every group and many people of a built study, no check shows one of that person's test photos (an
    intact original would prime the test), no check photo repeats within a person, and the attention checks
    name different classes and ask for different answers."""
    out = tmp_path / "exp"
    assert build(out, *SHUFFLE, "--catch-every", "4", "--attention", "4", "--check-images", str(check_photos)) == 0
    exp = ExperimentDir(out).load()
    attention = exp.trials_with_role("attention")
    assert len(attention) == 2 and len({t.category for t in attention}) == len({t.correct for t in attention}) == 2
    assert all(t.category in t.instruction and t.correct in t.instruction for t in attention)
    for group in range(len(exp.assignment.groups)):
        for person in range(25):
            trials = [exp.trial(s.trial_id) for s in participant_sequence(exp, group, f"p{person}")]
            tested = {t.source_image for t in trials if t.role == "test"}
            checks = [t.source_image for t in trials if t.role in ("catch", "attention")]
            assert len(tested) == 8 and checks and tested.isdisjoint(checks) and len(checks) == len(set(checks))


def test_a_check_photo_that_is_one_of_the_studys_photos_is_refused(tmp_path, capsys):
    from stimuli.sources import default_images

    chelsea = default_images()[0].read()
    for folder, name in (("study", "chelsea"), ("study", "coffee-like"), ("checks", "same-cat")):
        (tmp_path / folder / "cat").mkdir(parents=True, exist_ok=True)
        Image.fromarray(chelsea if name != "coffee-like" else chelsea[::-1]).save(tmp_path / folder / "cat" / f"{name}.png")
    assert build(tmp_path / "x", *SHUFFLE, "--images", str(tmp_path / "study"), "--practice", "1",
                 "--check-images", str(tmp_path / "checks")) == 2
    assert "check photo cat/same-cat.png is the study's image cat/chelsea.png" in capsys.readouterr().err


def test_timing_and_stimulus_size_are_recorded(study):
    exp = ExperimentDir(study).load()
    timings = {t.timing for t in exp.trials}
    assert len(timings) == 1
    timing = timings.pop()
    assert (timing.fixation, timing.stimulus, timing.mask, timing.response_window, timing.iti) == (500, 200, None,
                                                                                                  3000, 500)
    display = exp.provenance["display"]
    # 4 degrees at 57 cm: 2 * 57 * tan(2 deg) = 3.98097 cm
    assert display["stimulus_width_cm"] == pytest.approx(3.98097, abs=1e-4)
    assert (display["stimulus_degrees"], display["viewing_distance_cm"], display["screen_width_cm"]) == (4, 57, 53)
    assert exp.provenance["options"]["practice"] == 2 and "workers" not in exp.provenance["options"]


def bomb_png(path: Path, side: int = 60000) -> None:
    """A PNG whose header claims side x side RGB pixels (Pillow refuses to decode it: a decompression bomb)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
                     + chunk(b"IEND", b""))


@pytest.fixture
def folder(tmp_path, photos) -> Path:
    src = tmp_path / "src"
    for cls, name in (("cat", "chelsea"), ("flower", "flower"), ("coffee", "coffee")):
        (src / cls).mkdir(parents=True)
        Image.fromarray(photos[name]).save(src / cls / f"{name}.png")
    return src


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_skip_works_with_several_workers_and_lists_bombs_and_broken_files(folder, tmp_path, capsys):
    bomb_png(folder / "cat" / "bomb.png")
    (folder / "flower" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    argv = ["--design", "suppression", "--images", str(folder), "--conditions", "grayscale", "--attention", "0"]
    assert build(tmp_path / "fail", *argv, "--workers", "2") == 2
    refused = capsys.readouterr().err  # whichever bad file a worker reaches first stops the build
    assert "bomb.png" in refused or "broken.png" in refused
    assert build(tmp_path / "skip", *argv, "--workers", "2", "--on-error", "skip") == 0
    tail = capsys.readouterr().out.split("skipped 2 source image(s) (--on-error skip):")[1]
    assert "bomb.png" in tail and "decompression bomb" in tail and "broken.png" in tail
    exp = ExperimentDir(tmp_path / "skip").load()
    assert {t.source_image for t in exp.trials if t.role == "test"} == {"cat/chelsea", "flower/flower", "coffee/coffee"}
    assert len(exp.provenance["skipped_images"]) == 2


def test_a_failed_build_leaves_the_folder_as_it_was_and_the_next_run_reuses_the_folders_stimuli(folder, tmp_path, capsys):
    out = tmp_path / "exp"
    argv = ["--design", "suppression", "--images", str(folder), "--workers", "1", "--attention", "0"]
    assert build(out, *argv, "--conditions", "grayscale") == 0
    before = files(out)
    (folder / "zebra").mkdir()
    (folder / "zebra" / "zebra.png").write_bytes(b"not an image")  # the last source: the others are made first
    assert build(out, *argv, "--conditions", "grayscale,channel_shuffle") == 2
    assert files(out) == before
    staged = tmp_path / ".exp.building"
    assert len(list((staged / "stimuli").glob("*.png"))) > len(list((out / "stimuli").glob("*.png")))
    capsys.readouterr()
    assert build(out, *argv, "--conditions", "grayscale,channel_shuffle", "--on-error", "skip") == 0
    printed = capsys.readouterr()
    assert "stimuli: 3 made, 18 already there, 1 source images skipped" in printed.out
    assert "rewrote debrief.md (unedited defaults)" in printed.err  # the debrief names the new condition
    assert not staged.exists()
    after = files(out)
    rewritten = {"experiment.json", "texts/.defaults.json", "texts/debrief.md"}  # this build's defaults
    assert [name for name, data in before.items() if name not in rewritten and after[name] != data] == []
    assert len(ExperimentDir(out).load().trials_with_role("test")) == 3 * 7


def test_a_rebuild_rewrites_unedited_texts_keeps_edited_ones_and_says_so_in_one_line(folder, tmp_path, capsys):
    out = tmp_path / "exp"
    argv = ["--design", "suppression", "--images", str(folder), "--conditions", "grayscale", "--workers", "1"]
    assert build(out, *argv) == 0
    before = {p.name: p.read_text() for p in (out / "texts").glob("*.md")}
    assert "There is no time limit for the answer." in before["instructions.md"]
    (out / "texts" / "consent.md").write_text(before["consent.md"] + "\nEthics approval E-42.\n")
    capsys.readouterr()
    assert build(out, *argv, "--timing", "response=3000") == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "earlier build" in line]
    assert len(notes) == 1 and "rewrote instructions.md (unedited defaults)" in notes[0], notes
    assert "check the numbers in your edited consent.md" in notes[0]
    after = {p.name: p.read_text() for p in (out / "texts").glob("*.md")}
    assert after["consent.md"] == before["consent.md"] + "\nEthics approval E-42.\n"  # edited: never overwritten
    assert "You have 3 seconds to answer" in after["instructions.md"]
    assert build(out, *argv, "--timing", "response=3000") == 0
    assert "earlier build" not in capsys.readouterr().err  # said once, by the build that changed the numbers
