"""pAdaIN (Nuriel, Benaim & Wolf 2021, "Permuted AdaIN"): ERM where a random layer sometimes swaps
feature statistics between the batch's samples."""

from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from .base import Algorithm, AlgorithmOptions


def permute_adain(x: torch.Tensor, perm: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Permuted AdaIN (Nuriel, Benaim & Wolf 2021, eq. 2): each sample keeps its normalised
    content but takes the channel-wise mean and standard deviation of sample ``perm[i]``."""
    mean = x.mean(dim=(2, 3), keepdim=True)
    std = (x.var(dim=(2, 3), keepdim=True, unbiased=False) + eps).sqrt()
    return (x - mean) / std * std[perm] + mean[perm]


def candidate_layers(model: nn.Module) -> list[nn.Module]:
    """Where pAdaIN may act: timm's feature stages when the model lists them, else every Conv2d."""
    names = [info["module"] for info in getattr(model, "feature_info", []) or [] if isinstance(info, dict)]
    layers = []
    for name in names:
        try:
            layers.append(model.get_submodule(name))
        except AttributeError:
            continue
    return layers or [m for m in model.modules() if isinstance(m, nn.Conv2d)]


class PAdaIN(Algorithm):
    """Permuted AdaIN (Nuriel et al. 2021): ERM where a random layer sometimes swaps feature statistics.

    With probability ``p`` per step (0.01 there), one randomly chosen layer swaps channel statistics
    between the batch's samples."""

    class Options(AlgorithmOptions):
        p: float = Field(0.01, ge=0.0, le=1.0, description="probability of a swap per step (Nuriel et al. 2021: 0.01)")

    def __init__(self, model: nn.Module, **kwargs):
        super().__init__(model, **kwargs)
        self.p = self.options.p
        self.layers = candidate_layers(model)
        self._active: nn.Module | None = None
        self._perm: torch.Tensor | None = None
        self.swaps = 0
        for layer in self.layers:
            layer.register_forward_hook(self._hook)

    def _hook(self, module: nn.Module, inputs, output):
        if module is self._active and isinstance(output, torch.Tensor) and output.dim() == 4:
            self.swaps += 1
            return permute_adain(output, self._perm)
        return None

    def update(self, x: torch.Tensor, y: torch.Tensor) -> float:
        if self.layers and self.rng.random() < self.p:
            self._active = self.layers[self.rng.randrange(len(self.layers))]
            perm = list(range(len(x)))
            self.rng.shuffle(perm)
            self._perm = torch.tensor(perm, device=x.device)
        try:
            return super().update(x, y)
        finally:
            self._active = None
