"""The cue-decomposition, cue-conflict-eed and corruptions designs, built from the embedded
scikit-image photos through the real command line (few EED steps; 16,384 is for real use)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from PIL import Image

from cuebench_app.cli import main
from stimuli.designs.cue_conflict_eed import combine
from cuebench.expdir import ExperimentDir
from cuebench.images import decode_image
from stimuli.sources import default_images

N_IMAGES = len(default_images())  # every photo tested: the default attention check shows a bundled photo outside them


def build(tmp_path, name: str, *options: str) -> ExperimentDir:
    out = tmp_path / name
    assert main(["stimuli", "build", "--images", "default", "--out", str(out), "--workers", "1", *options]) == 0
    return ExperimentDir(out)


@pytest.fixture(scope="module")
def decomposition(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cue")
    return build(tmp, "decomposition", "--design", "cue-decomposition", "--eed-steps", "6")


@pytest.mark.slow
def test_cue_decomposition_has_original_shape_and_texture_per_image(decomposition):
    exp = decomposition.load()
    tests = [t for t in exp.trials if t.role == "test"]
    assert len(tests) == 3 * N_IMAGES
    by_image = {}
    for t in tests:
        by_image.setdefault(t.source_image, {})[t.condition] = t
        assert t.trial_type == "classify" and t.correct == t.category
    assert all(set(v) == {"original", "shape_cue", "texture_cue"} for v in by_image.values())
    shape = by_image["chelsea"]["shape_cue"]
    assert shape.params["method"] == "eed" and shape.params["steps"] == 6 and shape.params["contrast"] == 1 / 15
    assert shape.params["limit"] is True
    assert by_image["chelsea"]["texture_cue"].params == {"method": "voronoi", "cells": 32}
    stim = exp.stimuli[shape.stimuli[0]]
    assert stim.transform == "eed" and stim.source_image == "chelsea"
    assert len(exp.assignment.groups) == 3  # a Latin square over the three conditions
    original = decode_image(decomposition.stimulus_path(exp.stimuli[by_image["chelsea"]["original"].stimuli[0]]))
    texture = decode_image(decomposition.stimulus_path(exp.stimuli[by_image["chelsea"]["texture_cue"].stimuli[0]]))
    assert original.shape == texture.shape == (224, 224, 3) and not np.array_equal(original, texture)


@pytest.mark.slow
def test_rebuild_reuses_stimuli_and_is_identical(decomposition, capsys):
    before = decomposition.experiment_file.read_bytes()
    files = sorted(p.name for p in decomposition.stimuli_dir.iterdir())
    assert main(["stimuli", "build", "--design", "cue-decomposition", "--images", "default", "--out",
                 str(decomposition.root), "--workers", "1", "--eed-steps", "6"]) == 0
    assert "EED" not in capsys.readouterr().err  # no image was diffused again
    assert decomposition.experiment_file.read_bytes() == before
    assert sorted(p.name for p in decomposition.stimuli_dir.iterdir()) == files


@pytest.mark.slow
def test_plain_stencil_is_another_recipe(decomposition, tmp_path):
    """--eed-no-limit is recorded with the stimulus, so the limited and plain shape cues of
    one photo are different stimuli and neither replaces the other."""
    exp = build(tmp_path, "plain", "--design", "cue-decomposition", "--eed-steps", "6", "--eed-no-limit").load()
    plain = next(t for t in exp.trials if t.condition == "shape_cue" and t.source_image == "chelsea")
    limited = next(t for t in decomposition.load().trials if t.condition == "shape_cue" and t.source_image == "chelsea")
    assert plain.params["limit"] is False and plain.stimuli != limited.stimuli


@pytest.mark.slow
def test_alternative_texture_cue_tex_eed(tmp_path):
    exp = build(tmp_path, "tex", "--design", "cue-decomposition", "--eed-steps", "3",
                "--texture-cue", "tex_eed_patch").load()
    textures = [t for t in exp.trials if t.condition == "texture_cue"]
    assert len(textures) == N_IMAGES and textures[0].params == {"method": "tex_eed_patch", "grid": 8}


def test_combine_blends_or_sums_and_clips():
    shape = np.array([[[100, 200, 0]]], np.uint8)
    texture = np.array([[[200, 200, 50]]], np.uint8)
    assert combine(shape, texture, 0.5, 0.5).tolist() == [[[150, 200, 25]]]
    assert combine(shape, texture, 1, 1).tolist() == [[[255, 255, 50]]]
    assert combine(shape, np.array([[[-150.0, 20.0, -5.0]]]), 1, 2).tolist() == [[[0, 240, 0]]]


@pytest.fixture(scope="module")
def conflict(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("conflict")
    return build(tmp, "conflict", "--design", "cue-conflict-eed", "--eed-steps", "6", "--conflict-textures", "2")


@pytest.mark.slow
def test_cue_conflict_pairs_shape_and_texture_of_different_classes(conflict):
    exp = conflict.load()
    tests = [t for t in exp.trials if t.role == "test"]
    assert len(tests) == 2 * N_IMAGES
    for t in tests:
        assert t.category and t.texture_category and t.category != t.texture_category
        assert t.correct == t.category and t.params["mode"] == "blend"
        stim = exp.stimuli[t.stimuli[0]]
        assert stim.transform == "cue_conflict_eed" and stim.params["texture_image"] == t.params["texture_image"]
    assert len({t.source_image for t in tests}) == N_IMAGES
    # every photo serves as a texture equally often (2 of the 16 pairs each)
    assert sorted(Counter(t.params["texture_image"] for t in tests).values()) == [2] * N_IMAGES
    assert exp.design == "cue-conflict-eed" and exp.provenance["options"]["conflict_textures"] == 2


@pytest.mark.slow
def test_cue_conflict_pixels_are_the_blend_of_the_cues(conflict):
    """Rebuild the parts by hand from the stimuli the build wrote: EED of the shape image,
    Voronoi of the texture image, 0.5 / 0.5."""
    exp = conflict.load()
    t = next(t for t in exp.trials if t.role == "test")
    by_recipe = {}
    for path in conflict.stimuli_dir.iterdir():
        prov = conflict.provenance(path.stem)  # every stimulus has its record in the manifest
        by_recipe[(prov["source_image"], prov["transform"])] = decode_image(path)
    shape = by_recipe[(t.source_image, "eed")]
    texture = by_recipe[(t.params["texture_image"], "texture_cue")]
    mixed = decode_image(conflict.stimulus_path(exp.stimuli[t.stimuli[0]]))
    assert np.array_equal(mixed, combine(shape, texture, 0.5, 0.5))


@pytest.mark.slow
def test_cue_conflict_rebuild_skips_eed(conflict, capsys):
    before = conflict.experiment_file.read_bytes()
    assert main(["stimuli", "build", "--design", "cue-conflict-eed", "--images", "default", "--out", str(conflict.root),
                 "--workers", "1", "--eed-steps", "6", "--conflict-textures", "2"]) == 0
    assert "EED" not in capsys.readouterr().err
    assert conflict.experiment_file.read_bytes() == before


@pytest.mark.slow
def test_cue_conflict_sum_with_signed_tex_eed(tmp_path):
    exp = build(tmp_path, "sum", "--design", "cue-conflict-eed", "--eed-steps", "3", "--conflict-textures", "1",
                "--conflict-mode", "sum", "--gamma-texture", "2", "--texture-cue", "tex_eed_patch").load()
    tests = [t for t in exp.trials if t.role == "test"]
    assert len(tests) == N_IMAGES
    assert tests[0].params == {"texture_image": tests[0].params["texture_image"], "texture_cue": "tex_eed_patch",
                               "mode": "sum", "gamma_shape": 1.0, "gamma_texture": 2.0}


def test_bad_options_are_named(tmp_path, capsys):
    args = ["stimuli", "build", "--design", "cue-conflict-eed", "--images", "default", "--workers", "1",
            "--eed-steps", "2"]
    assert main([*args, "--out", str(tmp_path / "a"), "--gamma-shape", "0.7"]) == 2
    assert "must sum to 1" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "b"), "--eed-steps", "0"]) == 2
    assert "--eed-steps: must be >= 1" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "c"), "--eed-device", "cuda:7"]) == 2
    assert "eed-device" in capsys.readouterr().err


@pytest.mark.slow
def test_corruptions_design(tmp_path):
    exp = build(tmp_path, "corrupt", "--design", "corruptions", "--corruptions", "contrast,high_pass,phase_noise")
    loaded = exp.load()
    tests = [t for t in loaded.trials if t.role == "test"]
    assert len(tests) == N_IMAGES * (8 + 8 + 7)
    hp0 = next(t for t in tests if t.condition == "high_pass" and t.level == 0)
    assert hp0.params == {"sigma": "inf"}
    assert {t.level for t in tests if t.condition == "phase_noise"} == set(range(7))
    assert len(loaded.assignment.groups) == 23
    assert main(["stimuli", "build", "--design", "corruptions", "--images", "default", "--out",
                 str(tmp_path / "bad"), "--corruptions", "fog"]) == 2


@pytest.mark.slow
def test_eed_cue_conflict_runs_through_model_eval(conflict):
    """The experiment goes through ``cuebench eval`` unchanged, and each answer can be
    scored as a shape or a texture decision."""
    from cuebench.responses import ResponseStore

    assert main(["eval", "--model", "tf_efficientnet_lite0", "--experiment", str(conflict.root), "--device", "cpu",
                 "--workers", "0", "--batch-size", "8", "--quiet"]) == 0
    exp = conflict.load()
    with ResponseStore(conflict.responses_file) as store:
        rows = store.rows()
    assert len(rows) == len(exp.trials)
    tests = [r for r in rows if r["role"] == "test"]
    assert all(r["texture_category"] and r["texture_category"] != r["category"] for r in tests)
    labels = set(exp.label_set.labels)
    assert all(r["response"] in labels for r in tests)
    assert all(r["correct"] == int(r["response"] == r["category"]) for r in tests)


@pytest.mark.slow
def test_corrupt_source_is_skipped_and_recorded(tmp_path, photos):
    """A class folder with one unreadable file: --on-error skip leaves it out of every pair."""
    root = tmp_path / "images"
    for category, names in {"cat": ["chelsea"], "coffee": ["coffee"], "rocket": ["rocket"]}.items():
        (root / category).mkdir(parents=True)
        for name in names:
            Image.fromarray(photos[name]).save(root / category / f"{name}.png")
    (root / "rocket" / "broken.png").write_bytes(b"not a png")
    out = tmp_path / "exp"
    args = ["stimuli", "build", "--design", "cue-conflict-eed", "--images", str(root), "--out", str(out),
            "--workers", "1", "--eed-steps", "2", "--conflict-textures", "2"]
    assert main(args) == 2  # --on-error fail (the default) names the file and stops
    assert main([*args, "--on-error", "skip"]) == 0
    exp = ExperimentDir(out).load()
    tests = [t for t in exp.trials if t.role == "test"]
    assert len(tests) == 3 * 2  # every readable photo paired with two textures (the attention check shows the clock)
    assert all("broken" not in t.source_image and "broken" not in t.params["texture_image"] for t in tests)
    assert any("broken" in s for s in exp.provenance["skipped_images"])
