"""Named label sets shared by designs, runners and models."""

IMAGENET16 = ("airplane", "bear", "bicycle", "bird", "boat", "bottle", "car", "cat",
              "chair", "clock", "dog", "elephant", "keyboard", "knife", "oven", "truck")
"""The 16 entry-level classes of Geirhos et al. (2019) / model-vs-human ("16-class-ImageNet")."""
IMAGENET16_NAME = "imagenet16"
