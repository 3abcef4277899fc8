"""Shared fixtures: the ../shared data (skip on a user's machine, fail under CI) and real photos."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_root() -> Path | None:
    """``CUEBENCH_SHARED`` or ``../shared`` beside the repository, if it exists."""
    env = os.environ.get("CUEBENCH_SHARED")
    candidate = Path(env) if env else REPO.parent / "shared"
    return candidate if candidate.is_dir() else None


@pytest.fixture(scope="session")
def shared() -> Path:
    root = shared_root()
    if root is None:
        reason = "../shared (or CUEBENCH_SHARED) is missing: the published data sets are not available"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason + " and CI=true requires it")
        pytest.skip(reason)
    return root


@pytest.fixture(scope="session")
def photos() -> dict[str, np.ndarray]:
    """scikit-image's real photos, resized to 224x224 by the project's one policy."""
    from stimuli.sources import default_images, fit_to_stimulus

    return {img.name: fit_to_stimulus(img.read()) for img in default_images()}
