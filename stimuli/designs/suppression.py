"""Feature-suppression experiments (Burgert et al. 2025): each source image, unchanged and
under each suppression condition at each level of its parameter grid.

``--grid full`` takes every level of every condition (the model study, Sec. 5);
``--grid human`` the four settings of the human study (Sec. 4.2: patch shuffle g=3 and
g=6, bilateral d=12/sigma_c=170/sigma_s=75, grayscale) beside the originals, which rotate
over groups of five participants as a Latin square.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from cuebench.trials import Experiment
from ..build import stimulus_seed
from ..options import STUDY_OPTIONS, DesignOptions, OptionError
from . import Design
from .common import grid_experiment

DEFAULT_CONDITIONS = ("patch_shuffle", "patch_rotation", "bilateral", "gaussian_blur", "grayscale",
                      "channel_shuffle", "grid_overlay")
SUPPRESS_FN = "stimuli.suppression:suppress"


class SuppressionOptions(DesignOptions):
    """Options of the suppression design."""

    conditions: str = Field(",".join(DEFAULT_CONDITIONS),
                            description="comma-separated suppression conditions; 'a+b' suppresses two cues jointly")
    grid: Literal["full", "human"] = Field("full", description="every level of each condition's parameter grid, "
                                                               "or the human-study settings")
    adaptive: list[str] = Field([], description="COND:TRIALS[:MEAN:SD]: measure COND adaptively with QUEST+ over "
                                                "its grid, TRIALS answers per observer (optional normal prior on "
                                                "the threshold in the grid's units); repeatable")

    @model_validator(mode="after")
    def _grid_human_takes_no_conditions(self) -> "SuppressionOptions":
        if self.grid == "human" and "conditions" in self.model_fields_set:
            raise OptionError("--grid human shows the four settings of Burgert et al.'s human study and takes no "
                              "--conditions; drop --conditions, or use --grid full")
        return self

    def condition_names(self) -> list[str]:
        return [c.strip() for c in self.conditions.split(",") if c.strip()]


def arms(conditions: list[str], grid: str) -> list[tuple[str, int | None, dict]]:
    """(condition, level, params) for every suppressed version of one image; ``level`` is
    the setting's index on its condition's grid."""
    from ..suppression import HUMAN_STUDY, get_condition

    if grid == "human":
        out = []
        for _, name, params in HUMAN_STUDY:
            if name == "original":
                continue
            cond_grid = get_condition(name).grid
            out.append((name, cond_grid.index(params) if params in cond_grid else None, params))
        return out
    return [(name, level, params) for name in conditions
            for level, params in enumerate(get_condition(name).grid)]


def _seed(seed: int, source: str, condition: str, params: dict) -> int:
    """Stochastic conditions get a per-stimulus seed; deterministic ones seed 0, so their
    stimuli (and content addresses) do not change with ``--seed``."""
    from ..suppression import get_condition

    return stimulus_seed(seed, source, condition, params) if get_condition(condition).stochastic else 0


class Suppression(Design):
    """Feature suppression (Burgert et al. 2025): each photo unchanged and under each condition and level."""

    Options = SuppressionOptions
    study_options = STUDY_OPTIONS

    def build(self, request) -> Experiment:
        options, seed = request.options, request.common.seed
        return grid_experiment(request, arms(options.condition_names(), options.grid), SUPPRESS_FN,
                               lambda source, cond, params: _seed(seed, source, cond, params), original_trials=True,
                               adaptive_specs=options.adaptive)
