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

from cuebench import __version__
from cuebench.errors import CuebenchError
from cuebench.expdir import EXPERIMENT_FILE, ExperimentDir, atomic_write
from cuebench.studies import StudyDir

from . import comparison, consistency, factor_studies, metrics, plots, psychometric
from . import reference as published
from .exclusions import Cleaned, ExclusionOptions, apply_exclusions
from .load import load_responses
from .ranking import FriedmanResult, RankTestError, friedman_nemenyi
from .tables import html_table

HUMANS_MEAN = "humans (mean)"
NOT_SUPPRESSION = ("original", "attention", "practice")
LIBRARIES = ("numpy", "pandas", "scipy", "pingouin", "scikit_posthocs", "matplotlib", "jinja2", "psignifit")


class ReportError(CuebenchError, ValueError):
    """The report cannot be made from these sources or options."""


@dataclass
class AnalysisOptions:
    exclusions: ExclusionOptions = field(default_factory=ExclusionOptions)
    n_choices: int | None = None          # C for chance correction; default: labels of the experiment, else categories
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


def n_choices_of(sources, df: pd.DataFrame) -> int:
    """C: the label count of the (first) experiment directory among the sources, else the number of categories."""
    for src in sources:
        path = Path(src)
        if (path / EXPERIMENT_FILE).is_file():
            return len(ExperimentDir(path).load().label_set.labels)
    return category_count(df)


def category_count(df: pd.DataFrame) -> int:
    """Fallback C when no label set is known: the number of distinct true categories (at least 2)."""
    return max(2, int(df["category"].nunique()))


def analyze(df: pd.DataFrame, options: AnalysisOptions | None = None, progress: bool = False,
            only: set[str] | None = None) -> Analysis:
    """Every metric the responses support, as named tables (see docs/analysis.md for the list).
    ``only`` limits the work to some of :data:`STEPS` (plus what they depend on)."""
    options = options or AnalysisOptions()
    cleaned = apply_exclusions(df, options.exclusions)
    scored = cleaned.scored
    tables: dict[str, pd.DataFrame] = {"exclusions": cleaned.log, "exclusion_summary": cleaned.summary(),
                                       "excluded_observers": cleaned.excluded_observers}
    result = Analysis(tables=tables, summary={}, notes=[], cleaned=cleaned)
    if scored.empty:
        result.notes.append("no scored test trials are left after exclusions")
        return result
    n_choices = options.n_choices or category_count(scored)
    wanted = set(STEPS) if only is None or "observers" in only else set(only) | {"accuracy"}
    steps = [(name, step) for name, step in STEPS.items() if name in wanted]
    for _, step in tqdm(steps, desc="analysis", disable=not progress, unit="step"):
        step(result, scored, options, n_choices)
    result.summary.update({"observers": int(scored["observer"].nunique()), "scored_trials": int(len(scored)),
                           "excluded_rows": int(len(cleaned.log)), "n_choices": n_choices})
    return result


def _accuracy(result: Analysis, scored, options, n_choices) -> None:
    acc = metrics.accuracy(scored)
    result.tables["accuracy"] = acc
    result.tables["group_accuracy"] = metrics.group_accuracy(acc, seed=options.seed)
    classify = metrics.accuracy(scored[scored["trial_type"] == "classify"])
    suppressed = set(classify["condition"]) - set(NOT_SUPPRESSION)
    if "original" in set(classify["condition"]) and suppressed:
        rel = metrics.relative_accuracy(classify, n_choices)
        result.tables["relative_accuracy"] = rel
        group = metrics.group_accuracy(rel, "relative_accuracy", seed=options.seed)
        corrected = metrics.group_accuracy(rel, "chance_corrected", seed=options.seed)
        result.tables["group_relative_accuracy"] = group
        result.tables["group_chance_corrected"] = corrected
    else:
        result.notes.append("relative accuracy: needs 'original' trials and at least one suppression condition")


def _shape_bias(result: Analysis, scored, options, n_choices) -> None:
    if not (scored["texture_category"].notna() & (scored["texture_category"] != scored["category"])).any():
        return
    result.tables["shape_bias"] = metrics.shape_bias(scored)
    result.tables["shape_bias_by_category"] = metrics.shape_bias(scored, by_category=True)


def _cue_decomposition(result: Analysis, scored, options, n_choices) -> None:
    if not set(metrics.CUE_CONDITIONS) <= set(scored["condition"]):
        return
    result.tables["cue_decomposition"] = metrics.cue_decomposition(scored, options.model_set)


def _oddity(result: Analysis, scored, options, n_choices) -> None:
    if (scored["trial_type"] == "oddity").any():
        result.tables["oddity"] = metrics.oddity_accuracy(scored, result.cleaned.catch)


def _consistency(result: Analysis, scored, options, n_choices) -> None:
    if scored["observer"].nunique() < 2:
        return
    pairs = consistency.error_consistency(scored, n_boot=options.n_boot, seed=options.seed)
    result.tables["error_consistency"] = pairs
    reference_pairs = pairs[pairs["pair"] == "human-human"]
    if len(reference_pairs):
        mean, lo, hi = metrics.t_ci(reference_pairs["kappa"])
        result.summary["human_human_kappa"] = {"mean": mean, "t_ci_low": lo, "t_ci_high": hi,
                                               "pairs": int(len(reference_pairs))}


def _ceilings(result: Analysis, scored, options, n_choices) -> None:
    ceilings, relative = consistency.ceilings_and_models(scored, seed=options.seed)
    if len(ceilings):
        result.tables["noise_ceilings"] = ceilings
    if len(relative):
        result.tables["model_vs_human_ceiling"] = relative


def _ttests(result: Analysis, scored, options, n_choices) -> None:
    kinds = set(scored["observer_kind"])
    if kinds == {"human", "model"}:
        result.tables["ttests"] = comparison.paired_ttests(scored, options.pairing, options.correction)


def _friedman(result: Analysis, scored, options, n_choices) -> None:
    scores = friedman_scores(scored)
    try:
        fr = friedman_nemenyi(scores, higher_is_better=True, alpha=options.alpha)
    except RankTestError as err:
        result.notes.append(f"rank tests skipped: {err}")
        return
    result.friedman = fr
    result.tables["friedman_ranks"] = fr.table()
    result.tables["nemenyi_p"] = fr.nemenyi_p.reset_index(names="method")
    result.summary["friedman"] = fr.summary()


def friedman_scores(scored: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per block (condition x level x category) and method (each model, the humans' mean;
    individual humans when there are no models); blocks or methods with gaps are dropped."""
    cells = scored.assign(level=scored["level"].fillna(-1).astype(int), category=scored["category"].fillna("-"))
    per = cells.groupby(["condition", "level", "category", "observer", "observer_kind"], as_index=False)["correct"].mean()
    if (per["observer_kind"] == "model").any():
        humans = per[per["observer_kind"] == "human"].groupby(["condition", "level", "category"], as_index=False)[
            "correct"].mean().assign(observer=HUMANS_MEAN)
        per = pd.concat([per[per["observer_kind"] == "model"], humans], ignore_index=True)
    table = per.pivot_table(index=["condition", "level", "category"], columns="observer", values="correct")
    table = table.loc[:, table.notna().mean() >= 0.5].dropna()
    table.index = [" / ".join(map(str, ix)) for ix in table.index]
    return table


def _thresholds(result: Analysis, scored, options, n_choices) -> None:
    """Psychometric fits of every observer on every condition with an ordered grid (analysis.psychometric)."""
    classify = scored[scored["trial_type"] == "classify"]
    try:
        fits = psychometric.psychometric_fits(classify, n_choices, seed=options.seed)
    except psychometric.PsychometricError as err:
        result.notes.append(f"thresholds: {err}")
        return
    result.tables["thresholds"] = fits.table
    result.tables["psychometric_curves"] = fits.curves
    result.tables["psychometric_points"] = fits.points


def _observer_summary(result: Analysis, scored, options, n_choices) -> None:
    """One row per observer with every scalar metric, for rank correlations over a model set."""
    out = scored.groupby(["observer", "observer_kind"], as_index=False).agg(accuracy=("correct", "mean"),
                                                                           trials=("correct", "size"))
    t = result.tables
    if "shape_bias" in t:
        out = out.merge(t["shape_bias"][["observer", "shape_bias"]], on="observer", how="left")
    if "cue_decomposition" in t:
        out = out.merge(t["cue_decomposition"][["observer", "Q_O", "Q_S", "Q_T", "S_cd", "R_cd"]], on="observer",
                        how="left")
    if "relative_accuracy" in t:
        rel = t["relative_accuracy"].groupby(["observer", "condition"])["relative_accuracy"].mean().unstack()
        out = out.merge(rel.add_prefix("relative_").reset_index(), on="observer", how="left")
    if "error_consistency" in t:
        pairs = t["error_consistency"][["observer_a", "observer_b", "kappa"]]
        both_ways = pd.concat([pairs, pairs.rename(columns={"observer_a": "observer_b", "observer_b": "observer_a"})])
        humans = set(scored.loc[scored["observer_kind"] == "human", "observer"])
        with_humans = both_ways[both_ways["observer_b"].isin(humans)]
        out["kappa_with_humans"] = out["observer"].map(with_humans.groupby("observer_a")["kappa"].mean())
    t["observer_summary"] = out
    models = out[out["observer_kind"] == "model"]
    metric_cols = [c for c in out.columns if c not in ("observer", "observer_kind", "trials")]
    if len(models) >= 3:
        rows = [comparison.rank_correlation(models, a, b) for i, a in enumerate(metric_cols) for b in metric_cols[i + 1:]]
        t["rank_correlations"] = pd.DataFrame(rows)


STEPS = {"accuracy": _accuracy, "shape_bias": _shape_bias, "cue_decomposition": _cue_decomposition,
         "oddity": _oddity, "consistency": _consistency, "ceilings": _ceilings, "ttests": _ttests,
         "ranks": _friedman, "thresholds": _thresholds, "observers": _observer_summary}


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
    study_kind = StudyDir(sources[0]).kind if len(sources) == 1 else None
    if study_kind == "factor":
        return Path(factor_studies.write_study_report(sources[0], Path(out_dir or sources[0] / "reports")))
    if study_kind == "cue":
        from .cue_study import write_cue_report

        return Path(write_cue_report(sources[0], out_dir))
    if reference not in (None, *published.REFERENCES):
        raise ReportError(f"unknown reference {reference!r}; known: {', '.join(published.REFERENCES)} or none")
    options = options or AnalysisOptions()
    df = load_for_report(sources, compare, database)
    if options.n_choices is None:
        options = replace(options, n_choices=n_choices_of(sources, df))
    analysis = analyze(df, options, progress=progress)
    out = Path(out_dir) if out_dir else default_out_dir(sources[0])
    out.mkdir(parents=True, exist_ok=True)
    figures = make_figures(analysis, reference)
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


def make_figures(analysis: Analysis, reference_name: str | None) -> dict[str, bytes]:
    """PNG bytes of every figure the analysis supports, keyed by section."""
    t = analysis.tables
    figures = {}
    ref = published.burgert2025_humans() if reference_name == "burgert2025" else None
    if "relative_accuracy" in t and not set(t["relative_accuracy"]["condition"]) <= set(metrics.CUE_CONDITIONS):
        levels = analysis.cleaned.scored.assign(level=analysis.cleaned.scored["level"].fillna(-1).astype(int))
        levels = levels.drop_duplicates(["condition", "level"])[["condition", "level", "params"]]
        rel = t["relative_accuracy"][~t["relative_accuracy"]["condition"].isin(list(metrics.CUE_CONDITIONS))]
        figures["reliance"] = plots.to_png(plots.reliance_profiles(rel, t["group_relative_accuracy"], levels, ref))
        figures["reliance_chance"] = plots.to_png(plots.reliance_profiles(
            rel, t["group_chance_corrected"], levels, None, value="chance_corrected"))
    if reference_name == "burgert2025":
        figures["reference"] = plots.to_png(plots.reference_bars(published.burgert2025_table3()))
    if "shape_bias" in t:
        figures["shape_bias"] = plots.to_png(plots.shape_bias_plot(t["shape_bias_by_category"], t["shape_bias"]))
    if "error_consistency" in t and len(t["error_consistency"]):
        kinds = analysis.cleaned.scored.drop_duplicates("observer").set_index("observer")["observer_kind"]
        matrix = consistency.kappa_matrix(t["error_consistency"], list(kinds.index))
        figures["consistency"] = plots.to_png(plots.consistency_matrix_plot(matrix, kinds))
    if analysis.friedman is not None:
        figures["cd"] = plots.to_png(plots.cd_plot(analysis.friedman))
    if "thresholds" in t and len(t["psychometric_curves"]):
        figures["psychometric"] = plots.to_png(plots.psychometric_curves(
            t["psychometric_points"], t["psychometric_curves"], t["thresholds"], ref))
        figures["thresholds"] = plots.to_png(plots.threshold_comparison(t["thresholds"]))
    if "oddity" in t:
        figures["oddity"] = plots.to_png(plots.oddity_plot(t["oddity"]))
    if "cue_decomposition" in t:
        figures["cue_decomposition"] = plots.to_png(plots.cue_decomposition_plot(t["cue_decomposition"]))
    return figures


def write_tables(analysis: Analysis, out: Path) -> None:
    """Every table as tables/NAME.csv, and all tables plus the summary in results.json."""
    for name, table in analysis.tables.items():
        atomic_write(out / "tables" / f"{name}.csv", table.to_csv(index=False).encode("utf-8"))
    payload = {"summary": analysis.summary, "notes": analysis.notes,
               "tables": {n: json.loads(t.to_json(orient="records")) for n, t in analysis.tables.items()}}
    atomic_write(out / "results.json", json.dumps(payload, indent=1, default=_json_default).encode("utf-8"))


def _json_default(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return str(value)


def provenance(sources, compare, reference_name, options: AnalysisOptions) -> dict:
    """How the report was made: inputs (with sha256 of files), options, library versions, time."""
    def describe(path: Path) -> dict:
        files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file()
                                                     and p.suffix in (".csv", ".parquet", ".sqlite", ".json"))
        return {"path": str(path), "files": {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}}
    versions = {"cuebench": __version__, "python": platform.python_version()}
    for lib in LIBRARIES:
        versions[lib] = getattr(importlib.import_module(lib), "__version__", None) or metadata.version(lib)
    return {"created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "sources": [describe(Path(s)) for s in sources],
            "compare": [describe(Path(s)) for s in (compare or [])],
            "reference": reference_name, "options": options.to_dict(), "versions": versions}


def render_html(analysis: Analysis, figures: dict[str, bytes], sources, compare, reference_name) -> str:
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("analysis", "templates"), autoescape=select_autoescape(["html"]))
    images = {k: "data:image/png;base64," + base64.b64encode(v).decode("ascii") for k, v in figures.items()}
    tables = {name: html_table(t, p_values=name == "nemenyi_p") for name, t in analysis.tables.items() if len(t)}
    ref_table = html_table(reference_wide()) if reference_name == "burgert2025" else None
    return env.get_template("report.html").render(
        title="cuebench report", sources=[str(s) for s in sources], compare=[str(c) for c in (compare or [])],
        summary=analysis.summary, notes=analysis.notes, images=images, tables=tables, reference_table=ref_table,
        reference_label=published.BURGERT2025_LABEL, created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        version=__version__)


def reference_wide() -> pd.DataFrame:
    """Burgert et al. 2025 Table 3 laid out as published: one row per observer, one column per feature."""
    table = published.burgert2025_table3()
    wide = table[table["feature"] != "original"].pivot(index="observer", columns="feature", values="relative_accuracy")
    wide = wide[list(published.BURGERT2025_FEATURES)]
    wide["original_accuracy"] = table[table["feature"] == "original"].set_index("observer")["accuracy"]
    wide = wide.loc[list(published.BURGERT2025_TABLE3)]
    wide.columns.name = None
    return wide.reset_index()
