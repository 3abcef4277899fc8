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
5. one explicit step u <- u + tau div(D grad u) with the 3x3 "delta stencil" of Weickert,
   Welk & Wickert (2013, SSVM, "L2-stable nonstandard finite differences for anisotropic
   diffusion"): per corner, delta = alpha (a + c) + beta b with
   beta = (1 - 2 alpha) sgn(b); weights (a - delta) / 2h^2 to the row neighbours,
   (c - delta) / 2h^2 to the column neighbours, (delta +- b) / 2h^2 along the diagonals;
   alpha = 0.49, tau = 0.2, h = 1;
6. the input-range flux limiter (``EEDParams.limit``, on by default), below.

Scaling (a decision, see docs/cue_decomposition.md): the reference does not normalise
gradients; mu is a sum of squared 0-255 differences, so with lambda = 1/15 the diffusivity
across any visible edge is ~0 and diffusion runs only along edges and in flat regions.
We keep that, since the published stimuli were made that way. Note g is applied to mu
itself, i.e. 1/sqrt(1 + |grad|^4 / lambda^2), not the paper's Charbonnier form in |grad|^2.

Values outside the input range. The WWW stencil obeys the max-min principle only where
none of its weights is negative, and a non-negative 3x3 stencil exists only while the
diffusion tensor's condition number stays below 3 + 2 sqrt(2). EED's tensors at edges
exceed that by design (g is ~0 across an edge and 1 along it): the plain scheme overshoots
the input range by up to ~8 grey levels on photos. No 3x3 linear stencil avoids this, so
each step's pixel-to-pixel fluxes are limited (Zalesak 1979) just enough to keep every
pixel inside its channel's input range. The limiter acts only at pixels whose inflows (or
outflows) alone would carry them out of that range, so the scheme stays the plain one
elsewhere (on the default photos the two differ by 0.005 grey levels on average after
2,048 steps) and every mean is kept.
Limiting to each pixel's 3x3 neighbourhood instead (a full discrete max-min principle)
would remove the small halos inside the range too, but changes the result everywhere
(0.5 grey levels on average) and departs from the reference. ``EEDParams(limit=False)``
gives the plain WWW step.

The step is written as fluxes along the edges between neighbouring pixels (rows,
columns, both diagonals), which is the same linear map as the reference's nine-weight
form, conserves each channel's mean inside the image, gives the limiter its fluxes, and
is what makes the batched path fast. ``stimuli.eed_reference`` keeps the reference's
per-image, per-channel nine-weight form (with the limiter written per pixel) as an
independent check and a benchmark baseline.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np

from cuebench.errors import CuebenchError

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
    limit: bool = True  # keep each channel inside its input range (_Stepper._limit); False: the plain WWW step

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

    from .devices import resolve_device as resolve

    return torch.device(resolve(device, "--eed-device", EEDError))


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

    def __call__(self, u, bounds=None):
        """One explicit step u + tau div(D grad u), as fluxes along the edges between
        neighbouring pixels (each flux counted into one pixel and out of the other);
        ``bounds`` (low, high), each (N, 3, 1, 1), turns on the limiter."""
        p = self.p
        At, Bt, Ct = self.diffusion_tensor(u)
        k = p.tau / (2 * p.h * p.h)
        delta = p.alpha * (At + Ct) + (1 - 2 * p.alpha) * Bt.abs()
        w_row, w_col = k * (At - delta), k * (Ct - delta)
        # the padded grid (H+2, W+2); corner (r, c) sits between pixels (r..r+1, c..c+1)
        w_h = (w_row[:, :-1] + w_row[:, 1:]).unsqueeze(1)  # edges (r, c)-(r, c+1), real rows
        w_v = (w_col[:, :, :-1] + w_col[:, :, 1:]).unsqueeze(1)  # edges (r, c)-(r+1, c), real columns
        w_main = (k * (delta + Bt)).unsqueeze(1)  # edges (r, c)-(r+1, c+1)
        w_anti = (k * (delta - Bt)).unsqueeze(1)  # edges (r, c+1)-(r+1, c)
        up = _pad(u, self.one_rows, self.one_cols)
        inner, head, tail = slice(1, -1), slice(None, -1), slice(1, None)
        fluxes = [  # (flux into the first pixel, out of the second; where the two pixels are)
            (w_h * (up[:, :, inner, tail] - up[:, :, inner, head]), (inner, head), (inner, tail)),
            (w_v * (up[:, :, tail, inner] - up[:, :, head, inner]), (head, inner), (tail, inner)),
            (w_main * (up[:, :, tail, tail] - up[:, :, head, head]), (head, head), (tail, tail)),
            (w_anti * (up[:, :, tail, head] - up[:, :, head, tail]), (head, tail), (tail, head)),
        ]
        if bounds is not None:
            fluxes = self._limit(u, bounds, fluxes)
        flows = [f for f, _, _ in fluxes]
        return u + _net(flows, flows)

    def _limit(self, u, bounds, fluxes):
        """Scale each flux by the largest factor in [0, 1] that keeps both its pixels inside
        ``bounds``, each channel's input range (Zalesak 1979's flux-corrected-transport
        limiter with global bounds). Fluxes stay antisymmetric, so means are kept; a factor
        is below 1 only at a pixel whose inflows (or outflows) alone would carry it out of
        the range."""
        import torch

        flows = [f for f, _, _ in fluxes]
        gain = _net([f.clamp(min=0) for f in flows], [f.clamp(max=0) for f in flows])
        loss = _net(flows, flows) - gain
        lo, hi = bounds
        room_up = torch.where(gain > 0, (hi - u) / gain, 1.0).clamp(max=1.0)
        room_down = torch.where(loss < 0, (lo - u) / loss, 1.0).clamp(max=1.0)
        r_up = _pad(room_up, self.one_rows, self.one_cols)
        r_down = _pad(room_down, self.one_rows, self.one_cols)
        limited = []
        for flux, first, second in fluxes:
            into = torch.minimum(r_up[(..., *first)], r_down[(..., *second)])
            out_of = torch.minimum(r_down[(..., *first)], r_up[(..., *second)])
            limited.append((flux * torch.where(flux > 0, into, out_of), first, second))
        return limited


def _net(into_first, out_of_second):
    """Per real pixel, ``into_first`` summed over the edges it is the first pixel of, minus
    ``out_of_second`` summed over those it is the second of (edges horizontal, vertical,
    main and anti-diagonal, as built in ``_Stepper.__call__``)."""
    h, v, main, anti = into_first
    h2, v2, main2, anti2 = out_of_second
    return (h[..., 1:] - h2[..., :-1] + v[..., 1:, :] - v2[..., :-1, :]
            + main[..., 1:, 1:] - main2[..., :-1, :-1] + anti[..., 1:, :-1] - anti2[..., :-1, 1:])


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
    bounds = (u.amin(dim=(2, 3), keepdim=True), u.amax(dim=(2, 3), keepdim=True)) if params.limit else None
    with torch.inference_mode():
        if wanted[0] == 0:
            out[0] = batch.astype(np.float32)
        for step in tqdm(range(1, wanted[-1] + 1), desc=f"{desc} ({n} images, {dev.type})", unit="step",
                         disable=not progress, leave=False):
            u = stepper(u, bounds)
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
