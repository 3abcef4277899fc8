"""From a stimulus file to the tensor a model sees, following the model's timm data config.

Two policies for stimuli that are already 224 x 224:

- ``as-is`` (default, model-vs-human's convention): the stimulus pixels are fed unchanged,
  only scaled to [0, 1] and normalised with the model's mean and std; the model sees
  exactly what a person saw. All stimuli of an experiment must share one size.
- ``resize-crop``: the model's own evaluation transform (timm
  ``transforms_imagenet_eval``: resize to input_size / crop_pct, centre crop to input_size,
  with the config's interpolation), as for ImageNet validation images.

``cuebench eval`` decodes each stimulus once into uint8 arrays (``stimulus_cache.py``) and
``DevicePreprocess`` resizes, crops and normalises whole batches on the model's device,
where it is cheap and the copy to a GPU is four times smaller than floats.
``ToUint8Tensor`` is the per-image Pillow path (timm's own transform), kept as the
reference the device path is checked against and for one-off use. Both are deterministic.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from cuebench.errors import CuebenchError
from cuebench.images import decode_image

from .torch_compat import import_timm

POLICIES = ("as-is", "resize-crop")
DEFAULT_POLICY = "as-is"
DEFAULT_CROP_PCT = 0.875
"""timm's default when a data config has no crop_pct."""


class PreprocessError(CuebenchError):
    """A preprocessing policy cannot be applied to these stimuli."""


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise PreprocessError(f"unknown preprocessing policy {policy!r}; choose one of {', '.join(POLICIES)}")
    return policy


class ToUint8Tensor:
    """Picklable callable for DataLoader workers: image path -> uint8 tensor (3, H, W)."""

    def __init__(self, data_config: dict, policy: str = DEFAULT_POLICY):
        self.policy = check_policy(policy)
        self.resize_crop = None
        if policy == "resize-crop":
            timm = import_timm()
            self.resize_crop = timm.data.transforms_factory.transforms_imagenet_eval(
                img_size=tuple(data_config["input_size"][1:]), crop_pct=data_config.get("crop_pct"),
                crop_mode=data_config.get("crop_mode"), interpolation=data_config.get("interpolation", "bicubic"),
                normalize=False)

    def __call__(self, path):
        import torch

        pixels = decode_image(path)
        if self.resize_crop is not None:
            return self.resize_crop(Image.fromarray(pixels))
        return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))


class Normalise:
    """uint8 (or whole-valued float) batch (n, 3, H, W) on the device -> float batch normalised with
    the config's mean and std, in the memory format the model runs in."""

    def __init__(self, data_config: dict, device: str, channels_last: bool = False):
        import torch

        self.channels_last = channels_last
        self.mean = torch.tensor(data_config["mean"], device=device).view(1, 3, 1, 1) * 255.0
        self.inv_std = 1.0 / (torch.tensor(data_config["std"], device=device).view(1, 3, 1, 1) * 255.0)

    def __call__(self, batch):
        import torch

        x = (batch.float() - self.mean) * self.inv_std
        return x.contiguous(memory_format=torch.channels_last if self.channels_last else torch.contiguous_format)


class DevicePreprocess:
    """Decoded uint8 batch (n, H, W, 3) on the device -> the model's normalised input, all in torch ops.

    ``as-is`` only scales and normalises. ``resize-crop`` follows timm's
    ``transforms_imagenet_eval`` step by step (crop mode ``center``: the shorter side to
    ``floor(input_size / crop_pct)`` as torchvision's ``Resize(int)`` computes it, then
    torchvision's ``CenterCrop`` offsets; ``squash``: both sides to that size) with torch's
    antialiased bilinear/bicubic kernels, which are Pillow's (cubic a = -0.5, support widened
    when shrinking), one axis at a time and rounded to whole grey levels after each, as
    Pillow's two uint8 passes are. On the scikit-image photos fewer than 0.3 % of the pixels
    differ from ``ToUint8Tensor``'s, by one or two grey levels (Pillow's fixed-point weights).
    """

    INTERPOLATIONS = ("bilinear", "bicubic")

    def __init__(self, data_config: dict, policy: str, device: str, channels_last: bool = False):
        self.policy = check_policy(policy)
        self.normalise = Normalise(data_config, device, channels_last)
        self.crop = tuple(int(v) for v in data_config["input_size"][1:])
        crop_pct = data_config.get("crop_pct") or DEFAULT_CROP_PCT
        self.scale = tuple(math.floor(v / crop_pct) for v in self.crop)
        self.crop_mode = data_config.get("crop_mode") or "center"
        self.interpolation = data_config.get("interpolation", "bicubic")
        if policy == "resize-crop":
            if self.crop_mode not in ("center", "squash"):
                raise PreprocessError(f"crop mode {self.crop_mode!r} of this model's data config is not supported "
                                      "by --policy resize-crop (center and squash are); use --policy as-is")
            if self.interpolation not in self.INTERPOLATIONS:
                raise PreprocessError(f"interpolation {self.interpolation!r} of this model's data config is not "
                                      f"supported by --policy resize-crop ({', '.join(self.INTERPOLATIONS)} are); "
                                      "use --policy as-is")

    def __call__(self, batch):
        """``batch``: uint8 (n, H, W, 3), one image size per batch."""
        x = batch.permute(0, 3, 1, 2)  # a channels-last view: no copy
        if self.policy == "resize-crop":
            x = self._resize_crop(x)
        return self.normalise(x)

    def resized_size(self, height: int, width: int) -> tuple[int, int]:
        """Size after timm's resize step for a ``height`` x ``width`` stimulus."""
        if self.crop_mode == "squash":
            return self.scale
        if self.scale[0] != self.scale[1]:  # timm ResizeKeepRatio (longest=0): the shorter side fits
            ratio = min(height / self.scale[0], width / self.scale[1])
            return round(height / ratio), round(width / ratio)
        size = self.scale[0]  # torchvision Resize(int): shorter side to size, longer one truncated
        if width <= height:
            return int(size * height / width), size
        return size, int(size * width / height)

    def _resize_crop(self, x):
        import torch.nn.functional as F

        height, width = self.resized_size(*x.shape[-2:])
        x = x.float()
        for size in ((x.shape[-2], width), (height, width)):  # Pillow: rows, then columns, each to uint8
            if size != tuple(x.shape[-2:]):
                x = F.interpolate(x, size=size, mode=self.interpolation, align_corners=False,
                                  antialias=True).round_().clamp_(0, 255)
        crop_h, crop_w = self.crop
        if crop_h > height or crop_w > width:
            raise PreprocessError(f"the {crop_h}x{crop_w} crop is larger than the {height}x{width} resized stimulus; "
                                  "use --policy as-is")
        top, left = int(round((height - crop_h) / 2.0)), int(round((width - crop_w) / 2.0))
        return x[..., top:top + crop_h, left:left + crop_w]


def preprocess_paths(paths, data_config: dict, policy: str = DEFAULT_POLICY, device: str = "cpu"):
    """A normalised float batch from image files, in one call (tests, notebooks, the benchmark)."""
    import torch

    to_tensor = ToUint8Tensor(data_config, policy)
    batch = torch.stack([to_tensor(p) for p in paths]).to(device)
    return Normalise(data_config, device)(batch)
