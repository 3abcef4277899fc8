"""EED (stimuli.eed): the reference's constants and rules, agreement with the per-image
reference structure, and what the shape cue does to real photos."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image

from stimuli.eed import (EEDError, EEDParams, diffuse, eed, gaussian_kernel_1d, snapshot_steps, symmetric_index,
                         to_display)
from stimuli.eed_reference import diffuse_one
from stimuli.quality import quality_metrics

PHOTOS = ("chelsea", "coffee", "astronaut", "rocket")


def small(photo: np.ndarray, size: int) -> np.ndarray:
    return np.asarray(Image.fromarray(photo).resize((size, size), Image.BICUBIC))


@pytest.fixture(scope="module")
def diffused(photos):
    """Four real photos at 224x224 and their raw EED after 64 and 128 steps."""
    images = np.stack([photos[name] for name in PHOTOS])
    return images, diffuse(images, [64, 128], progress=False)


def test_snapshots_are_the_reference_sqrt2_ladder():
    # 512 * sqrt(2)^k truncated: 724.08 -> 724, 1448.15 -> 1448, 5792.62 -> 5792, 11585.24 -> 11585
    assert snapshot_steps() == [512, 724, 1024, 1448, 2048, 2896, 4096, 5792, 8192, 11585, 16384]
    assert snapshot_steps(5792) == [512, 724, 1024, 1448, 2048, 2896, 4096, 5792]


def test_gaussian_kernel_is_size_5_sigma_sqrt5():
    k = gaussian_kernel_1d(5, math.sqrt(5))
    # exp(-x^2 / 10) at x = 0, 1, 2: 1, 0.904837, 0.670320; sum 4.150315
    assert np.allclose(k, np.array([0.670320, 0.904837, 1.0, 0.904837, 0.670320]) / 4.150315, atol=1e-6)


def test_symmetric_padding_repeats_the_edge_pixel():
    assert symmetric_index(4, 3).tolist() == [2, 1, 0, 0, 1, 2, 3, 3, 2, 1]
    assert np.array_equal(np.arange(5)[symmetric_index(5, 2)], np.pad(np.arange(5), 2, mode="symmetric"))


def test_saved_form_clips_then_stretches_each_image():
    raw = np.array([[[[-10.0, 50.0, 100.0], [200.0, 300.0, 150.0]]]])  # one 1x2 image
    # clip -> 0, 50, 100, 200, 255, 150; min 0, max 255 -> unchanged
    assert to_display(raw).tolist() == [[[[0, 50, 100], [200, 255, 150]]]]
    raw = np.array([[[[100.0, 110.0, 120.0], [130.0, 140.0, 150.0]]]])
    # (x - 100) / 50 * 255: 0, 51, 102, 153, 204, 255
    assert to_display(raw).tolist() == [[[[0, 51, 102], [153, 204, 255]]]]
    flat = np.full((1, 2, 2, 3), 77.0)
    assert (to_display(flat) == 77).all()


def test_flat_image_stays_flat():
    flat = np.full((1, 12, 12, 3), 90, np.uint8)
    assert np.array_equal(diffuse(flat, 5, progress=False)[5], flat.astype(np.float32))


def test_batched_agrees_with_reference_structure_short(photos):
    images = np.stack([small(photos["chelsea"], 40), small(photos["motorcycle"], 40)])
    batched = diffuse(images, 32, progress=False)[32]
    reference = np.stack([diffuse_one(image, 32) for image in images])
    assert np.abs(batched - reference).max() < 1e-3
    assert np.abs(batched - images).max() > 3  # it did diffuse


@pytest.mark.slow
def test_batched_agrees_with_reference_structure_after_512_steps(photos):
    """The issue's criterion (1e-3 on 0-255 after 512 steps), at 48x48 to fit CI; the
    benchmark measures it at 224x224."""
    images = np.stack([small(photos["chelsea"], 48), small(photos["astronaut"], 48)])
    batched = diffuse(images, 512, progress=False)[512]
    reference = np.stack([diffuse_one(image, 512) for image in images])
    assert np.abs(batched - reference).max() < 1e-3


@pytest.mark.slow
def test_each_channel_mean_is_kept(diffused):
    images, out = diffused
    before = images.reshape(len(images), -1, 3).mean(axis=1)
    for steps in (64, 128):
        after = out[steps].reshape(len(images), -1, 3).mean(axis=1)
        # exact inside the image; the reference's blurred tensor at the border leaks < 0.05 grey levels
        assert np.abs(after - before).max() < 0.05


@pytest.mark.slow
def test_values_stay_near_the_input_range_and_saved_images_in_it(diffused):
    """The reference's WWW stencil (alpha 0.49, no beta term) has negative weights for
    strongly anisotropic tensors, so EED can overshoot slightly; the reference clips before
    saving, and so do we (docs/cue_decomposition.md)."""
    images, out = diffused
    lo = images.min(axis=(1, 2, 3)).astype(np.float32)
    hi = images.max(axis=(1, 2, 3)).astype(np.float32)
    raw = out[128]
    assert (raw.min(axis=(1, 2, 3)) > lo - 12).all() and (raw.max(axis=(1, 2, 3)) < hi + 12).all()
    shown = to_display(raw)
    assert shown.min() == 0 and shown.max() == 255


@pytest.mark.slow
def test_shape_cue_removes_texture_and_keeps_shape(photos):
    """Diffusion length grows with sqrt(steps), so 1,024 steps at 56x56 stand in for the
    full 16,384 at 224x224 in CI (the full-size numbers are in docs/cue_decomposition.md)."""
    images = np.stack([small(photos[name], 56) for name in PHOTOS])
    out = diffuse(images, [256, 1024], progress=False)

    def mean_metrics(steps):
        ms = [quality_metrics(a, b) for a, b in zip(images, to_display(out[steps]))]
        return {k: np.mean([m[k] for m in ms]) for k in ms[0]}

    early, late = mean_metrics(256), mean_metrics(1024)
    assert late["LV"] < early["LV"] < 1 and late["HFE"] < early["HFE"] < 1  # more steps, less texture
    assert late["HFE"] < 0.8, late
    assert late["GC"] > 0.9, late  # the outlines stay
    assert late["Texture"] < late["Shape"] - 0.08, late


def test_eed_returns_uint8_snapshots_in_batches(photos):
    images = np.stack([small(photos[name], 24) for name in PHOTOS[:3]])
    out = eed(images, [2, 4], batch_size=2, progress=False)
    assert sorted(out) == [2, 4]
    assert out[4].dtype == np.uint8 and out[4].shape == images.shape
    whole = eed(images, 4, batch_size=8, progress=False)[4]
    assert np.array_equal(out[4], whole)


def test_bad_input_is_named():
    with pytest.raises(EEDError, match=r"\(N, H, W, 3\)"):
        diffuse(np.zeros((8, 8)), 1, progress=False)
    with pytest.raises(EEDError, match="step counts"):
        diffuse(np.zeros((8, 8, 3)), -1, progress=False)
    with pytest.raises(EEDError, match="batch_size"):
        eed(np.zeros((8, 8, 3)), 1, batch_size=0, progress=False)
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(EEDError, match="CUDA is not available"):
            diffuse(np.zeros((8, 8, 3)), 1, device="cuda", progress=False)
    with pytest.raises(EEDError, match="not a torch device"):
        diffuse(np.zeros((8, 8, 3)), 1, device="gpu0", progress=False)


def test_params_are_the_papers():
    p = EEDParams()
    assert (p.contrast, p.kernel_size, p.sigma, p.alpha, p.tau, p.h) == (1 / 15, 5, math.sqrt(5), 0.49, 0.2, 1.0)
