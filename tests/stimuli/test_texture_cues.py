"""Texture cues (stimuli.texture_cues) on real photos: Voronoi, patch and diamond shuffling, tex.EED."""

from __future__ import annotations

import numpy as np
import pytest

from stimuli.eed import stretch
from stimuli.quality import quality_metrics
from stimuli.texture_cues import (TextureCueError, default_diamond_diagonal, diamond_shuffle, patch_shuffle,
                                  shuffle_like, signed_texture, texture_cue, texture_eed, texture_eed_image,
                                  voronoi_cells, voronoi_shuffle)


def position_image(h: int, w: int) -> np.ndarray:
    """Each pixel's colour encodes its own (row, column), so a shuffle's moves can be read back."""
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([yy, xx, np.zeros_like(yy)], axis=-1).astype(np.uint8)


def moves(shuffled: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dy, dx) from each output pixel to where its content came from."""
    h, w = shuffled.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w]
    return shuffled[..., 0].astype(int) - yy, shuffled[..., 1].astype(int) - xx


def test_voronoi_is_deterministic_by_seed(photos):
    a = voronoi_shuffle(photos["chelsea"], seed=7)
    assert np.array_equal(a, voronoi_shuffle(photos["chelsea"], seed=7))
    assert not np.array_equal(a, voronoi_shuffle(photos["chelsea"], seed=8))


def test_voronoi_fills_each_cell_with_one_shifted_copy_inside_the_image():
    h = w = 224
    out = voronoi_shuffle(position_image(h, w), cells=32, seed=3)
    dy, dx = moves(out)
    labels = voronoi_cells(h, w, 32, np.random.default_rng(3))  # the same draws come first
    assert len(np.unique(labels)) == 32
    for k in range(32):
        cell = labels == k
        assert len(np.unique(dy[cell])) == 1 and len(np.unique(dx[cell])) == 1  # a rigid shift per cell
    assert len({(a, b) for a, b in zip(dy.ravel(), dx.ravel())}) > 16  # cells move differently
    # the sources are pixels of the image (colours are positions, all in range by construction)
    assert out[..., 0].max() < h and out[..., 1].max() < w


def test_voronoi_keeps_texture_and_breaks_shape(photos):
    metrics = [quality_metrics(img, voronoi_shuffle(img, seed=i)) for i, img in enumerate(photos.values())]
    lv = np.mean([m["LV"] for m in metrics])
    hfe = np.mean([m["HFE"] for m in metrics])
    gc = np.mean([m["GC"] for m in metrics])
    assert lv > 0.9 and hfe > 0.9, (lv, hfe)
    assert gc < 0.3, gc


def test_patch_shuffle_keeps_every_pixel(photos):
    img = photos["coffee"]
    out = patch_shuffle(img, 8, seed=1)
    assert not np.array_equal(out, img)
    assert np.array_equal(np.sort(out.reshape(-1, 3), axis=0), np.sort(img.reshape(-1, 3), axis=0))


def test_diamond_default_size_matches_8x8_patches():
    # 8x8 patches of 28 px: area 784; even common divisors of 224 give diamonds of d^2/2:
    # 28 -> 392, 32 -> 512, 56 -> 1568; 512 is the closest
    assert default_diamond_diagonal(224, 224) == 32


def test_diamond_shuffle_moves_whole_diamonds_and_wraps(photos):
    h = w = 224
    out = diamond_shuffle(position_image(h, w), seed=5)
    sources = out[..., 0].astype(int) * w + out[..., 1]
    assert len(np.unique(sources)) == h * w  # a permutation of the pixels
    dy, dx = moves(out)
    dy, dx = dy % h, dx % w
    # the diamond centred at (row 16, column 32) with diagonal 32: |y - 16| + |x - 32| < 16
    yy, xx = np.mgrid[0:h, 0:w]
    inside = np.abs(yy - 16) + np.abs(xx - 32) < 15
    assert len(np.unique(dy[inside])) == 1 and len(np.unique(dx[inside])) == 1
    # the diamond centred on the left border at row 16 wraps: its two halves move together
    straddle = (np.abs(yy - 16) + np.abs(xx - 0) < 15) | (np.abs(yy - 16) + np.abs(xx - w) < 15)
    assert len(np.unique(dy[straddle])) == 1 and len(np.unique(dx[straddle])) == 1
    img = photos["rocket"]
    shuffled = diamond_shuffle(img, seed=5)
    assert np.array_equal(np.sort(shuffled.ravel()), np.sort(img.ravel()))
    assert np.array_equal(shuffled, diamond_shuffle(img, seed=5))


def test_tex_eed_is_the_signed_difference_and_its_patch_version_matches(photos):
    original = photos["chelsea"]
    shape = photos["chelsea"][::-1].copy()  # any second image stands in for the EED here
    diff = texture_eed(original, shape)
    assert diff.min() < 0 < diff.max()
    assert np.array_equal(diff, original.astype(np.float32) - shape.astype(np.float32))
    shown = texture_eed_image(original, shape)
    # min-max over the whole signed range: the most negative difference is 0, the largest 255
    assert shown.reshape(-1)[diff.argmin()] == 0 and shown.reshape(-1)[diff.argmax()] == 255
    assert np.array_equal(shown.reshape(-1)[diff.reshape(-1) == 0], np.full((diff == 0).sum(),
                          np.rint(-diff.min() / (diff.max() - diff.min()) * 255)))
    patched = texture_cue("tex_eed_patch", original, 11, shape=shape)
    # the signed version is moved with exactly the same permutation as the displayed one
    assert np.array_equal(stretch(signed_texture("tex_eed_patch", original, shape, 11)), patched)
    values = np.random.default_rng(0).normal(size=(224, 224, 3))
    assert np.array_equal(np.sort(shuffle_like(values, lambda im: patch_shuffle(im, 8, 11)).ravel()),
                          np.sort(values.ravel()))


def test_bad_input_is_named(photos):
    with pytest.raises(TextureCueError, match="uint8"):
        voronoi_shuffle(photos["chelsea"].astype(np.float32))
    with pytest.raises(TextureCueError, match="voronoi cells"):
        voronoi_shuffle(photos["chelsea"], cells=0)
    with pytest.raises(TextureCueError, match="even divisor"):
        diamond_shuffle(photos["chelsea"], diagonal=30)
    with pytest.raises(TextureCueError, match="needs the image's EED"):
        texture_cue("tex_eed", photos["chelsea"], 0)
    with pytest.raises(TextureCueError, match="unknown texture cue"):
        texture_cue("stripes", photos["chelsea"], 0)
