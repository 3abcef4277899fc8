"""Weight-free texture synthesis for DiST stimuli: Portilla & Simoncelli (2000) texture
statistics, matched by ``plenoptic`` (``PortillaSimoncelli`` + ``Metamer``, with its PS loss).

No network weights: the statistics are those of a steerable pyramid (marginal moments,
auto-correlations of the bands and their magnitudes, cross-scale and cross-orientation
correlations), which fix local texture and leave the global layout free.

Colour: the PS model is for one channel. Each image's RGB pixels are rotated onto their
principal colour axes (PCA over the image's pixels, as Portilla & Simoncelli's colour
extension does), the three decorrelated channels are synthesised together as a batch of
grey images, and rotated back. Colours stay those of the original; correlations between
the channels' spatial structure are not matched.

Images are synthesised one at a time (the pyramid's statistics are per image and the
optimiser is plenoptic's, whose line search would couple a batch), so ``synthesize`` over
a list equals one call per image. Each image starts from Gaussian noise drawn from its
own seed, with the original's per-channel mean and standard deviation.
"""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np

from cuebench.errors import CuebenchError
from .texture_synthesis import SynthesisResult, to_uint8

N_SCALES = 4
N_ORIENTATIONS = 4
SPATIAL_CORR_WIDTH = 7
"""Portilla & Simoncelli 2000 (and plenoptic's defaults): 4 scales, 4 orientations, a 7 x 7
neighbourhood for the auto-correlations."""
DEFAULT_STEPS = 60
"""Outer steps of L-BFGS (each up to ``LBFGS_INNER`` iterations, strong-Wolfe line search,
as plenoptic's PS example); 60 x 10 reaches LV/HFE ratios near 1 at 224 x 224."""
LBFGS_INNER = 10
LBFGS_HISTORY = 100


class PSSynthesisError(CuebenchError):
    """PS synthesis cannot run on these images (a size the pyramid cannot split, bad option)."""


def settings() -> dict:
    """The recipe recorded in each stimulus' provenance."""
    return {"model": "Portilla-Simoncelli (plenoptic)", "n_scales": N_SCALES, "n_orientations": N_ORIENTATIONS,
            "spatial_corr_width": SPATIAL_CORR_WIDTH, "colour": "PCA-decorrelated channels",
            "optimizer": f"lbfgs x{LBFGS_INNER} strong-wolfe"}


def colour_axes(pixels) -> tuple:
    """(mean, axes) of an H x W x 3 float image's colours: decorrelated = (x - mean) @ axes."""
    import torch

    flat = pixels.reshape(-1, 3)
    mean = flat.mean(0)
    _, vectors = torch.linalg.eigh(torch.cov(flat.T) + 1e-6 * torch.eye(3, dtype=flat.dtype))
    return mean, vectors


def synthesize_one(image: np.ndarray, seed: int, steps: int = DEFAULT_STEPS, device: str = "cpu"):
    """(H x W x 3 uint8 synthesis, final PS loss) of one H x W x 3 uint8 image."""
    import plenoptic as po
    import torch

    size = image.shape[:2]
    if any(s % 2 ** N_SCALES for s in size):
        raise PSSynthesisError(f"PS synthesis needs sides divisible by {2 ** N_SCALES}, got {size[1]}x{size[0]}")
    x = torch.from_numpy(image).to(torch.float32) / 255.0
    mean, axes = colour_axes(x)
    channels = ((x - mean) @ axes).permute(2, 0, 1)[:, None].contiguous().to(device)
    model = po.models.PortillaSimoncelli(size, n_scales=N_SCALES, n_orientations=N_ORIENTATIONS,
                                         spatial_corr_width=SPATIAL_CORR_WIDTH).to(device)
    po.remove_grad(model)
    generator = torch.Generator().manual_seed(int(seed))
    std = channels.std(dim=(2, 3), keepdim=True).cpu()
    start = (torch.randn(channels.shape, generator=generator) * std
             + channels.mean(dim=(2, 3), keepdim=True).cpu()).to(device)
    low, high = channels.amin().item(), channels.amax().item()
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        # the decorrelated channels are centred on 0, outside the [0, 1] plenoptic warns about;
        # its own per-step progress bar would drown the build's bar
        warnings.filterwarnings("ignore", message="input_tensor range")
        metamer = po.Metamer(channels, model, loss_function=po.loss.portilla_simoncelli_loss_factory(model, channels),
                             penalty_function=lambda img: ((img - img.clamp(low, high)) ** 2).sum())
        metamer.setup(initial_image=start, optimizer=torch.optim.LBFGS,
                      optimizer_kwargs={"max_iter": LBFGS_INNER, "max_eval": LBFGS_INNER,
                                        "history_size": LBFGS_HISTORY, "line_search_fn": "strong_wolfe", "lr": 1})
        metamer.synthesize(max_iter=steps, stop_criterion=0)
    result = metamer.metamer.detach().cpu()[:, 0].permute(1, 2, 0) @ axes.T + mean
    loss = float(metamer.losses[-1])
    if not np.isfinite(loss):
        raise PSSynthesisError("PS synthesis diverged (non-finite loss)")
    return to_uint8(result.permute(2, 0, 1)[None])[0], loss


def synthesize(images: np.ndarray, seeds: list[int], steps: int = DEFAULT_STEPS, device: str = "cpu",
               progress=None) -> SynthesisResult:
    """PS synthesis of N x H x W x 3 uint8 images, one seed each (same interface as the Gram backend)."""
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise PSSynthesisError(f"expected N x H x W x 3 uint8 images, got {images.shape} {images.dtype}")
    if len(seeds) != len(images):
        raise PSSynthesisError(f"{len(images)} images but {len(seeds)} seeds")
    if steps < 1:
        raise PSSynthesisError(f"synthesis needs at least 1 step, got {steps}")
    made, losses = [], []
    for image, seed in zip(images, seeds):
        pixels, loss = synthesize_one(image, seed, steps, device)
        made.append(pixels)
        losses.append(loss)
        if progress is not None:
            progress.update(1)
    return SynthesisResult(np.stack(made), np.asarray(losses, dtype=np.float64))
