"""The Observer protocol: what evaluation knows of a model.

A model is an observer like a person: it looks at images and answers trials. Evaluation
hands it normalised image batches and asks for ``probabilities`` (one row per image, over
ImageNet-1k's classes or over the observer's own ``classes``) and/or ``features`` (one
vector per image), whichever the trials' decision rules read; ``answer`` then turns the
outputs of a trial's images into the trial's answer. Nothing in the evaluation loop knows
timm, torchvision or a 1000-way softmax, so a CLIP-style model, a custom module or a
Brain-Score-like plug-in is one class (see ``docs/models.md``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from cuebench.registry import Registry
from cuebench.trials import Experiment, Trial

from ..decisions import Decision, DecisionTable
from ..models import ModelError

OBSERVERS: Registry[type["Observer"]] = Registry("observers", entry_point_group="cuebench.observers")
"""Observer classes by name, each an entry point of ``cuebench.observers`` (this package's or another's); ``--model NAME[:WEIGHTS]`` builds
``cls.from_spec(NAME, WEIGHTS, DEVICE)``, by default ``cls(weights=WEIGHTS or None, device=DEVICE)``."""
ADAPTERS: Registry[type["Observer"]] = Registry("observer-adapters", entry_point_group="cuebench.observer_adapters")
"""The ways a ``--model NAME[:WEIGHTS]`` spec that names no plug-in becomes an observer (torchvision,
timm, ...): ``Observer`` classes that ``claims`` the specs they make, asked in ``priority`` order."""


class Observer:
    """A model that answers trials from its outputs for the trials' images.

    A subclass sets ``observer_id`` (the ``observer`` of its response rows: name and weights),
    ``provenance`` (stored with every answer; at least ``model`` and ``weights``),
    ``data_config`` (``input_size`` (3, H, W), ``mean``, ``std`` and, for
    ``--policy resize-crop``, ``crop_pct``/``interpolation``/``crop_mode``) and ``device``,
    and implements ``probabilities`` and/or ``features``.
    """

    observer_id: str
    provenance: dict
    data_config: dict
    device: str = "cpu"
    channels_last: bool = False  # the memory format its batches should come in
    classes: tuple[str, ...] | None = None  # what probabilities are over; None: ImageNet-1k's 1000 classes
    priority: ClassVar[int] = 0
    """An adapter's place when several could make a spec: the highest is asked first."""

    @classmethod
    def claims(cls, name: str, weights: str) -> bool:
        """Whether this adapter makes the observer of ``NAME[:WEIGHTS]``; it may also refuse a spec meant for it
        (raising ``UnknownArchitecture``). A plug-in registered by name needs no claim: its name is one."""
        return False

    @classmethod
    def known_names(cls) -> list[str]:
        """The names this adapter makes, for "did you mean" when no adapter claims a spec."""
        return []

    @classmethod
    def from_spec(cls, name: str, weights: str, device: str) -> "Observer":
        """The observer of ``NAME[:WEIGHTS]`` on ``device``; ``weights`` is "" when the spec names none. The one
        way every observer is made: a plug-in's default is ``cls(weights=WEIGHTS or None, device=DEVICE)``."""
        return cls(weights=weights or None, device=device)

    def prepare(self, experiment: Experiment) -> None:
        """Called once before the observer sees an experiment's images; e.g. a CLIP-style
        observer sets ``classes`` to the experiment's labels and encodes their prompts here."""

    @property
    def experiment_independent(self) -> bool:
        """Whether an image's outputs are the same in every experiment: true unless the class overrides
        ``prepare`` (a CLIP-style observer's classes are the experiment's labels). Only then do images of
        several experiments share a batch (``model_eval.evaluate.evaluate_experiments``); a plug-in whose
        ``prepare`` changes nothing that its outputs depend on may override this."""
        return type(self).prepare is Observer.prepare

    def probabilities(self, images) -> Any:
        """(n, len(classes) or 1000) probabilities for a normalised float batch (n, 3, H, W)."""
        raise ModelError(f"observer {self.observer_id} gives no class probabilities, so it cannot answer "
                         "classification trials")

    def features(self, images) -> Any:
        """(n, D) feature vectors (e.g. penultimate-layer activations) for a normalised batch."""
        raise ModelError(f"observer {self.observer_id} gives no features, so it cannot answer oddity trials")

    def outputs(self, images, kinds: frozenset[str]) -> dict[str, Any]:
        """The asked output kinds for one batch; an adapter that gets both from one pass overrides this."""
        produce = {"probabilities": self.probabilities, "features": self.features}
        return {kind: produce[kind](images) for kind in kinds}

    def answer(self, trials: list[Trial], batch: dict[str, dict[str, np.ndarray]],
               decisions: DecisionTable) -> list[Decision]:
        """The answers to ``trials``; ``batch`` holds output kind -> stimulus id -> this observer's
        output for every stimulus of the trials, ``decisions`` the rule per trial type and the label mapping
        of the trials' experiment (``DecisionTable.prepared``)."""
        return decisions.decide(trials, batch)


class PendingOutputs:
    """One batch's outputs on their way to the host memory; ``collect`` waits for them.

    Torch tensors on a GPU are copied without blocking, so the next batch can start while
    this one's answers are decided; arrays an observer made on the CPU pass through."""

    def __init__(self, observer: Observer, ids: list[str], outputs: dict[str, Any]):
        self.observer, self.ids, self.ready = observer, ids, None
        self.host = {}
        for kind, value in outputs.items():
            if hasattr(value, "detach"):
                if value.is_cuda and self.ready is None:
                    import torch

                    self.ready = torch.cuda.Event()
                value = value.detach().to("cpu", non_blocking=True)
            self.host[kind] = value
        if self.ready is not None:
            self.ready.record()

    def collect(self) -> dict[str, dict[str, np.ndarray]]:
        """Output kind -> stimulus id -> float array, checked to have one row per image."""
        if self.ready is not None:
            self.ready.synchronize()
        collected = {}
        for kind, value in self.host.items():
            rows = np.asarray(value.float().numpy() if hasattr(value, "detach") else value, dtype=np.float32)
            if rows.ndim != 2 or len(rows) != len(self.ids):
                raise ModelError(f"observer {self.observer.observer_id} returned {kind} of shape {rows.shape} "
                                 f"for {len(self.ids)} images; expected one row per image")
            collected[kind] = dict(zip(self.ids, rows))
        return collected
