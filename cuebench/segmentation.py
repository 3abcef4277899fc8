"""Labelled segmentation sets: images with per-pixel label masks, the contract every stage reads.

Inside cuebench a label mask is an (H, W) uint8 array of class indices in the order of the
experiment's label set, with ``IGNORE`` (255) for pixels that count for no class; it is stored
as a single-channel PNG in the experiment's ``stimuli/`` folder, content-addressed with its
provenance like every stimulus. A set on disk is a folder::

    SETDIR/images/NAME.png|jpg      the photos
    SETDIR/labels/NAME.png          one mask per photo, same width and height
    SETDIR/classes.json             generic sets: ["road", "car", ...] or
                                    {"classes": [...], "ignore_index": 255}

and one of three conventions says how the mask's values read (Heinert et al., paper 000, Sec. IV-B):

- ``cityscapes``: the 19 train ids 0..18, 255 ignored (the ``*_labelTrainIds.png`` files; a photo
  ``X_leftImg8bit.png`` finds its mask ``X_gtFine_labelTrainIds.png`` or ``X.png``);
- ``ade20k``: 150 classes stored as 1..150 with 0 = "other", ignored: reduce-zero-label maps
  0 -> 255 and k -> k - 1;
- ``generic``: ``classes.json`` names the classes (value k = k-th class) and the ignore index.

Every mask is checked when the set is read: a photo without a mask, a mask of another size or a
value that is no class nor the ignore index is an error naming the file. Pre-processing follows
the paper: ADE20k photos are resized to 512 on their shorter side and centre-cropped to 512 x 512;
Cityscapes photos keep their 2048 x 1024 size unless a ``scale`` is given. Masks are resized with
nearest neighbour, so every mask value stays a class index.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from .errors import CuebenchError
from .images import IMAGE_SUFFIXES, decode_image

IGNORE = 255
"""The ignore index of every stored mask."""
MAX_CLASSES = 255
"""Class indices fit one byte beside the ignore index."""

CITYSCAPES_CLASSES = ("road", "sidewalk", "building", "wall", "fence", "pole", "traffic light", "traffic sign",
                      "vegetation", "terrain", "sky", "person", "rider", "car", "truck", "bus", "train",
                      "motorcycle", "bicycle")
"""Cityscapes' 19 evaluation classes in train-id order (Cordts et al. 2016)."""

ADE20K_CLASSES = (
    "wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed", "windowpane", "grass", "cabinet",
    "sidewalk", "person", "earth", "door", "table", "mountain", "plant", "curtain", "chair", "car", "water",
    "painting", "sofa", "shelf", "house", "sea", "mirror", "rug", "field", "armchair", "seat", "fence", "desk",
    "rock", "wardrobe", "lamp", "bathtub", "railing", "cushion", "base", "box", "column", "signboard",
    "chest of drawers", "counter", "sand", "sink", "skyscraper", "fireplace", "refrigerator", "grandstand", "path",
    "stairs", "runway", "case", "pool table", "pillow", "screen door", "stairway", "river", "bridge", "bookcase",
    "blind", "coffee table", "toilet", "flower", "book", "hill", "bench", "countertop", "stove", "palm",
    "kitchen island", "computer", "swivel chair", "boat", "bar", "arcade machine", "hovel", "bus", "towel",
    "light", "truck", "tower", "chandelier", "awning", "streetlight", "booth", "television receiver", "airplane",
    "dirt track", "apparel", "pole", "land", "bannister", "escalator", "ottoman", "bottle", "buffet", "poster",
    "stage", "van", "ship", "fountain", "conveyer belt", "canopy", "washer", "plaything", "swimming pool",
    "stool", "barrel", "basket", "waterfall", "tent", "bag", "minibike", "cradle", "oven", "ball", "food", "step",
    "tank", "trade name", "microwave", "pot", "animal", "bicycle", "lake", "dishwasher", "screen", "blanket",
    "sculpture", "hood", "sconce", "vase", "traffic light", "tray", "ashcan", "fan", "pier", "crt screen",
    "plate", "monitor", "bulletin board", "shower", "radiator", "glass", "clock", "flag")
"""ADE20k's 150 SceneParsing classes in label order 1..150 (Zhou et al. 2017; mmsegmentation's names)."""

ADE20K_SIZE = 512
"""Heinert et al. Sec. IV: ADE20k photos resized to 512 on the shorter side, centre crop 512 x 512."""
CONVENTIONS = ("cityscapes", "ade20k", "generic")


class SegmentationSetError(CuebenchError):
    """A labelled segmentation set is malformed; the message names the file."""


@dataclass(frozen=True)
class Convention:
    """How a set's mask values map to class indices: ``lookup[value]`` is the class index or IGNORE."""

    name: str
    classes: tuple[str, ...]
    lookup: np.ndarray = field(repr=False, compare=False)
    framing: str  # the pre-processing, recorded in every stimulus' provenance


def _lookup(valid: dict[int, int]) -> np.ndarray:
    table = np.full(256, -1, dtype=np.int16)  # -1: not a value this convention allows
    for value, index in valid.items():
        table[value] = index
    return table


def convention(name: str, root: Path | None = None, scale: float = 1.0) -> Convention:
    """The convention ``name`` (``CONVENTIONS``); ``generic`` reads ``root/classes.json``."""
    if name == "cityscapes":
        lookup = _lookup({k: k for k in range(len(CITYSCAPES_CLASSES))} | {IGNORE: IGNORE})
        framing = "full size" if scale == 1 else f"both sides x{scale:g} (Pillow bicubic; masks nearest)"
        return Convention(name, CITYSCAPES_CLASSES, lookup, framing)
    if name == "ade20k":
        lookup = _lookup({0: IGNORE} | {k: k - 1 for k in range(1, len(ADE20K_CLASSES) + 1)})
        return Convention(name, ADE20K_CLASSES, lookup, f"short side to {ADE20K_SIZE} (Pillow bicubic; masks "
                                                        f"nearest), centre crop {ADE20K_SIZE}x{ADE20K_SIZE}")
    if name == "generic":
        if root is None:
            raise SegmentationSetError("the generic convention needs the set folder's classes.json")
        classes, ignore = read_classes(root / "classes.json")
        lookup = _lookup({k: k for k in range(len(classes))} | {ignore: IGNORE})
        framing = "full size" if scale == 1 else f"both sides x{scale:g} (Pillow bicubic; masks nearest)"
        return Convention(name, classes, lookup, framing)
    raise SegmentationSetError(f"unknown segmentation convention {name!r}; choose one of {', '.join(CONVENTIONS)}")


def read_classes(path: Path) -> tuple[tuple[str, ...], int]:
    """``classes.json``: a list of class names, or ``{"classes": [...], "ignore_index": N}`` (default 255)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SegmentationSetError(f"{path} is missing: a generic segmentation set names its classes there") from None
    except json.JSONDecodeError as err:
        raise SegmentationSetError(f"{path}: not valid JSON at line {err.lineno}: {err.msg}") from None
    classes, ignore = (data, IGNORE) if isinstance(data, list) else (data.get("classes"), data.get("ignore_index",
                                                                                                   IGNORE))
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) and c for c in classes):
        raise SegmentationSetError(f"{path}: 'classes' must be a non-empty list of class names")
    if len(set(classes)) != len(classes):
        raise SegmentationSetError(f"{path}: class names repeat")
    if len(classes) > MAX_CLASSES:
        raise SegmentationSetError(f"{path}: {len(classes)} classes; at most {MAX_CLASSES} fit a mask byte")
    if not isinstance(ignore, int) or not len(classes) <= ignore <= 255:
        raise SegmentationSetError(f"{path}: ignore_index must be an integer from {len(classes)} to 255, got "
                                   f"{ignore!r}")
    return tuple(classes), ignore


def read_mask_file(path: Path) -> np.ndarray:
    """A label PNG's stored values, (H, W) uint8: a grey or palette image as its indices, never converted."""
    try:
        with Image.open(path) as im:
            im.load()
            if im.mode not in ("L", "P"):
                raise SegmentationSetError(f"label mask {path} is a {im.mode} image; expected one channel of class "
                                           "values (8-bit grey or palette PNG)")
            return np.asarray(im, dtype=np.uint8).copy()
    except (OSError, SyntaxError, ValueError) as err:
        raise SegmentationSetError(f"cannot decode label mask {path}: {err}") from None


def class_mask(values: np.ndarray, conv: Convention, path: Path) -> np.ndarray:
    """Stored mask values -> class indices with IGNORE, or an error naming the first value that is neither."""
    mapped = conv.lookup[values]
    bad = mapped < 0
    if bad.any():
        y, x = np.argwhere(bad)[0]
        raise SegmentationSetError(f"label mask {path}: value {int(values[y, x])} at (row {y}, column {x}) is no "
                                   f"class of the {conv.name} convention ({len(conv.classes)} classes) nor its "
                                   "ignore index")
    return mapped.astype(np.uint8)


def frame(image: np.ndarray, mask: np.ndarray, conv: Convention, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The paper's pre-processing of a photo and its mask (masks with nearest neighbour)."""
    h, w = mask.shape
    if conv.name == "ade20k":
        factor = ADE20K_SIZE / min(h, w)
        size = (max(ADE20K_SIZE, round(w * factor)), max(ADE20K_SIZE, round(h * factor)))
    elif scale != 1:
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
    else:
        return image, mask
    image = np.asarray(Image.fromarray(image).resize(size, Image.Resampling.BICUBIC, reducing_gap=None))
    mask = np.asarray(Image.fromarray(mask).resize(size, Image.Resampling.NEAREST))
    if conv.name == "ade20k":
        top, left = (size[1] - ADE20K_SIZE) // 2, (size[0] - ADE20K_SIZE) // 2
        image = image[top:top + ADE20K_SIZE, left:left + ADE20K_SIZE]
        mask = mask[top:top + ADE20K_SIZE, left:left + ADE20K_SIZE]
    return np.ascontiguousarray(image), np.ascontiguousarray(mask)


@dataclass(frozen=True)
class LabelledImage:
    """One photo of a set and its mask's file; ``read()`` gives both pre-processed, checked."""

    name: str
    image_path: Path = field(repr=False)
    mask_path: Path = field(repr=False)
    origin: str  # the photo's path relative to the set folder, recorded in provenance
    conv: Convention = field(repr=False, compare=False)
    scale: float = 1.0

    def read(self) -> tuple[np.ndarray, np.ndarray]:
        """(H, W, 3) uint8 photo and (H, W) uint8 class-index mask, pre-processed as the convention says."""
        image = decode_image(self.image_path)
        values = read_mask_file(self.mask_path)
        if values.shape != image.shape[:2]:
            raise SegmentationSetError(f"label mask {self.mask_path} is {values.shape[1]}x{values.shape[0]} but its "
                                       f"photo {self.image_path.name} is {image.shape[1]}x{image.shape[0]}")
        return frame(image, class_mask(values, self.conv, self.mask_path), self.conv, self.scale)

    def image(self) -> np.ndarray:
        return self.read()[0]


def _mask_candidates(stem: str, conv: Convention) -> list[str]:
    names = [f"{stem}.png"]
    if conv.name == "cityscapes" and stem.endswith("_leftImg8bit"):
        names.insert(0, f"{stem[:-len('_leftImg8bit')]}_gtFine_labelTrainIds.png")
    return names


def labelled_set(root: str | Path, convention_name: str, scale: float = 1.0) -> tuple[Convention,
                                                                                    list[LabelledImage]]:
    """The set in ``root`` (``images/`` and ``labels/``), every photo paired with its mask; the masks'
    values are checked here, so a bad file stops the import before any stimulus is made."""
    root = Path(root)
    if not (root / "images").is_dir() or not (root / "labels").is_dir():
        raise SegmentationSetError(f"segmentation set {root} needs the folders images/ and labels/")
    if not 0 < scale <= 4:
        raise SegmentationSetError(f"--scale must be in (0, 4], got {scale}")
    conv = convention(convention_name, root, scale)
    photos = sorted(p for p in (root / "images").rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not photos:
        raise SegmentationSetError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in {root / 'images'}")
    items = []
    for photo in photos:
        rel = photo.relative_to(root / "images")
        folder = root / "labels" / rel.parent
        found = [folder / n for n in _mask_candidates(photo.stem, conv) if (folder / n).is_file()]
        if not found:
            looked = ", ".join(str((folder / n).relative_to(root)) for n in _mask_candidates(photo.stem, conv))
            raise SegmentationSetError(f"photo {photo.relative_to(root)} has no label mask (looked for {looked})")
        item = LabelledImage(rel.with_suffix("").as_posix(), photo, found[0], photo.relative_to(root).as_posix(),
                             conv, scale)
        check_mask(item)
        items.append(item)
    return conv, items


def check_mask(item: LabelledImage) -> None:
    """Size and values of one mask against its photo (the photo's header only), errors naming the file."""
    values = read_mask_file(item.mask_path)
    try:
        with Image.open(item.image_path) as im:
            width, height = im.size
    except (OSError, SyntaxError, ValueError) as err:
        raise SegmentationSetError(f"cannot read photo {item.image_path}: {err}") from None
    if values.shape != (height, width):
        raise SegmentationSetError(f"label mask {item.mask_path} is {values.shape[1]}x{values.shape[0]} but its "
                                   f"photo {item.image_path.name} is {width}x{height}")
    class_mask(values, item.conv, item.mask_path)


class PeopleCannotAnswer(CuebenchError):
    """A runner for people was given an experiment only models can answer."""


def refuse_for_people(experiment, runner: str) -> None:
    """The web server and the lab runner refuse an experiment with trials only models answer (their card has
    no response for people, as segmentation's), in one line."""
    models_only = next((t.card for t in experiment.trials if not t.card.for_people), None)
    if models_only is not None:
        raise PeopleCannotAnswer(f"{runner} refuses experiment {experiment.name!r}: people do not take "
                                 f"{models_only.name!r} trials, only models answer them; evaluate it with `cuebench eval`")
