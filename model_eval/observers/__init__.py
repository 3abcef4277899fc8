"""Models as observers: one protocol (``base.Observer``), adapters for timm, torchvision and
local checkpoints, and plug-ins registered by name or through the ``cuebench.observers``
entry point group.

A spec ``NAME[:WEIGHTS]`` resolves to a registered observer class ``NAME`` when there is one, else
to the first adapter of ``ADAPTERS``, in ``priority`` order, that ``claims`` it (torchvision for
``NAME:torchvision`` and the names only torchvision has, then timm, today's path); either is made by
its ``from_spec(NAME, WEIGHTS, DEVICE)``.
"""

from __future__ import annotations

import difflib

from ..models import UnknownArchitecture, available_models
from . import segmentation, timm_models, torchvision_models  # noqa: F401  (register the built-in adapters)
from .base import ADAPTERS, OBSERVERS, Observer, PendingOutputs
from .torchvision_models import cached_torchvision_models

__all__ = ["ADAPTERS", "OBSERVERS", "Observer", "PendingOutputs", "adapters", "available_observers", "check_spec",
           "load_observer"]


def adapters() -> list[type[Observer]]:
    """The adapters in the order they are asked: highest ``priority`` first, then by name."""
    return [cls for _, cls in sorted(ADAPTERS.working(), key=lambda item: (-item[1].priority, item[0]))]


def _resolve(spec: str) -> tuple[type[Observer], str, str]:
    """(the class that makes the spec's observer, name, weights as given), or UnknownArchitecture."""
    name, _, weights = spec.strip().partition(":")
    if not name:
        raise UnknownArchitecture(f"model spec {spec!r} has no architecture name (expected NAME or NAME:WEIGHTS)")
    if name in OBSERVERS:
        plugin = OBSERVERS[name]
        if not (isinstance(plugin, type) and issubclass(plugin, Observer)):
            raise UnknownArchitecture(f"observer {name!r} ({getattr(plugin, '__name__', type(plugin).__name__)}) "
                                      "is not a model_eval.observers.Observer subclass")
        return plugin, name, weights
    asked = adapters()
    for adapter in asked:
        if adapter.claims(name, weights):
            return adapter, name, weights
    names = [*OBSERVERS.names(), *(n for adapter in asked for n in adapter.known_names())]
    close = difflib.get_close_matches(name.split(".")[0], names, n=5, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see `cuebench eval models` and timm.list_models()"
    raise UnknownArchitecture(f"unknown model architecture {name!r}{hint}")


def check_spec(spec: str) -> None:
    """Fail now, naming close names, if ``spec`` names no observer: before any model runs."""
    _resolve(spec)


def load_observer(spec: str, device: str) -> Observer:
    """The observer a ``--model NAME[:WEIGHTS]`` spec names, loaded on ``device`` (already resolved)."""
    cls, name, weights = _resolve(spec)
    return cls.from_spec(name, weights, device)


def available_observers() -> list[dict]:
    """What can be evaluated offline now: PyPI and HF-cache timm models, torch-hub torchvision
    models, and the registered observer classes."""
    plugins = [{"spec": name, "source": "observer plug-in", "file": OBSERVERS.summary(name)} for name in OBSERVERS]
    return available_models() + cached_torchvision_models() + plugins
