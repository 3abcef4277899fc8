"""Corruption experiments for the robustness side of cue decomposition (Heinert et al.,
paper 000, Sec. IV: R_cd is compared with the relative accuracy under contrast
reduction, high pass, low pass, uniform noise and phase noise): each source image under
each corruption at each intensity of the Geirhos et al. (2018) / model-vs-human grids.

Conditions are the corruption names, ``level`` is the position on the grid (0 = the
weakest) and ``params`` hold the intensity; the arms rotate over participant groups as a
Latin square, so a person sees each image once.
"""

from __future__ import annotations

import math

from pydantic import Field

from cuebench.trials import Experiment
from ..build import BuildError, stimulus_seed
from ..options import STUDY_OPTIONS, DesignOptions
from . import Design
from .common import grid_experiment

CORRUPTION_FN = "stimuli.corruptions:corruption_task"
HEINERT_ORDER = ("contrast", "low_pass", "high_pass", "uniform_noise", "phase_noise")
"""The corruptions of Heinert et al. Sec. IV, in the order the paper lists them."""


class CorruptionsOptions(DesignOptions):
    """Options of the corruptions design."""

    corruptions: str = Field(",".join(HEINERT_ORDER), description="comma-separated corruptions "
                                                                  "(`cuebench list corruptions`)")


def intensity(value: float) -> float | str:
    """A grid value as JSON can hold it: infinity (high pass level 0) as the string 'inf'."""
    return "inf" if math.isinf(value) else value


def arms(names: list[str]) -> list[tuple[str, int, dict]]:
    """(corruption, level, params) for every corrupted version of one image."""
    from ..corruptions import CORRUPTIONS

    if not names:
        raise BuildError("--corruptions names no corruption")
    return [(name, level, {CORRUPTIONS[name].param: intensity(value)})
            for name in names for level, value in enumerate(CORRUPTIONS[name].grid)]


class Corruptions(Design):
    """Robustness (Heinert et al. Sec. IV): each photo under each corruption at each intensity of its grid."""

    Options = CorruptionsOptions
    study_options = STUDY_OPTIONS

    def build(self, request) -> Experiment:
        seed = request.common.seed
        plan = arms([c.strip() for c in request.options.corruptions.split(",") if c.strip()])
        return grid_experiment(request, plan, CORRUPTION_FN,
                               lambda source, name, params: stimulus_seed(seed, source, name, params),
                               original_trials=False)
