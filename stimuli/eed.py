"""Edge-enhancing diffusion (EED): the shape cue of Heinert et al. (paper 000, Sec. III-a).

EED smooths an image along its edges but not across them, so texture disappears while
object outlines stay (Weickert 1998). We follow the structure of the authors' public
reference code ("tensorblur" variant), for many images at once on CPU or CUDA:

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

This module holds the scheme's constants and rules and runs it on the fastest path
for the device (``_stepper``): compiled loops, one image per thread, on a CPU
(``stimuli.eed_numba``); Triton kernels on CUDA (``stimuli.eed_triton``); whole-batch
torch operations in the edge-flux form elsewhere (``stimuli.eed_torch``). All three agree
with ``stimuli.eed_reference``, the reference's per-image, per-channel nine-weight form
(with the limiter written per pixel), kept as an independent check and a benchmark
baseline, to float32 rounding (< 1e-3 grey levels after 512 steps).
"""

from __future__ import annotations

import importlib.util
import math
from typing import Iterable, Sequence

import numpy as np

from .eed_scheme import EEDError, EEDParams, gaussian_kernel_1d, symmetric_index

__all__ = ["CLASSIFICATION_STEPS", "SEGMENTATION_STEPS", "EEDError", "EEDParams", "default_batch_size", "diffuse",
           "eed", "gaussian_kernel_1d", "resolve_device", "snapshot_steps", "stretch", "symmetric_index",
           "to_display"]

CLASSIFICATION_STEPS = 16384
"""Heinert et al., Sec. IV-b: EED steps for classification stimuli."""
SEGMENTATION_STEPS = 5792
"""Heinert et al., Sec. IV-b: EED steps for segmentation stimuli."""


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


def _stepper(height: int, width: int, params: EEDParams, dev):
    """The fastest path for the device: compiled loops per image on a CPU
    (``stimuli.eed_numba``), ``_cuda_path`` on CUDA, whole-batch torch operations
    (``stimuli.eed_torch``) elsewhere."""
    if dev.type == "cpu":
        from .eed_numba import Stepper

        return Stepper(height, width, params)
    if dev.type == "cuda":
        return _cuda_path().Stepper(height, width, params, dev)
    from .eed_torch import Stepper

    return Stepper(height, width, params, dev)


def _cuda_path():
    """Triton kernels (``stimuli.eed_triton``) where Triton is installed, as it is with
    torch's CUDA builds; else whole-batch torch operations (``stimuli.eed_torch``)."""
    if importlib.util.find_spec("triton") is not None:
        from . import eed_triton

        return eed_triton
    from . import eed_torch

    return eed_torch


PROGRESS_STEPS = 32
"""Steps between progress-bar updates (and between the CPU kernel's calls)."""


def diffuse(images, steps: int | Sequence[int], *, params: EEDParams = EEDParams(), device: str = "cpu",
            progress: bool = True, desc: str = "EED") -> dict[int, np.ndarray]:
    """Run EED on a batch of RGB images (N, H, W, 3), any numeric type on 0-255.

    Returns {step count: raw float32 images (N, H, W, 3)} at every requested step count,
    before clipping and rescaling (use ``to_display`` for the saved form). One progress
    bar over steps; all images advance together. On CUDA a snapshot is copied to pinned
    host memory while the next steps run.
    """
    import torch
    from tqdm import tqdm

    batch = _as_batch(images)
    wanted = _check_steps([steps] if isinstance(steps, (int, np.integer)) else steps)
    dev = resolve_device(device)
    n, h, w, _ = batch.shape
    stepper = _stepper(h, w, params, dev)
    u = torch.as_tensor(np.ascontiguousarray(batch.transpose(0, 3, 1, 2)), dtype=torch.float32, device=dev)
    bounds = (u.amin(dim=(2, 3), keepdim=True), u.amax(dim=(2, 3), keepdim=True)) if params.limit else None
    ends = sorted({s for s in wanted if s > 0} | set(range(PROGRESS_STEPS, wanted[-1], PROGRESS_STEPS)))
    snapshots: dict[int, object] = {0: u.cpu().clone()} if wanted[0] == 0 else {}
    done = 0
    with torch.inference_mode(), tqdm(total=wanted[-1], desc=f"{desc} ({n} images, {dev.type})", unit="step",
                                      disable=not progress, leave=False) as bar:
        for end in ends:
            u = stepper(u, end - done, bounds)
            bar.update(end - done)
            done = end
            if end in wanted:
                snapshots[end] = _snapshot(u)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    return {step: snap.permute(0, 2, 3, 1).numpy() for step, snap in snapshots.items()}


def _snapshot(u):
    """A host copy of ``u`` that later steps leave alone; from a GPU, queued without waiting."""
    import torch

    if u.device.type != "cuda":
        return u.clone()
    host = torch.empty(u.shape, dtype=u.dtype, pin_memory=True)
    host.copy_(u, non_blocking=True)
    return host


def default_batch_size(device: str, height: int = 224, width: int = 224) -> int:
    """Images per batch. On a CPU each image runs on one thread in its own cache-sized
    buffers, so a batch needs only enough images to keep torch's threads busy; on a GPU,
    as many as fit into 80 % of the device's free memory."""
    import torch

    dev = resolve_device(device)
    if dev.type != "cuda":
        return max(8, torch.get_num_threads())
    free, _ = torch.cuda.mem_get_info(dev)
    return max(1, int(0.8 * free) // (_cuda_path().BYTES_PER_PIXEL * height * width))


def eed(images, steps: int | Sequence[int] = CLASSIFICATION_STEPS, *, params: EEDParams = EEDParams(),
        device: str = "cpu", batch_size: int | None = None, progress: bool = True) -> dict[int, np.ndarray]:
    """EED shape cues as saved images: {step count: uint8 (N, H, W, 3)}.

    Images are diffused ``batch_size`` at a time (default: ``default_batch_size``).
    """
    import torch

    batch = _as_batch(images)
    if batch_size is not None and batch_size < 1:
        raise EEDError(f"batch_size must be >= 1, got {batch_size}")
    wanted = _check_steps([steps] if isinstance(steps, (int, np.integer)) else steps)
    batch_size = batch_size or default_batch_size(device, *batch.shape[1:3])
    parts: dict[int, list[np.ndarray]] = {s: [] for s in wanted}
    for start in range(0, len(batch), batch_size):
        chunk = batch[start:start + batch_size]
        desc = f"EED {start + 1}-{start + len(chunk)}/{len(batch)}"
        try:
            diffused = diffuse(chunk, wanted, params=params, device=device, progress=progress, desc=desc)
        except torch.cuda.OutOfMemoryError:
            raise EEDError(f"EED on {device} ran out of GPU memory with {len(chunk)} images of "
                           f"{chunk.shape[1]}x{chunk.shape[2]} per batch; try a batch size (--eed-batch) of "
                           f"{max(1, len(chunk) // 2)}") from None
        for step, raw in diffused.items():
            parts[step].append(to_display(raw))
    return {s: np.concatenate(v) for s, v in parts.items()}
