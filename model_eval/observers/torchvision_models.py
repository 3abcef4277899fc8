"""torchvision classification models as observers, by model-vs-human's names (``alexnet``,
``vgg16``, ``resnet50``, ...), with torchvision's ImageNet weights from the torch hub cache or
a local checkpoint. Nothing is downloaded: a missing file says how to fetch it once.

``NAME`` alone means torchvision for names timm does not have (``alexnet``); for names both
have (``resnet50``, ``vgg16``) it stays timm's, and ``NAME:torchvision`` asks for torchvision's.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from ..models import (LoadedModel, ModelError, UnknownArchitecture, WeightsNotFound, head_size,
                      load_checkpoint_into, read_checkpoint, sha256_file)
from ..torch_compat import import_timm
from .module import ModuleObserver

WEIGHTS_TAG = "torchvision"


def import_torchvision():
    """``torchvision``, importable also where its compiled operators are missing (``torch_compat``)."""
    import_timm()
    import torchvision

    return torchvision


def torchvision_names() -> list[str]:
    """torchvision's classification architectures."""
    models = import_torchvision().models
    return models.list_models(module=models)


def hub_checkpoints() -> Path:
    """The torch hub cache's weight folder (``$TORCH_HOME/hub/checkpoints``), where torchvision keeps weights."""
    import torch

    return Path(torch.hub.get_dir()) / "checkpoints"


def torch_hub_file(filename: str) -> Path | None:
    """``filename`` in the torch hub cache, if it is there."""
    path = hub_checkpoints() / filename
    return path if path.is_file() else None


def default_weights(name: str):
    """torchvision's default (ImageNet-1k) weights entry of ``name``."""
    return import_torchvision().models.get_model_weights(name).DEFAULT


def weights_filename(name: str) -> str:
    return Path(urlparse(default_weights(name).url).path).name


def load_torchvision(name: str, weights: str | None) -> LoadedModel:
    """torchvision's ``name`` with its ImageNet weights from the torch hub cache (``weights`` None, "" or
    "torchvision") or a local checkpoint, in eval mode and as torchvision builds it: what the observer evaluates
    and what training starts from."""
    torchvision = import_torchvision()
    entry = default_weights(name)
    if weights in (None, "", WEIGHTS_TAG):
        path = torch_hub_file(weights_filename(name))
        if path is None:
            raise WeightsNotFound(
                f"no weights for {name!r} here: looked for {weights_filename(name)} in the torch hub cache "
                f"({hub_checkpoints()}); fetch it once with `python -c \"import torchvision; "
                f"torchvision.models.get_model('{name}', weights='DEFAULT')\"`, or give a local file as "
                f"{name}:PATH/TO/CHECKPOINT.pth")
        model = torchvision.models.get_model(name, weights=entry)  # reads the cached file, as model-vs-human does
        source, tag, head = f"torch-hub:{path.name} (sha256 {sha256_file(path)})", WEIGHTS_TAG, None
        classes = None
    else:
        path = Path(weights).expanduser()
        checkpoint = read_checkpoint(path)
        model = torchvision.models.get_model(name, weights=None, **head_size(checkpoint))
        source, tag, head = load_checkpoint_into(model, path, name, checkpoint)
        classes = checkpoint.class_names
    transform = entry.transforms()
    crop, resize = transform.crop_size[0], transform.resize_size[0]
    data_config = {"input_size": (3, crop, crop), "mean": tuple(transform.mean), "std": tuple(transform.std),
                   "interpolation": transform.interpolation.value, "crop_pct": crop / resize,
                   "crop_mode": "center"}
    return LoadedModel(model=model.eval(), name=name, weights=tag if tag == WEIGHTS_TAG else "file",
                       weights_source=source, data_config=data_config, observer_id=f"{name}:{tag}", head=head,
                       classes=classes)


class TorchvisionObserver(ModuleObserver):
    """A torchvision model (NAME or NAME:torchvision, weights from the torch hub cache, or NAME:PATH): softmax, the
    classification block's input as features."""

    priority = 10  # asked before timm, and claims only NAME:torchvision and the names timm lacks

    @classmethod
    def claims(cls, name: str, weights: str) -> bool:
        in_torchvision = name in torchvision_names()
        if weights == WEIGHTS_TAG and not in_torchvision:
            raise UnknownArchitecture(f"{name!r} is not a torchvision classification model; "
                                      "see torchvision.models.list_models()")
        return in_torchvision and (weights == WEIGHTS_TAG or not import_timm().is_model(name))

    @classmethod
    def known_names(cls) -> list[str]:
        return torchvision_names()

    @classmethod
    def from_spec(cls, name: str, weights: str, device: str) -> "TorchvisionObserver":
        return cls(name, weights or None, device)

    def __init__(self, name: str, weights: str | None, device: str):
        loaded = load_torchvision(name, weights)
        super().__init__(loaded.model, loaded.observer_id, {"model": f"torchvision/{name}",
                                                            "weights": loaded.weights_source,
                                                            **({"head": loaded.head} if loaded.head else {})},
                         loaded.data_config, device, fold_batch_norm=True)
        self.classes = loaded.classes
        self.head = _feature_layer(self.model, name)
        self.head.register_forward_hook(self._keep_head_input)
        self._head_input = None

    def _keep_head_input(self, module, inputs, output) -> None:
        self._head_input = inputs[0]

    def forward(self, images, kinds):
        logits = self.model(images)
        out = {}
        if "probabilities" in kinds:
            out["probabilities"] = logits.float().softmax(dim=-1)
        if "features" in kinds:
            out["features"] = self._head_input.float().flatten(1)
        self._head_input = None
        return out


HEAD_NAMES = ("classifier", "fc", "heads", "head")
"""torchvision's names of a model's classification block."""


def _feature_layer(model, name: str):
    """The classification block, whose input is the oddity features: what the model gives with the block
    removed, as the DiST authors' evaluation (``classifier = Identity``; every layer but ``fc``). For
    AlexNet and VGG that is the flattened pool5 map (their ``classifier`` holds fc6, fc7 and fc8), for
    ResNet and ViT the penultimate vector. A model without such a block: its last linear layer."""
    import torch

    for attribute in HEAD_NAMES:
        block = getattr(model, attribute, None)
        if isinstance(block, torch.nn.Module):
            return block
    linear = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if linear:
        return linear[-1]
    raise ModelError(f"torchvision model {name!r} has no classifier block or linear layer to take features from")


def cached_torchvision_models() -> list[dict]:
    """torchvision models whose weights the torch hub cache holds now."""
    rows = []
    for name in torchvision_names():
        try:
            filename = weights_filename(name)
        except (ValueError, AttributeError):  # an architecture without registered weights
            continue
        if torch_hub_file(filename) is not None:
            rows.append({"spec": f"{name}:{WEIGHTS_TAG}", "source": "torch hub cache", "file": filename})
    return rows
