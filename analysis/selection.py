"""Model selection and variability as BiasBed defines them (Kalischek et al. 2023, Sec. 5 "Model selection",
Tables 1-5, Fig. 2), on a per-epoch training log.

The log has one row per algorithm, run, epoch and evaluated split: ``algorithm, run, epoch, split, accuracy``
(``cuebench train``'s ``training.csv``, ``train-cues``' ``cue_training.csv``, a labelled set's
``set_training.csv``, or any table of that shape). ``val`` is the in-domain validation split; every other
split is a test set (ImageNet's own test images, cue conflict, DiST, edges, silhouettes, any imported set).

Per (algorithm, run, test split), one score by

- ``best-val``: the test score at the epoch of the best validation accuracy (the earliest on a tie),
  "the most rigorous one"; where the log has a ``selectable`` column (``train-cues``: InfoDrop's ``shi``
  protocol selects among its fine-tuning epochs only), among the selectable epochs;
- ``last-N``: the mean test score over the last N epochs;
- ``oracle``: the best test score over all epochs, each split at its own epoch: cherry-picking, reported
  only to show how much selection matters, and always named ``oracle`` (BiasBed: "should be discouraged").

Then per algorithm and split the mean and sd over runs (Tables 1-3); the Friedman test with the
Iman-Davenport F and the Nemenyi post-hoc (``analysis.ranking``) with the data sets as blocks and the
algorithms as methods, over all test sets and over a "strict" subset without the sets made the way some
algorithm trains (Tables 4-5); intra-run variability (the sd over a run's last N epochs, averaged over runs)
and inter-run variability (the sd over runs of the selected score), and a Fig. 2-style figure: each
algorithm's mean test curve over epochs with the band between its runs' lowest and highest score.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .ranking import friedman_nemenyi

VALIDATION = "val"
ORACLE = "oracle"
LOG_COLUMNS = ("algorithm", "run", "epoch", "split", "accuracy")
RUN = ("algorithm", "run")
"""The columns that name one run of a training log."""


class SelectionError(ValueError):
    """A training log or selection method cannot be used as asked."""


def check_log(log: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in LOG_COLUMNS if c not in log.columns]
    if missing:
        raise SelectionError(f"the training log needs columns {', '.join(LOG_COLUMNS)}; missing {', '.join(missing)}")
    if VALIDATION not in set(log["split"]):
        raise SelectionError(f"the training log has no {VALIDATION!r} split to select by")
    return log


def parse_method(method: str) -> tuple[str, int | None]:
    """``best-val``, ``oracle`` or ``last-N`` (N >= 1) -> (kind, N)."""
    if method in ("best-val", ORACLE):
        return method, None
    match = re.fullmatch(r"last-(\d+)", method)
    if match and int(match[1]) >= 1:
        return "last", int(match[1])
    raise SelectionError(f"unknown selection {method!r}: use best-val, last-N (e.g. last-5) or oracle")


def picked_epochs(log: pd.DataFrame, method: str, runs: tuple[str, ...] = RUN):
    """Per run (one value of each ``runs`` column) and test split: the run's key, the split, the split's rows at
    the epochs ``method`` picks (sorted by epoch; none where the best validation epoch has no test row) and those
    epochs. The one implementation of the three selections; a table of another shape (the DiagViB-6 training
    table, ``analysis.factor_studies``) names its own run columns."""
    kind, n = parse_method(method)
    for key, runlog in log.groupby(list(runs), sort=True):
        if kind == "best-val":
            val = runlog[runlog["split"] == VALIDATION].sort_values("epoch")
            if "selectable" in val.columns and val["selectable"].astype(bool).any():
                val = val[val["selectable"].astype(bool)]
            if val.empty:
                raise SelectionError(f"run {key} has no validation rows to select the best validation epoch by; "
                                     "select by the last epochs instead")
            epochs = [int(val.loc[val["accuracy"].idxmax(), "epoch"])]  # idxmax: the first maximum, earliest epoch
        for split, test in runlog[runlog["split"] != VALIDATION].groupby("split", sort=True):
            test = test.sort_values("epoch")
            if kind == "last":
                epochs = [int(e) for e in test["epoch"].tail(n)]
            elif kind == ORACLE:
                epochs = [int(test.loc[test["accuracy"].idxmax(), "epoch"])]
            yield key, split, test[test["epoch"].isin(epochs)], epochs


def select(log: pd.DataFrame, method: str) -> pd.DataFrame:
    """One score per algorithm, run and test split by ``method``, with the epoch(s) it comes from and
    ``oracle`` True for the oracle selection."""
    check_log(log)
    kind, _ = parse_method(method)
    rows = [{"algorithm": algorithm, "run": run, "split": split, "selection": method,
             "score": float(picked["accuracy"].mean()) if len(picked) else np.nan,
             "epochs": f"{epochs[0]}-{epochs[-1]}" if kind == "last" else str(epochs[0]), "oracle": kind == ORACLE}
            for (algorithm, run), split, picked, epochs in picked_epochs(log, method)]
    return pd.DataFrame(rows, columns=["algorithm", "run", "split", "selection", "score", "epochs", "oracle"])


def selection_table(log: pd.DataFrame, methods: list[str]) -> pd.DataFrame:
    """Per selection, algorithm and test split: mean and sd of the selected score over runs, the runs counted."""
    selected = pd.concat([select(log, m) for m in methods], ignore_index=True)
    return (selected.groupby(["selection", "oracle", "algorithm", "split"], as_index=False, sort=False)
            .agg(mean=("score", "mean"), sd=("score", "std"), runs=("score", "size")))


def variability(log: pd.DataFrame, last: int, method: str = "best-val") -> pd.DataFrame:
    """Per algorithm and test split: intra-run variability (sd over each run's last ``last`` epochs, mean over
    runs) and inter-run variability (sd over runs of the score ``method`` selects)."""
    check_log(log)
    tests = log[log["split"] != VALIDATION].sort_values("epoch")
    intra = (tests.groupby(["algorithm", "split", "run"])["accuracy"].apply(lambda s: s.tail(last).std(ddof=1))
             .groupby(["algorithm", "split"]).mean().rename("intra_run_sd"))
    inter = select(log, method).groupby(["algorithm", "split"])["score"].std(ddof=1).rename("inter_run_sd")
    return pd.concat([intra, inter], axis=1).reset_index().assign(last_epochs=last, inter_selection=method)


def rank_tests(table: pd.DataFrame, selection: str, strict_exclude: tuple[str, ...] = (), alpha: float = 0.05
               ) -> dict[str, object]:
    """The Friedman/Nemenyi test on the mean scores of ``selection`` with the data sets (test splits) as blocks
    and the algorithms as methods: over ``all`` test sets and, when ``strict_exclude`` names some, over the
    ``strict`` rest (BiasBed Tables 4-5). An oracle selection is refused: its scores are cherry-picked."""
    chosen = table[table["selection"] == selection]
    if chosen.empty:
        raise SelectionError(f"no scores for selection {selection!r}")
    if chosen["oracle"].any():
        raise SelectionError("the rank tests take a fair selection (best-val or last-N), not the oracle")
    scores = chosen.pivot(index="split", columns="algorithm", values="mean")
    unknown = sorted(set(strict_exclude) - set(scores.index))
    if unknown:
        raise SelectionError(f"--strict-exclude names data sets the log does not have: {', '.join(unknown)}")
    out = {"all": friedman_nemenyi(scores, alpha=alpha)}
    if strict_exclude:
        out["strict"] = friedman_nemenyi(scores.drop(index=list(strict_exclude)), alpha=alpha)
    return out


def latex_table(table: pd.DataFrame) -> str:
    """The selection table as LaTeX (booktabs): one row per algorithm, a ``mean ± sd`` column per selection and
    data set (an oracle selection's headings say ``oracle``)."""
    cells = table.assign(cell=[f"{m:.3f} $\\pm$ {s:.3f}" if s == s else f"{m:.3f}"
                               for m, s in zip(table["mean"], table["sd"])],
                         column=[f"{split} {sel}" for split, sel in zip(table["split"], table["selection"])])
    wide = cells.pivot(index="algorithm", columns="column", values="cell")
    header = " & ".join(["algorithm", *(c.replace("_", r"\_") for c in wide.columns)])
    body = "\n".join(" & ".join([str(a).replace("_", r"\_"), *row]) + r" \\" for a, row in
                     zip(wide.index, wide.fillna("").to_numpy().tolist()))
    return ("\\begin{tabular}{l" + "r" * len(wide.columns) + "}\n\\toprule\n" + header + r" \\" + "\n\\midrule\n"
            + body + "\n\\bottomrule\n\\end{tabular}\n")


def variability_figure(log: pd.DataFrame):
    """BiasBed Fig. 2: per test split, each algorithm's mean test accuracy over epochs across runs, shaded between
    its runs' lowest and highest score at each epoch."""
    import matplotlib.pyplot as plt

    from .figure_style import series_styles

    tests = log[log["split"] != VALIDATION]
    splits = sorted(tests["split"].unique())
    fig, axes = plt.subplots(1, len(splits), figsize=(3.8 * len(splits), 3.2), squeeze=False)
    styles = series_styles(tests["algorithm"].unique())
    for ax, split in zip(axes[0], splits):
        for algorithm, rows in tests[tests["split"] == split].groupby("algorithm"):
            curve = rows.groupby("epoch")["accuracy"].agg(["mean", "min", "max"])
            style = styles[str(algorithm)]
            ax.plot(curve.index, curve["mean"], label=str(algorithm), color=style["color"], marker=style["marker"],
                    ms=3)
            ax.fill_between(curve.index, curve["min"], curve["max"], color=style["color"], alpha=0.2, lw=0)
        ax.set_title(split)
        ax.set_xlabel("epoch")
    axes[0][0].set_ylabel("test accuracy (band: runs' range)")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    return fig
