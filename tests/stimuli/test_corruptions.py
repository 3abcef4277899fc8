"""Corruptions (stimuli.corruptions) on real photos, against the formulas of Geirhos et al. (2018)."""

from __future__ import annotations

import numpy as np
import pytest

from stimuli.corruptions import (BACKGROUND_GREY, CORRUPTIONS, CorruptionError, corrupt, corruption_task,
                                 grayscale, high_pass, phase_noise)
from stimuli.quality import quality_metrics


def gray255(image: np.ndarray) -> np.ndarray:
    return grayscale(image) * 255


def test_grids_are_the_model_vs_human_ones():
    assert CORRUPTIONS["contrast"].grid == (1.0, 0.5, 0.3, 0.15, 0.10, 0.05, 0.03, 0.01)
    assert CORRUPTIONS["low_pass"].grid == (0, 1, 3, 5, 7, 10, 15, 40)
    assert CORRUPTIONS["high_pass"].grid == (np.inf, 3, 1.5, 1, 0.7, 0.55, 0.45, 0.4)
    assert CORRUPTIONS["uniform_noise"].grid == (0, 0.03, 0.05, 0.1, 0.2, 0.35, 0.6, 0.9)
    assert CORRUPTIONS["phase_noise"].grid == (0, 30, 60, 90, 120, 150, 180)


def test_output_is_grayscale_rgb(photos):
    for name, spec in CORRUPTIONS.items():
        out = corrupt(photos["coffee"], name, spec.grid[2], seed=1)
        assert out.dtype == np.uint8 and out.shape == (224, 224, 3)
        assert np.array_equal(out[..., 0], out[..., 1]) and np.array_equal(out[..., 0], out[..., 2])


def test_contrast_scales_towards_mid_grey(photos):
    img = photos["chelsea"]
    g = gray255(img)
    out = corrupt(img, "contrast", 0.1)[..., 0].astype(float)
    # c * x + (1 - c) / 2 on [0, 1]: mean 0.1 m + 0.45, std 0.1 s (up to rounding to uint8)
    assert abs(out.mean() - (0.1 * g.mean() + 0.45 * 255)) < 0.5
    assert abs(out.std() - 0.1 * g.std()) < 0.5
    assert np.abs(corrupt(img, "contrast", 1.0)[..., 0] - np.rint(g)).max() <= 1


def test_low_pass_removes_more_detail_with_larger_sigma(photos):
    img = photos["astronaut"]
    assert np.abs(corrupt(img, "low_pass", 0)[..., 0].astype(float) - np.rint(gray255(img))).max() <= 1
    hfe = [quality_metrics(img, corrupt(img, "low_pass", s))["HFE"] for s in (1, 3, 10)]
    assert hfe[0] > hfe[1] > hfe[2]


def test_high_pass_keeps_detail_around_the_grey_mean(photos):
    g = grayscale(photos["camera"])
    for sigma in (np.inf, 3.0, 0.7):
        assert abs(high_pass(g, sigma).mean() - BACKGROUND_GREY) < 1e-9
    # sigma = inf: the image itself, shifted to the mean grey
    assert np.allclose(high_pass(g, np.inf) - g, BACKGROUND_GREY - g.mean())
    # a smaller sigma leaves less of the low frequencies: lower correlation with the image
    corr = [np.corrcoef(g.ravel(), high_pass(g, s).ravel())[0, 1] for s in (3.0, 0.7)]
    assert corr[0] > corr[1]


def test_uniform_noise_is_bounded_and_at_30_percent_contrast(photos):
    img = photos["rocket"]
    base = corrupt(img, "uniform_noise", 0.0)[..., 0].astype(float)
    assert np.abs(base - corrupt(img, "contrast", 0.3)[..., 0]).max() == 0
    noisy = corrupt(img, "uniform_noise", 0.1, seed=4)[..., 0].astype(float)
    diff = noisy - base
    assert np.abs(diff).max() <= 0.1 * 255 + 1
    # uniform on [-w, w]: standard deviation w / sqrt(3) = 14.72 grey levels for w = 0.1
    assert abs(diff.std() - 0.1 * 255 / np.sqrt(3)) < 0.5
    assert np.array_equal(noisy, corrupt(img, "uniform_noise", 0.1, seed=4)[..., 0])


def test_phase_noise_keeps_the_amplitude_spectrum(photos):
    g = grayscale(photos["china"])
    out = phase_noise(g, 90, np.random.default_rng(0))
    assert np.allclose(np.abs(np.fft.fft2(out)), np.abs(np.fft.fft2(g)), rtol=1e-6, atol=1e-6)
    assert np.corrcoef(g.ravel(), out.ravel())[0, 1] < 0.9
    assert np.allclose(phase_noise(g, 0, np.random.default_rng(0)), g)


def test_task_form_and_json_infinity(photos):
    img = photos["flower"]
    assert np.array_equal(corruption_task(img, "high_pass", {"sigma": "inf"}, 0), corrupt(img, "high_pass", np.inf))


def test_bad_input_is_named(photos):
    with pytest.raises(CorruptionError, match="unknown corruption 'fog'"):
        corrupt(photos["chelsea"], "fog", 1)
    with pytest.raises(CorruptionError, match="out of range"):
        corrupt(photos["chelsea"], "contrast", 1.5)
    with pytest.raises(CorruptionError, match="uint8"):
        corrupt(photos["chelsea"][..., 0], "contrast", 0.5)
