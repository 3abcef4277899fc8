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
"""Each corruption is ``fn(gray, intensity, rng)`` on a grayscale [0, 1] image, registered with the
name of its intensity parameter (``fn.param``) and its Geirhos et al. 2018 / model-vs-human intensity
grid (``fn.grid``, level 0 the weakest: the image itself, or its grayscale)."""


def corruption(name: str, param: str, grid: tuple[float, ...]) -> Callable:
    """Register ``fn(gray, intensity, rng)`` as corruption ``name`` (Heinert et al. Sec. IV)."""

    def add(fn: Callable) -> Callable:
        fn.param, fn.grid = param, grid
        return CORRUPTIONS.register(name)(fn)

    return add


def grayscale(image: np.ndarray) -> np.ndarray:
    """RGB uint8 -> grayscale float64 on [0, 1] (scikit-image's rgb2gray, as Geirhos et al.)."""
    from skimage.color import rgb2gray

    return rgb2gray(image)


def contrast(gray: np.ndarray, level: float) -> np.ndarray:
    """Geirhos et al. 2018: c * x + (1 - c) / 2, i.e. scaled towards mid-grey."""
    return level * gray + (1 - level) / 2


def low_pass(gray: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur with standard deviation ``sigma`` (pixels), grey border."""
    from scipy.ndimage import gaussian_filter

    if sigma == 0:
        return gray
    return gaussian_filter(gray, sigma, mode="constant", cval=BACKGROUND_GREY)


def high_pass(gray: np.ndarray, sigma: float) -> np.ndarray:
    """Geirhos et al. 2018: the image minus its Gaussian blur, shifted to mean grey
    0.4423. sigma = inf (level 0) blurs to a constant, leaving the image shifted to that
    mean."""
    blurred = np.full_like(gray, gray.mean()) if np.isinf(sigma) else low_pass(gray, sigma)
    detail = gray - blurred
    return detail + (BACKGROUND_GREY - detail.mean())


def uniform_noise(gray: np.ndarray, width: float, rng: np.random.Generator) -> np.ndarray:
    """Geirhos et al. 2018: contrast to 30 %, then add noise uniform on [-width, width]."""
    return contrast(gray, NOISE_CONTRAST) + rng.uniform(-width, width, size=gray.shape)


def phase_noise(gray: np.ndarray, width_degrees: float, rng: np.random.Generator) -> np.ndarray:
    """Geirhos et al. 2018 phase scrambling: add to every Fourier phase a shift uniform on
    [-w, w] degrees, keeping the amplitudes. Shifts are antisymmetric over conjugate
    frequency pairs (and zero at DC), so the image stays real."""
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


@corruption("contrast", "contrast", (1.0, 0.5, 0.3, 0.15, 0.10, 0.05, 0.03, 0.01))
def _contrast(gray, level, rng):
    """Contrast reduction towards mid-grey (Geirhos et al. 2018)."""
    return contrast(gray, level)


@corruption("low_pass", "sigma", (0.0, 1.0, 3.0, 5.0, 7.0, 10.0, 15.0, 40.0))
def _low_pass(gray, sigma, rng):
    """Low pass: Gaussian blur with standard deviation sigma in pixels."""
    return low_pass(gray, sigma)


@corruption("high_pass", "sigma", (float("inf"), 3.0, 1.5, 1.0, 0.7, 0.55, 0.45, 0.4))
def _high_pass(gray, sigma, rng):
    """High pass: the image minus its Gaussian blur, on mean grey."""
    return high_pass(gray, sigma)


@corruption("uniform_noise", "width", (0.0, 0.03, 0.05, 0.1, 0.2, 0.35, 0.6, 0.9))
def _uniform_noise(gray, width, rng):
    """Uniform noise of the given width, added at 30 % contrast."""
    return uniform_noise(gray, width, rng)


@corruption("phase_noise", "width_degrees", (0.0, 30.0, 60.0, 90.0, 120.0, 150.0, 180.0))
def _phase_noise(gray, width_degrees, rng):
    """Phase noise: every Fourier phase shifted by up to the given width in degrees."""
    return phase_noise(gray, width_degrees, rng)
