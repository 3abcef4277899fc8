"""The Python API of the app layer, offered as ``cuebench.build``: a stimulus design wired to the model
loading that texture synthesis needs, as the command line does.

It lives above every stage, like ``cuebench_app.cli``; the ``cuebench`` namespace forwards to it on
first use (``cuebench/__init__.py``), so importing the core never imports a stage.
"""

from __future__ import annotations

import os
from pathlib import Path

from stimuli.designs import build_experiment
from stimuli.options import BuildOptions, DesignOptions


def build(design: str, *, out: str | Path | None = None, options: DesignOptions | None = None, **common):
    """Build ``design`` into the experiment directory ``out`` (default: a folder named after the design in
    the working folder) and return the ``Experiment``. ``options`` is the design's own options model (its
    defaults when left out); ``common`` the options every design takes (``images``, ``labels``, ``seed``,
    ``on_error``, ``practice``, ``timing``, ...; see ``stimuli.options.BuildOptions``), where ``images`` and
    ``labels`` may be paths. Bad options are one-line ``OptionError``s naming the option."""
    from .feature_nets import load_feature_net

    common = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in common.items()}
    return build_experiment(design, Path(design) if out is None else out, options, BuildOptions(**common),
                            feature_net_loader=load_feature_net)
