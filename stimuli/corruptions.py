"""Image corruptions for the robustness comparison of Heinert et al. (paper 000, Sec. IV:
contrast, high pass, low pass, noise, phase noise), with the intensity grids of Geirhos
et al. (2018, "Generalisation in humans and deep neural networks") as used by
model-vs-human.

As in Geirhos et al. (2018), every corruption works on the grayscale image on [0, 1]
(scikit-image's ``rgb2gray``) and returns it as three equal channels, uint8; uniform
noise is added at 30 % contrast, and the filters pad with the data set's mean grey
0.4423 (constant border), then values are clipped to [0, 1].
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from cuebench.errors import CuebenchError
from cuebench.registry import Registry

BACKGROUND_GREY = 0.4423
"""Geirhos et al. 2018: mean pixel value over their images, the filters' border and the
high-pass image's mean."""
NOISE_CONTRAST = 0.3
"""Geirhos et al. 2018: uniform noise is added to images at 30 % contrast."""


class CorruptionError(CuebenchError):
    """An unknown corruption or a bad intensity."""


CORRUPTIONS: Registry = Registry("corruptions")
"""Each corruption is ``fn(gray, intensity, rng)`` on a grayscale [0, 1] image, declared by an entry point of
``cuebench.corruptions`` and marked with the name of its intensity parameter (``fn.param``) and its Geirhos
et al. 2018 / model-vs-human intensity grid (``fn.grid``, level 0 the weakest: the image itself, or its
grayscale) by :func:`corruption`."""


def corruption(param: str, grid: tuple[float, ...]) -> Callable:
    """Mark ``fn(gray, intensity, rng)`` as a corruption (Heinert et al. Sec. IV) whose intensity is ``param`` on
    ``grid``; its name is its entry point's."""

    def mark(fn: Callable) -> Callable:
        fn.param, fn.grid = param, grid
        return fn

    return mark


def grayscale(image: np.ndarray) -> np.ndarray:
    """RGB uint8 -> grayscale float64 on [0, 1] (scikit-image's rgb2gray, as Geirhos et al.)."""
    from skimage.color import rgb2gray

    return rgb2gray(image)


@corruption("contrast", (1.0, 0.5, 0.3, 0.15, 0.10, 0.05, 0.03, 0.01))
def contrast(gray: np.ndarray, level: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """Contrast reduction towards mid-grey (Geirhos et al. 2018): c * x + (1 - c) / 2; deterministic."""
    return level * gray + (1 - level) / 2


@corruption("sigma", (0.0, 1.0, 3.0, 5.0, 7.0, 10.0, 15.0, 40.0))
def low_pass(gray: np.ndarray, sigma: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """Low pass: Gaussian blur with standard deviation sigma in pixels, grey border; deterministic."""
    from scipy.ndimage import gaussian_filter

    if sigma == 0:
        return gray
    return gaussian_filter(gray, sigma, mode="constant", cval=BACKGROUND_GREY)


@corruption("sigma", (float("inf"), 3.0, 1.5, 1.0, 0.7, 0.55, 0.45, 0.4))
def high_pass(gray: np.ndarray, sigma: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """High pass: the image minus its Gaussian blur, on mean grey (Geirhos et al. 2018). Shifted to mean grey
    0.4423; sigma = inf (level 0) blurs to a constant, leaving the image shifted to that mean. Deterministic."""
    blurred = np.full_like(gray, gray.mean()) if np.isinf(sigma) else low_pass(gray, sigma)
    detail = gray - blurred
    return detail + (BACKGROUND_GREY - detail.mean())


@corruption("width", (0.0, 0.03, 0.05, 0.1, 0.2, 0.35, 0.6, 0.9))
def uniform_noise(gray: np.ndarray, width: float, rng: np.random.Generator) -> np.ndarray:
    """Uniform noise of the given width, added at 30 % contrast (Geirhos et al. 2018). The contrast goes to
    30 %, then noise uniform on [-width, width] is added."""
    return contrast(gray, NOISE_CONTRAST) + rng.uniform(-width, width, size=gray.shape)


@corruption("width_degrees", (0.0, 30.0, 60.0, 90.0, 120.0, 150.0, 180.0))
def phase_noise(gray: np.ndarray, width_degrees: float, rng: np.random.Generator) -> np.ndarray:
    """Phase noise: every Fourier phase shifted by up to the given width in degrees (Geirhos et al. 2018).
    A shift uniform on [-w, w] degrees is added to every phase, keeping the amplitudes; shifts are
    antisymmetric over conjugate frequency pairs (and zero at DC), so the image stays real."""
    spectrum = np.fft.fft2(gray)
    shifts = rng.uniform(-1, 1, size=gray.shape) * np.deg2rad(width_degrees)
    conj = np.roll(shifts[::-1, ::-1], 1, axis=(0, 1))  # shift at frequency -k
    antisym = (shifts - conj) / 2
    return np.real(np.fft.ifft2(spectrum * np.exp(1j * antisym)))


def corrupt(image: np.ndarray, corruption: str, level: float, seed: int = 0) -> np.ndarray:
    """Apply one corruption at one intensity to an (H, W, 3) uint8 RGB image."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise CorruptionError(f"{corruption}: expected an HxWx3 uint8 RGB image, got {image.dtype} {image.shape}")
    if corruption not in CORRUPTIONS:
        raise CorruptionError(f"unknown corruption {corruption!r}; known: {', '.join(CORRUPTIONS)}")
    level = float(level)
    if np.isnan(level) or level < 0 or (corruption == "contrast" and level > 1):
        raise CorruptionError(f"{corruption}: intensity {level!r} is out of range")
    out = CORRUPTIONS[corruption](grayscale(image), level, np.random.default_rng(seed))
    pixels = np.clip(np.rint(np.clip(out, 0, 1) * 255), 0, 255).astype(np.uint8)
    return np.repeat(pixels[..., None], 3, axis=-1)


def corruption_task(image: np.ndarray, transform: str, params: dict, seed: int) -> np.ndarray:
    """``stimuli.build.run_jobs`` entry point: ``params`` is ``{param name: intensity}``."""
    if transform not in CORRUPTIONS:
        raise CorruptionError(f"unknown corruption {transform!r}; known: {', '.join(CORRUPTIONS)}")
    return corrupt(image, transform, params[CORRUPTIONS[transform].param], seed)
