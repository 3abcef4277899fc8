"""Report sections: one class per section, registered by name, so a new metric touches one file.

A section says whether it *applies* to the responses (the design has the trials it is about:
cue-conflict images for the shape bias, oddity triplets for DiST), *computes* its tables into
the analysis (or states in one line what is missing, e.g. "noise ceiling needs >= 2 people per
trial; 1 so far"), draws its *figures*, and renders its template fragment (``template``, else
``templates/sections/<name>.html``). The report shows only the sections that apply, in
``order``; ``cuebench analyze --metric`` offers every section's ``metrics``. Every section, built-in or
third-party, comes by the ``cuebench.report_sections`` entry point (pyproject.toml).
"""

from __future__ import annotations

from .base import (SECTIONS, Section, all_metrics, broken_notes, metric_columns, metric_table, ordered,
                   per_observer_sections, record_method, recorded_method, summary_tables)

__all__ = ["SECTIONS", "Section", "all_metrics", "broken_notes", "metric_columns", "metric_table", "ordered",
           "per_observer_sections", "record_method", "recorded_method", "summary_tables"]
