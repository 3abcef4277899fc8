"""Reliance over a domain of data sets (Burgert et al. 2025, Exp. II, Figs. 4-5 and 11-14): the same
suppression grid on the test split of every data set of a domain, each answered by models trained on
that set, and the reliance curves averaged over the sets.

Each set's experiment has its own classes, so its own chance 1/C: relative accuracy is put on the
chance-0 / original-1 scale per set, (A_sup − 1/C) / (A_orig − 1/C) (Burgert et al., Sec. 5.2;
``analysis.metrics.relative_accuracy`` with the set's C), before sets are averaged; a multi-label set is
put on the same scale with its models' mAP and the mAP of random answers (``analysis.multilabel``). A model's
identity across sets is its architecture (the observer id up to ``:``; a checkpoint trained per set
answers as ``NAME:file-<hash>``): its runs on one set are averaged first, then the sets, each set
weighing the same, with the sd over sets (Burgert et al. Fig. 5's 1-sigma error bars). People keep their
own observer id.

A run whose originals are at or below chance has no value on the chance-0 / original-1 scale (nor a
relative accuracy with originals never right): each mean is over the runs and sets that have the value, and
it says so: ``n_runs_<value>`` / ``n_sets_<value>`` count what entered each mean, ``n_runs`` / ``n_sets``
what was answered, and ``left_out`` names the runs and sets that did not enter and why.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cuebench.expdir import ExperimentDir
from cuebench.labels import category_labels

from . import metrics
from .exclusions import apply_exclusions
from .load import load_responses
from .multilabel import map_reliance, map_table

VALUES = ("relative_accuracy", "chance_corrected")
MAP_AT_CHANCE = "mAP of the originals at or below its chance: no chance-corrected value"


def set_names(sources: list[Path]) -> list[str]:
    """Each experiment's name in the domain: its folder's, with the folder above where two share one
    (``domain/flowers/suppression`` and ``domain/pets/suppression`` -> ``flowers/suppression``, ...)."""
    names = [Path(s).name for s in sources]
    return [f"{Path(s).parent.name}/{Path(s).name}" if names.count(Path(s).name) > 1 else Path(s).name
            for s in sources]


def model_of(observer: str, kind: str) -> str:
    return str(observer).split(":", 1)[0] if kind == "model" else str(observer)


def set_reliance(rows: pd.DataFrame, labels: tuple[str, ...]) -> pd.DataFrame:
    """One set's reliance per observer, condition and level from its stored answers: accuracy against 1/C
    over the scored trials, or, for a multi-label set (an image with several labels, whose trials have no
    one right answer), the models' mAP against its value under random answers (``analysis.multilabel``:
    ``relative_accuracy`` = mAP_sup / mAP_orig, ``chance_corrected`` the reliance); ``measure`` says which."""
    tests = rows[(rows["trial_type"] == "classify") & (rows["role"] == "test")]
    if any(len(category_labels(c)) > 1 for c in tests["category"].dropna()):
        rel = map_reliance(map_table(tests, labels))
        return rel.assign(observer_kind="model", relative_accuracy=rel["mAP"] / rel["mAP_original"],
                          chance_corrected=rel["reliance"], measure="mAP",
                          note=rel["reliance"].isna().map({True: MAP_AT_CHANCE, False: ""}))
    scored = apply_exclusions(rows).scored
    classify = scored[(scored["trial_type"] == "classify") & (scored["role"] == "test")]
    rel = metrics.relative_accuracy(metrics.accuracy(classify), len(labels))
    return rel[rel["condition"] != metrics.BASELINE].assign(measure="accuracy")


def per_set_reliance(sources: list[Path]) -> pd.DataFrame:
    """Per data set, model (runs averaged), condition and level: relative and chance-corrected accuracy with
    the set's own C (mAP with its chance level for a multi-label set), how many runs (observers) answered
    (``n_runs``) and entered each value's mean (``n_runs_<value>``), and ``left_out``: the runs without a
    value and why."""
    frames = []
    for source, name in zip(sources, set_names(sources)):
        labels = tuple(ExperimentDir(source).load().label_set.labels)
        n_choices = len(labels)
        rel = set_reliance(load_responses(source), labels)
        rel = rel.assign(data_set=name, n_classes=n_choices,
                         model=[model_of(o, k) for o, k in zip(rel["observer"], rel["observer_kind"])])
        frames.append(rel)
    if not frames:
        raise ValueError("a domain needs at least one experiment")
    runs = pd.concat(frames, ignore_index=True)
    keys = ["data_set", "n_classes", "measure", "model", "observer_kind", "condition", "level"]
    out = _counted_means(runs, keys, unit="observer", prefix="n_runs")
    without = runs[list(VALUES)].isna().any(axis=1)
    runs = runs.assign(left_out=(runs["observer"].astype(str) + ": " + runs["note"].fillna("").astype(str))
                       .where(without, ""))
    out["left_out"] = runs.groupby(keys)["left_out"].agg(_joined).to_numpy()
    return out


def _joined(notes: pd.Series) -> str:
    return "; ".join(n for n in notes if n)


def _counted_means(rows: pd.DataFrame, keys: list[str], unit: str, prefix: str) -> pd.DataFrame:
    """Each value's mean over the ``unit``s that have it, with how many entered (``PREFIX_<value>``) and how
    many there were (``PREFIX``); pandas' mean skips the empty ones, the counts say how many that left."""
    grouped = rows.groupby(keys)
    out = grouped[list(VALUES)].mean()
    out[prefix] = grouped[unit].nunique()
    for value in VALUES:
        out[f"{prefix}_{value}"] = grouped[value].count()
    return out.reset_index()


def domain_reliance(per_set: pd.DataFrame) -> pd.DataFrame:
    """Per model, condition and level: the mean over data sets of each set's reliance, its sd over the sets
    that have a value (``sd_sets_<value>``), the counts, and ``left_out``: the sets without a value, or whose
    value comes from fewer runs than answered, and why."""
    keys = ["model", "observer_kind", "condition", "level"]
    out = _counted_means(per_set, keys, unit="data_set", prefix="n_sets")
    grouped = per_set.groupby(keys)
    for value in VALUES:
        out[f"sd_sets_{value}"] = grouped[value].std(ddof=1).to_numpy()
    per_set = per_set.assign(left_out=[_set_left_out(row) for row in per_set.itertuples()])
    out["left_out"] = per_set.groupby(keys)["left_out"].agg(_joined).to_numpy()
    return out


def _set_left_out(row) -> str:
    """``SET (chance_corrected from k of n runs, ...: the runs and why)`` where a set's value lacks runs."""
    entered = {value: getattr(row, f"n_runs_{value}") for value in VALUES}
    if min(entered.values()) == row.n_runs:
        return ""
    counts = ", ".join(f"{value} from {k} of {row.n_runs} runs" for value, k in entered.items())
    return f"{row.data_set} ({counts}; {row.left_out})"


def domain_curves(domain: pd.DataFrame, value: str = "chance_corrected"):
    """One panel per condition: each model's reliance against the level, averaged over the domain's sets,
    with the sd over sets as error bars (Burgert et al. Fig. 5's 1 sigma); the legend counts the sets that
    entered (a range where levels differ); dotted lines at chance (0) and the originals (1) on the
    chance-corrected scale."""
    import matplotlib.pyplot as plt

    from .figure_style import series_styles

    conditions = sorted(domain["condition"].unique())
    fig, axes = plt.subplots(1, len(conditions), figsize=(3.6 * len(conditions), 3.2), squeeze=False, sharey=True)
    styles = series_styles(domain["model"].unique())
    for ax, condition in zip(axes[0], conditions):
        for model, rows in domain[domain["condition"] == condition].groupby("model"):
            rows = rows.sort_values("level")
            ax.errorbar(rows["level"], rows[value], yerr=rows[f"sd_sets_{value}"], capsize=2, elinewidth=0.8,
                        label=f"{model} ({_sets_label(rows[f'n_sets_{value}'])})", **styles[str(model)])
        for y in ((0.0, 1.0) if value == "chance_corrected" else (1.0,)):
            ax.axhline(y, color="#7f7f7f", ls=":", lw=1)
        ax.set_title(condition)
        ax.set_xlabel("level")
    axes[0][0].set_ylabel(("chance-corrected relative accuracy" if value == "chance_corrected"
                           else "relative accuracy") + "\n(mean ± sd over sets)")
    axes[0][-1].legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def _sets_label(counts: pd.Series) -> str:
    low, high = int(counts.min()), int(counts.max())
    return f"{low} set{'s' if high != 1 else ''}" if low == high else f"{low}-{high} sets"


def left_out_notes(domain: pd.DataFrame) -> list[str]:
    """One line per model and condition whose means lack sets or runs: ``MODEL, CONDITION, levels ...: why``."""
    notes = []
    rows = domain[domain["left_out"] != ""]
    for (model, condition, why), levels in rows.groupby(["model", "condition", "left_out"])["level"]:
        notes.append(f"{model}, {condition}, level(s) {', '.join(map(str, sorted(levels)))}: {why}")
    return notes


def write_domain_report(sources: list[Path], out: Path) -> tuple[list[Path], list[str]]:
    """``domain_reliance_per_set.csv``, ``domain_reliance.csv`` and the curves (PNG, SVG, PDF) into ``out``;
    the files and :func:`left_out_notes`."""
    from cuebench.csvsafe import frame_csv
    from cuebench.expdir import atomic_write

    from .figure_style import save

    per_set = per_set_reliance([Path(s) for s in sources])
    domain = domain_reliance(per_set)
    written = []
    for name, table in (("domain_reliance_per_set.csv", per_set), ("domain_reliance.csv", domain)):
        atomic_write(out / name, frame_csv(table))
        written.append(out / name)
    save(domain_curves(domain), out / "domain_reliance")
    return written + [out / "domain_reliance.png"], left_out_notes(domain)
