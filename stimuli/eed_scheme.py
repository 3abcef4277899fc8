"""EED's settings and the discretisation rules every EED path shares (``stimuli.eed``
runs the scheme; ``stimuli.eed_numba``, ``stimuli.eed_triton``, ``stimuli.eed_torch`` and
``stimuli.eed_reference`` implement its steps)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from cuebench.errors import CuebenchError


class EEDError(CuebenchError):
    """Bad EED input: wrong image shape or type, a bad step count, an unavailable device."""


@dataclass(frozen=True)
class EEDParams:
    """The reference's settings (Heinert et al. Sec. IV-b; WWW 2013 for alpha, tau, h)."""

    contrast: float = 1 / 15  # lambda
    kernel_size: int = 5
    sigma: float = math.sqrt(5)
    alpha: float = 0.49
    tau: float = 0.2
    h: float = 1.0
    limit: bool = True  # keep each channel inside its input range (stimuli.eed's limiter); False: the plain WWW step

    def as_dict(self) -> dict:
        return asdict(self)


def gaussian_kernel_1d(size: int, sigma: float) -> np.ndarray:
    """Normalised 1-D Gaussian; the reference's 2-D kernel is its outer product."""
    x = np.arange(size, dtype=np.float64) - (size - 1) / 2
    k = np.exp(-(x ** 2) / (2 * sigma ** 2))
    return k / k.sum()


def symmetric_index(n: int, pad: int) -> np.ndarray:
    """Indices that pad an axis of length n by ``pad`` on both sides, mirroring with the
    edge sample repeated (numpy's ``mode='symmetric'``)."""
    idx = np.arange(-pad, n + pad)
    idx = np.where(idx < 0, -idx - 1, idx)
    idx = np.where(idx >= n, 2 * n - idx - 1, idx)
    if idx.min() < 0 or idx.max() >= n:
        raise EEDError(f"cannot pad an axis of {n} pixels by {pad} symmetrically")
    return idx
