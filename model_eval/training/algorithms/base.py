"""What every training algorithm shares: the registry, the options model, the optimiser settings and
``Algorithm``, whose ``update(x, y) -> loss`` is one cross-entropy step (ERM's) and ``predict(x)``.

A method is one module beside this one, a subclass of ``Algorithm`` declared by an entry point of
``cuebench.algorithms`` (pyproject.toml).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from torch import nn
from torch.nn import functional as F

from cuebench.errors import CuebenchError, describe
from cuebench.registry import PluginError, Registry


ALGORITHMS: Registry[type["Algorithm"]] = Registry("algorithms", entry_point_group="cuebench.algorithms")
"""Training algorithms by name (``cuebench list algorithms``), each an entry point of ``cuebench.algorithms``."""

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


class Algorithm:
    """The shared step every algorithm builds on: one cross-entropy step per batch (ERM's, ``erm.py``), its
    optimiser, options and model selection; a method overrides what it changes."""

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


def seed_of(rng: random.Random) -> int:
    return rng.randrange(2 ** 31)
