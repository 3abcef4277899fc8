"""From a stimulus file to the tensor a model sees, following the model's timm data config.

Two policies for stimuli that are already 224 x 224:

- ``as-is`` (default, model-vs-human's convention): the stimulus pixels are fed unchanged,
  only scaled to [0, 1] and normalised with the model's mean and std; the model sees
  exactly what a person saw. All stimuli of an experiment must share one size.
- ``resize-crop``: the model's own evaluation transform (timm
  ``transforms_imagenet_eval``: resize to input_size / crop_pct, centre crop to input_size,
  with the config's interpolation), as for ImageNet validation images.

Decoding (Pillow) and resizing happen in DataLoader workers and yield uint8 tensors;
normalisation happens on the model's device, where it is cheap and the copy to a GPU is
four times smaller. Both steps are deterministic.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from cuebench.errors import CuebenchError
from stimuli.sources import decode_image

from .torch_compat import import_timm

POLICIES = ("as-is", "resize-crop")
DEFAULT_POLICY = "as-is"


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
    """uint8 batch (n, 3, H, W) on the device -> float batch normalised with the config's mean and std."""

    def __init__(self, data_config: dict, device: str, channels_last: bool = False):
        import torch

        self.channels_last = channels_last
        self.mean = torch.tensor(data_config["mean"], device=device).view(1, 3, 1, 1) * 255.0
        self.inv_std = 1.0 / (torch.tensor(data_config["std"], device=device).view(1, 3, 1, 1) * 255.0)

    def __call__(self, batch):
        import torch

        x = (batch.float() - self.mean) * self.inv_std
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x


def preprocess_paths(paths, data_config: dict, policy: str = DEFAULT_POLICY, device: str = "cpu"):
    """A normalised float batch from image files, in one call (tests, notebooks, the benchmark)."""
    import torch

    to_tensor = ToUint8Tensor(data_config, policy)
    batch = torch.stack([to_tensor(p) for p in paths]).to(device)
    return Normalise(data_config, device)(batch)
