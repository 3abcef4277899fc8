"""SagNet (Nam et al. 2021, "Reducing domain gap by reducing style bias"): content and style branches,
the encoder made adversarial to style, stepped as the official code does."""

from __future__ import annotations

import copy

import torch
from pydantic import Field
from torch import nn
from torch.nn import functional as F

from .base import Algorithm, AlgorithmOptions, seed_of


def stage_module(model: nn.Module, reduction: int) -> str:
    """Name of timm's feature stage at ``reduction`` (the stride of its output)."""
    for info in getattr(model, "feature_info", []) or []:
        if isinstance(info, dict) and info.get("reduction") == reduction:
            return info["module"]
    raise ValueError(f"{type(model).__name__} lists no feature stage at stride {reduction} (timm feature_info)")


def channel_stats(x: torch.Tensor, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample, per-channel mean and standard deviation over space (the "style" of AdaIN)."""
    return x.mean(dim=(2, 3), keepdim=True), (x.var(dim=(2, 3), keepdim=True, unbiased=False) + eps).sqrt()


def style_randomize(x: torch.Tensor, perm: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """SagNet style randomisation (Nam et al. 2021, Eq. 4): sample i keeps its normalised content and
    takes the style mu^ = a mu(x_i) + (1 - a) mu(x_perm[i]), sigma^ likewise, a ~ U(0, 1) per sample."""
    mean, std = channel_stats(x)
    mixed_mean = alpha * mean + (1 - alpha) * mean[perm]
    mixed_std = alpha * std + (1 - alpha) * std[perm]
    return (x - mean) / std * mixed_std + mixed_mean


def content_randomize(x: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """SagNet content randomisation (Nam et al. 2021, Eq. 3): sample i's style (channel mean and
    std) on sample perm[i]'s normalised content, so only style is left to predict the class from.

    The borrowed content is detached, as in the official code (``x[idx_swap].detach()``): a loss on
    sample i reaches the encoder only through sample i's own statistics, never through another
    sample's features."""
    mean, std = channel_stats(x)
    return ((x - mean) / std)[perm].detach() * std + mean


ADV_LOSS_EPS = 1e-5
"""The official code's ``AdvLoss`` takes log(p + 1e-5): the loss stays finite when a style prediction
is certain."""


def uniform_target_loss(logits: torch.Tensor) -> torch.Tensor:
    """SagNet's adversarial loss (Nam et al. 2021, Eq. 6): cross-entropy of the style network's
    prediction against the uniform distribution, -1/K sum_k log(p_k + eps), averaged over the batch
    (eps = ``ADV_LOSS_EPS``, as the official ``AdvLoss``)."""
    return -(F.softmax(logits.float(), dim=1) + ADV_LOSS_EPS).log().mean(dim=1).mean()


class SagNet(Algorithm):
    """SagNet (Nam et al. 2021): content and style branches, the encoder made adversarial to style.

    Style-agnostic networks (Nam, Lee, Park, Yoon & Yoo 2021, "Reducing domain gap by reducing style
    bias", CVPR), stepped as the official code does. The network is split at the stride-8 stage
    (BiasBed's ``style_stage: 3`` on ResNet-50: after ``layer2``). The content branch (the model) sees
    style-randomised features and learns the class; a copy of the later stages, the style branch, sees
    content-randomised features (detached content) and learns the class from style alone; the
    encoder's normalisation layers take an adversarial step that makes the style branch's prediction
    uniform. Each of the three has its own optimiser, as in the official ``train.py``: the adversarial
    gradient (loss weight ``w_adv`` = 0.1) is clipped to norm ``clip_adv`` = 0.1 on its own and stepped
    by its own optimiser. The optimiser is SGD by default, as there (``OPTIMIZER_DEFAULTS``: lr 0.004,
    momentum 0.9, weight decay 1e-4), so both numbers are the step sizes they are in the paper: the
    first adversarial step moves the encoder's normalisation parameters by lr x (clipped gradient +
    weight decay x parameter), at most about 4e-4 in norm. Adam (``optimizer="adam"``, only when asked
    for) rescales every gradient to a step of about lr per parameter, which cancels both numbers.
    Randomisation acts only in ``update``; ``predict`` is the plain model."""

    default_optimizer = "sgd"

    class Options(AlgorithmOptions):
        w_adv: float = Field(0.1, ge=0.0, description="weight of the adversarial loss (BiasBed, Nam et al.: 0.1)")
        clip_adv: float | None = Field(0.1, gt=0.0, description="L2 norm the adversarial gradient is clipped to "
                                                              "(0.1; none: no clipping)")
        split_reduction: int = Field(8, ge=2, description="stride of the feature stage after which the network is "
                                                         "split into encoder and branches (8: ResNet's layer2, "
                                                         "BiasBed's style_stage 3)")

    def __init__(self, model: nn.Module, **kwargs):
        super().__init__(model, **kwargs)
        self.w_adv, self.clip_adv = self.options.w_adv, self.options.clip_adv
        self.split = stage_module(model, self.options.split_reduction)
        self.style_net = copy.deepcopy(model)
        self.style_optimizer = self.make_optimizer(self.style_net.parameters())
        self.adv_params = [p for m in encoder_modules(model, self.split)
                           if isinstance(m, nn.modules.batchnorm._BatchNorm) for p in m.parameters()]
        self.adv_optimizer = self.make_optimizer(self.adv_params)
        self.generator = torch.Generator().manual_seed(seed_of(self.rng))
        self._features: torch.Tensor | None = None
        self._randomise = False
        self.randomised = 0
        model.get_submodule(self.split).register_forward_hook(self._content_hook)
        self.style_net.get_submodule(self.split).register_forward_hook(self._style_hook)

    def _content_hook(self, module, inputs, output):
        if not self._randomise:
            return None
        self._features = output
        self.randomised += 1
        n = len(output)
        perm = torch.randperm(n, generator=self.generator).to(output.device)
        alpha = torch.rand(n, 1, 1, 1, generator=self.generator).to(output.device, output.dtype)
        return style_randomize(output, perm, alpha)

    def _style_hook(self, module, inputs, output):
        """The style branch's own early stages only carry a stub input: their output is replaced by
        the content-randomised features of the shared encoder."""
        perm = torch.randperm(len(self._features), generator=self.generator).to(self._features.device)
        return content_randomize(self._features, perm)

    def update(self, x: torch.Tensor, y: torch.Tensor) -> float:
        self.model.train()
        self.style_net.train()
        self._randomise = True
        try:
            with self._autocast(x):
                logits = self.model(x)
                style_logits = self.style_net(x[:, :, :32, :32])
        finally:
            self._randomise = False
        style_params = [p for p in self.style_net.parameters() if p.requires_grad]
        style_grads = torch.autograd.grad(F.cross_entropy(style_logits.float(), y), style_params,
                                          retain_graph=True, allow_unused=True)
        adv_grads = torch.autograd.grad(self.w_adv * uniform_target_loss(style_logits), self.adv_params,
                                        retain_graph=True, allow_unused=True)
        adv_grads = [torch.zeros_like(p) if g is None else g for p, g in zip(self.adv_params, adv_grads)]
        if self.clip_adv is not None:
            clip_in_place(adv_grads, self.clip_adv)
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        self.optimizer.step()
        step_with(self.style_optimizer, style_params, style_grads)
        step_with(self.adv_optimizer, self.adv_params, adv_grads)
        self._features = None
        return float(loss.detach())


def step_with(optimizer: torch.optim.Optimizer, params: list[torch.Tensor], grads) -> None:
    """One step of ``optimizer`` on exactly ``grads`` (None: a parameter the loss does not reach)."""
    for p, g in zip(params, grads):
        p.grad = g
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def encoder_modules(model: nn.Module, split: str) -> list[nn.Module]:
    """The modules that run before and up to the stage ``split`` (timm registers modules in forward order)."""
    out, seen = [], False
    for name, module in model.named_modules():
        inside = name == split or name.startswith(split + ".")
        if seen and not inside:
            break
        seen = seen or inside
        out.append(module)
    return out


def clip_in_place(grads: list[torch.Tensor], max_norm: float) -> None:
    """Scale ``grads`` so their joint L2 norm is at most ``max_norm`` (as ``clip_grad_norm_``)."""
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale)
