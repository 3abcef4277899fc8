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

from ..build import BuildError, stimulus_seed
from cuebench.trials import Experiment
from .common import grid_experiment

CORRUPTION_FN = "stimuli.corruptions:corruption_task"


def add_arguments(parser) -> None:
    from ..corruptions import CORRUPTIONS

    group = parser.add_argument_group("corruptions design")
    group.add_argument("--corruptions", default=",".join(CORRUPTIONS),
                       help=f"comma-separated corruptions (default: all of {', '.join(CORRUPTIONS)})")


def intensity(value: float) -> float | str:
    """A grid value as JSON can hold it: infinity (high pass level 0) as the string 'inf'."""
    return "inf" if math.isinf(value) else value


def arms(names: list[str]) -> list[tuple[str, int, dict]]:
    """(corruption, level, params) for every corrupted version of one image."""
    from ..corruptions import CORRUPTIONS

    unknown = [n for n in names if n not in CORRUPTIONS]
    if unknown or not names:
        raise BuildError(f"unknown corruption {unknown[0] if unknown else '(none given)'!r}; "
                         f"known: {', '.join(CORRUPTIONS)}")
    return [(name, level, {CORRUPTIONS[name].param: intensity(value)})
            for name in names for level, value in enumerate(CORRUPTIONS[name].grid)]


def build(args, expdir) -> Experiment:
    plan = arms([c.strip() for c in args.corruptions.split(",") if c.strip()])
    return grid_experiment(args, expdir, "corruptions", plan, CORRUPTION_FN,
                           lambda source, name, params: stimulus_seed(args.seed, source, name, params),
                           original_trials=False)
