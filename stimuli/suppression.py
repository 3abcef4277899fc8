"""Feature-suppression transforms of Burgert et al. 2025 (paper 004, Sec. 4 and appendices D, I, J).

Each transform removes one cue from a 224x224x3 uint8 RGB photo while sparing the others:
shape (patch shuffle, patch rotation), texture (bilateral filter, Gaussian blur; box,
median and non-local-means filters as the paper's comparison smoothers), colour
(grayscale, channel shuffle), plus the grid-overlay control of appendix J and joint
suppression of two cues (``"patch_shuffle+grayscale"``, appendix I). Every transform is
deterministic given an integer seed, so a stimulus is reproducible from its provenance.

Patch grids on a side that ``g`` does not divide: cells must be equal squares (patch
rotation turns them by 90 degrees, patch shuffle moves any cell to any slot), so cells are
``s = side // g`` pixels and the ``g*s`` square they tile is centred in the image; the
leftover frame of ``side - g*s`` pixels (0-14 px in all for g in 2..16 at 224 px, 2 px for
the human study's g = 3 and 6) stays in place. Every pixel is kept, so patch shuffle
preserves the multiset of pixel values exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import cv2
import numpy as np

from cuebench.errors import CuebenchError
from cuebench.registry import Registry


class SuppressionError(CuebenchError):
    """An unknown condition, a bad parameter, or an image the transforms cannot take."""


@dataclass(frozen=True)
class Condition:
    """A suppression condition: its parameter grid (index = the trial's ``level``, weakest
    first), the setting of the human study (None if people never saw it), and the cue it removes."""

    name: str
    grid: tuple[dict, ...]
    human_params: dict | None
    cue: str  # "shape", "texture", "colour", "control", or "a+b" for joint suppression
    stochastic: bool


@dataclass(frozen=True)
class Param:
    """The rule of one parameter of a transform: its type, the allowed values in words (for the error message)
    and the check."""

    kind: type  # int or float
    rule: str  # the allowed values, as the error message states them
    valid: Callable[[float], bool]


def _odd_at_least(n: int) -> Param:
    return Param(int, f"an odd integer >= {n}", lambda v: v >= n and v % 2 == 1)


_GRID = Param(int, "an integer from 2 to the image's shorter side", lambda v: v >= 2)
_POSITIVE = Param(float, "a number > 0", lambda v: v > 0)
_POSITIVE_INT = Param(int, "an integer >= 1", lambda v: v >= 1)
_ALPHA = Param(float, "a number in [0, 1]", lambda v: 0 <= v <= 1)

TRANSFORMS: Registry = Registry("transforms")
"""The single suppression transforms ``fn(image, params, rng)``, each declared by an entry point of
``cuebench.transforms`` with its parameters' rules (``fn.params``); conditions (below) put them on
parameter grids and join two of them."""


def transform(**params: Param) -> Callable:
    """Mark ``fn(image, params, rng)`` as a transform taking ``params`` (name -> rule); its name is its entry
    point's."""

    def mark(fn: Callable) -> Callable:
        fn.params = params
        return fn

    return mark


# --- the transforms: (image, params, rng) -> image ---------------------------------------

def _cell_layout(image: np.ndarray, grid: int) -> tuple[int, int, int]:
    """Cell side and the top/left offset of the centred g x g square of equal cells."""
    h, w = image.shape[:2]
    side = min(h, w) // grid
    if side < 1:
        raise SuppressionError(f"grid={grid} is too fine for a {h}x{w} image: use {_GRID.rule}")
    return side, (h - grid * side) // 2, (w - grid * side) // 2


def _cells(image: np.ndarray, grid: int) -> tuple[np.ndarray, tuple[slice, slice]]:
    """The grid's cells as an array (g*g, s, s, 3) in row-major order, and the region they tile."""
    side, top, left = _cell_layout(image, grid)
    region = (slice(top, top + grid * side), slice(left, left + grid * side))
    cells = image[region].reshape(grid, side, grid, side, 3).swapaxes(1, 2).reshape(-1, side, side, 3)
    return cells, region


def _place(image: np.ndarray, cells: np.ndarray, region: tuple[slice, slice], grid: int) -> np.ndarray:
    side = cells.shape[1]
    out = image.copy()
    out[region] = cells.reshape(grid, grid, side, side, 3).swapaxes(1, 2).reshape(grid * side, grid * side, 3)
    return out


@transform(grid=_GRID)
def patch_shuffle(image, params, rng):
    """Permute the g x g cells uniformly at random (Burgert et al. Sec. 4; Luo et al. 2019),
    redrawing the identity (1 in 24 for g = 2), which would leave the photo as it was."""
    cells, region = _cells(image, params["grid"])
    order = np.arange(len(cells))
    while np.array_equal(order, np.arange(len(cells))):
        order = rng.permutation(len(cells))
    return _place(image, cells[order], region, params["grid"])


@transform(grid=_GRID)
def patch_rotation(image, params, rng):
    """Turn every cell by k x 90 degrees, k uniform in {0, 1, 2, 3}: cells stay where they
    were, but edges break at every cell border (Burgert et al. Sec. 4). A draw that turns no
    cell at all (1 in 256 for g = 2) is redrawn."""
    cells, region = _cells(image, params["grid"])
    turns = np.zeros(len(cells), dtype=int)
    while not turns.any():
        turns = rng.integers(0, 4, size=len(cells))
    rotated = cells.copy()
    for k in (1, 2, 3):
        rotated[turns == k] = np.rot90(cells[turns == k], k, axes=(1, 2))
    return _place(image, rotated, region, params["grid"])


@transform(grid=_GRID)
def grid_overlay(image, params, rng):
    """Appendix J control: shuffle, then copy the 2-px-wide block boundaries (1 px each side of
    every inner cell border) of the shuffled image onto the unshuffled one."""
    grid = params["grid"]
    side, top, left = _cell_layout(image, grid)
    shuffled = patch_shuffle(image, params, rng)
    rows = np.array([top + i * side + d for i in range(1, grid) for d in (-1, 0)])
    cols = np.array([left + i * side + d for i in range(1, grid) for d in (-1, 0)])
    span_r, span_c = slice(top, top + grid * side), slice(left, left + grid * side)
    out = image.copy()
    out[rows, span_c] = shuffled[rows, span_c]
    out[span_r, cols] = shuffled[span_r, cols]
    return out


@transform(d=_POSITIVE_INT, sigma_color=_POSITIVE, sigma_space=_POSITIVE)
def bilateral(image, params, rng):
    """Edge-preserving smoothing (Tomasi & Manduchi 1998), OpenCV's bilateralFilter."""
    return cv2.bilateralFilter(image, params["d"], params["sigma_color"], params["sigma_space"])


@transform(ksize=_odd_at_least(1), sigma=_POSITIVE)
def gaussian_blur(image, params, rng):
    """Gaussian blur with a k x k kernel and standard deviation sigma (OpenCV)."""
    k = params["ksize"]
    return cv2.GaussianBlur(image, (k, k), params["sigma"])


@transform(ksize=_POSITIVE_INT)
def box_blur(image, params, rng):
    """Box (mean) filter over a k x k window (appendix D comparison smoother)."""
    k = params["ksize"]
    return cv2.blur(image, (k, k))


@transform(ksize=_odd_at_least(3))
def median_blur(image, params, rng):
    """Median filter over a k x k window (appendix D comparison smoother)."""
    return cv2.medianBlur(image, params["ksize"])


@transform(h=_POSITIVE, template_window=_odd_at_least(1), search_window=_odd_at_least(1))
def nonlocal_means(image, params, rng):
    """Non-local means (Buades et al. 2005). A gray image (three equal channels, as in the
    quality metrics of appendix A) is denoised as gray; a colour one with OpenCV's coloured
    variant, h_colour = h, which expects BGR (it denoises in L*a*b*), hence the channel flips."""
    windows = (params["template_window"], params["search_window"])
    if np.array_equal(image[..., 0], image[..., 1]) and np.array_equal(image[..., 0], image[..., 2]):
        gray = cv2.fastNlMeansDenoising(np.ascontiguousarray(image[..., 0]), None, params["h"], *windows)
        return np.repeat(gray[..., None], 3, axis=2)
    bgr = np.ascontiguousarray(image[..., ::-1])
    out = cv2.fastNlMeansDenoisingColored(bgr, None, params["h"], params["h"], *windows)
    return np.ascontiguousarray(out[..., ::-1])


def luminance(image: np.ndarray) -> np.ndarray:
    """ITU-R BT.601 luma (0.299 R + 0.587 G + 0.114 B) as uint8, OpenCV's and torchvision's grayscale."""
    return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)


@transform(alpha=_ALPHA)
def grayscale(image, params, rng):
    """Blend towards luminance: (1 - alpha) * RGB + alpha * gray; alpha = 1 is full grayscale."""
    alpha = params["alpha"]
    gray = luminance(image)[..., None].astype(np.float32)
    blended = (1.0 - alpha) * image.astype(np.float32) + alpha * gray
    return np.clip(np.rint(blended), 0, 255).astype(np.uint8)


_NON_IDENTITY_PERMUTATIONS = ((0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))


@transform()
def channel_shuffle(image, params, rng):
    """Reorder R, G, B by one of the five non-identity permutations, chosen by the seed."""
    order = _NON_IDENTITY_PERMUTATIONS[rng.integers(len(_NON_IDENTITY_PERMUTATIONS))]
    return np.ascontiguousarray(image[..., list(order)])


@transform()
def original(image, params, rng):
    """The photo unchanged: the baseline of relative accuracy."""
    return image.copy()


# --- conditions ---------------------------------------------------------------------------

_SHUFFLE_GRIDS = tuple({"grid": g} for g in range(2, 17))

_SINGLE_CONDITIONS = (
    Condition("original", ({},), {}, "control", False),
    Condition("patch_shuffle", _SHUFFLE_GRIDS, {"grid": 6}, "shape", True),
    Condition("patch_rotation", _SHUFFLE_GRIDS, None, "shape", True),
    Condition("grid_overlay", _SHUFFLE_GRIDS, None, "control", True),
    Condition("bilateral", tuple({"d": d, "sigma_color": sc, "sigma_space": 75}
                                 for d, sc in ((4, 50), (6, 80), (8, 110), (10, 140), (12, 170), (14, 200))),
              {"d": 12, "sigma_color": 170, "sigma_space": 75}, "texture", False),
    Condition("gaussian_blur", tuple({"ksize": k, "sigma": s} for k, s in
                                     ((3, .33), (5, .66), (7, 1.0), (9, 1.33), (11, 1.66), (13, 2.0), (15, 2.33))),
              None, "texture", False),
    Condition("box_blur", tuple({"ksize": k} for k in (5, 7, 9, 11, 13, 15)), None, "texture", False),
    Condition("median_blur", tuple({"ksize": k} for k in (5, 7, 9, 11, 13, 15)), None, "texture", False),
    Condition("nonlocal_means", tuple({"h": h, "template_window": k, "search_window": k} for h, k in
                                      ((5, 5), (5, 7), (10, 9), (15, 11), (20, 13), (25, 15))),
              None, "texture", False),
    Condition("grayscale", tuple({"alpha": a} for a in (0.2, 0.4, 0.6, 0.8, 1.0)), {"alpha": 1.0}, "colour", False),
    Condition("channel_shuffle", ({},), None, "colour", True),
)
"""Grids: Burgert et al. Sec. 5 and appendix D (box, median and non-local means follow the
appendix-D ablation, k = 5..15; non-local means uses its (h, k) mapping with k as both windows)."""


def joint_condition(first: str, second: str) -> Condition:
    """Two cues suppressed together (Burgert et al. appendix I), ``first`` applied first.

    The joint grid walks both grids from weakest to strongest together: it has as many levels
    as the longer grid, and level i uses each grid's level at the same fraction of its length.
    """
    if first == second:
        raise SuppressionError(f"joint condition {first}+{second}: the two conditions must differ")
    a, b = (_single(name, f"{first}+{second}") for name in (first, second))
    n = max(len(a.grid), len(b.grid))

    def at(grid: tuple[dict, ...], i: int) -> dict:
        return grid[round(i * (len(grid) - 1) / (n - 1))] if n > 1 else grid[0]

    grid = tuple({a.name: at(a.grid, i), b.name: at(b.grid, i)} for i in range(n))
    human = ({a.name: a.human_params, b.name: b.human_params}
             if a.human_params is not None and b.human_params is not None else None)
    return Condition(f"{a.name}+{b.name}", grid, human, f"{a.cue}+{b.cue}", a.stochastic or b.stochastic)


def _single(name: str, context: str | None = None) -> Condition:
    for cond in _SINGLE_CONDITIONS:
        if cond.name == name:
            return cond
    if name in TRANSFORMS:
        return plugin_condition(name)
    where = f" in {context!r}" if context else ""
    raise SuppressionError(f"unknown suppression condition {name!r}{where}; "
                           f"known: {', '.join(condition_names())}, or two joined by '+'")


def condition_names() -> list[str]:
    """The single conditions: Burgert et al.'s in the paper's order, then those of installed transform plug-ins."""
    built_in = [c.name for c in _SINGLE_CONDITIONS]
    return built_in + [name for name in TRANSFORMS.names() if name not in built_in]


def plugin_condition(name: str) -> Condition:
    """The condition of a transform another package installs (``cuebench.transforms``): besides its ``params``
    (name -> ``Param``) it declares its grid, weakest first (``levels``), the cue it removes (``cue``) and,
    optionally, the setting people saw (``human_params``) and whether it draws from the seed (``stochastic``)."""
    fn = TRANSFORMS[name]
    missing = [attribute for attribute in ("params", "levels", "cue") if not hasattr(fn, attribute)]
    if missing:
        raise SuppressionError(f"the transform {name!r} ({fn.__module__}) does not declare {', '.join(missing)}: a "
                               "transform plug-in gives its parameters' rules (params), its grid (levels) and the cue "
                               "it removes (cue)")
    return Condition(name, tuple(fn.levels), getattr(fn, "human_params", None), fn.cue,
                     bool(getattr(fn, "stochastic", False)))


CONDITIONS: dict[str, Condition] = {c.name: c for c in _SINGLE_CONDITIONS} | {
    j.name: j for j in (joint_condition("bilateral", "grayscale"),
                        joint_condition("patch_shuffle", "grayscale"),
                        joint_condition("patch_shuffle", "bilateral"))}
"""Every single condition, and the three joint ones of Burgert et al. Fig. 14; any other pair
is available through ``get_condition("a+b")``."""

HUMAN_STUDY: tuple[tuple[str, str, dict], ...] = (
    ("original", "original", {}),
    ("global shape", "patch_shuffle", {"grid": 3}),
    ("local shape", "patch_shuffle", {"grid": 6}),
    ("texture", "bilateral", {"d": 12, "sigma_color": 170, "sigma_space": 75}),
    ("colour", "grayscale", {"alpha": 1.0}),
)
"""The five conditions of Burgert et al.'s human experiment (Sec. 5.1): (label, condition, params)."""


def get_condition(name: str) -> Condition:
    """A condition by name: a single one, or two single ones joined by ``+``."""
    if name in CONDITIONS:
        return CONDITIONS[name]
    parts = name.split("+")
    if len(parts) == 2:
        return joint_condition(*parts)
    if len(parts) > 2:
        raise SuppressionError(f"condition {name!r}: joint suppression takes exactly two conditions")
    return _single(name)


def _checked_params(condition: str, params: object) -> dict:
    if not isinstance(params, dict):
        raise SuppressionError(f"{condition}: params must be a dict, got {params!r}")
    spec = TRANSFORMS[condition].params
    unknown = sorted(set(params) - set(spec))
    missing = sorted(set(spec) - set(params))
    if unknown or missing:
        allowed = ", ".join(f"{k} ({p.rule})" for k, p in spec.items()) or "none"
        problem = f"unknown parameter(s) {unknown}" if unknown else f"missing parameter(s) {missing}"
        raise SuppressionError(f"{condition}: {problem}; parameters: {allowed}")
    checked = {}
    for key, rule in spec.items():
        value = params[key]
        is_number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
        if rule.kind is int and is_number and float(value).is_integer():
            value = int(value)
        if not is_number or (rule.kind is int and not isinstance(value, int)) or not rule.valid(value):
            raise SuppressionError(f"{condition}: parameter {key}={value!r} is not {rule.rule}")
        checked[key] = rule.kind(value)
    return checked


def suppress(image: np.ndarray, condition: str, params: dict, seed: int) -> np.ndarray:
    """Apply a suppression condition to an HxWx3 uint8 RGB image; same inputs, same pixels.

    ``params`` is one entry of the condition's grid (or any valid setting); for a joint
    condition ``"a+b"`` it is ``{"a": {...}, "b": {...}}`` and both share one seeded generator.
    """
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise SuppressionError(f"{condition}: expected an HxWx3 uint8 RGB image, got {image.dtype} {image.shape}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SuppressionError(f"{condition}: seed must be a non-negative integer, got {seed!r}")
    cond = get_condition(condition)
    rng = np.random.default_rng(int(seed))
    steps = [(cond.name, params)]
    if "+" in cond.name:
        if not isinstance(params, dict) or set(params) != set(cond.name.split("+")):
            raise SuppressionError(f"{cond.name}: params must be {{name: params}} for exactly "
                                   f"{cond.name.split('+')}, got {params!r}")
        steps = [(name, params[name]) for name in cond.name.split("+")]
    out = np.ascontiguousarray(image)
    for name, step_params in steps:
        out = TRANSFORMS[name](out, _checked_params(name, step_params), rng)
    return out
