"""The report section contract: the base class every section subclasses, and their registry.

What a section ran, for the methods paragraph: a section that computes a statistic records it with
:func:`record_method` as ``result.summary[<section name>]["method"]``, a dict of the numbers *as they
were used* (resamples drawn, series fitted, priors, definitions), never the options' defaults. Its key
``"sentence"`` holds one sentence for a paper's methods built from those numbers; the methods
paragraph (:mod:`analysis.sections.methods`) quotes each recorded sentence in report order, and
leaves a section out that recorded none. A section may instead override :meth:`Section.method_sentence`
to write its sentence from the dict. Both the dict and the sentence land in results.json, so every
number of the paragraph can be checked against what was recorded beside it.
"""

from __future__ import annotations

from typing import ClassVar

import pandas as pd

from cuebench.registry import Registry

SECTIONS: Registry[type["Section"]] = Registry("report-sections", entry_point_group="cuebench.report_sections")


class Section:
    """Base class: override ``applies``, ``compute`` and (optionally) ``figures``."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    order: ClassVar[int] = 100
    metrics: ClassVar[dict[str, str]] = {}
    """``cuebench analyze --metric`` name -> the table it prints."""
    needs: ClassVar[str] = ""
    """What the section needs, in words, for "metric X needs ..." errors."""
    depends: ClassVar[tuple[str, ...]] = ()
    """Sections whose tables this one reads (computed first); ``ALL`` (``"*"``): every section."""
    adaptive_blocks: ClassVar[bool] = False
    """Whether ``compute`` reads the answers of adaptive (QUEST+) blocks. Every other section gets the rows of the
    fixed sequence only (:func:`analysis.load.fixed_level_rows`): a level chosen from the answers is no level of
    a fixed-level statistic."""
    reads_segments: ClassVar[bool] = False
    """Whether ``compute`` reads the kept ``segment`` trials (``Cleaned.segments``, scored by confusion matrices)
    instead of the scored classification and oddity trials."""
    template: ClassVar[str | None] = None
    """Jinja fragment of the section's body; None: ``templates/sections/<name>.html``. It sees
    ``tables`` (HTML), ``images`` (PNG data URLs), ``summary`` and what the sections' :meth:`references` give."""
    summary_tables: ClassVar[tuple[str, ...]] = ()
    """The tables ``cuebench analyze`` prints without ``--metric``: the section's part of that quick look."""
    metric_columns: ClassVar[dict[str, tuple[str, ...]]] = {}
    """``--metric`` name -> the columns it prints and writes, where not its whole table."""
    p_value_tables: ClassVar[tuple[str, ...]] = ()
    """Tables of p-values only, which the report prints to 3 significant digits rather than 3 decimals."""
    per_observer: ClassVar[str | None] = None
    """The table with one row per observer and a column per scalar metric, which ``cuebench analyze --correlate X
    Y`` ranks the models by."""

    def applies(self, scored: pd.DataFrame) -> bool:
        """Whether the responses contain the kind of trials this section is about."""
        return True

    def compute(self, result, scored: pd.DataFrame, options, n_choices: int) -> str | None:
        """Add tables to ``result.tables`` (and numbers to ``result.summary``); return a one-line
        reason when the data do not allow the section's numbers, else None."""
        raise NotImplementedError

    def has_numbers(self, tables: dict) -> bool:
        """Whether ``compute`` made the section's first table (a note alone draws no figure)."""
        return next(iter(self.metrics.values()), None) in tables

    def figures(self, analysis, reference: str | None) -> dict:
        """Matplotlib figures by key (file name stem); drawn only when ``compute`` succeeded."""
        return {}

    def references(self, analysis, reference: str | None) -> dict:
        """Published numbers the report shows beside this experiment's, as names the templates read -> values
        (an HTML table, its label); ``reference`` is the one asked for (``cuebench report --reference``), None for
        none. Asked of the sections that apply; what one gives, every section's template sees."""
        return {}

    def method_sentence(self, method: dict) -> str | None:
        """The methods paragraph's sentence from what :func:`record_method` recorded (default: its
        ``"sentence"``); None leaves the section out of the paragraph."""
        return method.get("sentence") or None


ALL = "*"
METHOD = "method"


def record_method(result, section: str, sentence: str, **numbers) -> dict:
    """Record what ``section`` ran: ``result.summary[section]["method"] = {"sentence": ..., **numbers}``
    (module docstring); numbers are the ones the sentence was written from. Returns the dict."""
    method = {"sentence": sentence, **numbers}
    result.summary.setdefault(section, {})[METHOD] = method
    return method


def recorded_method(summary: dict, section: str) -> dict | None:
    """The ``method`` dict ``section`` recorded in ``summary``, or None."""
    entry = summary.get(section)
    method = entry.get(METHOD) if isinstance(entry, dict) else None
    return method if isinstance(method, dict) else None


def ordered(names=None) -> list[Section]:
    """Instances of the registered sections (all that load, or ``names`` and what they depend on), in report
    order; a broken plug-in section is left out (``broken_notes`` says so)."""
    everything = {name for name, _ in SECTIONS.working()}
    wanted = everything if names is None else set(names)
    todo = list(wanted)
    while todo:
        depends = SECTIONS[todo.pop()].depends
        for dep in (everything if ALL in depends else depends):
            if dep not in wanted:
                wanted.add(dep)
                todo.append(dep)
    return sorted((SECTIONS[n]() for n in wanted), key=lambda s: (s.order, s.name))


def metric_table(metric: str) -> tuple[str, str, str]:
    """``cuebench analyze --metric`` name -> (section, table, what it needs)."""
    for name, cls in SECTIONS.working():
        if metric in cls.metrics:
            return name, cls.metrics[metric], cls.needs
    raise KeyError(metric)


def metric_columns(metric: str) -> tuple[str, ...] | None:
    """The columns ``cuebench analyze --metric`` prints of the metric's table (None: all of them)."""
    return next((cls.metric_columns[metric] for _, cls in SECTIONS.working() if metric in cls.metric_columns), None)


def summary_tables(names) -> list[str]:
    """The tables ``cuebench analyze`` prints without ``--metric``, of the sections ``names``, in report order."""
    return [table for section in ordered(names) if section.name in names for table in section.summary_tables]


def per_observer_sections() -> set[str]:
    """The sections that make a per-observer table of metrics (``--correlate`` runs only these and what they need)."""
    return {name for name, cls in SECTIONS.working() if cls.per_observer}


def all_metrics() -> list[str]:
    """Every ``--metric`` name of the sections that load (a broken plug-in's are missing, not fatal)."""
    return sorted(m for _, cls in SECTIONS.working() for m in cls.metrics)


def broken_notes() -> list[str]:
    """One line per plug-in section that cannot be imported: the report says it left it out."""
    return [f"report section {name!r} of the package {package} is left out: it cannot be loaded ({cause})"
            for name, (package, cause) in SECTIONS.broken().items()]
