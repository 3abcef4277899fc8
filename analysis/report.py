"""One analysis of the responses, and the report that shows it.

:func:`analyze` runs every metric that the data allow (a section whose conditions are
absent is skipped with a note) and returns plain tables. :func:`write_report` writes
``report.html`` (self-contained: plots inlined as base64 PNG), every table as CSV and
all of them in ``results.json``, and ``provenance.json`` (inputs with their checksums,
options, software versions, time).
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import platform
from importlib import metadata
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from cuebench.version import __version__
from cuebench.csvsafe import frame_csv
from cuebench.errors import CuebenchError
from cuebench.expdir import EXPERIMENT_FILE, ExperimentDir, atomic_write
from cuebench.paths import recorded_path
from cuebench.studies import CueStudy, FactorStudy, StudyDir

from . import chance, factor_studies, figure_style, sections
from . import reference as published
from .chance import experiment_n_choices, with_chance
from .design_record import experiment_of, experiment_record
from .exclusions import Cleaned, ExclusionOptions, apply_exclusions, catch_performance, scored_otherwise
from .load import fixed_level_rows, load_responses, logged_exclusions, withdrawal_count
from .ranking import FriedmanResult
from .tables import html_table

LIBRARIES = ("numpy", "pandas", "scipy", "pingouin", "scikit_posthocs", "matplotlib", "jinja2", "psignifit")


class ReportError(CuebenchError, ValueError):
    """The report cannot be made from these sources or options."""


@dataclass
class AnalysisOptions:
    exclusions: ExclusionOptions = field(default_factory=ExclusionOptions)
    n_choices: int | None = None          # C for chance correction; default: the trial type's card, else categories
    model_set: list[str] | None = None    # models that define s, t of S_cd (default: all models)
    pairing: str = "item"                 # t-test pairing unit, see analysis.comparison
    correction: str = "holm"
    alpha: float = 0.05
    n_boot: int = 1000
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Analysis:
    tables: dict[str, pd.DataFrame]
    summary: dict
    notes: list[str]
    cleaned: Cleaned
    friedman: FriedmanResult | None = None
    sections: list[str] = field(default_factory=list)
    """Names of the sections that apply to these responses, in report order."""
    missing: dict[str, str] = field(default_factory=dict)
    """Section name -> one line on what its numbers still need."""
    sources: list = field(default_factory=list)
    """The folders the responses came from, for figures that show stimuli (set by ``write_report``)."""


def n_choices_of(experiment, df: pd.DataFrame) -> tuple[int, str]:
    """C and where it came from (:func:`analysis.chance.origin`): the card of the experiment's test trials
    (:func:`analysis.chance.experiment_n_choices`), else, for responses without their experiment, the number of
    categories."""
    from_card = None if experiment is None else experiment_n_choices(experiment)
    if from_card is not None:
        return from_card[0], f"{chance.FROM_CARD} {from_card[1]}"
    return category_count(df), chance.FROM_CATEGORIES


def category_count(df: pd.DataFrame) -> int:
    """Fallback C when no label set is known: the number of distinct true categories (at least 2)."""
    return max(2, int(df["category"].nunique()))


def analyze(df: pd.DataFrame, options: AnalysisOptions | None = None, progress: bool = False,
            only: set[str] | None = None, logged: pd.DataFrame | None = None, design: dict | None = None,
            withdrawals: int = 0, n_choices_from: str | None = None) -> Analysis:
    """Every section that applies to the responses (see :mod:`analysis.sections`), as named tables.
    ``only`` limits the work to some sections (plus what they depend on). Which sections apply is
    decided by the design's test trials as collected, before exclusions: a section whose answers were
    all excluded (timeouts, attention checks) stays, with a note saying so. A section the data do not
    support leaves a one-line note in ``notes`` (and in ``missing`` under its name) instead of numbers.
    ``logged``: the exclusion logs' ``observer, reason, by`` (:func:`analysis.load.logged_exclusions`), who
    is excluded although the responses may hold no answer of theirs; ``design``: the experiment as built
    (:func:`analysis.design_record.experiment_record`), kept in ``summary["design"]`` for the methods;
    ``withdrawals``: how many people withdrew (:func:`analysis.load.withdrawal_count`), for the methods too;
    ``n_choices_from``: where ``options.n_choices`` came from (:func:`n_choices_of`), kept in the summary for the
    methods (default: the option when it is given, else the number of categories)."""
    options = options or AnalysisOptions()
    cleaned = apply_exclusions(df, options.exclusions)
    scored = cleaned.scored
    listed = cleaned.excluded_observers
    if logged is not None and len(logged):
        listed = pd.concat([listed[~listed["observer"].isin(logged["observer"])], logged], ignore_index=True)
    tables: dict[str, pd.DataFrame] = {"exclusions": cleaned.log, "exclusion_summary": cleaned.summary(),
                                       "excluded_observers": listed, "catch_per_person": catch_performance(df)}
    result = Analysis(tables=tables, summary={}, notes=sections.broken_notes() if only is None else [],
                      cleaned=cleaned)
    fixed = fixed_level_rows(scored)
    n_choices = options.n_choices or category_count(scored if len(scored) else df)
    n_choices_from = n_choices_from or (chance.FROM_OPTION if options.n_choices else chance.FROM_CATEGORIES)
    result.summary.update({"observers": int(scored["observer"].nunique()), "scored_trials": int(len(scored)),
                           "adaptive_trials": int(len(scored) - len(fixed)), "excluded_rows": int(len(cleaned.log)),
                           "n_choices": n_choices, "n_choices_from": n_choices_from})
    catch = tables["catch_per_person"]
    people_catch = catch[catch["observer_kind"] == "human"]
    if len(catch):
        result.summary["catch"] = {"people": int(len(people_catch)),
                                   "trials": int(people_catch["catch_trials"].sum()),
                                   "correct": int(people_catch["catch_correct"].sum()),
                                   "max_catch_errors": options.exclusions.max_catch_errors}
    if design is not None:
        result.summary["design"] = design
    if withdrawals:
        result.summary["withdrawals"] = withdrawals
    if scored.empty and cleaned.segments.empty:
        result.notes.append("no scored test trials are left after exclusions")
    designed = df[df["role"] == "test"]
    otherwise = scored_otherwise(designed)

    def designed_for(section) -> pd.DataFrame:
        return designed[otherwise] if section.reads_segments else designed[~otherwise]

    wanted = [s for s in sections.ordered(only)
              if not (otherwise.any() and designed_for(s).empty) and s.applies(designed_for(s))]
    for section in tqdm(wanted, desc="analysis", disable=not progress, unit="section"):
        available = cleaned.segments if section.reads_segments else scored
        rows = available if section.reads_segments or section.adaptive_blocks else fixed
        if available.empty or not section.applies(available):
            missing = f"no answers to these trials are left after exclusions ({excluded_because(cleaned.log)})"
        elif rows.empty or not section.applies(rows):
            missing = ("every answer to these trials is in an adaptive (QUEST+) block, whose levels follow the "
                       "answers: no fixed-level statistic")
        else:
            missing = section.compute(result, rows, options, n_choices)
        result.sections.append(section.name)
        if missing:
            result.missing[section.name] = missing
            result.notes.append(missing)
    return result


def excluded_because(log: pd.DataFrame) -> str:
    """The test-trial exclusions by reason, most frequent first: ``12 timeout (no answer), 4 pilot session``."""
    counts = log.loc[log["role"] == "test", "reason"].value_counts()
    return ", ".join(f"{n} {reason}" for reason, n in counts.items()) or "none excluded; no answers collected"


def analyze_sources(sources, options: AnalysisOptions | None = None, compare=None, database: str | None = None,
                    only: set[str] | None = None, progress: bool = False) -> tuple[Analysis, AnalysisOptions]:
    """:func:`analyze` of what ``sources`` hold: their responses (+ ``compare``), C and each trial's chance from
    the trial type's card unless given, the exclusion logs and the experiment as built. ``cuebench report``,
    ``analyze`` and ``plan`` all start here, so they see the same analysis (and print the same methods paragraph). Returns the analysis and
    the options it ran with."""
    options = options or AnalysisOptions()
    experiment = experiment_of(sources)
    df = with_chance(load_for_report(sources, compare, database), experiment)
    n_choices_from = chance.FROM_OPTION
    if options.n_choices is None:
        n_choices, n_choices_from = n_choices_of(experiment, df)
        options = replace(options, n_choices=n_choices)
    analysis = analyze(df, options, progress=progress, only=only, logged=logged_exclusions(sources, database),
                       design=None if experiment is None else experiment_record(experiment),
                       withdrawals=withdrawal_count(sources, database), n_choices_from=n_choices_from)
    return analysis, options


def load_for_report(sources, compare=None, database: str | None = None) -> pd.DataFrame:
    frames = [load_responses(list(sources), database)]
    if compare:
        frames.append(load_responses(list(compare)))
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def write_report(sources: list, out_dir=None, compare=None, reference: str | None = "burgert2025",
                 options: AnalysisOptions | None = None, progress: bool = True, database: str | None = None) -> Path:
    """Analyse ``sources`` (+ ``compare``) and write report.html, tables/*.csv, results.json and
    provenance.json into ``out_dir`` (default: the experiment's reports/ folder, else ./report).
    Returns the path of report.html. A study directory (``cuebench.studies.StudyDir``) gets its own
    report: a factor study ``analysis.factor_studies.write_study_report``'s, a cue study
    ``analysis.cue_study.write_cue_report``'s. ``database``: a ``postgresql://``
    URL holding the responses of the experiment directories in ``sources``."""
    sources = [Path(s) for s in ([sources] if isinstance(sources, (str, Path)) else sources)]
    if not sources:
        raise ReportError("no source given")
    study = StudyDir(sources[0]).study() if len(sources) == 1 else None  # read through its schema
    if isinstance(study, FactorStudy):
        return Path(factor_studies.write_study_report(sources[0], Path(out_dir or sources[0] / "reports")))
    if isinstance(study, CueStudy):
        from .cue_study import write_cue_report

        return Path(write_cue_report(sources[0], out_dir))
    if reference not in (None, *published.REFERENCES):
        raise ReportError(f"unknown reference {reference!r}; known: {', '.join(published.REFERENCES)} or none")
    analysis, options = analyze_sources(sources, options, compare, database, progress=progress)
    out = Path(out_dir) if out_dir else default_out_dir(sources[0])
    out.mkdir(parents=True, exist_ok=True)
    analysis.sources = sources
    figures = {stem: figure_style.save(fig, out / "figures" / stem)
               for stem, fig in make_figures(analysis, reference).items()}
    write_tables(analysis, out)
    html = render_html(analysis, figures, sources, compare, reference)
    target = out / "report.html"
    atomic_write(target, html.encode("utf-8"))
    atomic_write(out / "provenance.json", json.dumps(provenance(sources, compare, reference, options), indent=1,
                                                     default=str).encode("utf-8"))
    return target


def default_out_dir(source: Path) -> Path:
    if (source / EXPERIMENT_FILE).is_file():
        return ExperimentDir(source).reports_dir
    return Path("report")


def make_figures(analysis: Analysis, reference_name: str | None) -> dict:
    """Every figure of the sections that have numbers, keyed by file name stem."""
    figures = {}
    for section in sections.ordered(analysis.sections):
        if section.name in analysis.sections and section.has_numbers(analysis.tables):
            figures.update(section.figures(analysis, reference_name))
    return figures


def write_tables(analysis: Analysis, out: Path) -> None:
    """Every table as tables/NAME.csv, and all tables plus the summary in results.json."""
    for name, table in analysis.tables.items():
        atomic_write(out / "tables" / f"{name}.csv", frame_csv(table))
    payload = {"summary": analysis.summary, "sections": analysis.sections, "missing": analysis.missing,
               "notes": analysis.notes,
               "tables": {n: json.loads(t.to_json(orient="records")) for n, t in analysis.tables.items()}}
    text = json.dumps(_finite(payload), indent=1, default=_json_default, allow_nan=False)
    atomic_write(out / "results.json", text.encode("utf-8"))


def _finite(value):
    """NaN and infinities as null: JSON has no such numbers, and an undefined value is an empty one."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (float, np.floating)) and not np.isfinite(value):
        return None
    return value


def _json_default(value):
    if isinstance(value, (np.floating, np.integer)):
        return _finite(value.item())
    return str(value)


def provenance(sources, compare, reference_name, options: AnalysisOptions) -> dict:
    """How the report was made: inputs (with sha256 of files), options, library versions, time."""
    def describe(path: Path) -> dict:
        files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file()
                                                     and p.suffix in (".csv", ".parquet", ".sqlite", ".json"))
        return {"path": recorded_path(path), "files": {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}}
    versions = {"cuebench": __version__, "python": platform.python_version()}
    for lib in LIBRARIES:
        versions[lib] = getattr(importlib.import_module(lib), "__version__", None) or metadata.version(lib)
    return {"created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "sources": [describe(Path(s)) for s in sources],
            "compare": [describe(Path(s)) for s in (compare or [])],
            "reference": reference_name, "options": options.to_dict(), "versions": versions}


def render_html(analysis: Analysis, figures: dict[str, bytes], sources, compare, reference_name) -> str:
    """report.html: the summary, then each section that applies (its template fragment, or its one-line
    note on what is missing), then the exclusions."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("analysis", "templates"), autoescape=select_autoescape(["html"]))
    applied = [section for section in sections.ordered(analysis.sections) if section.name in analysis.sections]
    images = {k: "data:image/png;base64," + base64.b64encode(v).decode("ascii") for k, v in figures.items()}
    p_values = {name for section in applied for name in section.p_value_tables}
    tables = {name: html_table(t, p_values=name in p_values) for name, t in analysis.tables.items() if len(t)}
    context = {"images": images, "tables": tables, "summary": analysis.summary}
    for section in applied:  # the published numbers each section shows beside this experiment's
        context.update(section.references(analysis, reference_name))
    shown = []
    for section in applied:
        template = (env.from_string(section.template) if section.template
                    else env.get_template(f"sections/{section.name}.html"))
        shown.append({"name": section.name, "title": section.title, "note": analysis.missing.get(section.name),
                      "html": template.render(**context)})
    return env.get_template("report.html").render(
        title="cuebench report", sources=[recorded_path(s) for s in sources],
        compare=[recorded_path(c) for c in (compare or [])],
        sections=shown, created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), version=__version__,
        **context)
