"""Published values the report draws as labelled references, each only for the design it belongs to.

Burgert, Stoll, Rota & Demir (2025), Table 3: relative accuracy (accuracy under
suppression / accuracy on the originals) per suppressed feature, and the absolute
accuracy on the originals, for their 20 human participants and 12 models on the
ImageNet16 images (16 classes). Each feature was suppressed by one fixed transform:
global shape = patch shuffle, grid 3; local shape = patch shuffle, grid 6; texture =
bilateral filter d = 12, sigma_colour = 170; colour = full grayscale (alpha 1).
"""

from __future__ import annotations

import pandas as pd

BURGERT2025_LABEL = "published human data, Burgert et al. 2025, Table 3"

# feature -> (condition, parameters of the transform used)
BURGERT2025_FEATURES = {
    "global_shape": ("patch_shuffle", {"grid": 3}),
    "local_shape": ("patch_shuffle", {"grid": 6}),
    "texture": ("bilateral", {"d": 12, "sigma_color": 170}),
    "color": ("grayscale", {"alpha": 1.0}),
}

# observer -> (global shape, local shape, texture, colour, original accuracy)
BURGERT2025_TABLE3 = {
    "Humans": (0.965, 0.763, 0.979, 0.999, 0.969),
    "ResNet50-standard": (0.832, 0.276, 0.795, 0.924, 0.954),
    "ResNet50-sota": (0.943, 0.618, 0.867, 0.948, 0.931),
    "ConvNeXt": (0.938, 0.606, 0.910, 0.961, 0.934),
    "ConvNeXtV2": (0.949, 0.647, 0.925, 0.969, 0.940),
    "EfficientNet": (0.870, 0.240, 0.892, 0.987, 0.856),
    "EfficientNetV2": (0.926, 0.423, 0.897, 0.957, 0.932),
    "MobileNetV3": (0.795, 0.217, 0.761, 0.859, 0.881),
    "ConvMixer": (0.920, 0.437, 0.815, 0.891, 0.874),
    "ViT": (0.930, 0.636, 0.921, 0.977, 0.929),
    "DeiT": (0.938, 0.730, 0.926, 0.969, 0.932),
    "Swin": (0.924, 0.713, 0.906, 0.941, 0.945),
    "CLIP ViT": (0.959, 0.758, 0.949, 0.984, 0.936),
}

REFERENCES = ("burgert2025",)

GEIRHOS2019_LABEL = "published data, Geirhos et al. 2019, cue-conflict experiment"
GEIRHOS2019_SHAPE_BIAS = {"Humans (mean of 10)": 0.958, "AlexNet": 0.429, "GoogLeNet": 0.312, "VGG-16": 0.172}
"""Shape bias (shape / (shape + texture) decisions) in the raw data released with Geirhos et al. 2019
(Fig. 4): the mean of the 10 participants' shape biases, and the three ImageNet CNNs. Shown in cue-conflict
reports only (the report's reference switch ``--reference none`` hides it with the Burgert table)."""


def burgert2025_table3() -> pd.DataFrame:
    """Table 3 as rows ``observer, observer_kind, feature, condition, params, relative_accuracy`` plus the
    originals' accuracy (``feature == "original"``, column ``accuracy``)."""
    rows = []
    for observer, values in BURGERT2025_TABLE3.items():
        kind = "human" if observer == "Humans" else "model"
        for (feature, (condition, params)), value in zip(BURGERT2025_FEATURES.items(), values[:4]):
            rows.append({"observer": observer, "observer_kind": kind, "feature": feature, "condition": condition,
                         "params": params, "relative_accuracy": value, "accuracy": None})
        rows.append({"observer": observer, "observer_kind": kind, "feature": "original", "condition": "original",
                     "params": {}, "relative_accuracy": 1.0, "accuracy": values[4]})
    return pd.DataFrame(rows)


def burgert2025_applies(conditions) -> bool:
    """Whether Table 3 speaks about an experiment with these conditions: it measured patch shuffle, the
    bilateral filter and grayscale, so a report of other suppressions (corruptions, blur) leaves it out."""
    return bool({condition for condition, _ in BURGERT2025_FEATURES.values()} & set(conditions))


def burgert2025_humans() -> pd.DataFrame:
    """The human row of Table 3 only: what the report draws as the published human reference."""
    table = burgert2025_table3()
    return table[table["observer"] == "Humans"].reset_index(drop=True)


def geirhos2019_shape_bias() -> pd.DataFrame:
    """The published shape biases as rows ``observer, shape_bias, source``."""
    return pd.DataFrame({"observer": list(GEIRHOS2019_SHAPE_BIAS), "shape_bias": list(GEIRHOS2019_SHAPE_BIAS.values()),
                         "source": GEIRHOS2019_LABEL})

