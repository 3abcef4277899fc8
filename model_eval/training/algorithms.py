"""Training algorithms behind one small interface: ``update(x, y) -> loss`` and ``predict(x)``.

A new method subclasses ``Algorithm`` and registers in ``ALGORITHMS`` (``cuebench list
algorithms``); the job runner, logging and model selection stay the same. Its settings are a
typed ``Options`` model (pydantic: default from the paper, bounds, help), validated when the
algorithm is built, set from the command line with ``--algorithm-option NAME.KEY=VALUE``
(``parse_algorithm_options``) and recorded with every result row. Here: ERM, pAdaIN,
SagNet, InfoDrop (BiasBed, Kalischek et al. 2023, with BiasBed's algorithm settings) and
DiSTinguish (Wen et al. 2024). BiasBed's Stylized ERM, Debiased and DeepAugment train on
images made by pretrained image-to-image networks (AdaIN style transfer, a CAE or EDSR); none
of those weights exist offline, so they are not here -- they would be an ``Algorithm`` plus an
image transform fed to ``update``, and fit the same interface.
"""

from __future__ import annotations

import copy
import random
import typing
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from torch import nn
from torch.nn import functional as F

from cuebench.errors import CuebenchError, describe
from cuebench.registry import PluginError, Registry


ALGORITHMS: Registry[type["Algorithm"]] = Registry("algorithms", entry_point_group="cuebench.algorithms")
"""Training algorithms by name (``cuebench list algorithms``); a new one registers with ``@ALGORITHMS.register``."""

OPTIMIZERS = ("adam", "sgd")
AUTO_OPTIMIZER = "auto"
"""``--optimizer auto``: each algorithm's own (``Algorithm.default_optimizer``)."""


@dataclass(frozen=True)
class OptimizerSettings:
    """The optimiser a run steps with: recorded with every result row and checkpoint (``as_dict``)."""

    name: str
    lr: float
    weight_decay: float
    momentum: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


OPTIMIZER_DEFAULTS = {
    "adam": OptimizerSettings("adam", lr=1e-3, weight_decay=0.0),
    "sgd": OptimizerSettings("sgd", lr=0.004, weight_decay=1e-4, momentum=0.9),
}
"""Settings of each optimiser when a run gives none. SGD's are SagNet's (Nam et al. 2021, official
``train.py``: SGD, lr 0.004, momentum 0.9, weight decay 1e-4, one optimiser each for the content,
style and adversarial steps); BiasBed trains SagNet with the same SGD at lr 1e-4 over 100 ImageNet
epochs (``--lr 1e-4``). Neither schedule (cosine, or x0.1 at epochs 30/60/90) is reproduced: the lr
stays constant. Adam's lr is the command's own default (``cuebench train``: 1e-3, ``train-cues``: 1e-4)."""


@dataclass(frozen=True)
class OptimizerRequest:
    """What a command line asked for: ``auto`` or an optimiser, and an lr and weight decay (None: the
    optimiser's default, ``OPTIMIZER_DEFAULTS``, with Adam's lr being the command's ``adam_lr``)."""

    name: str = AUTO_OPTIMIZER
    lr: float | None = None
    weight_decay: float | None = None

    def settle(self, algorithm: type["Algorithm"], adam_lr: float | None = None) -> OptimizerSettings:
        """The settings ``algorithm`` trains with under this request."""
        name = algorithm.default_optimizer if self.name == AUTO_OPTIMIZER else self.name
        if name not in OPTIMIZERS:
            raise AlgorithmError(f"--optimizer must be {AUTO_OPTIMIZER} or one of {', '.join(OPTIMIZERS)}, "
                                 f"got {name!r}")
        base = OPTIMIZER_DEFAULTS[name]
        if name == "adam" and adam_lr is not None:
            base = replace(base, lr=adam_lr)
        return replace(base, lr=base.lr if self.lr is None else self.lr,
                       weight_decay=base.weight_decay if self.weight_decay is None else self.weight_decay)


PARSED = {"int_parsing": "a whole number", "float_parsing": "a number", "bool_parsing": "true or false"}
"""What a command-line string failed to be, in words."""


class AlgorithmError(CuebenchError, ValueError):
    """An algorithm option has a bad value or does not exist."""


class AlgorithmOptions(BaseModel):
    """Base of every algorithm's options: unknown names refused, values immutable, help from ``description``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def parse(cls, values: dict[str, Any], algorithm: str) -> "AlgorithmOptions":
        """Validate ``values`` (command-line strings are converted); the first problem is one line
        naming the algorithm and the option."""
        try:
            return cls(**values)
        except ValidationError as err:
            first = err.errors()[0]
            path, problem = describe(first)
            if first["type"] == "extra_forbidden":
                known = ", ".join(cls.model_fields) or "none"
                problem = f"is not an option of {algorithm} (its options: {known})"
            elif first["type"].endswith("_parsing"):
                problem = f"expected {PARSED.get(first['type'], 'another value')}, got {first['input']!r}"
            raise AlgorithmError(f"{algorithm} option {path}: {problem}") from None

    def changed(self) -> dict[str, Any]:
        """The options that differ from their defaults (what names a job: a new option with a default
        leaves the names of earlier jobs as they were)."""
        default = type(self)()
        return {k: v for k, v in self.model_dump(mode="json").items() if getattr(default, k) != getattr(self, k)}


@ALGORITHMS.register("erm")
class Algorithm:
    """Empirical risk minimisation (ERM): one cross-entropy step per batch."""

    Options: type[AlgorithmOptions] = AlgorithmOptions
    """The algorithm's settings; a subclass with settings declares its own ``Options`` model."""

    default_optimizer = "adam"
    """The optimiser a run takes unless asked for another (``--optimizer``)."""

    @staticmethod
    def output_classes(n_classes: int) -> int:
        """Width of the classification head for ``n_classes`` training classes."""
        return n_classes

    @staticmethod
    def answer_logits(logits: torch.Tensor, n_classes: int) -> torch.Tensor:
        """The ``n_classes`` logits the model answers with (the head's own outputs, for all but DiSTinguish)."""
        return logits

    def __init__(self, model: nn.Module, lr: float | None = None, weight_decay: float | None = None, seed: int = 0,
                 amp: bool = False, optimizer: str = AUTO_OPTIMIZER, **options):
        self.options = options_of(type(self), options)
        self.settings = OptimizerRequest(optimizer, lr, weight_decay).settle(type(self))
        self.model = model
        self.optimizer = self.make_optimizer(model.parameters())
        self.rng = random.Random(seed)
        self.amp = amp

    def start_epoch(self, epoch: int, epochs: int) -> None:
        """Called before epoch ``epoch`` (1-based) of ``epochs``: for algorithms whose training has stages."""

    def selectable(self, epoch: int, epochs: int) -> bool:
        """Whether model selection may pick ``epoch`` (all epochs, unless the method's protocol
        evaluates only after a final stage)."""
        return True

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        """This run's optimiser (``settings``) over ``params``: SGD with momentum, or Adam."""
        s = self.settings
        if s.name == "sgd":
            return torch.optim.SGD(params, lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)
        return torch.optim.Adam(params, lr=s.lr, weight_decay=s.weight_decay)

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


@ALGORITHMS.register("padain")
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


@ALGORITHMS.register("sagnet")
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


def seed_of(rng: random.Random) -> int:
    return rng.randrange(2 ** 31)


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


@ALGORITHMS.register("infodrop")
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


@ALGORITHMS.register("distinguish")
class DiSTinguish(Algorithm):
    """DiSTinguish (Wen et al. 2024): each class and its structure-disrupted twin as 2n classes.

    Sec. 3.3: n original classes plus their structure-disrupted versions as n more classes, one 2n-way
    cross-entropy L = -sum_{i=1}^{2n} y_i log p_i. The step is
    ERM's; the difference is the data (``distinguish_labels``), the head (``output_classes``) and the
    answer (``answer_logits``: each class's logit plus its disrupted twin's)."""

    @staticmethod
    def output_classes(n_classes: int) -> int:
        return 2 * n_classes

    @staticmethod
    def answer_logits(logits: torch.Tensor, n_classes: int) -> torch.Tensor:
        """z'_i = z_i + z_{i+n}, i = 1..n (Wen et al. 2024, Sec. 3.3): the evidence for a class counts
        whether the network saw it as the original or as the structure-disrupted version."""
        if logits.shape[1] != 2 * n_classes:
            raise ValueError(f"DiSTinguish answers from 2n = {2 * n_classes} logits, got {logits.shape[1]}")
        return logits[:, :n_classes] + logits[:, n_classes:]


def distinguish_labels(labels: torch.Tensor, disrupted: torch.Tensor, n_classes: int) -> torch.Tensor:
    """2n-way labels (Wen et al. 2024, Fig. 4): class k stays k for originals, disrupted images get n + k."""
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= n_classes):
        raise ValueError(f"labels must lie in 0..{n_classes - 1}")
    return labels + n_classes * disrupted.to(labels.dtype)



def options_of(algorithm: type[Algorithm], values: dict[str, Any]) -> AlgorithmOptions:
    """``values`` validated by ``algorithm``'s options model (its registered name looked up only for an error)."""
    try:
        return algorithm.Options(**values)
    except ValidationError:
        return algorithm.Options.parse(values, registered_name(algorithm))


def registered_name(algorithm: type[Algorithm]) -> str:
    """The name ``algorithm`` is registered under (its class name when it is not registered)."""
    for name in ALGORITHMS.names():
        try:
            if ALGORITHMS[name] is algorithm:
                return name
        except PluginError:  # another package's broken plug-in is not this algorithm
            continue
    return algorithm.__name__


def parse_algorithm_options(pairs: list[str] | tuple[str, ...], algorithms: list[str]) -> dict[str, AlgorithmOptions]:
    """Each algorithm's validated options from ``--algorithm-option`` pairs: ``NAME.KEY=VALUE``, or
    ``KEY=VALUE`` when exactly one of ``algorithms`` has the option ``KEY``; ``none`` is None."""
    given: dict[str, dict[str, str | None]] = {name: {} for name in algorithms}
    for pair in pairs:
        target, sep, value = pair.partition("=")
        if not sep or not target.strip():
            raise AlgorithmError(f"--algorithm-option {pair!r} must be NAME.KEY=VALUE (or KEY=VALUE)")
        name, dot, key = target.strip().rpartition(".")
        if dot and name not in given:
            raise AlgorithmError(f"--algorithm-option {pair!r}: {name!r} is not among the algorithms trained here "
                                 f"({', '.join(algorithms)})")
        if not dot:
            owners = [n for n in algorithms if key in ALGORITHMS[n].Options.model_fields]
            if len(owners) != 1:
                why = (f"{', '.join(owners)} all have it; write NAME.{key}" if owners else
                       f"no algorithm trained here has it ({options_summary(algorithms)})")
                raise AlgorithmError(f"--algorithm-option {pair!r}: {why}")
            name = owners[0]
        value = value.strip()
        given[name][key] = None if value.lower() == "none" else value
    return {name: ALGORITHMS[name].Options.parse(values, name) for name, values in given.items()}


def options_summary(algorithms: list[str] | None = None) -> str:
    """``name: key=default, ...`` per algorithm with options, on one line (for error messages)."""
    parts = []
    for name in algorithms or ALGORITHMS.names():
        fields = ALGORITHMS[name].Options.model_fields
        if fields:
            parts.append(f"{name}: " + ", ".join(f"{k}={_shown(f.default)}" for k, f in fields.items()))
    return "; ".join(parts) or "none has options"


def options_help(algorithms: list[str] | None = None) -> str:
    """Every option of ``algorithms`` with its default, bounds and description (``--algorithm-option help``)."""
    lines = []
    for name in algorithms or ALGORITHMS.names():
        fields = ALGORITHMS[name].Options.model_fields
        lines.append(f"{name}:" + ("" if fields else " no options"))
        for key, info in fields.items():
            bounds = [f"{sign} {getattr(m, attr)}" for m in info.metadata for attr, sign in
                      (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")) if getattr(m, attr, None) is not None]
            kind = info.annotation
            choices = f" one of {', '.join(map(str, typing.get_args(kind)))};" if typing.get_origin(kind) is Literal else ""
            lines.append(f"  {name}.{key}={_shown(info.default)}  ({', '.join(bounds) + ';' if bounds else ''}{choices}"
                         f" {info.description})".replace("( ", "(").replace(";)", ")"))
    return "\n".join(lines)


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else "none" if value is None else str(value)
