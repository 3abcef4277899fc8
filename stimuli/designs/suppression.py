"""Feature-suppression experiments (Burgert et al. 2025): each source image, unchanged and
under each suppression condition at each level of its parameter grid.

``--grid full`` takes every level of every condition (the model study, Sec. 5);
``--grid human`` the four settings of the human study (Sec. 4.2: patch shuffle g=3 and
g=6, bilateral d=12/sigma_c=170/sigma_s=75, grayscale) beside the originals, which rotate
over groups of five participants as a Latin square.
"""

from __future__ import annotations

from ..build import stimulus_seed
from cuebench.trials import Experiment
from .common import grid_experiment

DEFAULT_CONDITIONS = ("patch_shuffle", "patch_rotation", "bilateral", "gaussian_blur", "grayscale",
                      "channel_shuffle", "grid_overlay")
SUPPRESS_FN = "stimuli.suppression:suppress"


def add_arguments(parser) -> None:
    group = parser.add_argument_group("suppression design")
    group.add_argument("--conditions", default=",".join(DEFAULT_CONDITIONS),
                       help="comma-separated suppression conditions; 'a+b' suppresses two cues jointly "
                            f"(default: {','.join(DEFAULT_CONDITIONS)})")
    group.add_argument("--grid", choices=("full", "human"), default="full",
                       help="every level of each condition's parameter grid, or the human-study settings")
    group.add_argument("--adaptive", action="append", default=[], metavar="COND:TRIALS[:MEAN:SD]",
                       help="measure COND adaptively with QUEST+ over its grid, TRIALS answers per observer "
                            "(optional normal prior on the threshold in the grid's units); repeatable")


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


def build(args, expdir) -> Experiment:
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    return grid_experiment(args, expdir, "suppression", arms(conditions, args.grid), SUPPRESS_FN,
                           lambda source, cond, params: _seed(args.seed, source, cond, params), original_trials=True)
