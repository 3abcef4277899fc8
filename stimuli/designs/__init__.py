"""Experiment designs: ``DESIGNS`` (a ``cuebench.registry.Registry``) and ``build_experiment``, the one call
that builds any of them.

A design is a class declared by an entry point of ``cuebench.designs``: its docstring's first sentence is
what ``cuebench list designs`` shows, ``Options`` is its typed options model (``stimuli.options``),
and ``build(request) -> Experiment`` makes the stimuli and trials. A design may also offer
``shards(request, shard_size)`` for work an executor can spread (the EED shape cues). Designs
import heavy libraries (torch) only inside ``build``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Callable, ClassVar

from cuebench.expdir import ExperimentDir
from cuebench.registry import Registry
from cuebench.trials import Experiment
from ..options import BuildOptions, DesignOptions

DESIGNS: Registry = Registry("designs", entry_point_group="cuebench.designs")

"""Every design, built-in or third-party, comes by the ``cuebench.designs`` entry point (pyproject.toml) and is
imported when it is first asked for."""


@dataclass(frozen=True)
class BuildRequest:
    """Everything a design's build gets: its own options, the common ones, the folder it writes into
    (a staging folder beside the experiment directory, see ``stimuli.staging``), the experiment's name,
    and the services the command hands in (``feature_net_loader`` for texture synthesis)."""

    design: str
    options: DesignOptions
    common: BuildOptions
    expdir: ExperimentDir
    name: str
    feature_net_loader: Callable | None = None


class Design:
    """Base of a design: ``Options`` and ``build``; a subclass is named by its ``cuebench.designs`` entry point."""

    Options: ClassVar[type[DesignOptions]] = DesignOptions
    study_options: ClassVar[frozenset[str]] = frozenset()
    """The common study options (``STUDY_OPTIONS``) this design honours; the others are refused."""

    def build(self, request: BuildRequest) -> Experiment:
        raise NotImplementedError



def design(name: str) -> Design:
    """The design registered as ``name``; an unknown name is a one-line error with "did you mean"."""
    return DESIGNS[name]()


def split_options(design_name: str, values: dict) -> tuple[DesignOptions, BuildOptions]:
    """Typed (design options, common options) from one flat mapping of option names to values; a name both
    declare (``catch_every`` of ``dist``) belongs to the design, which then sets its own default."""
    from ..options import OptionError, flag

    model = design(design_name).Options
    own = {k: v for k, v in values.items() if k in model.model_fields}
    common = {k: v for k, v in values.items() if k not in own}
    foreign = sorted(k for k in common if k not in BuildOptions.model_fields)
    if foreign:
        owners = [n for n, d in DESIGNS.working() if foreign[0] in d.Options.model_fields]
        raise OptionError(f"{flag(foreign[0])} is an option of {', '.join(owners) or 'no design'}, "
                          f"not of --design {design_name}")
    return model(**own), BuildOptions(**common)


def build_experiment(design_name: str, out: str | Path, options: DesignOptions | None = None,
                     common: BuildOptions | None = None, *, feature_net_loader: Callable | None = None,
                     before_build: Callable[[Design, BuildRequest], None] | None = None) -> Experiment:
    """Build design ``design_name`` into the experiment directory ``out``, all or nothing.

    The design works in a staging folder beside ``out`` that starts with ``out``'s stimuli (so a
    re-run makes only what is missing); ``experiment.json`` and the new files reach ``out`` only when
    the build succeeded, and a build that would change the trials of an experiment with responses is
    refused. ``before_build`` runs first on the staging request (the command's executor shards).
    """
    from ..preflight import refuse_changes_to_collected
    from ..staging import Staging

    chosen = design(design_name)
    options = options if options is not None else chosen.Options()
    if not isinstance(options, chosen.Options):
        raise TypeError(f"design {design_name!r} takes {chosen.Options.__name__}, got {type(options).__name__}")
    common = common if common is not None else BuildOptions()
    refuse_study_options(design_name, chosen, common)
    out = Path(out)
    refuse_changes_to_collected(ExperimentDir(out), common.name or out.name, design_name,
                                recorded_options(design_name, options, common))
    with Staging(out) as staging:
        request = BuildRequest(design_name, options, common, ExperimentDir(staging.root),
                               common.name or out.name, feature_net_loader)
        if before_build is not None:
            before_build(chosen, request)
        experiment = chosen.build(request)
        experiment.language = common.language  # before the commit writes the default texts in it
        staging.commit(experiment)
    return experiment


def refuse_study_options(design_name: str, chosen: Design, common: BuildOptions) -> None:
    """A study option the design does not honour is an error, never silently ignored."""
    from ..options import STUDY_OPTIONS, OptionError, flag

    given = [k for k in STUDY_OPTIONS if k in common.model_fields_set and getattr(common, k) not in (None, 0)]
    refused = [k for k in given if k not in chosen.study_options]
    if refused:
        honour = [n for n, d in DESIGNS.items() if refused[0] in d.study_options]
        raise OptionError(f"{flag(refused[0])} is not available for --design {design_name}"
                          + (f"; designs that take it: {', '.join(honour)}" if honour else ""))


def portable(value):
    """An absolute path as its last part: the folder is shared, the researcher's file system is not."""
    return PurePath(value).name if isinstance(value, str) and PurePath(value).is_absolute() else value


def recorded_options(design_name: str, options: DesignOptions, common: BuildOptions) -> dict:
    """What provenance keeps of the options: the design's own and the common ones, sorted by name, an
    absolute path as its last part (:func:`portable`)."""
    values = {**common.recorded(), "design": design_name, **options.model_dump(mode="json")}
    return {key: portable(value) for key, value in sorted(values.items())}


