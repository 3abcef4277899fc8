"""DiSTinguish (Wen et al. 2024): each class and its structure-disrupted twin as 2n classes."""

from __future__ import annotations

import torch

from .base import Algorithm


class DiSTinguish(Algorithm):
    """DiSTinguish (Wen et al. 2024): each class and its structure-disrupted twin as 2n classes.

    Sec. 3.3: n original classes plus their structure-disrupted versions as n more classes, one 2n-way
    cross-entropy L = -sum_{i=1}^{2n} y_i log p_i. The step is
    ERM's; the difference is the data (``distinguish_labels``), the head (``output_classes``) and the
    answer (``answer_logits``: each class's logit plus its disrupted twin's)."""

    @staticmethod
    def output_classes(n_classes: int) -> int:
        return 2 * n_classes

    @staticmethod
    def answer_logits(logits: torch.Tensor, n_classes: int) -> torch.Tensor:
        """z'_i = z_i + z_{i+n}, i = 1..n (Wen et al. 2024, Sec. 3.3): the evidence for a class counts
        whether the network saw it as the original or as the structure-disrupted version."""
        if logits.shape[1] != 2 * n_classes:
            raise ValueError(f"DiSTinguish answers from 2n = {2 * n_classes} logits, got {logits.shape[1]}")
        return logits[:, :n_classes] + logits[:, n_classes:]


def distinguish_labels(labels: torch.Tensor, disrupted: torch.Tensor, n_classes: int) -> torch.Tensor:
    """2n-way labels (Wen et al. 2024, Fig. 4): class k stays k for originals, disrupted images get n + k."""
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= n_classes):
        raise ValueError(f"labels must lie in 0..{n_classes - 1}")
    return labels + n_classes * disrupted.to(labels.dtype)
