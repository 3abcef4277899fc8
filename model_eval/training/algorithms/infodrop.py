"""InfoDrop (Shi, Zhang, Li, Shao & Xie 2020, "Informative dropout for robust representation learning:
a shape-bias perspective"): ERM with dropout that favours texture-like positions, at the stride-4 stage."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn
from torch.nn import functional as F

from .base import Algorithm, AlgorithmOptions, seed_of


def drop_log_probabilities(x: torch.Tensor, size: tuple[int, int], kernel: int, radius: int = 3, samples: int = 9,
                           band_width: float = 1.0, temperature: float = 0.03,
                           generator: torch.Generator | None = None) -> torch.Tensor:
    """InfoDrop's dropout distribution (Shi, Zhang, Li, Shao & Xie 2020, "Informative dropout for robust
    representation learning: a shape-bias perspective", ICML, Eqs. 3-5), log-probabilities (N, 1, *size).

    A patch (``kernel`` x ``kernel``, the stem convolution's) carries little shape information when
    it resembles its neighbours: with d_k its squared distance to the patch shifted by one of
    ``samples`` random offsets within ``radius``, its self-similarity is
    s = mean_k exp(-d_k / (2 h^2 mean(d))) and p(drop) is proportional to s^(1/T). The input grid is
    brought to the feature grid by min-pooling (as the source code does across the stem's pooling).
    Defaults: BiasBed's InfoDrop (radius 3, 9 samples, h = 1, T = 0.03).
    """
    offsets = torch.randint(-radius, radius + 1, (samples, 2), generator=generator).tolist()
    padded = F.pad(x.float(), (radius,) * 4)
    h, w = x.shape[-2:]
    distances = torch.stack([(x.float() - padded[:, :, radius + i:radius + i + h, radius + j:radius + j + w])
                             .pow(2).sum(dim=1) for i, j in offsets], dim=1)
    distances = F.avg_pool2d(distances, kernel, stride=1, padding=kernel // 2, count_include_pad=False) * kernel ** 2
    similarity = torch.exp(-distances / distances.mean().clamp_min(1e-12) / (2 * band_width ** 2)).mean(dim=1,
                                                                                                        keepdim=True)
    log_p = similarity.clamp_min(1e-30).log() / temperature
    log_p = -F.adaptive_max_pool2d(-log_p, size)
    return log_p - torch.logsumexp(log_p.flatten(1), dim=1).view(-1, 1, 1, 1)


def info_dropout(features: torch.Tensor, log_p: torch.Tensor, drop_rate: float = 1.5,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """Zero ``drop_rate * H * W`` positions per sample and channel, drawn with replacement from the
    dropout distribution (Shi et al. 2020, Sec. 3.2; BiasBed: drop rate 1.5)."""
    n, c, h, w = features.shape
    probs = log_p.flatten(1).softmax(dim=1).repeat_interleave(c, dim=0).float().cpu()
    picked = torch.multinomial(probs, max(1, int(drop_rate * h * w)), replacement=True, generator=generator)
    mask = torch.ones(n * c, h * w).scatter_(1, picked, 0.0)
    return features * mask.view(n, c, h, w).to(features.device, features.dtype)


class InfoDrop(Algorithm):
    """InfoDrop (Shi et al. 2020): ERM with informative dropout at the stride-4 stage.

    Feature positions whose input patch resembles its surroundings (texture, flat regions) are zeroed
    more often than edges and corners.

    Where: after the stem's max-pool on a ResNet, as BiasBed's ``dropout_layers = 0.5`` and Shi et
    al.'s ResNet do; on other timm families the first stage at the same stride (``stride4_stage``).
    The distances are taken over the stem convolution's window and min-pooled onto the stride-4 grid.

    Protocol (``test_protocol``), after one named reference each:

    - ``"shi"`` (default): Shi et al.'s recipe (their domain-generalisation code: train with
      InfoDrop, then turn it off and fine-tune; 100 + 20 epochs there). The last
      ``finetune_fraction`` of a run's epochs (1/6 = 20 of 120, at least one epoch in runs of two or
      more) train the plain network, model selection picks among those epochs only, and ``predict``
      and every saved checkpoint are the plain network.
    - ``"biasbed"``: BiasBed's InfoDrop module, which drops in every forward pass, training and
      evaluation alike, with no fine-tuning stage (predictions are then random draws; a checkpoint
      answering through ``cuebench eval`` is the plain network all the same)."""

    class Options(AlgorithmOptions):
        drop_rate: float = Field(1.5, gt=0.0, description="positions dropped per channel, as a multiple of H x W "
                                                           "(BiasBed: 1.5)")
        temperature: float = Field(0.03, gt=0.0, description="T of p ~ similarity^(1/T) (BiasBed: 0.03)")
        radius: int = Field(3, ge=1, description="largest offset of the neighbouring patches compared (BiasBed: 3)")
        band_width: float = Field(1.0, gt=0.0, description="kernel bandwidth h of the patch similarity (BiasBed: 1)")
        samples: int = Field(9, ge=1, description="random neighbouring offsets per position (BiasBed: 9)")
        test_protocol: Literal["shi", "biasbed"] = Field(
            "shi", description="shi: train with InfoDrop, then fine-tune and test the plain network; biasbed: "
                               "InfoDrop in every forward pass, test time included")
        finetune_fraction: float = Field(1 / 6, ge=0.0, lt=1.0, description="shi: share of the run's epochs, at "
                                                                             "its end, fine-tuned without InfoDrop "
                                                                             "(Shi et al.: 20 of 120)")

    def __init__(self, model: nn.Module, **kwargs):
        super().__init__(model, **kwargs)
        o = self.options
        self.drop_rate, self.temperature, self.radius, self.band_width, self.samples = (
            o.drop_rate, o.temperature, o.radius, o.band_width, o.samples)
        self.test_protocol = o.test_protocol
        self.kernel = next(m for m in model.modules() if isinstance(m, nn.Conv2d)).kernel_size[0]
        self.stage = stride4_stage(model)
        self.generator = torch.Generator().manual_seed(seed_of(self.rng))
        self._input: torch.Tensor | None = None
        self.finetuning = False
        self.dropped = 0
        model.get_submodule(self.stage).register_forward_hook(self._hook)

    def finetune_epochs(self, epochs: int) -> int:
        """How many of a run's last epochs fine-tune without InfoDrop ("shi"; none under "biasbed")."""
        if self.test_protocol != "shi" or epochs < 2 or self.options.finetune_fraction == 0:
            return 0
        return min(epochs - 1, max(1, round(epochs * self.options.finetune_fraction)))

    def start_epoch(self, epoch: int, epochs: int) -> None:
        self.finetuning = epoch > epochs - self.finetune_epochs(epochs)

    def selectable(self, epoch: int, epochs: int) -> bool:
        finetune = self.finetune_epochs(epochs)
        return finetune == 0 or epoch > epochs - finetune

    def _hook(self, module, inputs, output):
        if self._input is None:
            return None
        log_p = drop_log_probabilities(self._input, tuple(output.shape[-2:]), self.kernel, self.radius, self.samples,
                                       self.band_width, self.temperature, self.generator)
        self.dropped += 1
        return info_dropout(output, log_p.to(output.device), self.drop_rate, self.generator)

    def update(self, x: torch.Tensor, y: torch.Tensor) -> float:
        self._input = None if self.finetuning else x
        try:
            return super().update(x, y)
        finally:
            self._input = None

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        self._input = x if self.test_protocol == "biasbed" else None
        try:
            return super().predict(x)
        finally:
            self._input = None


def stride4_stage(model: nn.Module, size: int = 224) -> str:
    """The first module whose output is at stride 4, among the model's top-level modules and timm's
    feature stages, in the order one forward pass runs them: ``maxpool`` on a timm ResNet (BiasBed's
    and Shi et al.'s place), ``blocks.1`` on an EfficientNet, ``stem`` on a ConvNeXt."""
    candidates = dict(model.named_children())
    for info in getattr(model, "feature_info", []) or []:
        if isinstance(info, dict):
            candidates.setdefault(info["module"], model.get_submodule(info["module"]))
    order: list[tuple[str, int]] = []
    handles = [module.register_forward_hook(
        lambda m, i, out, name=name: order.append((name, out.shape[-1])) if isinstance(out, torch.Tensor)
        and out.dim() == 4 else None) for name, module in candidates.items()]
    was_training = model.training
    device = next(model.parameters()).device
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(1, 3, size, size, device=device))
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    for name, width in order:
        if width * 4 == size:
            return name
    raise ValueError(f"{type(model).__name__} has no feature stage at stride 4 for InfoDrop "
                     f"(stages ran: {', '.join(f'{n} (stride {size // max(w, 1)})' for n, w in order) or 'none'})")
