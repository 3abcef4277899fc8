"""Suppression-quality metrics (Burgert et al. appendix A): hand-computed values on tiny arrays,
behaviour on real photos, and the Table 2 reproduction on the 400 DiST ImageNet photos."""

from __future__ import annotations

import numpy as np
import pytest

from stimuli.metrics_table import PAPER_TABLE2, TABLE2_SETTINGS, TableRow, format_table, metrics_table
from stimuli.quality import (METRICS, QualityError, edge_ssim, gradient_correlation, high_frequency_ratio,
                             local_variance, quality_metrics)
from stimuli.suppression import suppress

CHECKER = np.indices((4, 4)).sum(axis=0) % 2 * 2.0 - 1  # +1/-1 checkerboard


def test_local_variance_by_hand():
    x = np.array([[0, 2, 1, 1],
                  [0, 2, 1, 1],
                  [0, 4, 3, 3],
                  [0, 4, 3, 3]], float)
    # 2x2 blocks: {0,2,0,2} var 1; {1,1,1,1} var 0; {0,4,0,4} var 4; {3,3,3,3} var 0 -> mean 1.25
    assert local_variance(x, window=2) == pytest.approx(1.25)
    # a 5x5 image with 2x2 windows drops the partial last row and column
    assert local_variance(np.pad(x, ((0, 1), (0, 1)), constant_values=99), window=2) == pytest.approx(1.25)


def test_high_frequency_ratio_by_hand():
    # all energy at DC -> 0; a checkerboard's energy all at the Nyquist corner, sqrt(8) > 1 from DC -> 1;
    # 1 + checkerboard: |F| = 16 at DC and at Nyquist -> half the energy is high-frequency
    assert high_frequency_ratio(np.full((4, 4), 3.0), radius=1) == 0.0
    assert high_frequency_ratio(CHECKER, radius=1) == pytest.approx(1.0)
    assert high_frequency_ratio(1 + CHECKER, radius=1) == pytest.approx(0.5)
    assert high_frequency_ratio(np.zeros((4, 4)), radius=1) == 0.0


def test_gradient_correlation_by_hand():
    f, g = np.array([0, 1, 4, 9, 16.0]), np.array([0, 1, 3, 7, 8.0])
    x = f[:, None] + g[None, :]
    grads = tuple(np.gradient(x))
    assert gradient_correlation(grads, tuple(np.gradient(3 * x + 5))) == pytest.approx(1.0)
    # y = -f + g: the x-gradients agree (r = 1), the y-gradients are opposite (r = -1, counted as 0)
    assert gradient_correlation(grads, tuple(np.gradient(-f[:, None] + g[None, :]))) == pytest.approx(0.5)
    assert gradient_correlation(grads, tuple(np.gradient(-x))) == 0.0


def test_edge_ssim_is_wang_ssim_of_the_edge_maps():
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0, 10, (7, 7)), rng.uniform(0, 10, (7, 7))
    # one 7x7 window: SSIM = (2 mx my + C1)(2 sxy + C2) / ((mx^2 + my^2 + C1)(sx^2 + sy^2 + C2)),
    # sample (co)variances, C1 = (0.01 L)^2, C2 = (0.03 L)^2 with L the joint range of both maps
    L = max(a.max(), b.max()) - min(a.min(), b.min())
    c1, c2 = (0.01 * L) ** 2, (0.03 * L) ** 2
    mx, my = a.mean(), b.mean()
    sxy = ((a - mx) * (b - my)).sum() / 48
    expected = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx ** 2 + my ** 2 + c1) * (a.var(ddof=1) + b.var(ddof=1) + c2))
    assert edge_ssim(a, b, window=7) == pytest.approx(max(0.0, expected))
    assert edge_ssim(a, a, window=7) == 1.0
    assert edge_ssim(np.zeros((7, 7)), np.zeros((7, 7)), window=7) == 1.0


def test_metrics_are_one_on_an_unchanged_photo(photos):
    for image in photos.values():
        assert quality_metrics(image, image.copy()) == {m: 1.0 for m in METRICS}


def test_texture_and_shape_are_the_means_of_their_metrics(photos):
    scores = quality_metrics(photos["coffee"], suppress(photos["coffee"], "gaussian_blur", {"ksize": 9, "sigma": 1.33}, 0))
    assert scores["Texture"] == pytest.approx((scores["LV"] + scores["HFE"]) / 2)
    assert scores["Shape"] == pytest.approx((scores["ESSIM"] + scores["GC"]) / 2)


@pytest.mark.parametrize("condition, params", [
    ("patch_shuffle", {"grid": 6}), ("patch_rotation", {"grid": 6}), ("grid_overlay", {"grid": 6}),
    ("bilateral", {"d": 12, "sigma_color": 170, "sigma_space": 75}), ("gaussian_blur", {"ksize": 11, "sigma": 1.66}),
    ("box_blur", {"ksize": 11}), ("median_blur", {"ksize": 11}), ("channel_shuffle", {}), ("grayscale", {"alpha": 1.0}),
])
def test_every_metric_lies_in_unit_interval(photos, condition, params):
    for image in photos.values():
        scores = quality_metrics(image, suppress(image, condition, params, 3))
        assert all(0.0 <= scores[m] <= 1.0 for m in METRICS), scores


def test_shape_suppression_keeps_texture_and_breaks_shape(photos):
    for name, image in photos.items():
        for condition in ("patch_shuffle", "patch_rotation"):
            scores = quality_metrics(image, suppress(image, condition, {"grid": 6}, 1))
            assert scores["LV"] >= 0.95 and scores["HFE"] >= 0.95, (name, condition, scores)
            assert scores["Shape"] < 0.6, (name, condition, scores)


def test_texture_suppression_lowers_texture_more_than_shape(photos):
    for name, image in photos.items():
        for condition, params in (("bilateral", {"d": 12, "sigma_color": 170, "sigma_space": 75}),
                                  ("gaussian_blur", {"ksize": 11, "sigma": 1.66})):
            scores = quality_metrics(image, suppress(image, condition, params, 0))
            assert scores["LV"] < 0.9 and scores["HFE"] < 0.9, (name, condition, scores)
            assert scores["Texture"] < scores["Shape"], (name, condition, scores)


def test_stronger_blur_suppresses_more(photos):
    image = photos["astronaut"]
    hfe = [quality_metrics(image, suppress(image, "gaussian_blur", p, 0))["HFE"]
           for p in ({"ksize": 3, "sigma": .33}, {"ksize": 7, "sigma": 1.0}, {"ksize": 15, "sigma": 2.33})]
    assert hfe[0] > hfe[1] > hfe[2]


def test_images_of_different_sizes_are_refused(photos):
    with pytest.raises(QualityError, match="transformed image is 100x224"):
        quality_metrics(photos["coffee"], photos["coffee"][:, :100])


def test_metrics_table_is_the_same_on_one_core_and_two(photos):
    images = list(photos.values())[:4]
    rows = (TABLE2_SETTINGS[0], TABLE2_SETTINGS[5], TableRow("Channel Shuffle", "", "channel_shuffle", {}))
    one = metrics_table(images, seed=4, progress=False, workers=1, rows=rows)
    two = metrics_table(images, seed=4, progress=False, workers=2, rows=rows)
    assert list(one.columns) == ["transform", "params", *METRICS]
    assert list(one["params"]) == ["d=11, sigma_color=170, sigma_space=75", "grid=6", ""]
    np.testing.assert_allclose(one[list(METRICS)].to_numpy(), two[list(METRICS)].to_numpy())
    # the metrics work on grayscale, where a channel shuffle changes nothing
    assert one.loc[2, list(METRICS)].tolist() == [1.0] * 6
    text = format_table(one)
    assert text.splitlines()[1].startswith("Bilateral Filter") and "0." in text


@pytest.mark.slow
def test_table2_on_the_400_dist_imagenet_photos(shared):
    """Our table on 400 ImageNet validation photos against Burgert et al.'s on 800 others.

    Every metric lands within 0.07 of the paper, except patch shuffle's ESSIM and GC, which
    come out lower than published (about 0.12 and 0.04 against 0.205 and 0.147) under every
    reading of appendix A we tried; patch rotation, computed by the same code, matches. With a
    uniform permutation about one of the 36 cells stays in place, so a gradient correlation
    near 1/36 is what the definition gives; the paper's shuffle evidently keeps more.
    """
    from cuebench.images import decode_image
    from stimuli.sources import fit_to_stimulus

    files = sorted((shared / "data" / "dist" / "original").glob("*.jpg"))
    assert len(files) == 400
    table = metrics_table([fit_to_stimulus(decode_image(f)) for f in files], seed=0, progress=False)
    print("\n" + format_table(table))
    ours = table.set_index("transform")
    for transform, published in PAPER_TABLE2.items():
        for metric, value in published.items():
            if transform == "Patch Shuffle" and metric in ("ESSIM", "GC", "Shape"):
                continue
            assert ours.loc[transform, metric] == pytest.approx(value, abs=0.07), (transform, metric)
    shuffle, rotation = ours.loc["Patch Shuffle"], ours.loc["Patch Rotation"]
    assert shuffle["ESSIM"] < rotation["ESSIM"] < 0.4 and shuffle["GC"] < rotation["GC"] < 0.3
    texture_rows = ["Bilateral Filter", "Box Blur", "Gaussian Blur", "Median Filter", "NLMeans Denoising"]
    # the paper's reading of its table: box blur suppresses texture most, non-local means least
    assert ours.loc[texture_rows, "Texture"].idxmin() == "Box Blur"
    assert ours.loc[texture_rows, "Texture"].idxmax() == "NLMeans Denoising"
    assert ours.loc["Bilateral Filter", "Shape"] > ours.loc["Gaussian Blur", "Shape"] > ours.loc["Box Blur", "Shape"]
