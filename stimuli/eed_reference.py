"""EED one image at a time, in the structure of the authors' reference code.

This is the baseline that ``stimuli.eed`` is checked and timed against: numpy float32,
one image and one step at a time, the Gaussian as a full 2-D convolution of each channel
(and of each tensor entry) separately, and the explicit step as the Weickert-Welk-Wickert
(2013) nine-weight stencil applied channel by channel -- the reference's CPU path. The
arithmetic is written independently of the batched flux form, so agreement of the two
is evidence that both implement the same scheme.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import convolve2d

from .eed import EEDParams, gaussian_kernel_1d


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


def _stencil(u: np.ndarray, A, B, C, p: EEDParams) -> np.ndarray:
    """One explicit step of one channel with the nine weights of WWW 2013."""
    r, c = u.shape
    ap, am = p.alpha, 1 - p.alpha
    q = _symmetric_pad(u, 1)
    ul, ur = (slice(0, r), slice(0, c)), (slice(0, r), slice(1, c + 1))
    ll, lr = (slice(1, r + 1), slice(0, c)), (slice(1, r + 1), slice(1, c + 1))
    terms = [
        (ap * A[ul] + ap * C[ul] + B[ul]) * q[0:r, 0:c],
        (am * C[ul] - ap * A[ul] + am * C[ur] - ap * A[ur]) * q[0:r, 1:c + 1],
        (ap * A[ur] + ap * C[ur] - B[ur]) * q[0:r, 2:c + 2],
        (am * A[ll] - ap * C[ll] + am * A[ul] - ap * C[ul]) * q[1:r + 1, 0:c],
        (-am * (A[lr] + C[lr]) - B[lr] - am * (A[ll] + C[ll]) + B[ll]
         - am * (A[ur] + C[ur]) + B[ur] - am * (A[ul] + C[ul]) - B[ul]) * q[1:r + 1, 1:c + 1],
        (am * A[lr] - ap * C[lr] + am * A[ur] - ap * C[ur]) * q[1:r + 1, 2:c + 2],
        (ap * A[ll] + ap * C[ll] - B[ll]) * q[2:r + 2, 0:c],
        (am * C[lr] - ap * A[lr] + am * C[ll] - ap * A[ll]) * q[2:r + 2, 1:c + 1],
        (ap * A[lr] + ap * C[lr] + B[lr]) * q[2:r + 2, 2:c + 2],
    ]
    return (u + p.tau / (p.h * p.h) * np.sum(terms, axis=0)).astype(np.float32)


def eed_step(image: np.ndarray, p: EEDParams, kernel: np.ndarray) -> np.ndarray:
    A, B, C = _tensor(image, p, kernel)
    return np.stack([_stencil(image[:, :, ch], A, B, C, p) for ch in range(image.shape[2])], axis=-1)


def diffuse_one(image: np.ndarray, steps: int, params: EEDParams = EEDParams()) -> np.ndarray:
    """Raw EED of one (H, W, 3) image on 0-255 after ``steps`` steps (float32, unclipped)."""
    k1 = gaussian_kernel_1d(params.kernel_size, params.sigma)
    kernel = np.outer(k1, k1).astype(np.float32)
    u = np.asarray(image, dtype=np.float32)
    for _ in range(steps):
        u = eed_step(u, params, kernel)
    return u
