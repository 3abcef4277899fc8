"""1/f ("pink") noise masks, one fresh mask per trial, deterministic by seed.

Burgert et al. 2025 (appendix, human protocol) mask every image with 200 ms of 1/f
noise. Amplitude falls as 1/f over spatial frequency with random phase, so the mask
has the second-order statistics of natural images and masks them well. The web server
and the PsychoPy runner both call ``pink_noise_mask`` so a trial's mask is identical
in the lab and online.
"""

from __future__ import annotations

import hashlib

import numpy as np


def pink_noise_mask(size: int = 224, seed: int = 0, exponent: float = 1.0) -> np.ndarray:
    """A size x size grey-level uint8 image whose amplitude spectrum is 1/f**exponent."""
    rng = np.random.default_rng(seed)
    fy = np.fft.fftfreq(size)[:, None]
    fx = np.fft.rfftfreq(size)[None, :]
    radius = np.hypot(fy, fx)
    radius[0, 0] = 1.0
    amplitude = 1.0 / radius**exponent
    amplitude[0, 0] = 0.0
    phase = rng.uniform(0, 2 * np.pi, size=amplitude.shape)
    noise = np.fft.irfft2(amplitude * np.exp(1j * phase), s=(size, size))
    noise = (noise - noise.mean()) / (noise.std() + 1e-12)
    return np.clip(127.5 + 42.5 * noise, 0, 255).astype(np.uint8)


def trial_mask_seed(trial_mask_seed: int | None, experiment: str, trial_id: str) -> int:
    """The trial's own mask seed, or a stable one derived from its id."""
    if trial_mask_seed is not None:
        return trial_mask_seed
    return int.from_bytes(hashlib.sha256(f"{experiment}\x00{trial_id}".encode()).digest()[:4], "big")
