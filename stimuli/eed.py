"""Edge-enhancing diffusion (EED): the shape cue of Heinert et al. (paper 000, Sec. III-a).

EED smooths an image along its edges but not across them, so texture disappears while
object outlines stay (Weickert 1998). We follow the structure of the authors' public
reference code ("tensorblur" variant), batched over many images in torch on CPU or CUDA:

1. pixel values on 0-255; symmetric padding (edge pixel repeated) by 3; Gaussian
   pre-smoothing, kernel 5, sigma = sqrt(5);
2. finite differences of the smoothed image on the dual grid of pixel corners, combined
   into the colour structure tensor (A, B, C) summed over R, G, B (Di Zenzo), each entry
   with the Weickert-Welk-Wickert (2013) averaging (alpha weights the mixed products);
3. "tensorblur": the tensor is smoothed once more with the same Gaussian;
4. diffusion tensor with the tensor's eigenvectors and eigenvalues g(mu), the reference's
   g(mu) = 1 / sqrt(1 + (mu / lambda)^2), lambda = 1/15; identity where the eigenvalues
   coincide (discriminant < 1e-6);
5. one explicit step u <- u + tau/h^2 * S(A', B', C') u with the non-negative 3x3 stencil
   of Weickert, Welk & Wickert (2013, SSVM, "L2-stable nonstandard finite differences
   for anisotropic diffusion"), alpha = 0.49, tau = 0.2, h = 1.

Scaling (a decision, see docs/cue_decomposition.md): the reference does not normalise
gradients; mu is a sum of squared 0-255 differences, so with lambda = 1/15 the diffusivity
across any visible edge is ~0 and diffusion runs only along edges and in flat regions.
We keep that, since the published stimuli were made that way. Note g is applied to mu
itself, i.e. 1/sqrt(1 + |grad|^4 / lambda^2), not the paper's Charbonnier form in |grad|^2.

The stencil is written here in flux form: each 2x2 cell of pixels around a corner
exchanges mass along its two rows, two columns and two diagonals with the weights of the
WWW stencil; this is the same linear map as the reference's nine-weight form, conserves
each channel's mean exactly inside the image, and is what makes the batched path fast.
``stimuli.eed_reference`` keeps the reference's per-image, per-channel nine-weight form as
an independent check and a benchmark baseline.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np

from .errors import CuebenchError

CLASSIFICATION_STEPS = 16384
"""Heinert et al., Sec. IV-b: EED steps for classification stimuli."""
SEGMENTATION_STEPS = 5792
"""Heinert et al., Sec. IV-b: EED steps for segmentation stimuli."""


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

    def as_dict(self) -> dict:
        return asdict(self)


def snapshot_steps(last: int = CLASSIFICATION_STEPS, first: int = 512) -> list[int]:
    """Step counts spaced by factors of sqrt(2), as the reference saves them:
    512, 724, 1024, 1448, 2048, ..., 16384 (truncated to integers)."""
    steps, k = [], 0
    while True:
        n = int(first * math.sqrt(2) ** k + 1e-9)
        if n > last:
            break
        steps.append(n)
        k += 1
    return steps


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


def stretch(values: np.ndarray) -> np.ndarray:
    """Min-max rescale each image (over all its channels) to 0-255, rounded to uint8.
    ``values`` is (..., H, W, 3); a flat image keeps its (clipped) value."""
    x = np.asarray(values, dtype=np.float64)
    axes = (-3, -2, -1)
    lo, hi = x.min(axis=axes, keepdims=True), x.max(axis=axes, keepdims=True)
    span = np.where(hi > lo, hi - lo, 1.0)
    scaled = np.where(hi > lo, (x - lo) / span * 255.0, x)
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)


def to_display(raw: np.ndarray) -> np.ndarray:
    """The reference's saving rule: clip to [0, 255], then min-max rescale each image to
    the full range (``stretch``; we round where the reference truncates)."""
    return stretch(np.clip(np.asarray(raw, dtype=np.float64), 0, 255))


def _as_batch(images) -> np.ndarray:
    batch = np.asarray(images)
    if batch.ndim == 3:
        batch = batch[None]
    if batch.ndim != 4 or batch.shape[-1] != 3:
        raise EEDError(f"EED needs RGB images shaped (N, H, W, 3) or (H, W, 3), got {batch.shape}")
    if min(batch.shape[1:3]) < 2:
        raise EEDError(f"EED needs images of at least 2x2 pixels, got {batch.shape[1]}x{batch.shape[2]}")
    return batch


def _check_steps(steps: Iterable[int]) -> list[int]:
    out = sorted({int(s) for s in steps})
    if not out or out[0] < 0:
        raise EEDError(f"EED step counts must be integers >= 0, got {list(steps)}")
    return out


def resolve_device(device: str):
    """A torch device, or an EEDError saying why it cannot be used."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise EEDError(f"--eed-device {device!r} is not a torch device: {err}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise EEDError(f"--eed-device {device!r}: CUDA is not available on this machine (use cpu)")
    return dev


def _pad(x, rows, cols):
    """Pad the last two axes by gathering ``rows`` and ``cols`` (see ``symmetric_index``)."""
    return x.index_select(-2, rows).index_select(-1, cols)


class _Stepper:
    """One EED step for a batch (N, 3, H, W) float32 on one device; constants built once."""

    def __init__(self, height: int, width: int, params: EEDParams, device):
        import torch

        self.p = params
        pad = params.kernel_size // 2 + 1  # reference: (k - 1) / 2 + 1
        self.pad_rows = torch.as_tensor(symmetric_index(height, pad), device=device)
        self.pad_cols = torch.as_tensor(symmetric_index(width, pad), device=device)
        # the tensor lives on (H+1) x (W+1) corners and is padded by pad - 1 for tensorblur
        self.tpad_rows = torch.as_tensor(symmetric_index(height + 1, pad - 1), device=device)
        self.tpad_cols = torch.as_tensor(symmetric_index(width + 1, pad - 1), device=device)
        self.one_rows = torch.as_tensor(symmetric_index(height, 1), device=device)
        self.one_cols = torch.as_tensor(symmetric_index(width, 1), device=device)
        self.kernel = [float(v) for v in gaussian_kernel_1d(params.kernel_size, params.sigma).astype(np.float32)]

    def _smooth(self, x):
        """Separable Gaussian, 'valid' over already padded planes (..., H', W'), as sums of
        shifted slices: on CPU this is several times faster than a one-channel conv2d."""
        k = self.kernel
        rows = x.shape[-2] - len(k) + 1
        y = k[0] * x[..., 0:rows, :]
        for i in range(1, len(k)):
            y = y + k[i] * x[..., i:i + rows, :]
        cols = x.shape[-1] - len(k) + 1
        z = k[0] * y[..., 0:cols]
        for i in range(1, len(k)):
            z = z + k[i] * y[..., i:i + cols]
        return z

    def diffusion_tensor(self, u):
        """(A', B', C') on the corner grid, each (N, H+1, W+1)."""
        import torch

        p = self.p
        s = self._smooth(_pad(u, self.pad_rows, self.pad_cols)) / p.h  # (N, 3, H+2, W+2)
        x1 = s[:, :, :-1, :-1] - s[:, :, :-1, 1:]
        x2 = s[:, :, 1:, :-1] - s[:, :, 1:, 1:]
        y1 = s[:, :, :-1, :-1] - s[:, :, 1:, :-1]
        y2 = s[:, :, :-1, 1:] - s[:, :, 1:, 1:]
        a = p.alpha
        A = ((1 - a) / 2 * (x1 * x1 + x2 * x2) + a * x1 * x2).sum(1)
        C = ((1 - a) / 2 * (y1 * y1 + y2 * y2) + a * y1 * y2).sum(1)
        B = (0.25 * (x1 + x2) * (y1 + y2)).sum(1)
        abc = _pad(torch.stack((A, B, C), 1), self.tpad_rows, self.tpad_cols)
        A, B, C = self._smooth(abc).unbind(1)
        D = torch.sqrt(4 * B * B + (A - C) ** 2)
        flat = D < 1e-6
        g1 = torch.rsqrt(1 + ((A + C - D) / (2 * p.contrast)) ** 2)
        g2 = torch.rsqrt(1 + ((A + C + D) / (2 * p.contrast)) ** 2)
        Dsafe = torch.where(flat, torch.ones_like(D), D)
        At = torch.where(flat, 1.0, ((A - C + D) * g2 - (A - C - D) * g1) / (2 * Dsafe))
        Ct = torch.where(flat, 1.0, ((C - A + D) * g2 - (C - A - D) * g1) / (2 * Dsafe))
        Bt = torch.where(flat, 0.0, B * (g2 - g1) / Dsafe)
        return At, Bt, Ct

    def __call__(self, u):
        p = self.p
        At, Bt, Ct = self.diffusion_tensor(u)
        a, am = p.alpha, 1 - p.alpha
        # per-corner weights of the WWW stencil: rows, columns, main and anti-diagonal
        w_row = (am * At - a * Ct).unsqueeze(1)
        w_col = (am * Ct - a * At).unsqueeze(1)
        w_main = (a * (At + Ct) + Bt).unsqueeze(1)
        w_anti = (a * (At + Ct) - Bt).unsqueeze(1)
        up = _pad(u, self.one_rows, self.one_cols)  # (N, 3, H+2, W+2)
        p00, p01 = up[:, :, :-1, :-1], up[:, :, :-1, 1:]
        p10, p11 = up[:, :, 1:, :-1], up[:, :, 1:, 1:]
        top = w_row * (p01 - p00)
        bottom = w_row * (p11 - p10)
        left = w_col * (p10 - p00)
        right = w_col * (p11 - p01)
        main = w_main * (p11 - p00)
        anti = w_anti * (p10 - p01)
        to00 = top + left + main
        to01 = right + anti - top
        to10 = bottom - left - anti
        to11 = -(bottom + right + main)
        du = to11[:, :, :-1, :-1] + to10[:, :, :-1, 1:] + to01[:, :, 1:, :-1] + to00[:, :, 1:, 1:]
        return u + (p.tau / (p.h * p.h)) * du


def diffuse(images, steps: int | Sequence[int], *, params: EEDParams = EEDParams(), device: str = "cpu",
            progress: bool = True, desc: str = "EED") -> dict[int, np.ndarray]:
    """Run EED on a batch of RGB images (N, H, W, 3), any numeric type on 0-255.

    Returns {step count: raw float32 images (N, H, W, 3)} at every requested step count,
    before clipping and rescaling (use ``to_display`` for the saved form). One progress
    bar over steps; all images advance together.
    """
    import torch
    from tqdm import tqdm

    batch = _as_batch(images)
    wanted = _check_steps([steps] if isinstance(steps, (int, np.integer)) else steps)
    dev = resolve_device(device)
    n, h, w, _ = batch.shape
    stepper = _Stepper(h, w, params, dev)
    u = torch.as_tensor(np.ascontiguousarray(batch.transpose(0, 3, 1, 2)), dtype=torch.float32, device=dev)
    out: dict[int, np.ndarray] = {}
    snapshots = set(wanted)
    with torch.inference_mode():
        if wanted[0] == 0:
            out[0] = batch.astype(np.float32)
        for step in tqdm(range(1, wanted[-1] + 1), desc=f"{desc} ({n} images, {dev.type})", unit="step",
                         disable=not progress, leave=False):
            u = stepper(u)
            if step in snapshots:
                out[step] = u.permute(0, 2, 3, 1).float().cpu().numpy()
    return out


def default_batch_size(device: str) -> int:
    """Images per batch: on a CPU the step is memory-bound and 224x224 batches beyond
    about 8 images fall out of cache (measured 4.9 ms per image-step at 8, 7.1 at 16);
    a GPU wants large batches (about 12 MB of working memory per 224x224 image)."""
    return 256 if str(device).startswith("cuda") else 8


def eed(images, steps: int | Sequence[int] = CLASSIFICATION_STEPS, *, params: EEDParams = EEDParams(),
        device: str = "cpu", batch_size: int | None = None, progress: bool = True) -> dict[int, np.ndarray]:
    """EED shape cues as saved images: {step count: uint8 (N, H, W, 3)}.

    Images are diffused ``batch_size`` at a time (default: ``default_batch_size``).
    """
    batch = _as_batch(images)
    batch_size = default_batch_size(device) if batch_size is None else batch_size
    if batch_size < 1:
        raise EEDError(f"batch_size must be >= 1, got {batch_size}")
    wanted = _check_steps([steps] if isinstance(steps, (int, np.integer)) else steps)
    parts: dict[int, list[np.ndarray]] = {s: [] for s in wanted}
    for start in range(0, len(batch), batch_size):
        chunk = batch[start:start + batch_size]
        desc = f"EED {start + 1}-{start + len(chunk)}/{len(batch)}"
        for step, raw in diffuse(chunk, wanted, params=params, device=device, progress=progress, desc=desc).items():
            parts[step].append(to_display(raw))
    return {s: np.concatenate(v) for s, v in parts.items()}
