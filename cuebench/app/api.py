"""The Python API of the app layer: ``from cuebench.app.api import build`` wires a stimulus design to the
model loading that texture synthesis needs, as the command line does.

It lives above every stage, like ``cuebench.app.cli``; it is not ``cuebench.build`` because the core
package (``cuebench/__init__.py``) imports no stage, and ``stimuli`` itself imports the core.
"""

from __future__ import annotations

from pathlib import Path

from stimuli.designs import build_experiment
from stimuli.options import BuildOptions, DesignOptions


def build(design: str, *, out: str | Path, options: DesignOptions | None = None, **common):
    """Build ``design`` into ``out``: ``options`` is the design's own options model (its defaults when
    left out), ``common`` the options every design takes (``images``, ``labels``, ``seed``, ``on_error``,
    ``practice``, ``timing``, ...; see ``stimuli.options.BuildOptions``). Returns the ``Experiment``."""
    from .feature_nets import load_feature_net

    return build_experiment(design, out, options, BuildOptions(**common), feature_net_loader=load_feature_net)
