"""Observers that wrap a PyTorch module: device placement, memory format, mixed precision and batch norm
folded into convolutions, shared by the timm and torchvision adapters."""

from __future__ import annotations

from typing import Any

from ..batchnorm_folding import fold_batch_norms
from .base import Observer


class ModuleObserver(Observer):
    """An eval-mode ``torch.nn.Module`` on its device; subclasses say how one pass gives the outputs.

    Batches come channels-last (on a CPU too: its convolutions there run about twice as fast as on NCHW
    batches, benchmarks/bench_scorecard.py); on a GPU the module's weights are channels-last as well and it
    runs under bfloat16 autocast; outputs come back as float32. With ``fold_batch_norm`` (classifiers whose
    every path is their ``forward``) batch norms are folded into the convolutions before them
    (``batchnorm_folding``), and the provenance says how many."""

    def __init__(self, model, observer_id: str, provenance: dict, data_config: dict, device: str,
                 fold_batch_norm: bool = False):
        import torch

        self.cuda = device.startswith("cuda")
        self.channels_last = True
        model = model.eval().to(device)  # on a CPU converting the weights too saves nothing and costs a copy
        if fold_batch_norm and (folded := fold_batch_norms(model)):
            provenance = {**provenance, "batch_norm": f"folded into {folded} convolutions"}
        self.model = model.to(memory_format=torch.channels_last) if self.cuda else model
        self.observer_id, self.provenance, self.data_config, self.device = (observer_id, provenance, data_config,
                                                                            device)

    def outputs(self, images, kinds: frozenset[str]) -> dict[str, Any]:
        import torch

        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.cuda):
            return {kind: value.float() for kind, value in self.forward(images, kinds).items()}

    def probabilities(self, images):
        return self.outputs(images, frozenset({"probabilities"}))["probabilities"]

    def features(self, images):
        return self.outputs(images, frozenset({"features"}))["features"]

    def forward(self, images, kinds: frozenset[str]) -> dict[str, Any]:
        """The asked kinds from one pass of the module (softmax probabilities, flat features)."""
        raise NotImplementedError
