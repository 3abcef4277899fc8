"""Benchmarks as plug-ins: one class per benchmark (entry point group ``cuebench.benchmarks``, listed by
``cuebench list benchmarks``) that says everything a scorecard needs and nothing else has to know:

- how it is **built**: the design ``cuebench stimuli build`` uses, the source (a folder under the shared data
  or the bundled photos), how a ``--per-class`` subset is taken, the design's options;
- how it is **answered**: the decision rule its references used (``cuebench eval --rule``);
- how it is **scored**: its metrics, each a formula over per-image proportions (:class:`Cell`), with the
  published values it is set beside (:class:`Published`);
- what its references **measured**: the published stimulus set (:class:`PublishedSet`), named by the hash of
  its image list. A scorecard ranks a model and compares it with people only where the run scored that very
  list with that very rule (``analysis.scorecard``).

A third-party benchmark is one module with one such class and one entry point, as the in-tree ones.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, ClassVar

import numpy as np
import pandas as pd

from cuebench.registry import Registry

BENCHMARKS: Registry[type["Benchmark"]] = Registry("benchmarks", entry_point_group="cuebench.benchmarks")


def image_list_hash(names) -> str:
    """sha256 over the sorted distinct source-image names, one per line: the identity of a stimulus set as a
    list of images (the names ``analysis.load`` gives as ``source_image``), whatever was built from them."""
    return hashlib.sha256("\n".join(sorted({str(n) for n in names})).encode()).hexdigest()


@dataclass(frozen=True)
class PublishedSet:
    """The images a benchmark's references were measured on. ``image_list_hash`` None: the set is not
    distributed, so no run can be the same measurement and none is ranked against it."""

    description: str
    images: int
    image_list_hash: str | None = None


@dataclass(frozen=True)
class Published:
    """Where a metric's published values come from: the human value (and the people's range where a table
    lists them one by one), and the models to rank against, each a (name, value) pair."""

    reference_ids: tuple[str, ...]
    human: float | None = None
    human_label: str = ""
    human_range: tuple[float, float] | None = None
    models: tuple[tuple[str, float], ...] = ()


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
    published: Callable[[], Published] = field(default=lambda: Published(()))
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
    published_set: ClassVar[PublishedSet] = PublishedSet("no published set", 0)

    def metrics(self, scored: pd.DataFrame) -> list[Metric]:
        """The metrics in scorecard order; ``scored`` holds every observer's trials of the benchmark's
        experiment, for metrics normalised over the models evaluated on the same stimuli."""
        raise NotImplementedError
