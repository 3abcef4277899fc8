"""Segmentation models as observers: a class for every pixel (Heinert et al., paper 000, Sec. IV-B).

A segmentation observer gives the output kind ``segmentation``: for each image of a batch the
index of its most probable class at every pixel, over its own named ``classes``, flattened to
one row (n, H * W) at the stimulus' resolution. The ``segment`` decision rule scores it against
the trial's label mask (``model_eval.decisions.SegmentConfusion``).

Three ways in, all through ``--model NAME[:WEIGHTS]``:

- torchvision's segmentation models by name (``fcn_resnet50``, ``deeplabv3_resnet50``,
  ``lraspp_mobilenet_v3_large``, ...): ``NAME`` reads torchvision's weights from the torch hub
  cache (21 VOC classes), ``NAME:PATH`` a state dict of the architecture trained for the classes
  its sidecar ``PATH.json`` names (never downloaded);
- ``segmenter:PATH``: any module saved with TorchScript (``torch.jit.save``) that maps a
  normalised batch (n, 3, H, W) to per-pixel logits (n, K, h, w), with the sidecar ``PATH.json``;
- a plug-in class through the ``cuebench.observers`` entry point whose ``outputs`` gives
  ``segmentation`` (``docs/models.md`` shows a Hugging Face SegFormer adapter).

The sidecar JSON: ``{"classes": [...], "mean": [...], "std": [...], "window": [h, w],
"stride": [h, w]}``; only ``classes`` is required (mean and std default to ImageNet's). With a
``window`` the image is segmented in overlapping crops whose logits are averaged where they
overlap (mmsegmentation's "slide" mode); without one, whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..models import ModelError, UnknownArchitecture, WeightsNotFound, load_fitting, owned_keys, read_checkpoint, \
    sha256_file
from .module import ModuleObserver
from .torchvision_models import hub_checkpoints, import_torchvision, torch_hub_file

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def read_sidecar(path: Path) -> dict:
    """The JSON beside a checkpoint (``model.pt`` -> ``model.json``): classes, normalisation, window."""
    sidecar = path.with_suffix(".json")
    try:
        data = json.loads(sidecar.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WeightsNotFound(f"{sidecar} is missing: a segmentation checkpoint names its classes there "
                              '({"classes": ["road", ...]})') from None
    except json.JSONDecodeError as err:
        raise ModelError(f"{sidecar}: not valid JSON at line {err.lineno}: {err.msg}") from None
    classes = data.get("classes") if isinstance(data, dict) else None
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) for c in classes):
        raise ModelError(f"{sidecar}: 'classes' must be a non-empty list of class names")
    for key in ("window", "stride"):
        value = data.get(key)
        if value is not None and not (isinstance(value, list) and len(value) == 2
                                      and all(isinstance(v, int) and v > 0 for v in value)):
            raise ModelError(f"{sidecar}: {key!r} must be [height, width] in pixels, got {value!r}")
    if data.get("stride") and not data.get("window"):
        raise ModelError(f"{sidecar}: a 'stride' needs a 'window'")
    return data


def windows(size: int, window: int, stride: int) -> list[int]:
    """Start offsets of crops of ``window`` every ``stride`` pixels, the last one flush with the border."""
    if window >= size:
        return [0]
    starts = list(range(0, size - window, stride))
    return starts + [size - window]


class SegmentationObserver(ModuleObserver):
    """A module giving per-pixel logits; answers ``segmentation`` (argmax class per pixel)."""

    def __init__(self, model, observer_id: str, provenance: dict, classes: list[str], device: str,
                 mean=IMAGENET_MEAN, std=IMAGENET_STD, window=None, stride=None):
        data_config = {"input_size": (3, 0, 0), "mean": tuple(mean), "std": tuple(std)}
        super().__init__(model, observer_id, {**provenance, "inference": self.describe(window, stride)}, data_config,
                         device)
        self.classes = tuple(classes)
        self.window = tuple(window) if window else None
        self.stride = tuple(stride or window) if window else None

    @staticmethod
    def describe(window, stride) -> str:
        if not window:
            return "whole image"
        return f"sliding window {window[0]}x{window[1]}, stride {(stride or window)[0]}x{(stride or window)[1]}"

    def logits(self, images):
        """(n, K, H, W) logits at the input's size: the module's output upsampled bilinearly."""
        import torch.nn.functional as F

        out = self.model(images)
        if isinstance(out, dict):  # torchvision's segmentation models return {"out": ..., "aux": ...}
            out = out["out"]
        if out.ndim != 4 or out.shape[1] != len(self.classes):
            raise ModelError(f"observer {self.observer_id} returned {tuple(out.shape)} for {tuple(images.shape)}; "
                             f"expected logits (n, {len(self.classes)}, h, w) over its classes")
        if out.shape[-2:] != images.shape[-2:]:
            out = F.interpolate(out.float(), size=images.shape[-2:], mode="bilinear", align_corners=False)
        return out

    def sliding_logits(self, images):
        """Logits averaged over overlapping windows (mmsegmentation's "slide" inference)."""
        import torch

        n, _, height, width = images.shape
        total = torch.zeros((n, len(self.classes), height, width), device=images.device)
        count = torch.zeros((1, 1, height, width), device=images.device)
        wh, ww = min(self.window[0], height), min(self.window[1], width)
        for top in windows(height, wh, self.stride[0]):
            for left in windows(width, ww, self.stride[1]):
                total[:, :, top:top + wh, left:left + ww] += self.logits(images[:, :, top:top + wh, left:left + ww])
                count[:, :, top:top + wh, left:left + ww] += 1
        return total / count

    def forward(self, images, kinds: frozenset[str]) -> dict[str, Any]:
        if kinds - {"segmentation"}:
            raise ModelError(f"observer {self.observer_id} segments images; it gives no "
                             f"{', '.join(sorted(kinds - {'segmentation'}))}")
        logits = self.sliding_logits(images) if self.window else self.logits(images)
        return {"segmentation": logits.argmax(dim=1).flatten(1)}


def segmentation_names() -> list[str]:
    """torchvision's segmentation architectures."""
    models = import_torchvision().models
    return models.list_models(module=models.segmentation)


class TorchvisionSegmentation(SegmentationObserver):
    """A torchvision segmentation model (weights from the torch hub cache, or NAME:PATH with PATH.json)."""

    priority = 20  # its names are no classifier's

    @classmethod
    def claims(cls, name: str, weights: str) -> bool:
        return name in segmentation_names()

    @classmethod
    def known_names(cls) -> list[str]:
        return segmentation_names()

    @classmethod
    def from_spec(cls, name: str, weights: str, device: str) -> "TorchvisionSegmentation":
        models = import_torchvision().models
        entry = models.get_model_weights(name).DEFAULT
        if not weights:
            filename = Path(entry.url).name
            path = torch_hub_file(filename)
            if path is None:
                raise WeightsNotFound(
                    f"no weights for {name!r} here: looked for {filename} in the torch hub cache "
                    f"({hub_checkpoints()}); fetch it once with `python -c \"import torchvision; torchvision.models.get_model('{name}', "
                    f"weights='DEFAULT')\"`, or give a trained state dict as {name}:PATH with PATH.json naming its "
                    "classes")
            model = models.get_model(name, weights=entry)
            classes, sidecar = list(entry.meta["categories"]), {}
            source, tag = f"torch-hub:{path.name} (sha256 {sha256_file(path)})", "torchvision"
        else:
            path = Path(weights).expanduser()
            sidecar = read_sidecar(path)
            classes = sidecar["classes"]
            state = read_checkpoint(path).state
            aux = any(k.startswith("aux_classifier.") for k in state)
            model = models.get_model(name, weights=None, weights_backbone=None, num_classes=len(classes),
                                     **({"aux_loss": True} if aux else {}))
            load_fitting(model, owned_keys(state, model.state_dict()), path, name)
            digest = sha256_file(path)
            source, tag = f"file:{path.name} (sha256 {digest})", f"file-{digest[:12]}"
        return cls(model, f"{name}:{tag}", {"model": f"torchvision/{name}", "weights": source}, classes, device,
                   sidecar.get("mean", IMAGENET_MEAN), sidecar.get("std", IMAGENET_STD), sidecar.get("window"),
                   sidecar.get("stride"))


class ScriptedSegmenter(SegmentationObserver):
    """Any TorchScript module giving per-pixel logits: segmenter:PATH, classes in PATH.json."""

    priority = 20  # the name is its own

    @classmethod
    def claims(cls, name: str, weights: str) -> bool:
        return name == "segmenter"

    @classmethod
    def known_names(cls) -> list[str]:
        return ["segmenter"]

    @classmethod
    def from_spec(cls, name: str, weights: str, device: str) -> "ScriptedSegmenter":
        import torch

        if not weights:
            raise UnknownArchitecture("segmenter needs its TorchScript file: --model segmenter:PATH (classes in "
                                      "PATH.json)")
        path = Path(weights).expanduser()
        if not path.is_file():
            raise WeightsNotFound(f"TorchScript file {path} does not exist")
        sidecar = read_sidecar(path)
        try:
            model = torch.jit.load(str(path), map_location="cpu")
        except RuntimeError as err:
            raise ModelError(f"{path} is not a TorchScript module (save one with torch.jit.save(torch.jit.script("
                             f"model), PATH)): {str(err).splitlines()[0]}") from None
        digest = sha256_file(path)
        return cls(model, f"segmenter:{path.stem}-{digest[:12]}", {"model": "torchscript", "weights":
                                                                   f"file:{path.name} (sha256 {digest})"},
                   sidecar["classes"], device, sidecar.get("mean", IMAGENET_MEAN), sidecar.get("std", IMAGENET_STD),
                   sidecar.get("window"), sidecar.get("stride"))
