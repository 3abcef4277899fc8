"""The DiST design: oddity trials from texture syntheses of the default photos, catch
trials from held-out originals, the quality report, re-runs and regeneration."""

from __future__ import annotations

import csv
from collections import Counter

import pytest

from cuebench_app.cli import main
from cuebench.expdir import ExperimentDir
from cuebench.trials import standard_timing

FAST = ["--synthesis-steps", "2", "--synthesis-device", "cpu", "--catch-every", "3"]


def build(out, *extra: str) -> int:
    return main(["stimuli", "build", "--design", "dist", "--images", "default", "--out", str(out), *FAST, *extra])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    assert build(out) == 0
    return out


def quality_rows(out) -> list[dict]:
    with (out / "synthesis_quality.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_oddity_trials_balanced_with_held_out_catches(built):
    exp = ExperimentDir(built).load()
    tests = [t for t in exp.trials if t.role == "test"]
    catches = [t for t in exp.trials if t.role == "catch"]
    # 8 photos, one catch after every 3 standard trials: 8 // 4 = 2 held out, 6 standard
    assert (len(tests), len(catches)) == (6, 2)
    assert Counter(t.correct for t in tests) == {"1": 2, "2": 2, "3": 2}
    for t in tests:
        kinds = [exp.stimuli[s].transform for s in t.stimuli]
        assert kinds[int(t.correct) - 1] == "original" and kinds.count("texture synthesis (gram)") == 2
        assert {exp.stimuli[s].source_image for s in t.stimuli} == {t.source_image}
        seeds = {exp.stimuli[s].seed for s in t.stimuli if exp.stimuli[s].transform != "original"}
        assert len(seeds) == 2  # two versions from different seeds
        assert t.timing == standard_timing("oddity") and t.choices == ("1", "2", "3")
    test_stimuli = {s for t in tests for s in t.stimuli}
    test_sources = {t.source_image for t in tests}
    for t in catches:
        kinds = [exp.stimuli[s].transform for s in t.stimuli]
        assert sorted(kinds) == ["mirror", "original", "texture synthesis (gram)"]
        assert kinds[int(t.correct) - 1] == "texture synthesis (gram)"
        assert t.source_image not in test_sources
        assert not set(t.stimuli) & test_stimuli
    assert exp.schedule.catch_every == 3 and exp.schedule.break_every == 100
    assert exp.assignment.groups == (tuple(t.trial_id for t in tests),)


def test_provenance_and_quality_report(built):
    exp = ExperimentDir(built).load()
    synth = [s for s in exp.stimuli.values() if s.transform.startswith("texture synthesis")]
    assert len(synth) == 6 * 2 + 2
    for s in synth:
        assert s.params["feature_net"] == "tf_efficientnet_lite0" and s.params["steps"] == 2
        assert s.params["optimizer"] == "lbfgs" and s.params["layers"] and s.seed is not None
    rows = quality_rows(built)
    assert {r["stimulus_id"] for r in rows} == {s.id for s in synth}
    for r in rows:
        flagged = float(r["LV"]) < 0.7 or float(r["HFE"]) < 0.7 or float(r["GC"]) > 0.3
        assert r["flagged"] == str(flagged) and float(r["loss"]) > 0


def test_rerun_reuses_and_regenerates_only_flagged(built, capsys):
    before = ExperimentDir(built).load()
    files = {p.name: p.stat().st_mtime_ns for p in (built / "stimuli").iterdir()}
    assert build(built) == 0
    assert "synthesis (gram" not in capsys.readouterr().err  # nothing synthesised again
    again = ExperimentDir(built).load()
    assert [t.to_dict() for t in again.trials] == [t.to_dict() for t in before.trials]
    assert {p.name: p.stat().st_mtime_ns for p in (built / "stimuli").iterdir()} == files
    losses = {r["stimulus_id"]: r["loss"] for r in quality_rows(built)}
    assert all(losses.values())  # losses of reused versions are kept from the earlier report

    flagged = {r["stimulus_id"] for r in quality_rows(built) if r["flagged"] == "True"}
    assert flagged  # two steps from noise do not reach the texture: the report says so
    assert build(built, "--regenerate-flagged") == 0
    regenerated = ExperimentDir(built).load()
    now = {s for t in regenerated.trials for s in t.stimuli}
    assert not flagged & now
    attempts = {r["stimulus_id"]: r["attempt"] for r in quality_rows(built)}
    assert set(attempts.values()) == {"1"} and set(attempts) <= now


@pytest.mark.parametrize("extra, message", [
    (["--variants", "3"], "even number"),
    (["--feature-net", "resnet50"], "no default layer set"),
    (["--synthesis-steps", "0"], "--synthesis-steps: must be >= 1"),
    (["--synthesis-device", "tpu"], "--synthesis-device: unknown device 'tpu'"),
])
def test_bad_options_are_named(tmp_path, capsys, extra, message):
    assert build(tmp_path / "x", *extra) == 2
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
                 "--synthesis", "ps", "--synthesis-steps", "1", "--catch-every", "0"]) == 0
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
