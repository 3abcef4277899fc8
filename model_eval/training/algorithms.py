"""Training algorithms behind one small interface: ``update(x, y) -> loss`` and ``predict(x)``.

A new method (SagNet, InfoDrop, ...) subclasses ``Algorithm`` and registers in
``ALGORITHMS``; the job runner, logging and model selection stay the same.
"""

from __future__ import annotations

import random

import torch
from torch import nn
from torch.nn import functional as F


class Algorithm:
    """Empirical risk minimisation (ERM): one cross-entropy step per batch with Adam."""

    name = "erm"

    def __init__(self, model: nn.Module, lr: float = 1e-3, weight_decay: float = 0.0, seed: int = 0, amp: bool = False,
                 **options):
        if options:
            raise ValueError(f"algorithm {self.name!r} takes no options {sorted(options)}")
        self.model = model
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
        self.rng = random.Random(seed)
        self.amp = amp

    def _autocast(self, x: torch.Tensor):
        enabled = self.amp and x.device.type == "cuda"
        return torch.autocast(device_type=x.device.type, dtype=torch.bfloat16, enabled=enabled)

    def update(self, x: torch.Tensor, y: torch.Tensor) -> float:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        with self._autocast(x):
            loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        self.model.eval()
        with self._autocast(x):
            return self.model(x).argmax(dim=1)


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
    """ERM with permuted AdaIN: with probability ``p`` per step, one randomly chosen layer swaps
    feature statistics between the batch's samples (Nuriel et al. 2021; p = 0.01 there)."""

    name = "padain"

    def __init__(self, model: nn.Module, p: float = 0.01, **kwargs):
        super().__init__(model, **kwargs)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"pAdaIN probability p must be in [0, 1], got {p}")
        self.p = p
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


ALGORITHMS = {cls.name: cls for cls in (Algorithm, PAdaIN)}
