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

from dataclasses import dataclass

import numpy as np

from cuebench.errors import CuebenchError

BACKGROUND_GREY = 0.4423
"""Geirhos et al. 2018: mean pixel value over their images, the filters' border and the
high-pass image's mean."""
NOISE_CONTRAST = 0.3
"""Geirhos et al. 2018: uniform noise is added to images at 30 % contrast."""


class CorruptionError(CuebenchError):
    """An unknown corruption or a bad intensity."""


@dataclass(frozen=True)
class Corruption:
    name: str
    param: str
    grid: tuple[float, ...]  # level 0 is the weakest (the image itself, or its grayscale)


CORRUPTIONS: dict[str, Corruption] = {c.name: c for c in (
    Corruption("contrast", "contrast", (1.0, 0.5, 0.3, 0.15, 0.10, 0.05, 0.03, 0.01)),
    Corruption("low_pass", "sigma", (0.0, 1.0, 3.0, 5.0, 7.0, 10.0, 15.0, 40.0)),
    Corruption("high_pass", "sigma", (float("inf"), 3.0, 1.5, 1.0, 0.7, 0.55, 0.45, 0.4)),
    Corruption("uniform_noise", "width", (0.0, 0.03, 0.05, 0.1, 0.2, 0.35, 0.6, 0.9)),
    Corruption("phase_noise", "width_degrees", (0.0, 30.0, 60.0, 90.0, 120.0, 150.0, 180.0)),
)}
"""Geirhos et al. 2018 / model-vs-human intensity grids (Heinert et al. Sec. IV)."""


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
    gray = grayscale(image)
    rng = np.random.default_rng(seed)
    out = {
        "contrast": lambda: contrast(gray, level),
        "low_pass": lambda: low_pass(gray, level),
        "high_pass": lambda: high_pass(gray, level),
        "uniform_noise": lambda: uniform_noise(gray, level, rng),
        "phase_noise": lambda: phase_noise(gray, level, rng),
    }[corruption]()
    pixels = np.clip(np.rint(np.clip(out, 0, 1) * 255), 0, 255).astype(np.uint8)
    return np.repeat(pixels[..., None], 3, axis=-1)


def corruption_task(image: np.ndarray, transform: str, params: dict, seed: int) -> np.ndarray:
    """``stimuli.build.run_jobs`` entry point: ``params`` is ``{param name: intensity}``."""
    spec = CORRUPTIONS.get(transform)
    if spec is None:
        raise CorruptionError(f"unknown corruption {transform!r}; known: {', '.join(CORRUPTIONS)}")
    return corrupt(image, transform, params[spec.param], seed)
