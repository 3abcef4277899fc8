"""Report of a cue-reliance training study: per algorithm, DiST oddity accuracy, cue-conflict
shape bias and original-photo accuracy, each with its run-to-run spread, and a rank test.

Every number comes from stored answers: the training table (``cue_training.csv``: the
best-validation epoch of each run, BiasBed's model selection, and its top-1 accuracy on
held-out photos) and the responses the selected checkpoints gave in the study's two
experiments (``dist/``, ``cue_conflict/``), scored with the same functions as any observer
(``metrics.oddity_accuracy``, Wen et al. 2024; ``metrics.shape_bias``, Geirhos et al. 2019).
Algorithms are ranked over the three measures with the Friedman / Iman-Davenport and
Nemenyi tests and drawn as a critical-difference diagram (``analysis.ranking``, BiasBed).
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from cuebench import __version__
from cuebench.csvsafe import frame_csv
from cuebench.errors import CuebenchError
from cuebench.expdir import atomic_write

TABLE_FILE = "cue_training.csv"
MEASURES = {"dist_accuracy": "DiST oddity accuracy", "shape_bias": "cue-conflict shape bias",
            "original_accuracy": "original-photo accuracy (top-1)"}
ALGORITHM_ORDER = ("erm", "padain", "distinguish", "sagnet", "infodrop")


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


def rank_algorithms(summary: pd.DataFrame, alpha: float = 0.05):
    """Friedman/Iman-Davenport + Nemenyi with the three measures as blocks (higher is better in each)."""
    from .ranking import friedman_nemenyi

    scores = summary.set_index("algorithm")[[f"{m}_mean" for m in MEASURES]].T
    scores.index = list(MEASURES)
    scores.columns.name = None
    return friedman_nemenyi(scores, higher_is_better=True, alpha=alpha)


def measures_figure(per_run: pd.DataFrame):
    """One panel per measure: each run's value and the algorithm's mean with +-1 SD."""
    import matplotlib.pyplot as plt

    algorithms = list(dict.fromkeys(per_run["algorithm"]))
    fig, axes = plt.subplots(1, len(MEASURES), figsize=(4.2 * len(MEASURES), 3.6))
    for ax, (measure, label) in zip(axes, MEASURES.items()):
        for i, algorithm in enumerate(algorithms):
            values = per_run.loc[per_run["algorithm"] == algorithm, measure].dropna().to_numpy()
            ax.scatter(np.full(len(values), i) + np.linspace(-0.12, 0.12, len(values)), values, s=14, alpha=0.6)
            if len(values):
                ax.errorbar(i, values.mean(), yerr=values.std(ddof=1) if len(values) > 1 else 0, fmt="o",
                            color="black", capsize=4)
        if measure == "dist_accuracy":
            ax.axhline(1 / 3, color="grey", linestyle=":", linewidth=1)
        ax.set_xticks(range(len(algorithms)), algorithms, rotation=30)
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.25)
    fig.tight_layout()
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
{% for note in notes %}<p class="note">{{ note }}</p>{% endfor %}
<h2>Per algorithm (mean, SD over runs)</h2>{{ tables.summary | safe }}
<img src="{{ images.measures }}" alt="measures per algorithm">
{% if friedman %}<h2>Rank test over the three measures</h2>
<p>Friedman chi2 = {{ '%.3f' % friedman.chi2 }} (p = {{ '%.3g' % friedman.chi2_p }}), Iman-Davenport
F({{ friedman.df1 }}, {{ friedman.df2 }}) = {{ '%.3f' % friedman.iman_davenport_f }} (p = {{ '%.3g' % friedman.f_p }}),
Nemenyi CD = {{ '%.2f' % friedman.critical_difference }} at alpha = {{ friedman.alpha }}.</p>
<img src="{{ images.cd }}" alt="critical-difference diagram">{{ tables.ranks | safe }}{{ tables.nemenyi | safe }}{% endif %}
<h2>Per run</h2>{{ tables.runs | safe }}
</body></html>
"""


def write_cue_report(study_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """Write ``reports/cue_report.html`` (inlined PNGs) and the tables as CSV; return the HTML path."""
    import matplotlib

    matplotlib.use("Agg")
    from jinja2 import Environment, select_autoescape

    from .plots import cd_plot, to_png
    from .ranking import RankTestError
    from .tables import html_table

    study = Path(study_dir)
    out = Path(out_dir) if out_dir else study / "reports"
    per_run = run_measures(study)
    summary = algorithm_summary(per_run)
    tables = {"runs": per_run, "summary": summary}
    images, notes, friedman = {"measures": to_png(measures_figure(per_run))}, [], None
    try:
        result = rank_algorithms(summary)
        friedman = result.summary()
        images["cd"] = to_png(cd_plot(result))
        tables["ranks"] = result.table()
        tables["nemenyi"] = result.nemenyi_p.reset_index().rename(columns={"index": "method"})
    except RankTestError as err:
        notes.append(f"Algorithms not rank-tested: {err}.")
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        atomic_write(out / f"cue_{name}.csv", frame_csv(frame))
    uri = {k: "data:image/png;base64," + base64.b64encode(v).decode("ascii") for k, v in images.items()}
    html = Environment(autoescape=select_autoescape(default=True)).from_string(REPORT_TEMPLATE).render(
        title=f"Cue-reliance training study: {study.name}", notes=notes, images=uri, friedman=friedman,
        tables={k: html_table(v, p_values=k == "nemenyi") for k, v in tables.items()}, version=__version__,
        created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), table_file=TABLE_FILE,
        table_sha=hashlib.sha256((study / TABLE_FILE).read_bytes()).hexdigest()[:16])
    path = out / "cue_report.html"
    atomic_write(path, html.encode("utf-8"))
    return path
