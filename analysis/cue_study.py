"""Report of a cue-reliance training study: per algorithm, DiST oddity accuracy, cue-conflict
shape bias and original-photo accuracy, each with its run-to-run spread, each algorithm's
difference from ERM with an interval, and rank tests where there are blocks enough.

Every number comes from stored answers: the training table (``cue_training.csv``: the
best-validation epoch of each run, BiasBed's model selection, and its top-1 accuracy on
held-out photos) and the responses the selected checkpoints gave in the study's two
experiments (``dist/``, ``cue_conflict/``), scored with the same functions as any observer
(``metrics.oddity_accuracy``, Wen et al. 2024; ``metrics.shape_bias``, Geirhos et al. 2019).

The three measures answer different questions on different scales, so they are never pooled:
each measure gets each algorithm's difference from ERM with a Welch 95 % interval over runs
(:func:`measure_effects`), and, per measure, the Friedman / Iman-Davenport and Nemenyi tests
with the runs as blocks (run r of every algorithm shares its seed, so the runs are matched) and
a critical-difference diagram (``analysis.ranking``, BiasBed) only with at least
:data:`MIN_BLOCKS` runs (this module's rule). With fewer blocks the test's chi-square and F
approximations are unreliable (with three blocks any perfectly consistent order makes the
Iman-Davenport F infinite) and it has little power, so a non-significant result would be read as
"no algorithm differs" when it only means "too few runs"; the report says so instead of testing.
The measures themselves are no blocks: ranking an algorithm over DiST accuracy, shape bias and
photo accuracy together mixes what it gains on one with what it loses on another.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from cuebench.version import __version__
from cuebench.csvsafe import frame_csv
from cuebench.errors import CuebenchError
from cuebench.expdir import atomic_write
from cuebench.studies import CUE_TRAINING_TABLE as TABLE_FILE

MEASURES = {"dist_accuracy": "DiST oddity accuracy", "shape_bias": "cue-conflict shape bias",
            "original_accuracy": "original-photo accuracy (top-1)"}
MEASURE_UNITS = {"dist_accuracy": "fraction of triplets right", "shape_bias": "shape / (shape + texture) decisions",
                 "original_accuracy": "fraction correct"}
ALGORITHM_ORDER = ("erm", "padain", "distinguish", "sagnet", "infodrop")
BASELINE = "erm"
MIN_BLOCKS = 5
CONFIDENCE = 0.95


class CueStudyError(CuebenchError, ValueError):
    """A cue-study directory lacks what the report needs."""


def run_measures(study_dir: str | Path) -> pd.DataFrame:
    """One row per (algorithm, run): its selected epoch, original accuracy, DiST accuracy and shape bias."""
    from .load import load_responses
    from .metrics import oddity_accuracy, shape_bias

    study = Path(study_dir)
    path = study / TABLE_FILE
    if not path.is_file():
        raise CueStudyError(f"{path} does not exist; train the study first (cuebench train-cues)")
    table = pd.read_csv(path)
    selected = table[table["selected"].astype(bool) & (table["split"] == "test")]
    runs = selected[["algorithm", "run", "epoch", "observer"]].rename(columns={"epoch": "selected_epoch"}).assign(
        original_accuracy=selected["accuracy"].to_numpy())
    answers = {}
    for name in ("dist", "cue_conflict"):
        store = study / name / "responses.sqlite"
        if not store.is_file():
            raise CueStudyError(f"{store} does not exist: no checkpoint has answered the {name} trials")
        rows = load_responses(store)
        answers[name] = rows[(rows["role"] == "test") & rows["correct"].notna()
                             & rows["observer"].isin(runs["observer"])].assign(
            correct=lambda d: d["correct"].astype(int))
    dist = oddity_accuracy(answers["dist"]).rename(columns={"accuracy": "dist_accuracy", "n": "dist_trials"})
    bias = shape_bias(answers["cue_conflict"])
    out = runs.merge(dist[["observer", "dist_accuracy", "dist_trials"]], on="observer", how="left")
    out = out.merge(bias[["observer", "shape_bias", "n_shape", "n_texture"]], on="observer", how="left")
    order = {a: i for i, a in enumerate(ALGORITHM_ORDER)}
    return out.sort_values(["algorithm", "run"], key=lambda s: s.map(order).fillna(99) if s.name == "algorithm"
                           else s).reset_index(drop=True)


def algorithm_summary(per_run: pd.DataFrame) -> pd.DataFrame:
    """Mean, standard deviation (ddof 1) and number of runs of each measure per algorithm."""
    rows = []
    for algorithm, group in per_run.groupby("algorithm", sort=False):
        row = {"algorithm": algorithm, "runs": len(group)}
        for measure in MEASURES:
            values = group[measure].dropna()
            row[f"{measure}_mean"] = values.mean()
            row[f"{measure}_sd"] = values.std(ddof=1) if len(values) > 1 else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def welch_interval(a, b, confidence: float = CONFIDENCE) -> tuple[float, float, float, float]:
    """Difference of means mean(a) − mean(b) with its Welch interval and two-sided p (Welch 1947, Biometrika 34):
    SE = √(s_a²/n_a + s_b²/n_b), df = SE⁴ / ((s_a²/n_a)²/(n_a − 1) + (s_b²/n_b)²/(n_b − 1)), difference ± t_df·SE.
    NaN interval and p with fewer than two runs on either side."""
    from scipy import stats

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    difference = float(a.mean() - b.mean()) if len(a) and len(b) else np.nan
    if len(a) < 2 or len(b) < 2:
        return difference, np.nan, np.nan, np.nan
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = np.sqrt(va + vb)
    if se == 0:
        return difference, difference, difference, 1.0 if difference == 0 else 0.0
    df = se ** 4 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = stats.t.ppf((1 + confidence) / 2, df) * se
    return difference, difference - half, difference + half, float(2 * stats.t.sf(abs(difference) / se, df))


def measure_effects(per_run: pd.DataFrame) -> pd.DataFrame:
    """Per measure and algorithm: its difference from ERM (mean over runs, algorithm − ERM) with the Welch 95 %
    interval and p over runs (:func:`welch_interval`); ``note`` says why a row has no interval."""
    rows = []
    baseline = per_run[per_run["algorithm"] == BASELINE]
    for measure in MEASURES:
        base = baseline[measure].dropna().to_numpy()
        for algorithm, group in per_run.groupby("algorithm", sort=False):
            if algorithm == BASELINE:
                continue
            values = group[measure].dropna().to_numpy()
            difference, low, high, p = welch_interval(values, base)
            note = "" if len(values) > 1 and len(base) > 1 else (
                "no interval: needs at least 2 runs of each algorithm" if len(base) else f"no {BASELINE} run")
            rows.append({"measure": measure, "algorithm": algorithm, "difference_from_erm": difference,
                         "ci_low": low, "ci_high": high, "p": p, "runs": len(values), "erm_runs": len(base),
                         "note": note})
    return pd.DataFrame(rows, columns=["measure", "algorithm", "difference_from_erm", "ci_low", "ci_high", "p",
                                       "runs", "erm_runs", "note"])


def rank_tests(per_run: pd.DataFrame, alpha: float = 0.05) -> tuple[dict, list[str]]:
    """Per measure, Friedman/Iman-Davenport + Nemenyi over the algorithms with the matched runs as blocks (higher is
    better), where at least :data:`MIN_BLOCKS` runs have a value for every algorithm; returns {measure: result} and
    a note for each measure not tested."""
    from .ranking import RankTestError, friedman_nemenyi

    results, notes = {}, []
    for measure, label in MEASURES.items():
        scores = per_run.pivot_table(index="run", columns="algorithm", values=measure, aggfunc="first")
        scores = scores[[a for a in dict.fromkeys(per_run["algorithm"]) if a in scores.columns]].dropna()
        scores.columns.name = None
        if len(scores) < MIN_BLOCKS:
            notes.append(f"{label}: no rank test, {len(scores)} matched run(s) as blocks; the Friedman test needs at "
                         f"least {MIN_BLOCKS} to mean anything (train with --runs {MIN_BLOCKS} or more)")
            continue
        try:
            results[measure] = friedman_nemenyi(scores, higher_is_better=True, alpha=alpha)
        except RankTestError as err:
            notes.append(f"{label}: no rank test, {err}")
    return results, notes


def measures_figure(per_run: pd.DataFrame):
    """One panel per measure: each run's value (hollow) and the algorithm's mean with +-1 SD (filled), each
    algorithm its own colour and marker (analysis.figure_style), legend outside."""
    import matplotlib.pyplot as plt

    from .figure_style import legend_outside, series_styles

    algorithms = list(dict.fromkeys(per_run["algorithm"]))
    styles = series_styles(algorithms)
    fig, axes = plt.subplots(1, len(MEASURES), figsize=(4.2 * len(MEASURES), 3.6))
    for ax, (measure, label) in zip(axes, MEASURES.items()):
        for i, algorithm in enumerate(algorithms):
            style = styles[str(algorithm)]
            values = per_run.loc[per_run["algorithm"] == algorithm, measure].dropna().to_numpy()
            ax.plot(np.full(len(values), i) + np.linspace(-0.12, 0.12, len(values)), values, ls="none", ms=5,
                    marker=style["marker"], color=style["color"], mfc="white", alpha=0.8)
            if len(values):
                ax.errorbar(i, values.mean(), yerr=values.std(ddof=1) if len(values) > 1 else 0, ls="none", ms=8,
                            marker=style["marker"], color=style["color"], mfc=style["color"], capsize=4,
                            label=str(algorithm))
        if measure == "dist_accuracy":
            ax.axhline(1 / 3, color="grey", linestyle=":", linewidth=1, label="chance (1/3)")
        ax.set_xticks(range(len(algorithms)), algorithms, rotation=30)
        ax.set_xlabel("training algorithm")
        ax.set_ylabel(MEASURE_UNITS[measure])
        ax.set_title(label, fontsize=10)
    fig.suptitle("hollow: each run; filled: mean ± 1 SD over runs", fontsize=9)
    fig.tight_layout()
    legend_outside(fig, axes)
    return fig


REPORT_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 7px;font-size:13px}
img{max-width:100%}.note{color:#555;font-size:13px}</style></head><body>
<h1>{{ title }}</h1>
<p class="note">cuebench {{ version }}, {{ created }}; table {{ table_file }} (sha256 {{ table_sha }}).
Each run is the epoch with the best validation accuracy (BiasBed model selection). DiST: oddity trials on
originals no model trained on, penultimate features (Wen et al. 2024, Eq. 2; chance 1/3). Shape bias over
cue-conflict images whose shape and texture classes differ (Geirhos et al. 2019). Original accuracy: top-1
ImageNet accuracy on held-out photos.</p>
<h2>Per algorithm (mean, SD over runs)</h2>{{ tables.summary | safe }}
<img src="{{ images.measures }}" alt="measures per algorithm">
<h2>Difference from ERM per measure</h2>
<p class="note">Mean over runs, algorithm minus ERM, with a Welch 95 % interval over runs. An interval that
contains 0 does not show that two algorithms are equal, only that these runs cannot tell them apart.</p>
{{ tables.effects | safe }}
<h2>Rank tests per measure</h2>
{% for note in rank_notes %}<p class="note">{{ note }}</p>{% endfor %}
{% for measure, friedman in friedman.items() %}<h3>{{ measures[measure] }}</h3>
<p>Friedman chi2 = {{ '%.3f' % friedman.chi2 }} (p = {{ '%.3g' % friedman.chi2_p }}), {% if friedman.note %}{{ friedman.note }},{% else %}Iman-Davenport
F({{ friedman.df1 }}, {{ friedman.df2 }}) = {{ '%.3f' % friedman.iman_davenport_f }} (p = {{ '%.3g' % friedman.f_p }}),{% endif %}
Nemenyi CD = {{ '%.2f' % friedman.critical_difference }} at alpha = {{ friedman.alpha }}, {{ friedman.blocks }} runs
as blocks.</p>
<img src="{{ images['cd_' + measure] }}" alt="critical-difference diagram, {{ measures[measure] }}">
{{ tables['ranks_' + measure] | safe }}{{ tables['nemenyi_' + measure] | safe }}{% endfor %}
<h2>Per run</h2>{{ tables.runs | safe }}
</body></html>
"""


def write_cue_report(study_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """Write ``reports/cue_report.html`` (inlined PNGs) and the tables as CSV; return the HTML path."""
    import matplotlib

    matplotlib.use("Agg")
    from jinja2 import Environment, select_autoescape

    from .figure_style import save
    from .plots import cd_plot
    from .tables import html_table

    study = Path(study_dir)
    out = Path(out_dir) if out_dir else study / "reports"
    per_run = run_measures(study)
    summary = algorithm_summary(per_run)
    tables = {"runs": per_run, "summary": summary, "effects": measure_effects(per_run)}
    images = {"measures": save(measures_figure(per_run), out / "figures" / "measures")}
    results, rank_notes = rank_tests(per_run)
    friedman = {}
    for measure, result in results.items():
        friedman[measure] = result.summary()
        images[f"cd_{measure}"] = save(cd_plot(result), out / "figures" / f"cd_{measure}")
        tables[f"ranks_{measure}"] = result.table()
        tables[f"nemenyi_{measure}"] = result.nemenyi_p.reset_index().rename(columns={"index": "method"})
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        atomic_write(out / f"cue_{name}.csv", frame_csv(frame))
    uri = {k: "data:image/png;base64," + base64.b64encode(v).decode("ascii") for k, v in images.items()}
    html = Environment(autoescape=select_autoescape(default=True)).from_string(REPORT_TEMPLATE).render(
        title=f"Cue-reliance training study: {study.name}", rank_notes=rank_notes, images=uri,
        friedman=friedman, measures=MEASURES, version=__version__,
        tables={k: html_table(v, p_values=k.startswith("nemenyi")) for k, v in tables.items()},
        created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), table_file=TABLE_FILE,
        table_sha=hashlib.sha256((study / TABLE_FILE).read_bytes()).hexdigest()[:16])
    path = out / "cue_report.html"
    atomic_write(path, html.encode("utf-8"))
    return path
