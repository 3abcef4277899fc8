"""Benchmarks as plug-ins: one class per benchmark (entry point group ``cuebench.benchmarks``, listed by
``cuebench list benchmarks``) that says everything a scorecard needs and nothing else has to know:

- how it is **built**: the design ``cuebench stimuli build`` uses, the source (a folder under the shared data
  or the bundled photos), how a ``--per-class`` subset is taken, the design's options;
- how it is **answered**: the decision rule of the reference it is ranked against (``cuebench eval --rule``);
- how it is **scored**: its metrics, each a formula over per-image proportions (:class:`Cell`), set beside
  published sources (:class:`Published`), each saying what it **measured**: the stimulus set
  (:class:`PublishedSet`, named by the hash of its image list, or not stated) and the decision rule (or not
  stated). A scorecard ranks a model among a source's models, and compares it with that source's people, only
  where the run scored that very list with that very rule (``analysis.scorecard``); the other sources are shown
  for context, never in the rank.

A third-party benchmark is one module with one such class and one entry point, as the in-tree ones.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, ClassVar

import numpy as np
import pandas as pd

from cuebench.registry import Registry

from .. import reference

BENCHMARKS: Registry[type["Benchmark"]] = Registry("benchmarks", entry_point_group="cuebench.benchmarks")


def image_list_hash(names) -> str:
    """sha256 over the sorted distinct source-image names, one per line: the identity of a stimulus set as a
    list of images (the names ``analysis.load`` gives as ``source_image``), whatever was built from them."""
    return hashlib.sha256("\n".join(sorted({str(n) for n in names})).encode()).hexdigest()


@dataclass(frozen=True)
class PublishedSet:
    """The images a published source measured. ``image_list_hash`` None: the set is not distributed, so no run
    can be the same measurement; ``images`` None as well: the source does not say which images it used."""

    description: str
    images: int | None
    image_list_hash: str | None = None


@dataclass(frozen=True)
class Published:
    """One published source a metric is set beside, and how it measured: its stimulus set and its decision rule
    (a ``cuebench list decision-rules`` name, or in words where cuebench has no such rule; None: not stated).
    Its values: the human value (and the people's range where the table lists them one by one) and the models,
    each a (name, value) pair. A people-only source's rule is the one its models must use to be compared."""

    reference_ids: tuple[str, ...]
    measured_on: PublishedSet
    decision_rule: str | None
    human: float | None = None
    human_label: str = ""
    human_range: tuple[float, float] | None = None
    models: tuple[tuple[str, float], ...] = ()

    @property
    def citation(self) -> str:
        """The source as a reader names it: authors, year and table(s)."""
        return "; ".join(reference.reference(r).citation for r in self.reference_ids)


def correct(trials: pd.DataFrame) -> pd.Series:
    return trials["correct"].astype(float)


@dataclass(frozen=True)
class Cell:
    """The trials of one proportion: ``select`` picks them, ``success`` scores each 1 or 0 (NaN: the trial
    counts for neither, e.g. a cue-conflict answer naming neither cue). The unit is the source image: an image
    answered several times counts once, with its mean (``analysis.scorecard.cell_counts``)."""

    name: str
    select: Callable[[pd.DataFrame], pd.Series]
    success: Callable[[pd.DataFrame], pd.Series] = correct
    counted: str = "images per setting"
    """What the cell's n counts, as a note says it ("823 images with a shape or texture decision")."""


def condition_is(condition: str, **params) -> Callable[[pd.DataFrame], pd.Series]:
    """Rows of one condition whose parameters include ``params`` (``params`` already parsed to dicts)."""
    def select(trials: pd.DataFrame) -> pd.Series:
        chosen = trials["condition"] == condition
        if params:
            chosen &= trials["params"].map(lambda p: all(p.get(k) == v for k, v in params.items()))
        return chosen
    return select


@dataclass(frozen=True)
class Metric:
    """A number of the scorecard: ``formula`` maps the cells' proportions (numpy arrays, in ``cells`` order) to
    the metric, elementwise, so the same formula gives the value and every posterior draw of the interval."""

    name: str
    description: str
    cells: tuple[Cell, ...]
    formula: Callable[..., np.ndarray]
    published: Callable[[], tuple[Published, ...]] = field(default=lambda: ())
    """The published sources, the one the benchmark is ranked against first."""
    directions: tuple[int, ...] = (1,)
    """Per cell, +1 where the formula increases with the cell's proportion, -1 where it decreases (0: neither):
    which exact bound of the cell gives which end of the interval (``analysis.scorecard.interval``)."""
    not_ranked_because: str | None = None
    """Set when the metric's scale itself differs from the references' (one sentence; no rank, no people)."""


class Benchmark:
    """Base class of a benchmark plug-in: class attributes say how it builds, answers and scores."""

    name: ClassVar[str] = ""
    design: ClassVar[str] = ""
    shared: ClassVar[str | None] = None
    """Source folder under the shared data folder; None: the bundled photos."""
    layout: ClassVar[str] = "classes"
    """How ``--per-class N`` takes a subset: ``classes`` (first N files per class folder) or ``dist`` (first N
    originals with their two versions)."""
    options: ClassVar[dict] = {}
    """The design's options; a model-only benchmark holds no image out for attention or catch checks."""
    decision_rule: ClassVar[str] = ""
    """The rule the run answers with: that of the source it is ranked against."""

    def metrics(self, scored: pd.DataFrame) -> list[Metric]:
        """The metrics in scorecard order; ``scored`` holds every observer's trials of the benchmark's
        experiment, for metrics normalised over the models evaluated on the same stimuli."""
        raise NotImplementedError
