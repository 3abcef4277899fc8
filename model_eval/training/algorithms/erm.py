"""ERM: empirical risk minimisation, the shared step as it is (the baseline of BiasBed, Kalischek et al. 2023)."""

from __future__ import annotations

from .base import Algorithm


class ERM(Algorithm):
    """Empirical risk minimisation (ERM): one cross-entropy step per batch."""
