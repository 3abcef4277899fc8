"""Image sources: where the photos that stimuli are made from come from.

Three kinds: ``default`` (scikit-image's and scikit-learn's bundled photos, so every
command works offline with no data of the user's), a folder with one sub-folder per
class, and a flat folder plus a labels CSV (columns ``image,category``). Every image is
decoded with Pillow and converted to RGB uint8 (``cuebench.images``); a corrupt file raises
``CorruptImageError`` naming it. A file's origin is recorded relative to the folder the
researcher named, so no path of their machine reaches the experiment directory.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from cuebench.errors import CuebenchError
from cuebench.images import IMAGE_SUFFIXES, decode_image

STIMULUS_SIZE = 224


class SourceError(CuebenchError):
    """An image source specification is wrong (missing folder, bad labels file)."""


@dataclass(frozen=True)
class SourceImage:
    """One source photo: a stable name, its class, and how to read its pixels."""

    name: str
    category: str | None
    origin: str  # path relative to the source folder, or "builtin:chelsea"; recorded in provenance
    reader: Callable[[], np.ndarray] = field(compare=False, repr=False)
    imagenet_index: int | None = None

    def read(self) -> np.ndarray:
        return self.reader()


def _to_rgb(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim == 2:
        array = np.stack([array] * 3, axis=-1)
    return np.ascontiguousarray(array[..., :3].astype(np.uint8))


def _read_skimage(name: str) -> np.ndarray:
    from skimage import data

    image = getattr(data, name)()
    if isinstance(image, tuple):  # stereo_motorcycle returns (left, right, disparity)
        image = image[0]
    return _to_rgb(image)


def _read_sklearn(name: str) -> np.ndarray:
    from sklearn.datasets import load_sample_image

    return _to_rgb(load_sample_image(name))


def _skimage(name: str) -> Callable[[], np.ndarray]:
    return partial(_read_skimage, name)


def _sklearn(name: str) -> Callable[[], np.ndarray]:
    return partial(_read_sklearn, name)


DEFAULT_IMAGES: dict[str, tuple[Callable[[], np.ndarray], str, int]] = {
    "chelsea": (_skimage("chelsea"), "cat", 281),  # tabby cat
    "coffee": (_skimage("coffee"), "coffee", 967),  # espresso
    "rocket": (_skimage("rocket"), "rocket", 812),  # space shuttle (launch vehicle on its pad)
    "motorcycle": (_skimage("stereo_motorcycle"), "motorcycle", 670),  # motor scooter
    "astronaut": (_skimage("astronaut"), "astronaut", 834),  # suit (the person's class in ImageNet)
    "camera": (_skimage("camera"), "camera", 872),  # tripod (photographer with camera on tripod)
    "china": (_sklearn("china.jpg"), "temple", 698),  # palace
    "flower": (_sklearn("flower.jpg"), "flower", 985),  # daisy
}
"""The embedded default set: name -> (reader, category, ImageNet-1k index of the class that
best names the photo's main object). scikit-image's photos are CC0 / public domain;
scikit-learn's china.jpg and flower.jpg are CC BY 2.0."""

DEFAULT_LABEL_INDICES: dict[str, list[int]] = {
    "cat": [281, 282, 283, 284, 285],
    "coffee": [967, 968, 504],
    "rocket": [812, 657, 744],
    "motorcycle": [670, 665],
    "astronaut": [834, 457, 399],
    "camera": [872, 759, 732],
    "temple": [698, 663, 832, 668],
    "flower": [985, 738, 883],
}
"""Demo label -> ImageNet indices a model's 8-way decision aggregates over."""


def default_images() -> list[SourceImage]:
    return [SourceImage(name=name, category=cat, origin=f"builtin:{name}", reader=reader, imagenet_index=idx)
            for name, (reader, cat, idx) in DEFAULT_IMAGES.items()]


CHECK_IMAGES: dict[str, tuple[Callable[[], np.ndarray], str]] = {
    "chelsea": (_skimage("chelsea"), "cat"),
    "clock": (_skimage("clock"), "clock"),
}
"""The bundled photos of ImageNet-16 classes (scikit-image's, CC0 / public domain) that practice, catch and
attention trials show when a build names no ``--check-images``: photos outside every published set, so a
study's own images all stay test images."""

CHECK_PREFIX = "check/"
"""Check photos' names start with it, so none is ever taken for one of the study's images (which may share a
file name) in trials, stimuli or analyses."""


def check_images(folder: str | None) -> list[SourceImage]:
    """The photos for a study's practice, catch and attention trials: a folder with one sub-folder per class
    (``--check-images``), else ``CHECK_IMAGES``; named ``check/...``."""
    if folder is None:
        return [SourceImage(CHECK_PREFIX + name, category, f"builtin:{name}", reader)
                for name, (reader, category) in CHECK_IMAGES.items()]
    images = folder_images(folder)
    if any(img.category is None for img in images):
        raise SourceError(f"--check-images {folder}: expected one sub-folder per class (the class is the answer a "
                          "practice or catch trial expects), found images directly in it")
    return [SourceImage(CHECK_PREFIX + img.name, img.category, img.origin, img.reader) for img in images]


def _file_reader(path: Path) -> Callable[[], np.ndarray]:
    return partial(decode_image, path)


def folder_images(root: str | Path, labels_csv: str | Path | None = None) -> list[SourceImage]:
    """Images of a folder: one sub-folder per class, or flat with a labels CSV (image,category)."""
    root = Path(root)
    if not root.is_dir():
        raise SourceError(f"image folder {root} does not exist")
    if labels_csv is not None:
        return _flat_with_labels(root, Path(labels_csv))
    subdirs = sorted(p for p in root.iterdir() if p.is_dir())
    images: list[SourceImage] = []
    if subdirs:
        for sub in subdirs:
            for f in sorted(sub.iterdir()):
                if f.suffix.lower() in IMAGE_SUFFIXES:
                    images.append(SourceImage(f"{sub.name}/{f.stem}", sub.name, f"{sub.name}/{f.name}", _file_reader(f)))
    else:
        for f in sorted(root.iterdir()):
            if f.suffix.lower() in IMAGE_SUFFIXES:
                images.append(SourceImage(f.stem, None, f.name, _file_reader(f)))
    if not images:
        raise SourceError(f"no images ({', '.join(IMAGE_SUFFIXES)}) found in {root}")
    return images


def _flat_with_labels(root: Path, labels_csv: Path) -> list[SourceImage]:
    try:
        with labels_csv.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames or "image" not in reader.fieldnames or "category" not in reader.fieldnames:
                raise SourceError(f"{labels_csv}: needs columns 'image' and 'category', has {reader.fieldnames}")
            rows = list(reader)
    except FileNotFoundError:
        raise SourceError(f"labels file {labels_csv} does not exist") from None
    images = []
    for n, row in enumerate(rows, start=2):
        f = root / row["image"]
        if not f.suffix:
            matches = [m for m in root.glob(row["image"] + ".*") if m.suffix.lower() in IMAGE_SUFFIXES]
            f = matches[0] if matches else f
        if not f.is_file():
            raise SourceError(f"{labels_csv} line {n}: image {row['image']!r} not found in {root}")
        index = row.get("imagenet_index")
        images.append(SourceImage(f.stem, row["category"] or None, f.relative_to(root).as_posix(), _file_reader(f),
                                  int(index) if index not in (None, "") else None))
    return images


def resolve_images(spec: str, labels_csv: str | None = None, only: str | None = None) -> list[SourceImage]:
    """``default`` or a folder path (with an optional labels CSV), limited to the images ``only`` lists."""
    images = default_images() if spec == "default" else folder_images(spec, labels_csv)
    return listed_images(images, Path(only)) if only else images


def listed_images(images: list[SourceImage], listing: Path) -> list[SourceImage]:
    """The images a CSV's ``source_image`` column names, by name or file stem (``airplane/airplane1`` or
    ``airplane1``), e.g. a model-confidence curation (``cuebench curate``); a name matching no image is an error."""
    try:
        with listing.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames or "source_image" not in reader.fieldnames:
                raise SourceError(f"{listing}: needs a column 'source_image', has {reader.fieldnames}")
            wanted = {row["source_image"] for row in reader}
    except FileNotFoundError:
        raise SourceError(f"image list {listing} does not exist") from None
    kept = [s for s in images if s.name in wanted or Path(s.name).name in wanted]
    found = {s.name for s in kept} | {Path(s.name).name for s in kept}
    missing = sorted(wanted - found)
    if missing:
        raise SourceError(f"{listing}: image {missing[0]!r} is not among the source images "
                          f"({len(missing)} of {len(wanted)} listed are missing)")
    return kept


def fit_to_stimulus(image: np.ndarray, size: int = STIMULUS_SIZE) -> np.ndarray:
    """The one resize policy: scale the short side to ``size`` (Pillow bicubic, antialiased),
    then centre-crop to size x size, as ImageNet evaluation does (Burgert et al.: 224 x 224)."""
    h, w = image.shape[:2]
    if (h, w) == (size, size):
        return image
    scale = size / min(h, w)
    new_w, new_h = max(size, round(w * scale)), max(size, round(h * scale))
    resized = np.asarray(Image.fromarray(image).resize((new_w, new_h), Image.Resampling.BICUBIC, reducing_gap=None))
    top, left = (new_h - size) // 2, (new_w - size) // 2
    return np.ascontiguousarray(resized[top:top + size, left:left + size])
