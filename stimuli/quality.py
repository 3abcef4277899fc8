"""Suppression-quality metrics of Burgert et al. 2025, appendix A (paper 004, Eqs. 1-10).

They check that a transform removes the cue it targets and spares the other: local variance
(LV) and high-frequency energy (HFE) measure texture left, Sobel-edge SSIM (ESSIM) and
gradient correlation (GC) measure shape left. Each compares the grayscale original x with
its suppressed version x^ and is a ratio to the original capped at 1, so 1 = untouched.
All windows, radii and kernels are 11 (w = r = k = 11, appendix A).

Where the appendix leaves a choice open, this module takes the following reading (checked
against Table 2 on ImageNet validation photos; see docs/suppression.md): grayscale is BT.601
luma; LV windows tile the image from the top-left corner and a partial last row/column of
windows is dropped; HFE's centre is the DC term of the shifted spectrum; ESSIM is
scikit-image's SSIM (11 x 11 uniform window, data range = the joint range of both edge
maps) on OpenCV 11 x 11 Sobel magnitudes; GC uses central differences (``numpy.gradient``).
A correlation or SSIM below 0 counts as 0, so every metric lies in [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from skimage.metrics import structural_similarity

from cuebench.errors import CuebenchError

WINDOW = RADIUS = KERNEL = 11
METRICS = ("LV", "HFE", "ESSIM", "GC", "Texture", "Shape")


class QualityError(CuebenchError):
    """Images the metrics cannot compare (wrong shape or type, or sizes that differ)."""


def to_gray(image: np.ndarray) -> np.ndarray:
    """An RGB uint8 image (or an already gray HxW one) as float64 BT.601 luma in [0, 255]."""
    image = np.asarray(image)
    if image.ndim == 3 and image.shape[2] == 3:
        image = cv2.cvtColor(image.astype(np.uint8, copy=False), cv2.COLOR_RGB2GRAY)
    if image.ndim != 2:
        raise QualityError(f"expected an HxWx3 RGB or HxW gray image, got shape {image.shape}")
    return image.astype(np.float64)


def local_variance(gray: np.ndarray, window: int = WINDOW) -> float:
    """phi_var, Eq. 1: the mean of the variances of the non-overlapping window x window blocks."""
    rows, cols = gray.shape[0] // window, gray.shape[1] // window
    if rows == 0 or cols == 0:
        raise QualityError(f"image {gray.shape} is smaller than the {window}x{window} LV window")
    blocks = gray[:rows * window, :cols * window].reshape(rows, window, cols, window)
    return float(blocks.var(axis=(1, 3)).mean())


def _outside_radius(shape: tuple[int, int], radius: float) -> np.ndarray:
    h, w = shape
    dy, dx = np.ogrid[:h, :w]
    return np.hypot(dy - h // 2, dx - w // 2) > radius


def high_frequency_ratio(gray: np.ndarray, radius: float = RADIUS) -> float:
    """phi_hf, Eq. 3: the share of spectral energy |F(x)|^2 farther than ``radius`` from the
    centre (DC) of the shifted 2-D Fourier transform; 0 for an all-zero image."""
    power = np.abs(np.fft.fftshift(np.fft.fft2(gray))) ** 2
    total = power.sum()
    return float(power[_outside_radius(gray.shape, radius)].sum() / total) if total > 0 else 0.0


def sobel_magnitude(gray: np.ndarray, ksize: int = KERNEL) -> np.ndarray:
    """phi_sobel, Eq. 5: sqrt(dx^2 + dy^2) of OpenCV's ksize x ksize Sobel derivatives."""
    return cv2.magnitude(cv2.Sobel(gray, cv2.CV_64F, 1, 0, ksize=ksize), cv2.Sobel(gray, cv2.CV_64F, 0, 1, ksize=ksize))


def _capped_ratio(suppressed: float, original: float) -> float:
    """Eqs. 2 and 4: min(1, phi(x^) / phi(x)); an original without the feature (phi = 0) has
    nothing to suppress, which counts as fully kept (1)."""
    return 1.0 if original <= 0 else float(min(1.0, suppressed / original))


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson r clipped to [0, 1]; two constant fields correlate 1 if equal, else 0."""
    a, b = a.ravel() - a.mean(), b.ravel() - b.mean()
    norm = np.sqrt((a @ a) * (b @ b))
    if norm == 0:
        return 1.0 if np.array_equal(a, b) else 0.0
    return float(np.clip((a @ b) / norm, 0.0, 1.0))


def edge_ssim(edges: np.ndarray, edges_hat: np.ndarray, window: int = WINDOW) -> float:
    """ESSIM, Eq. 6: SSIM (Wang et al. 2004) of two Sobel-magnitude maps, clipped to [0, 1]."""
    low, high = min(edges.min(), edges_hat.min()), max(edges.max(), edges_hat.max())
    if high == low:
        return 1.0 if np.array_equal(edges, edges_hat) else 0.0
    if min(edges.shape) < window:
        raise QualityError(f"image {edges.shape} is smaller than the {window}x{window} SSIM window")
    ssim = structural_similarity(edges, edges_hat, win_size=window, data_range=high - low)
    return float(np.clip(ssim, 0.0, 1.0))


def gradient_correlation(gradients: tuple[np.ndarray, np.ndarray],
                         gradients_hat: tuple[np.ndarray, np.ndarray]) -> float:
    """GC, Eq. 8: the mean of corr(g_y(x), g_y(x^)) and corr(g_x(x), g_x(x^))."""
    return 0.5 * (_pearson(gradients[0], gradients_hat[0]) + _pearson(gradients[1], gradients_hat[1]))


@dataclass(frozen=True)
class Reference:
    """What the metrics need from an original, computed once and compared with many versions."""

    gray: np.ndarray
    variance: float
    high_frequency: float
    edges: np.ndarray
    gradients: tuple[np.ndarray, np.ndarray]

    @classmethod
    def of(cls, image: np.ndarray) -> Reference:
        gray = to_gray(image)
        return cls(gray, local_variance(gray), high_frequency_ratio(gray), sobel_magnitude(gray),
                   tuple(np.gradient(gray)))

    def compare(self, transformed: np.ndarray) -> dict[str, float]:
        """LV, HFE, ESSIM, GC of ``transformed`` against this original, and Eqs. 9-10's
        aggregates Texture = (LV + HFE) / 2 and Shape = (ESSIM + GC) / 2."""
        gray = to_gray(transformed)
        if gray.shape != self.gray.shape:
            raise QualityError(f"transformed image is {gray.shape[1]}x{gray.shape[0]}, "
                               f"the original {self.gray.shape[1]}x{self.gray.shape[0]}")
        scores = {
            "LV": _capped_ratio(local_variance(gray), self.variance),
            "HFE": _capped_ratio(high_frequency_ratio(gray), self.high_frequency),
            "ESSIM": edge_ssim(self.edges, sobel_magnitude(gray)),
            "GC": gradient_correlation(self.gradients, tuple(np.gradient(gray))),
        }
        scores["Texture"] = (scores["LV"] + scores["HFE"]) / 2
        scores["Shape"] = (scores["ESSIM"] + scores["GC"]) / 2
        return scores


def quality_metrics(original: np.ndarray, transformed: np.ndarray) -> dict[str, float]:
    """The suppression-quality metrics of ``transformed`` relative to ``original`` (keys ``METRICS``)."""
    return Reference.of(original).compare(transformed)
