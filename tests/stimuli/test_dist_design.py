"""The DiST design as a researcher runs it: oddity trials from texture syntheses of every photo of
``--images``, practice, catch and attention trials from check photos outside the study (``--check-images``),
the quality report, re-runs and regeneration."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from collections import Counter

import pytest
from PIL import Image

from cuebench_app.cli import main
from cuebench.expdir import ExperimentDir
from cuebench.trials import standard_timing
from stimuli.sources import default_images
from support import check_photo_folder

FAST = ["--synthesis-steps", "2", "--synthesis-device", "cpu", "--workers", "1"]
STUDY = ("chelsea", "coffee", "rocket")
CHECKS = {"motorcycle": ("motorcycle",), "astronaut": ("astronaut",), "camera": ("camera",), "china": ("china",)}
PEOPLE = ["--variants", "4", "--check-images", "checks", "--practice", "1", "--catch-every", "3", "--attention", "6"]
"""3 photos x 4 versions = 6 standard trials; one catch after every 3 (6 // 3 = 2), one attention check after
every 6 (1) and 1 practice trial: 4 check photos, one each, from the 4 of ``checks/``."""


def cuebench(cwd, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "cuebench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "MPLBACKEND": "Agg"})
    assert (done.returncode == 0) == ok, f"cuebench {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def photo_folder(folder, names) -> None:
    """``folder/<class>/<name>.png``: the bundled photos, one sub-folder per class, as a researcher's own."""
    for image in default_images():
        if image.name in names:
            (folder / image.category).mkdir(parents=True, exist_ok=True)
            Image.fromarray(image.read()).save(folder / image.category / f"{image.name}.png")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A fresh folder with ``photos/`` (3 photos) and ``checks/`` (4 other photos, mirrored), built with the
    documented command, relative paths, in a process of its own."""
    work = tmp_path_factory.mktemp("dist")
    photo_folder(work / "photos", STUDY)
    check_photo_folder(work / "checks", CHECKS)
    cuebench(work, "stimuli", "build", "--design", "dist", "--images", "photos", "--out", "exp", *PEOPLE, *FAST)
    return work


@pytest.fixture(scope="module")
def built(work):
    return work / "exp"


def origin(out, stimulus_id: str) -> str:
    """The file a stimulus was made from, as its provenance record names it."""
    return json.loads((ExperimentDir(out).provenance_dir / f"{stimulus_id}.json").read_text())["source_origin"]


def quality_rows(out) -> list[dict]:
    with (out / "synthesis_quality.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_photo_gives_oddity_trials_and_the_checks_show_only_check_photos(built):
    exp = ExperimentDir(built).load()
    by_role = {role: [t for t in exp.trials if t.role == role] for role in ("test", "practice", "catch", "attention")}
    tests = by_role["test"]
    assert {role: len(trials) for role, trials in by_role.items()} == {"test": 6, "practice": 1, "catch": 2,
                                                                       "attention": 1}
    assert Counter(t.source_image for t in tests) == {f"{image.category}/{image.name}": 2 for image in default_images()
                                                      if image.name in STUDY}
    assert Counter(t.correct for t in tests) == {"1": 2, "2": 2, "3": 2}
    for t in tests:
        kinds = [exp.stimuli[s].transform for s in t.stimuli]
        assert kinds[int(t.correct) - 1] == "original" and kinds.count("texture synthesis (gram)") == 2
        assert {exp.stimuli[s].source_image for s in t.stimuli} == {t.source_image}
        assert t.timing == standard_timing("oddity") and t.choices == ("1", "2", "3") and t.condition == "dist"
    versions = [s for t in tests for s in t.stimuli if exp.stimuli[s].transform != "original"]
    assert len(set(versions)) == len(versions) == 12  # 4 versions per photo, each in one trial
    assert len({exp.stimuli[s].seed for s in versions}) == 12
    checks = [t for role in ("practice", "catch", "attention") for t in by_role[role]]
    check_files = {f"{cls}/{name}-mirrored.png" for cls, names in CHECKS.items() for name in names}
    assert len({t.source_image for t in checks}) == 4  # a photo of its own for every check
    test_stimuli = {s for t in tests for s in t.stimuli}
    for t in checks:
        assert t.source_image.startswith("check/") and not set(t.stimuli) & test_stimuli
        assert {origin(built, s) for s in t.stimuli} <= check_files
    for t in by_role["catch"]:
        kinds = [exp.stimuli[s].transform for s in t.stimuli]
        assert sorted(kinds) == ["mirror", "original", "texture synthesis (gram)"]
        assert kinds[int(t.correct) - 1] == "texture synthesis (gram)" and t.condition == "catch"
    practice, attention = by_role["practice"][0], by_role["attention"][0]
    assert exp.stimuli[practice.stimuli[int(practice.correct) - 1]].transform == "original"
    assert f"please press {attention.correct}" in attention.instruction
    assert (exp.schedule.catch_every, exp.schedule.attention_every, exp.schedule.break_every) == (3, 6, 100)
    assert exp.assignment.groups == (tuple(t.trial_id for t in tests),)


def test_a_check_photo_identical_to_a_study_photo_is_refused_naming_both(tmp_path):
    photo_folder(tmp_path / "photos", ("chelsea",))
    shutil.copytree(tmp_path / "photos", tmp_path / "checks")
    done = cuebench(tmp_path, "stimuli", "build", "--design", "dist", "--images", "photos", "--out", "exp",
                    "--check-images", "checks", *FAST, ok=False)
    assert done.returncode == 2 and "check photo cat/chelsea.png is the study's image cat/chelsea.png" in done.stderr
    assert not (tmp_path / "exp").exists()


def test_the_designs_own_catch_trials_that_the_bundled_photos_cannot_cover_are_left_out_with_a_note(capsys):
    """15 photos x 2 triplets = 30 standard trials, one catch after every 10 (the design's default): 3 check photos,
    and the bundled ones are 2 (cat, clock). Not asked for: a note and no catch trials; asked for: refused. 14
    photos (28 trials) need 2: both, whatever their class, since an oddity trial's answer is a position."""
    from stimuli.designs.common import study_checks
    from stimuli.options import BuildOptions, OptionError
    from stimuli.sources import SourceImage

    common = BuildOptions(attention=0)
    photos = [SourceImage(f"dog/p{k}", "dog", f"dog/p{k}.png", lambda: None) for k in range(15)]
    held = study_checks(photos, None, common, 10, 2, catch_asked=False)
    assert (held.tests, held.practice, held.catch, held.attention) == (photos, [], [], [])
    assert ("note: no catch trials: 3 catch (--catch-every) trial(s) need as many photos from outside the study, "
            "and the bundled check photos (cat, clock) hold 2: give --check-images DIR (one sub-folder per class), "
            "or --catch-every 0 to leave them out on purpose") in capsys.readouterr().err
    with pytest.raises(OptionError, match=r"^3 catch \(--catch-every\) trial\(s\) need as many photos from outside "
                                          r"the study, and the bundled check photos \(cat, clock\) hold 2: give "
                                          r"--check-images DIR"):
        study_checks(photos, None, common, 10, 2)
    held = study_checks(photos[:14], None, common, 10, 2, catch_asked=False)
    assert sorted(p.category for p in held.catch) == ["cat", "clock"] and len(held.tests) == 14


def test_provenance_and_quality_report(built):
    exp = ExperimentDir(built).load()
    synth = [s for s in exp.stimuli.values() if s.transform.startswith("texture synthesis")]
    assert len(synth) == 6 * 2 + 2 + 2 * 1 + 2  # test, practice, catch (one version each) and attention trials
    for s in synth:
        assert s.params["feature_net"] == "tf_efficientnet_lite0" and s.params["steps"] == 2
        assert s.params["optimizer"] == "lbfgs" and s.params["layers"] and s.seed is not None
    rows = quality_rows(built)
    assert {r["stimulus_id"] for r in rows} == {s.id for s in synth}
    assert Counter(r["role"] for r in rows) == {"test": 12, "practice": 2, "catch": 2, "attention": 2}
    for r in rows:
        flagged = float(r["LV"]) < 0.7 or float(r["HFE"]) < 0.7 or float(r["GC"]) > 0.3
        assert r["flagged"] == str(flagged) and float(r["loss"]) > 0


def test_rerun_reuses_and_regenerates_only_flagged(work, built, capsys, monkeypatch):
    monkeypatch.chdir(work)
    command = ["stimuli", "build", "--design", "dist", "--images", "photos", "--out", "exp", *PEOPLE, *FAST]
    before = ExperimentDir(built).load()
    files = {p.name: p.stat().st_mtime_ns for p in (built / "stimuli").iterdir()}
    assert main(command) == 0
    assert "synthesis (gram" not in capsys.readouterr().err  # nothing synthesised again
    again = ExperimentDir(built).load()
    assert [t.to_dict() for t in again.trials] == [t.to_dict() for t in before.trials]
    assert {p.name: p.stat().st_mtime_ns for p in (built / "stimuli").iterdir()} == files
    losses = {r["stimulus_id"]: r["loss"] for r in quality_rows(built)}
    assert all(losses.values())  # losses of reused versions are kept from the earlier report

    flagged = {r["stimulus_id"]: (r["source_image"], r["variant"]) for r in quality_rows(built)
               if r["flagged"] == "True"}
    assert flagged  # two steps from noise do not reach the texture: the report says so
    assert main([*command, "--regenerate-flagged"]) == 0
    regenerated = ExperimentDir(built).load()
    now = {s for t in regenerated.trials for s in t.stimuli}
    assert not set(flagged) & now
    rows = quality_rows(built)
    assert {r["stimulus_id"] for r in rows} <= now
    for r in rows:  # a flagged version's next attempt, the others as they were
        assert r["attempt"] == ("1" if (r["source_image"], r["variant"]) in flagged.values() else "0")


@pytest.mark.parametrize("extra, message", [
    (["--variants", "3"], "even number"),
    (["--feature-net", "resnet50"], "no default layer set"),
    (["--synthesis-steps", "0"], "--synthesis-steps: must be >= 1"),
    (["--synthesis-device", "tpu"], "--synthesis-device: unknown device 'tpu'"),
])
def test_bad_options_are_named(tmp_path, capsys, extra, message):
    assert main(["stimuli", "build", "--design", "dist", "--images", "default", "--out", str(tmp_path / "x"),
                 *FAST, *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x" / "experiment.json").exists()


@pytest.mark.slow
def test_oddity_rule_runs_on_built_experiment(built):
    from model_eval.evaluate import evaluate_experiment
    from cuebench.responses import ResponseStore

    evaluate_experiment(built, ["tf_efficientnet_lite0"], rule="oddity", device="cpu", progress=False)
    exp = ExperimentDir(built).load()
    with ResponseStore(ExperimentDir(built).responses_file) as store:
        assert store.count() == len(exp.trials)


@pytest.mark.slow
def test_weight_free_backend_builds(tmp_path, photos):
    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("chelsea", "coffee"):
        Image.fromarray(photos[name]).save(folder / f"{name}.png")
    out = tmp_path / "ps"
    assert main(["stimuli", "build", "--design", "dist", "--images", str(folder), "--out", str(out),
                 "--synthesis", "ps", "--synthesis-steps", "1", "--catch-every", "0", "--workers", "1"]) == 0
    exp = ExperimentDir(out).load()
    assert [t.role for t in exp.trials] == ["test", "test"]
    synth = [s for s in exp.stimuli.values() if s.transform == "texture synthesis (ps)"]
    assert len(synth) == 4 and all(s.params["n_scales"] == 4 and s.params["steps"] == 1 for s in synth)
    assert len(quality_rows(out)) == 4


@pytest.mark.validates(
    "DiST oddity features per architecture",
    definition="the observer's output with its classification head removed: VGG/AlexNet flattened pool5 (not fc7), "
               "ResNet/ViT the penultimate vector; decided by Eq. 2 on z-scored features",
    source="Wen et al. 2024, Eq. 2; the authors' evaluation code (starsky77/DiST src/eval.py: classifier = Identity, "
           "children()[:-1], head = Identity)",
    reference="the authors' construction rebuilt on the same randomly initialised networks (torchvision AlexNet "
              "with classifier = Identity; timm models with their head removed; VGG's conv stack output)",
    tolerance="equal to float32 rounding (assert_close defaults)")
def test_oddity_features_are_what_the_network_gives_without_its_head_as_in_the_authors_code():
    import torch

    from model_eval.observers.timm_models import head_input
    from model_eval.observers.torchvision_models import _feature_layer, import_torchvision
    from model_eval.torch_compat import import_timm

    torchvision, timm = import_torchvision(), import_timm()
    with torch.device("meta"):  # the large heads' structure only: AlexNet's and VGG's fc6-fc8
        alexnet = torchvision.models.alexnet()
        assert _feature_layer(alexnet, "alexnet") is alexnet.classifier  # input: pool5, flattened (256 x 6 x 6)
        vgg = timm.create_model("vgg11", pretrained=False)
        trunk = vgg.forward_features(torch.empty(2, 3, 64, 64))
        assert head_input(vgg, trunk).shape == (2, 512 * 2 * 2)  # pool5 at 64 px, not fc7's 4096
    torch.manual_seed(0)
    x = torch.randn(2, 3, 64, 64)
    mobilenet = torchvision.models.mobilenet_v3_small().eval()  # a classifier block with a hidden layer
    seen = []
    _feature_layer(mobilenet, "mobilenet_v3_small").register_forward_hook(lambda m, inputs, out: seen.append(inputs[0]))
    with torch.no_grad():
        mobilenet(x)
        mobilenet.classifier = torch.nn.Identity()  # the authors' construction for AlexNet and VGG
        torch.testing.assert_close(seen[0], mobilenet(x))
        for name in ("test_resnet", "test_vit", "mobilenetv3_small_050"):
            model = timm.create_model(name, pretrained=False).eval()
            got = head_input(model, model.forward_features(x))
            model.reset_classifier(0)  # the authors' ResNet and ViT: the head removed
            if name.startswith("mobilenet"):  # and the hidden conv_head too, as classifier = Identity does
                model.conv_head, model.act2 = torch.nn.Identity(), torch.nn.Identity()
            torch.testing.assert_close(got, model(x))


def test_dist_import_keeps_the_release_sizes_and_pairs_files_by_stem(tmp_path, capsys):
    """The public release keeps each photo's size (original/X.JPEG beside set1/X.jpg and set2/X.jpg of the same
    size); a triplet whose images differ in size is refused, or left out and listed under --on-error skip."""
    import numpy as np
    from PIL import Image

    release = tmp_path / "release"
    sizes = {"landscape": [(40, 30)] * 3, "portrait": [(30, 40)] * 3, "mismatched": [(40, 30), (40, 30), (32, 32)]}
    rng = np.random.default_rng(0)
    for stem, triplet in sizes.items():
        for part, suffix, (w, h) in zip(("original", "set1", "set2"), (".JPEG", ".jpg", ".jpg"), triplet):
            (release / part).mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(release / part / f"{stem}{suffix}",
                                                                                 format="JPEG")
    command = ["stimuli", "build", "--design", "dist-import", "--images", str(release)]
    assert main([*command, "--out", str(tmp_path / "refused")]) == 2
    assert ("triplet mismatched: its images differ in size (original/mismatched.JPEG 40 x 30, set1/mismatched.jpg "
            "40 x 30, set2/mismatched.jpg 32 x 32)") in capsys.readouterr().err
    assert main([*command, "--out", str(tmp_path / "exp"), "--on-error", "skip"]) == 0
    exp = ExperimentDir(tmp_path / "exp").load()
    assert sorted(t.source_image for t in exp.trials) == ["landscape", "portrait"]
    for t in exp.trials:
        assert {(exp.stimuli[s].width, exp.stimuli[s].height) for s in t.stimuli} == {sizes[t.source_image][0]}
    assert "triplet mismatched" in exp.provenance["skipped_images"][0]
