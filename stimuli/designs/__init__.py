"""Experiment designs that ``cuebench stimuli build --design NAME`` can make.

Each design module exposes ``add_arguments(parser)`` for its own options (it may add
none) and ``build(args, expdir) -> Experiment``, and imports heavy libraries only inside
``build``. The registry maps design names to modules so the command line can list them
without importing torch.
"""

from __future__ import annotations

import importlib

DESIGNS: dict[str, str] = {
    "suppression": "stimuli.designs.suppression",
    "cue-conflict-import": "stimuli.designs.imports",
    "dist-import": "stimuli.designs.imports",
    "cue-decomposition": "stimuli.designs.cue_decomposition",
    "cue-conflict-eed": "stimuli.designs.cue_conflict_eed",
    "corruptions": "stimuli.designs.corruptions",
    "dist": "stimuli.designs.dist",
    "diagvib": "stimuli.designs.diagvib",
}


def design_module(name: str):
    from ..build import BuildError

    if name not in DESIGNS:
        raise BuildError(f"unknown design {name!r}; known designs: {', '.join(DESIGNS)}")
    return importlib.import_module(DESIGNS[name])


def all_modules() -> list:
    """Every design module, each once, in registry order (the importers share one)."""
    return [importlib.import_module(path) for path in dict.fromkeys(DESIGNS.values())]
