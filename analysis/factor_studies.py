"""DiagViB-6 factor-study metrics, plots and report, from the training table alone.

Eulig et al. (2021), Sec. 3.4: acc_ij is the mean per-class test accuracy of predicting
factor F_i when F_j is the correlated factor; P_ij = E[acc_ij] over dataset samples
(for ZSO, P_i = E[acc_i]); FAAvg_i = E[mean_{j != i} acc_ij] (eq. 1) and
FAMin_i = E[min_{j != i} acc_ij] (eq. 2), each with its standard error over dataset
samples; in ZSO, FAAvg_i = FAMin_i = P_i. Table 2 compares the CHGO shortcut class's test
accuracy with the ZGO accuracy of the same pair. Which epoch a run contributes is chosen
as in BiasBed (Kalischek et al. 2023): best validation accuracy (default), the average
of the last n epochs, or the best test epoch (an oracle, flagged as such). Methods
(model/algorithm) are compared with the Friedman/Iman-Davenport and Nemenyi tests of
``analysis.ranking`` over (study, factor) blocks.
"""

from __future__ import annotations

import base64
import json
import re
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from cuebench.version import __version__
from cuebench.csvsafe import frame_csv
from cuebench.studies import FACTOR_TRAINING_TABLE as TABLE_FILE, StudyDir
from cuebench.errors import CuebenchError
from cuebench.expdir import atomic_write

from .selection import ORACLE, SelectionError, picked_epochs

FACTORS = ("position", "hue", "lightness", "scale", "shape", "texture")
"""Row order of Eulig et al. (2021), Fig. 4a (most shortcut-robust first)."""
STUDY_ORDER = ("ZSO", "FGO-20", "FGO-10", "FGO-5", "CGO-3", "CGO-2", "CGO-1", "CHGO", "ZGO")
"""Studies from most to fewest generalisation opportunities (the x axis of Fig. 4b)."""
SELECTIONS = ("best_val", "last_n", "oracle")
CHANCE = 1 / 3
REQUIRED = ("study", "target", "correlated", "dataset_sample", "shortcut_class", "model", "algorithm", "run",
            "epoch", "split", "accuracy", "per_class_accuracy")
KEYS = ["study", "model", "algorithm", "target", "correlated", "dataset_sample"]


class FactorStudyError(CuebenchError, ValueError):
    """The training table is missing, malformed, or cannot give the asked-for result."""


def load_training_table(path: str | Path) -> pd.DataFrame:
    """Read ``training.csv`` (or a study directory holding one); errors name the file and column."""
    path = Path(path)
    if path.is_dir():
        path = path / TABLE_FILE
    if not path.is_file():
        raise FactorStudyError(f"{path} does not exist; run 'cuebench train STUDYDIR' first")
    table = pd.read_csv(path)
    missing = [c for c in REQUIRED if c not in table.columns]
    if missing:
        raise FactorStudyError(f"{path}: column {missing[0]!r} is missing (a training table has {', '.join(REQUIRED)})")
    bad = table[~table["split"].isin(["val", "test"])]
    if len(bad):
        raise FactorStudyError(f"{path}: column 'split' has {bad['split'].iloc[0]!r}; expected 'val' or 'test'")
    table["per_class_accuracy"] = table["per_class_accuracy"].map(_per_class)
    return table


def _per_class(value) -> np.ndarray:
    values = json.loads(value) if isinstance(value, str) else value
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def method_label(model: str, algorithm: str) -> str:
    return f"{model}/{algorithm}"


def select_epochs(table: pd.DataFrame, selection: str = "best_val", last_n: int = 3) -> pd.DataFrame:
    """One test result per run (BiasBed model selection, Kalischek et al. 2023, Sec. 4), the epochs picked by
    :func:`analysis.selection.picked_epochs` with the factor study's run columns.

    ``best_val``: the epoch with the highest validation accuracy (earliest on ties);
    ``last_n``: test accuracy averaged over the last ``last_n`` epochs; ``oracle``: the best
    test epoch (optimistic: it looks at the test set; reported only flagged as oracle).
    """
    if selection not in SELECTIONS:
        raise FactorStudyError(f"unknown model selection {selection!r}; known: {', '.join(SELECTIONS)}")
    method = {"best_val": "best-val", "last_n": f"last-{last_n}", "oracle": ORACLE}[selection]
    run_keys = KEYS + ["run"]
    try:
        picked = list(picked_epochs(table, method, tuple(run_keys)))
    except SelectionError as err:
        raise FactorStudyError(str(err)) from None
    out = pd.DataFrame([{**dict(zip(run_keys, key)), "shortcut_class": int(rows["shortcut_class"].iloc[0]),
                         "epoch": epochs[0] if len(epochs) == 1 else f"last {len(epochs)}",
                         "accuracy": float(rows["accuracy"].mean()),
                         "per_class_accuracy": np.nanmean(np.stack(rows["per_class_accuracy"].to_list()), axis=0)}
                        for key, _, rows, epochs in picked])
    out["selection"] = selection
    out["oracle"] = selection == "oracle"
    return out


def pair_accuracy(selected: pd.DataFrame) -> pd.DataFrame:
    """acc_ij per dataset sample: the runs' selected test accuracies averaged."""
    grouped = selected.groupby(KEYS, sort=True)
    out = grouped["accuracy"].mean().reset_index()
    out["runs"] = grouped["run"].nunique().to_numpy()
    out["shortcut_class"] = grouped["shortcut_class"].first().to_numpy()
    out["per_class_accuracy"] = grouped["per_class_accuracy"].apply(lambda s: np.mean(np.stack(s.to_list()), axis=0)).to_numpy()
    return out


def _mean_se(values: pd.Series) -> pd.Series:
    n = values.notna().sum()
    se = values.std(ddof=1) / np.sqrt(n) if n > 1 else np.nan
    return pd.Series({"mean": values.mean(), "se": se, "samples": n})


def p_matrix(selected: pd.DataFrame) -> pd.DataFrame:
    """P_ij = E[acc_ij] over dataset samples, with its standard error (Eulig et al. 2021, Sec. 3.4)."""
    acc = pair_accuracy(selected)
    out = acc.groupby(["study", "model", "algorithm", "target", "correlated"])["accuracy"].apply(_mean_se).unstack()
    return out.rename(columns={"mean": "P", "se": "se"}).reset_index()


def factor_aggregates(selected: pd.DataFrame) -> pd.DataFrame:
    """FAAvg_i (eq. 1) and FAMin_i (eq. 2) per study and method, each with its standard error over samples.

    The mean and minimum over the correlated factors j are taken within each dataset sample,
    then averaged over samples. In ZSO no factor is correlated, so acc_i is the mean over
    whatever pairs were run and FAAvg_i = FAMin_i = P_i.
    """
    acc = pair_accuracy(selected)
    per_sample = acc.groupby(["study", "model", "algorithm", "target", "dataset_sample"])["accuracy"]
    summary = pd.DataFrame({"avg": per_sample.mean(), "min": per_sample.min(), "pairs": per_sample.size()}).reset_index()
    zso = summary["study"] == "ZSO"
    summary.loc[zso, "min"] = summary.loc[zso, "avg"]
    rows = []
    for key, group in summary.groupby(["study", "model", "algorithm", "target"]):
        avg, low = _mean_se(group["avg"]), _mean_se(group["min"])
        rows.append({**dict(zip(["study", "model", "algorithm", "target"], key)), "FAAvg": avg["mean"],
                     "FAAvg_se": avg["se"], "FAMin": low["mean"], "FAMin_se": low["se"], "samples": int(avg["samples"]),
                     "pairs": int(group["pairs"].max())})
    return pd.DataFrame(rows)


def chgo_improvement(selected: pd.DataFrame) -> pd.DataFrame:
    """Eulig et al. (2021), Table 2: CHGO test accuracy of the shortcut-only class minus the ZGO
    accuracy of the same pair and dataset sample; mean and standard deviation over pairs and samples,
    in percentage points, one row per method and one column per target factor."""
    acc = pair_accuracy(selected)
    pair = ["model", "algorithm", "target", "correlated", "dataset_sample"]
    chgo = acc[acc["study"] == "CHGO"].set_index(pair)
    zgo = acc[acc["study"] == "ZGO"].set_index(pair)["accuracy"]
    both = chgo.index.intersection(zgo.index)
    if len(both) == 0:
        raise FactorStudyError("Table 2 needs CHGO and ZGO results for the same pairs and dataset samples")
    shortcut = [row["per_class_accuracy"][int(row["shortcut_class"])] for _, row in chgo.loc[both].iterrows()]
    diff = pd.DataFrame({"improvement": 100 * (np.array(shortcut) - zgo.loc[both].to_numpy())}, index=both).reset_index()
    stats = diff.groupby(["model", "algorithm", "target"])["improvement"].agg(["mean", "std", "count"]).reset_index()
    stats["method"] = [method_label(m, a) for m, a in zip(stats["model"], stats["algorithm"])]
    stats["cell"] = [f"{m:.0f} ± {0 if np.isnan(s) else s:.0f}" for m, s in zip(stats["mean"], stats["std"])]
    table = stats.pivot(index="method", columns="target", values="cell")
    table = table[[f for f in FACTORS if f in table.columns]]
    table.columns.name = None
    return table.reset_index()


def rank_methods(aggregates: pd.DataFrame, metric: str = "FAAvg", alpha: float = 0.05):
    """Friedman/Iman-Davenport + Nemenyi over (study, factor) blocks, one column per method
    (BiasBed, Kalischek et al. 2023, eqs. 4-6; reuses ``analysis.ranking.friedman_nemenyi``)."""
    from .ranking import friedman_nemenyi

    data = aggregates.assign(method=[method_label(m, a) for m, a in zip(aggregates["model"], aggregates["algorithm"])])
    scores = data.pivot_table(index=["study", "target"], columns="method", values=metric, aggfunc="mean")
    scores.index = [f"{s}:{t}" for s, t in scores.index]
    scores.columns.name = None
    return friedman_nemenyi(scores.dropna(), higher_is_better=True, alpha=alpha)


def _file_stem(label: str) -> str:
    """A method label as part of a figure's file name."""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", label).strip("_")


def _studies_present(values) -> list[str]:
    present = set(values)
    return [s for s in STUDY_ORDER if s in present]


def matrix_figure(p: pd.DataFrame, model: str, algorithm: str):
    """Eulig et al. (2021), Fig. 4a layout: the ZSO vector P_i, then one P_ij matrix per study
    (rows: predicted factor F_i, columns: correlated factor F_j)."""
    import matplotlib.pyplot as plt

    data = p[(p["model"] == model) & (p["algorithm"] == algorithm)]
    studies = _studies_present(data["study"])
    widths = [1 if s == "ZSO" else 6 for s in studies]
    fig, axes = plt.subplots(1, len(studies), figsize=(1.2 + sum(widths) * 0.55, 3.4), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    image = None
    for ax, study in zip(axes[0], studies):
        sub = data[data["study"] == study]
        if study == "ZSO":
            grid = sub.groupby("target")["P"].mean().reindex(FACTORS).to_numpy()[:, None]
            cols = ["P_i"]
        else:
            grid = sub.pivot_table(index="target", columns="correlated", values="P").reindex(index=FACTORS, columns=FACTORS).to_numpy()
            cols = FACTORS
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
        for (r, c), v in np.ndenumerate(grid):
            if not np.isnan(v):
                ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if v < 0.6 else "black")
        ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=8)
        ax.set_yticks(range(len(FACTORS)), FACTORS if ax is axes[0][0] else [""] * len(FACTORS), fontsize=8)
        ax.set_title(study, fontsize=10)
    fig.colorbar(image, ax=list(axes[0]), fraction=0.02, label="test accuracy")
    fig.suptitle(f"{method_label(model, algorithm)}: P_ij (rows predicted, columns correlated)", fontsize=10)
    return fig


def aggregate_figure(aggregates: pd.DataFrame):
    """Eulig et al. (2021), Fig. 4b layout: FAAvg (solid, filled) and FAMin (dashed, hollow) per study, one
    panel per factor, each method its own colour and marker (analysis.figure_style), legend outside."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from .figure_style import legend_outside, series_styles

    studies = _studies_present(aggregates["study"])
    data = aggregates.assign(method=[method_label(m, a) for m, a in zip(aggregates["model"], aggregates["algorithm"])])
    styles = series_styles(data["method"].unique())
    targets = [f for f in FACTORS if f in set(data["target"])]
    fig, axes = plt.subplots(1, len(targets), figsize=(2.6 * len(targets) + 1, 3.2), squeeze=False, sharey=True)
    x = np.arange(len(studies))
    for ax, target in zip(axes[0], targets):
        for method, group in data[data["target"] == target].groupby("method"):
            style, g = styles[str(method)], group.set_index("study").reindex(studies)
            ax.errorbar(x, g["FAAvg"], yerr=g["FAAvg_se"], color=style["color"], marker=style["marker"], ms=4,
                        mfc=style["color"], ls="-", capsize=2, label=str(method))
            ax.plot(x, g["FAMin"], color=style["color"], marker=style["marker"], ms=4, mfc="white", ls="--")
        ax.axhline(CHANCE, color="grey", ls=":", lw=1)
        ax.set_xticks(x, studies, rotation=90, fontsize=8)
        ax.set_ylim(0, 1.02)
        ax.set_title(target)
        ax.set_xlabel("study")
    axes[0][0].set_ylabel("mean per-class test accuracy")
    keys = [Line2D([], [], color="#444444", ls="-", label="FAAvg (solid, ± s.e. over samples)"),
            Line2D([], [], color="#444444", ls="--", label="FAMin (dashed, hollow)"),
            Line2D([], [], color="grey", ls=":", label="chance (1/3)")]
    for key in keys:
        axes[0][-1].add_line(key)
    fig.tight_layout()
    legend_outside(fig, axes)
    return fig


REPORT_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table.data{border-collapse:collapse;font-size:13px;margin:0.5em 0}table.data td,table.data th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}
.note{color:#666;font-size:13px}.oracle{background:#fff4e0;padding:0.5em 1em;border-left:4px solid #e69500}img{max-width:100%}</style></head>
<body><h1>{{ title }}</h1>
<p>Study directory <code>{{ study_dir }}</code>: studies {{ studies|join(", ") }}; {{ n_pairs }} factor pair(s);
dataset samples {{ samples|join(", ") }}; split sizes {{ sizes }}. Model selection: <b>{{ selection }}</b>.
Accuracies are mean per-class test accuracies on the study's test combinations (Eulig et al. 2021, Sec. 3.4);
standard errors are over dataset samples; chance is 1/3.</p>
{% for note in notes %}<p class="note">{{ note }}</p>{% endfor %}
<h2>FAAvg and FAMin per study (Fig. 4b layout)</h2><img src="{{ images.aggregates }}" alt="FAAvg and FAMin">
{{ tables.aggregates|safe }}
<h2>P<sub>ij</sub> per study (Fig. 4a layout)</h2>
{% for key, img in matrices %}<img src="{{ img }}" alt="P_ij matrices {{ key }}">{% endfor %}
{{ tables.p|safe }}
{% if tables.chgo %}<h2>CHGO minus ZGO (Table 2 layout)</h2>
<p class="note">Test accuracy of the shortcut-only class in CHGO minus the ZGO accuracy of the same pair, percentage points, mean ± s.d. over pairs and dataset samples.</p>
{{ tables.chgo|safe }}{% endif %}
{% if friedman %}<h2>Methods compared (Friedman / Iman-Davenport, Nemenyi)</h2>
<p>Blocks: (study, factor) FAAvg values; {{ friedman.blocks }} blocks, {{ friedman.methods }} methods.
Friedman &chi;&sup2; = {{ "%.3f"|format(friedman.chi2) }} (p = {{ "%.3g"|format(friedman.chi2_p) }}),
{% if friedman.note %}{{ friedman.note }},{% else %}Iman-Davenport F({{ friedman.df1 }}, {{ friedman.df2 }}) = {{ "%.3f"|format(friedman.iman_davenport_f) }} (p = {{ "%.3g"|format(friedman.f_p) }}),{% endif %}
critical difference {{ "%.3f"|format(friedman.critical_difference) }} at &alpha; = {{ friedman.alpha }}.</p>
<img src="{{ images.cd }}" alt="critical difference diagram">{{ tables.ranks|safe }}<h3>Nemenyi p-values</h3>{{ tables.nemenyi|safe }}{% endif %}
<h2 class="oracle">Oracle (best test epoch) — optimistic, for reference only</h2>
<div class="oracle"><p>Selecting the epoch by test accuracy looks at the test set (BiasBed, Kalischek et al. 2023); these numbers are an upper bound, not a result.</p>
{{ tables.oracle|safe }}</div>
<p class="note">Made by cuebench {{ version }} on {{ created }} from {{ table_file }} (sha256 {{ table_sha }}).</p>
</body></html>
"""


def write_study_report(study_dir: str | Path, out_dir: str | Path | None = None, selection: str = "best_val",
                       last_n: int = 3) -> Path:
    """Write a self-contained HTML report (inlined PNGs) and the tables as CSV; return the HTML path."""
    import hashlib

    import matplotlib

    matplotlib.use("Agg")
    from jinja2 import Environment, select_autoescape

    from .figure_style import save
    from .plots import cd_plot
    from .ranking import RankTestError
    from .tables import html_table

    study_dir = Path(study_dir)
    out = Path(out_dir) if out_dir else study_dir / "reports"
    table = load_training_table(study_dir)
    study = StudyDir(study_dir).load("factor") if StudyDir(study_dir).kind == "factor" else None
    selected = select_epochs(table, selection, last_n)
    p = p_matrix(selected)
    agg = factor_aggregates(selected)
    oracle = factor_aggregates(select_epochs(table, "oracle"))
    notes, tables, images = [], {}, {}
    figures = out / "figures"
    images["aggregates"] = save(aggregate_figure(agg), figures / "aggregates")
    matrices = []
    for (model, algorithm), _ in p.groupby(["model", "algorithm"]):
        label = method_label(model, algorithm)
        matrices.append((label, save(matrix_figure(p, model, algorithm), figures / f"p_matrix_{_file_stem(label)}")))
    tables["aggregates"], tables["p"], tables["oracle"] = agg, p, oracle
    try:
        tables["chgo"] = chgo_improvement(selected)
    except FactorStudyError as err:
        notes.append(f"Table 2 not shown: {err}.")
    friedman = None
    try:
        result = rank_methods(agg)
        friedman = result.summary()
        images["cd"] = save(cd_plot(result), figures / "cd")
        tables["ranks"] = result.table()
        tables["nemenyi"] = result.nemenyi_p.reset_index().rename(columns={"index": "method"})
    except RankTestError as err:
        notes.append(f"Methods not rank-tested: {err} (train more models or algorithms on this study directory).")
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        atomic_write(out / f"factor_{name}.csv", frame_csv(frame))
    uri = {k: "data:image/png;base64," + base64.b64encode(v).decode("ascii") for k, v in images.items()}
    html_tables = {k: html_table(v, p_values=k == "nemenyi") for k, v in tables.items()}
    table_path = study_dir / TABLE_FILE
    html = Environment(autoescape=select_autoescape(default=True)).from_string(REPORT_TEMPLATE).render(
        title=f"DiagViB-6 factor study: {study_dir.name}", study_dir=study_dir.name,
        studies=_studies_present(table["study"]), n_pairs=table[["target", "correlated"]].drop_duplicates().shape[0],
        samples=sorted(table["dataset_sample"].unique().tolist()), sizes=study.sizes if study else "?", selection=selection,
        notes=notes, images=uri, tables=html_tables, friedman=friedman,
        matrices=[(k, "data:image/png;base64," + base64.b64encode(v).decode("ascii")) for k, v in matrices],
        version=__version__, created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        table_file=TABLE_FILE, table_sha=hashlib.sha256(table_path.read_bytes()).hexdigest()[:16])
    path = out / "report.html"
    atomic_write(path, html.encode("utf-8"))
    return path
