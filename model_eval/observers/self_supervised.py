"""Self-supervised timm models without a classifier (DINO, MAE, ...) as feature-only observers.

Wen et al. (2024, Table 1) evaluate ViT-B trained with DINO (Caron et al. 2021) and with MAE
(He et al. 2022) on DiST from "a feature vector F(I_i) from the final layer" (Sec. 3.2): here
the [CLS] token after the last block and the final norm, which is what timm's
``forward_head(pre_logits=True)`` gives for these architectures (``global_pool="token"``).
Such a model has no classes, so it answers oddity trials only; a classification trial is
refused with that reason instead of a softmax over feature dimensions.
"""

from __future__ import annotations

from ..models import ModelError
from ..torch_compat import import_timm
from .timm_models import TimmObserver


def feature_only(name: str) -> bool:
    """Whether timm's pretrained tag of ``name`` has no classifier (``num_classes`` 0): DINO's, MAE's."""
    timm = import_timm()
    if "." not in name or not timm.is_model(name):
        return False
    cfg = timm.models.get_pretrained_cfg(name)
    return cfg is not None and cfg.num_classes == 0


class FeatureOnlyObserver(TimmObserver):
    """A timm self-supervised model without a classifier (vit_base_patch16_224.mae[:WEIGHTS], ...): final-layer [CLS] features, oddity trials only."""

    priority = 5  # before timm, which would otherwise give a softmax over the feature dimensions

    @classmethod
    def claims(cls, name: str, weights: str) -> bool:
        return feature_only(name)

    @classmethod
    def known_names(cls) -> list[str]:
        return [name for name in import_timm().list_models(pretrained=True) if feature_only(name)]

    def __init__(self, spec: str, device: str):
        super().__init__(spec, device)
        self.provenance["features"] = "final-layer [CLS] token after the last norm (forward_head pre_logits)"

    def forward(self, images, kinds):
        if "probabilities" in kinds:
            raise ModelError(f"observer {self.observer_id} is self-supervised and has no classifier: it gives features "
                             "only, so it answers oddity trials (DiST) but not classification trials")
        return super().forward(images, kinds)
