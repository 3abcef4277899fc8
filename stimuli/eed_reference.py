"""EED one image at a time, in the structure of the authors' reference code.

This is the baseline that ``stimuli.eed`` is checked and timed against: numpy float32,
one image and one step at a time, the Gaussian as a full 2-D convolution of each channel
(and of each tensor entry) separately, and the explicit step as the Weickert-Welk-Wickert
(2013) nine-weight stencil applied channel by channel -- the reference's CPU path -- with
the bound-preserving limiter written per pixel. The arithmetic is written independently
of the batched edge-flux form, so agreement of the two is evidence that both implement the
same scheme.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import convolve2d

from .eed_scheme import EEDParams, gaussian_kernel_1d


def _symmetric_pad(plane: np.ndarray, pad: int) -> np.ndarray:
    return np.pad(plane, pad, mode="symmetric")


def _smooth(plane: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    return convolve2d(plane, kernel, mode="valid").astype(np.float32)


def _tensor(image: np.ndarray, p: EEDParams, kernel: np.ndarray):
    rows, cols, _ = image.shape
    pad = p.kernel_size // 2 + 1
    A = np.zeros((rows + 1, cols + 1), np.float32)
    B = np.zeros_like(A)
    C = np.zeros_like(A)
    for ch in range(image.shape[2]):
        s = _smooth(_symmetric_pad(image[:, :, ch], pad), kernel)
        x1 = (s[0:rows + 1, 0:cols + 1] - s[0:rows + 1, 1:cols + 2]) / p.h
        x2 = (s[1:rows + 2, 0:cols + 1] - s[1:rows + 2, 1:cols + 2]) / p.h
        y1 = (s[0:rows + 1, 0:cols + 1] - s[1:rows + 2, 0:cols + 1]) / p.h
        y2 = (s[0:rows + 1, 1:cols + 2] - s[1:rows + 2, 1:cols + 2]) / p.h
        A += (1 - p.alpha) / 2 * (x1 ** 2 + x2 ** 2) + p.alpha * x1 * x2
        C += (1 - p.alpha) / 2 * (y1 ** 2 + y2 ** 2) + p.alpha * y1 * y2
        B += 0.25 * (x1 * y1 + x1 * y2 + x2 * y1 + x2 * y2)
    A, B, C = (_smooth(_symmetric_pad(m, pad - 1), kernel) for m in (A, B, C))
    D = np.sqrt(4 * B ** 2 + (A - C) ** 2)
    crit = D < 1e-6
    g1 = 1 / np.sqrt(1 + ((A + C - D) / 2 / p.contrast) ** 2)
    g2 = 1 / np.sqrt(1 + ((A + C + D) / 2 / p.contrast) ** 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        At = ((A - C + D) * g2 - (A - C - D) * g1) / (2 * D)
        Ct = ((C - A + D) * g2 - (C - A - D) * g1) / (2 * D)
        Bt = B * (g2 - g1) / D
    At[crit], Ct[crit], Bt[crit] = 1, 1, 0
    return At.astype(np.float32), Bt.astype(np.float32), Ct.astype(np.float32)


NEIGHBOURS = ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1))
"""(row, column) offsets of the eight neighbours, in the order ``_weights`` returns them."""


def _weights(A, B, C, p: EEDParams) -> list[np.ndarray]:
    """The eight neighbour weights of every pixel, times tau: the WWW (2013) delta stencil,
    each pixel gathering from the four corners around it (upper/lower, left/right)."""
    r, c = A.shape[0] - 1, A.shape[1] - 1
    k = p.tau / (2 * p.h * p.h)
    delta = p.alpha * (A + C) + (1 - 2 * p.alpha) * np.abs(B)
    ul, ur = (slice(0, r), slice(0, c)), (slice(0, r), slice(1, c + 1))
    ll, lr = (slice(1, r + 1), slice(0, c)), (slice(1, r + 1), slice(1, c + 1))
    row, col, main, anti = A - delta, C - delta, delta + B, delta - B
    return [k * w for w in (main[ul], col[ul] + col[ur], anti[ur], row[ul] + row[ll],
                            row[ur] + row[lr], anti[ll], col[ll] + col[lr], main[lr])]


def _stencil(u: np.ndarray, weights: list[np.ndarray], bounds: tuple[float, float] | None) -> np.ndarray:
    """One explicit step of one channel: the flux from each neighbour, limited to keep the
    channel inside ``bounds`` (the rule of ``stimuli.eed``, per pixel)."""
    r, c = u.shape
    q = _symmetric_pad(u, 1)

    def shifted(a, dy, dx):
        return a[1 + dy:1 + dy + r, 1 + dx:1 + dx + c]

    fluxes = [w * (shifted(q, dy, dx) - u) for w, (dy, dx) in zip(weights, NEIGHBOURS)]
    if bounds is not None:
        lo, hi = bounds
        gain = np.sum([np.maximum(f, 0) for f in fluxes], axis=0)
        loss = np.sum([np.minimum(f, 0) for f in fluxes], axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            room_up = np.minimum(np.where(gain > 0, (hi - u) / gain, 1), 1)
            room_down = np.minimum(np.where(loss < 0, (lo - u) / loss, 1), 1)
        up, down = _symmetric_pad(room_up, 1), _symmetric_pad(room_down, 1)
        fluxes = [f * np.where(f > 0, np.minimum(room_up, shifted(down, dy, dx)),
                               np.minimum(room_down, shifted(up, dy, dx)))
                  for f, (dy, dx) in zip(fluxes, NEIGHBOURS)]
    return (u + np.sum(fluxes, axis=0)).astype(np.float32)


def eed_step(image: np.ndarray, p: EEDParams, kernel: np.ndarray, bounds=None) -> np.ndarray:
    """One step of an (H, W, 3) image; ``bounds``: a (low, high) pair per channel, or None."""
    weights = _weights(*_tensor(image, p, kernel), p)
    return np.stack([_stencil(image[:, :, ch], weights, None if bounds is None else bounds[ch])
                     for ch in range(image.shape[2])], axis=-1)


def diffuse_one(image: np.ndarray, steps: int, params: EEDParams = EEDParams()) -> np.ndarray:
    """Raw EED of one (H, W, 3) image on 0-255 after ``steps`` steps (float32, unclipped)."""
    k1 = gaussian_kernel_1d(params.kernel_size, params.sigma)
    kernel = np.outer(k1, k1).astype(np.float32)
    u = np.asarray(image, dtype=np.float32)
    bounds = [(u[:, :, ch].min(), u[:, :, ch].max()) for ch in range(u.shape[2])] if params.limit else None
    for _ in range(steps):
        u = eed_step(u, params, kernel, bounds)
    return u
