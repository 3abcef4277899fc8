"""Texture cues: images that keep local texture but lose global shape (Heinert et al.,
paper 000, Sec. III-b and the ablation of Sec. IV / Tab. IX).

- ``voronoi_shuffle`` (the paper's choice): N random sites give a Voronoi partition;
  each cell is filled with the image content under the same cell shifted by a random
  offset that keeps the shifted cell inside the image.
- ``patch_shuffle``: a regular 8x8 grid of square patches, permuted (the project's
  Burgert et al. transform, ``stimuli.suppression``).
- ``diamond_shuffle``: the same idea on a grid rotated by 45 degrees that wraps around
  the borders, so every pixel is kept.
- ``texture_eed``: the original minus its EED shape cue ("tex.EED"), and its
  patch-shuffled version ("tex.EEDpat.").

All take and return (H, W, 3) uint8 RGB and are deterministic given the seed.
"""

from __future__ import annotations

import math

import numpy as np

from cuebench.errors import CuebenchError

VORONOI_CELLS = 32
"""Heinert et al., Sec. IV-b: N = 32 sites."""
PATCH_GRID = 8
"""Heinert et al., Sec. IV: 8x8 patches for regular patch shuffling."""
TEXTURE_CUES = ("voronoi", "patch", "diamond", "tex_eed", "tex_eed_patch")
SHUFFLES = ("voronoi", "patch", "diamond")
"""The texture cues that only move pixels (so a label mask can follow them)."""


class TextureCueError(CuebenchError):
    """A texture-cue transform got a bad image or parameter."""


def _check_image(image: np.ndarray, what: str) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise TextureCueError(f"{what}: expected an HxWx3 uint8 RGB image, got {image.dtype} {image.shape}")
    return image


def voronoi_cells(height: int, width: int, cells: int, rng: np.random.Generator) -> np.ndarray:
    """Label map (H, W): index of the nearest of ``cells`` distinct random pixel sites
    (Euclidean distance; ties go to the lower index)."""
    if not 1 <= cells <= height * width:
        raise TextureCueError(f"voronoi cells must be between 1 and {height * width}, got {cells}")
    flat = rng.choice(height * width, size=cells, replace=False)
    sites = np.stack(np.divmod(flat, width), axis=1).astype(np.float64)
    yy, xx = np.mgrid[0:height, 0:width]
    d2 = (yy[..., None] - sites[:, 0]) ** 2 + (xx[..., None] - sites[:, 1]) ** 2
    return np.argmin(d2, axis=-1)


def voronoi_source(height: int, width: int, cells: int = VORONOI_CELLS, seed: int = 0) -> np.ndarray:
    """Where each pixel of a Voronoi-shuffled image comes from, as flat indices (H, W) into the
    original (Heinert et al. Sec. III-b / Fig. 2): each cell takes the content under the cell
    shifted by a random offset (dy, dx), uniform over the offsets that keep the cell's bounding
    box inside the image. Computed once, it moves a photo and its label mask alike (Fig. 1, right)."""
    rng = np.random.default_rng(seed)
    labels = voronoi_cells(height, width, cells, rng)
    source = np.empty((height, width), dtype=np.int64)
    for k in range(cells):
        ys, xs = np.nonzero(labels == k)
        dy = rng.integers(-ys.min(), height - ys.max())
        dx = rng.integers(-xs.min(), width - xs.max())
        source[ys, xs] = (ys + dy) * width + xs + dx
    return source


def move(values: np.ndarray, source: np.ndarray) -> np.ndarray:
    """``values`` (H, W[, C]) rearranged by a shuffle's flat source indices: every pixel, or mask
    value, is copied whole from one place, so a label mask stays a label mask (nearest neighbour)."""
    values = np.asarray(values)
    h, w = values.shape[:2]
    if source.shape != (h, w):
        raise TextureCueError(f"a shuffle planned for {source.shape[1]}x{source.shape[0]} cannot move a "
                              f"{w}x{h} array")
    return values.reshape(h * w, *values.shape[2:])[source.ravel()].reshape(values.shape)


def voronoi_shuffle(image: np.ndarray, cells: int = VORONOI_CELLS, seed: int = 0) -> np.ndarray:
    """Heinert et al. Sec. III-b / Fig. 2: each Voronoi cell filled from the cell shifted at random
    (``voronoi_source``)."""
    image = _check_image(image, "voronoi_shuffle")
    return move(image, voronoi_source(*image.shape[:2], cells, seed))


def patch_shuffle(image: np.ndarray, grid: int = PATCH_GRID, seed: int = 0) -> np.ndarray:
    """Regular g x g patch shuffling (Heinert et al.: 8x8), via the suppression transform."""
    from .suppression import suppress

    return suppress(_check_image(image, "patch_shuffle"), "patch_shuffle", {"grid": grid}, seed)


def default_diamond_diagonal(height: int, width: int, grid: int = PATCH_GRID) -> int:
    """The diamond diagonal whose cell area is closest to that of a g x g patch grid's
    cells, among even divisors of both sides (so the wrapped grid tiles the image):
    32 px at 224x224 (98 diamonds of 512 px vs. 64 patches of 784 px)."""
    target = math.sqrt(2) * min(height, width) / grid
    options = [d for d in range(2, math.gcd(height, width) + 1, 2) if height % d == 0 and width % d == 0]
    if not options:
        raise TextureCueError(f"a {height}x{width} image has no even common divisor for a wrapped diamond grid")
    return min(options, key=lambda d: (abs(d * d / 2 - target * target / 2), d))


def diamond_source(height: int, width: int, diagonal: int | None = None, seed: int = 0) -> np.ndarray:
    """Heinert et al. Sec. IV: patch shuffling on a grid rotated by 45 degrees that wraps around
    the image borders, as flat source indices (H, W). Diamonds are bounded by the lines
    x + y = k d and x - y = m d; on the torus their centres form a lattice, and every diamond is
    moved whole to the place of another, so each pixel value is kept exactly once."""
    h, w = height, width
    d = default_diamond_diagonal(h, w) if diagonal is None else int(diagonal)
    if d < 2 or d % 2 or h % d or w % d:
        raise TextureCueError(f"diamond diagonal must be an even divisor of both sides {h}x{w}, got {diagonal}")
    yy, xx = np.mgrid[0:h, 0:w]
    k = np.floor_divide(xx + yy, d)
    m = np.floor_divide(xx - yy, d)
    cy, cx = (k - m) * d // 2, (k + m + 1) * d // 2  # the diamond's centre (integer: d is even)
    centre_id = (cy % h) * w + cx % w
    centres, cell = np.unique(centre_id, return_inverse=True)
    target = np.random.default_rng(seed).permutation(len(centres))
    src_cy, src_cx = np.divmod(centres[target][cell.reshape(h, w)], w)
    return ((src_cy + yy - cy) % h) * w + (src_cx + xx - cx) % w


def diamond_shuffle(image: np.ndarray, diagonal: int | None = None, seed: int = 0) -> np.ndarray:
    """Diamond shuffling of an image (``diamond_source``)."""
    image = _check_image(image, "diamond_shuffle")
    return move(image, diamond_source(*image.shape[:2], diagonal, seed))


def texture_eed(original: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """tex.EED (Heinert et al. Sec. IV): original minus its EED image, signed float
    (H, W, 3) on -255..255. ``texture_eed_image`` makes it viewable."""
    return np.asarray(original, dtype=np.float32) - np.asarray(shape, dtype=np.float32)


def texture_eed_image(original: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """tex.EED shown as an image: the signed difference min-max rescaled to 0-255 (the
    reference's rescaling rule for EED images, without its clipping)."""
    from .eed import stretch

    return stretch(texture_eed(original, shape))


def source_of(shuffle, height: int, width: int) -> np.ndarray:
    """The flat source indices (H, W) of ``shuffle`` (a function of an (H, W, 3) uint8 image that
    only moves pixels), read by running it once on an image whose pixels encode their own positions."""
    index = np.arange(height * width, dtype=np.uint32)
    encoded = np.stack([(index >> s) & 0xFF for s in (0, 8, 16)], axis=-1).astype(np.uint8)
    moved = shuffle(encoded.reshape(height, width, 3)).astype(np.int64)
    return moved[..., 0] | (moved[..., 1] << 8) | (moved[..., 2] << 16)


def shuffle_like(values: np.ndarray, shuffle) -> np.ndarray:
    """Move the pixels of any (H, W, C) array exactly as ``shuffle`` moves an image's. Used to
    patch-shuffle the signed tex.EED difference with the same permutation as its displayed version."""
    return move(values, source_of(shuffle, *np.asarray(values).shape[:2]))


def shuffle_source(kind: str, height: int, width: int, seed: int, *, cells: int = VORONOI_CELLS,
                   grid: int = PATCH_GRID) -> np.ndarray:
    """The flat source indices of the pixel-moving texture cues (``SHUFFLES``), planned once for an
    image size and seed, so a photo and its label mask move with exactly the same cells and shifts."""
    if kind == "voronoi":
        return voronoi_source(height, width, cells, seed)
    if kind == "diamond":
        return diamond_source(height, width, None, seed)
    if kind == "patch":
        return source_of(lambda im: patch_shuffle(im, grid, seed), height, width)
    raise TextureCueError(f"texture cue {kind!r} does not move pixels; the shuffles are {', '.join(SHUFFLES)}")


def shuffle_with_mask(kind: str, image: np.ndarray, mask: np.ndarray, seed: int, *, cells: int = VORONOI_CELLS,
                      grid: int = PATCH_GRID) -> tuple[np.ndarray, np.ndarray]:
    """A texture cue and its label mask moved by one plan (Heinert et al. Fig. 1, right)."""
    image = _check_image(image, kind)
    source = shuffle_source(kind, *image.shape[:2], seed, cells=cells, grid=grid)
    return move(image, source), move(mask, source)


def signed_texture(kind: str, original: np.ndarray, shape: np.ndarray, seed: int, grid: int = PATCH_GRID) -> np.ndarray:
    """tex.EED or tex.EEDpat. as the signed difference (float, -255..255), for the
    sum-and-clip cue conflict (Heinert et al. Fig. 5: EED image + gamma_T x difference)."""
    diff = texture_eed(original, shape)
    if kind == "tex_eed":
        return diff
    if kind == "tex_eed_patch":
        return shuffle_like(diff, lambda im: patch_shuffle(im, grid, seed))
    raise TextureCueError(f"texture cue {kind!r} has no signed form; only tex_eed and tex_eed_patch do")


def texture_cue(kind: str, original: np.ndarray, seed: int, *, shape: np.ndarray | None = None,
                cells: int = VORONOI_CELLS, grid: int = PATCH_GRID) -> np.ndarray:
    """One texture cue by name (``TEXTURE_CUES``); the tex.EED kinds need the EED ``shape``."""
    if kind == "voronoi":
        return voronoi_shuffle(original, cells, seed)
    if kind == "patch":
        return patch_shuffle(original, grid, seed)
    if kind == "diamond":
        return diamond_shuffle(original, None, seed)
    if kind in ("tex_eed", "tex_eed_patch"):
        if shape is None:
            raise TextureCueError(f"texture cue {kind!r} needs the image's EED shape cue")
        diff = texture_eed_image(_check_image(original, kind), _check_image(shape, kind))
        return diff if kind == "tex_eed" else patch_shuffle(diff, grid, seed)
    raise TextureCueError(f"unknown texture cue {kind!r}; known: {', '.join(TEXTURE_CUES)}")


def texture_task(image: np.ndarray, transform: str, params: dict, seed: int) -> np.ndarray:
    """``stimuli.build.run_jobs`` entry point for the cues made from the photo alone."""
    if params.get("method") not in ("voronoi", "patch", "diamond"):
        raise TextureCueError(f"{transform}: method {params.get('method')!r} needs the EED image, not a worker task")
    return texture_cue(params["method"], image, seed, cells=params.get("cells", VORONOI_CELLS),
                       grid=params.get("grid", PATCH_GRID))
