"""Scorecards: one model's benchmark scores, each with a bootstrap interval, set beside the published
human value and the published models of the reference library (``analysis.reference``).

A metric is a function of one observer's scored trials (``analysis.load`` / ``analysis.exclusions``
columns). Its interval is a percentile bootstrap over that observer's trials, resampled within each
condition so every resample keeps the design's mix (Efron & Tibshirani 1993). Its place among the published
models is a rank, and the interval's ends give the ranks the model could hold: where they differ by more
than :data:`RANK_SLACK`, the benchmark is too small to rank the model and the scorecard says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np
import pandas as pd

from . import reference
from .load import params_of
from .metrics import oddity_accuracy, shape_bias

RANK_SLACK = 2
"""Ranks an interval may span before the scorecard calls the benchmark too small to rank the model."""


@dataclass(frozen=True)
class Published:
    """Where a metric's published values come from: the human value (and the people's range where a table
    lists them one by one), and the models to rank against, each a (name, value) pair."""

    reference_ids: tuple[str, ...]
    human: float | None = None
    human_label: str = ""
    human_range: tuple[float, float] | None = None
    noise_ceiling: tuple[float, float] | None = None
    models: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Metric:
    name: str
    description: str
    compute: Callable[[pd.DataFrame], float]
    published: Callable[[], Published] = field(default=lambda: Published(()))


def _shape_bias(trials: pd.DataFrame) -> float:
    return float(shape_bias(trials)["shape_bias"].iloc[0]) if len(trials) else np.nan


def _accuracy_of(condition: str | None = None) -> Callable[[pd.DataFrame], float]:
    def compute(trials: pd.DataFrame) -> float:
        chosen = trials if condition is None else trials[trials["condition"] == condition]
        return float(chosen["correct"].mean()) if len(chosen) else np.nan
    return compute


def _oddity(trials: pd.DataFrame) -> float:
    table = oddity_accuracy(trials)
    test = table[table["role"] == "test"]
    return float((test["k"].sum() / test["n"].sum())) if len(test) else np.nan


def _relative(feature: str) -> Callable[[pd.DataFrame], float]:
    """Relative accuracy A_sup / A_orig (Burgert et al. 2025, Sec. 5.1) at the setting of their human study."""
    condition, setting = reference.BURGERT2025_FEATURES[feature]

    def compute(trials: pd.DataFrame) -> float:
        original = trials.loc[trials["condition"] == "original", "correct"].mean()
        at_setting = trials["params"].map(lambda p: all(p.get(k) == v for k, v in setting.items()))
        chosen = trials.loc[(trials["condition"] == condition) & at_setting, "correct"]
        return float(chosen.mean() / original) if len(chosen) and original > 0 else np.nan
    return compute


@lru_cache(maxsize=1)
def _heinert_scale() -> tuple[float, float]:
    """s and t (Heinert et al., eq. 3): mean Q_S and Q_T of their 43 pre-trained models (Table VIII)."""
    table = reference.load("heinert_table8")
    members = table[table["arch"] != "trained"]
    return float(members["q_s"].mean()), float(members["q_t"].mean())


def _cue(name: str) -> Callable[[pd.DataFrame], float]:
    """S_cd on the published model set's scale (eqs. 3-4 with Heinert et al.'s s and t), so the score ranks
    among their models; R_cd (eq. 5) needs no scale. ``analysis.metrics.cue_decomposition_scores`` with
    the model set's rows gives the same numbers; this form costs nothing per bootstrap resample."""
    def compute(trials: pd.DataFrame) -> float:
        q_o, q_s, q_t = (_accuracy_of(c)(trials) for c in ("original", "shape_cue", "texture_cue"))
        if name == "R_cd":
            return (q_s + q_t) / (2 * q_o) if q_o > 0 else np.nan
        s, t = _heinert_scale()
        return (q_s / s) / (q_s / s + q_t / t) if q_s + q_t > 0 else np.nan
    return compute


def _geirhos() -> Published:
    table = reference.load("geirhos2019_shape_bias")
    humans = table[table["observer_kind"] == "human"]["shape_bias"]
    models = reference.load("geirhos2019_shape_bias").query("observer_kind == 'model'")
    heinert = reference.load("heinert_table8").query("arch != 'trained'")
    return Published(("geirhos2019_shape_bias", "heinert_table8"), human=round(float(humans.mean()), 3),
                     human_label=reference.label("geirhos2019_shape_bias") + f", mean of {len(humans)} people",
                     human_range=(float(humans.min()), float(humans.max())),
                     models=tuple(zip(models["observer"], models["shape_bias"]))
                     + tuple(zip(heinert["model"], heinert["cue_conflict_shape_bias"])))


def _dist() -> Published:
    fig5 = reference.load("dist_fig5").set_index("observer")
    table1 = reference.load("dist_table1")
    models = {m: v / 100 for m, v in zip(table1["model"], table1["dist_accuracy_percent"])}
    models.update({m: r["dist_accuracy_percent"] / 100 for m, r in fig5.iterrows() if r["observer_kind"] == "model"})
    return Published(("dist_fig5", "dist_table1"), human=fig5.loc["Humans", "dist_accuracy_percent"] / 100,
                     human_label=reference.label("dist_fig5") + ": 32 people, 16,800 trials",
                     models=tuple(models.items()))


def _burgert(feature: str) -> Callable[[], Published]:
    def published() -> Published:
        table = reference.load("burgert2025_table3")
        human = table[table["observer_kind"] == "human"][feature].iloc[0]
        models = table[table["observer_kind"] == "model"]
        return Published(("burgert2025_table3",), human=float(human), human_label=reference.label("burgert2025_table3"),
                         models=tuple(zip(models["observer"], models[feature])))
    return published


def _heinert(column: str) -> Callable[[], Published]:
    def published() -> Published:
        table = reference.load("heinert_table8").query("arch != 'trained'")
        return Published(("heinert_table8",), models=tuple(zip(table["model"], table[column])))
    return published


def _biasbed(dataset: str) -> Callable[[], Published]:
    def published() -> Published:
        table = reference.load("biasbed_table2")
        return Published(("biasbed_table2",), models=tuple(zip(table["algorithm"], table[dataset] / 100)))
    return published


METRICS: dict[str, list[Metric]] = {
    "cue-conflict": [Metric("shape_bias", "shape / (shape + texture) decisions, Geirhos et al. 2019", _shape_bias,
                            _geirhos)],
    "dist": [Metric("dist_accuracy", "oddity accuracy on DiST triplets (chance 1/3), Wen et al.", _oddity, _dist)],
    "suppression": [Metric(f"relative_accuracy_{f}", f"accuracy with {f.replace('_', ' ')} suppressed / on the "
                           "originals, Burgert et al. 2025", _relative(f), _burgert(f))
                    for f in reference.BURGERT2025_FEATURES],
    "cue-decomposition": [Metric("S_cd", "cue-decomposition shape bias on Heinert et al.'s model-set scale",
                                 _cue("S_cd"), _heinert("s_cd")),
                          Metric("R_cd", "cue-decomposition robustness (Q_S + Q_T) / (2 Q_O), Heinert et al.",
                                 _cue("R_cd"), _heinert("r_cd"))],
    "edges": [Metric("edge_accuracy", "accuracy on edge maps (16 classes)", _accuracy_of("original"),
                     _biasbed("edge"))],
    "silhouettes": [Metric("silhouette_accuracy", "accuracy on filled silhouettes (16 classes)",
                           _accuracy_of("original"), _biasbed("silhouette"))],
}
"""Each benchmark's metrics, in the order a scorecard lists them."""


def bootstrap(compute: Callable[[pd.DataFrame], float], trials: pd.DataFrame, n_boot: int = 200,
              seed: int = 0, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile interval of ``compute`` over resamples of the trials, drawn within each condition."""
    rng = np.random.default_rng(seed)
    groups = [g.index.to_numpy() for _, g in trials.groupby("condition")]
    values = []
    for _ in range(n_boot):
        rows = np.concatenate([rng.choice(g, size=len(g), replace=True) for g in groups])
        values.append(compute(trials.loc[rows]))
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if not len(values):
        return np.nan, np.nan
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def rank(value: float, models: tuple[tuple[str, float], ...]) -> int:
    """1 + the published models scoring above ``value`` (1 is the top)."""
    return 1 + sum(1 for _, v in models if np.isfinite(v) and v > value)


def score(benchmark: str, trials: pd.DataFrame, n_boot: int = 200, seed: int = 0) -> list[dict]:
    """Every metric of ``benchmark`` on one observer's scored trials, as scorecard entries."""
    entries = []
    trials = trials.reset_index(drop=True)
    if "params" in trials:
        trials["params"] = trials["params"].map(params_of)   # once, not once per resample
    for metric in METRICS[benchmark]:
        value = metric.compute(trials)
        low, high = bootstrap(metric.compute, trials, n_boot=n_boot, seed=seed)
        published = metric.published()
        entry = {"benchmark": benchmark, "metric": metric.name, "description": metric.description,
                 "value": value, "ci_low": low, "ci_high": high, "trials": int(len(trials)),
                 "human": published.human, "human_label": published.human_label,
                 "human_range": list(published.human_range) if published.human_range else None,
                 "noise_ceiling": list(published.noise_ceiling) if published.noise_ceiling else None,
                 "references": [{"id": r, "label": reference.label(r), "version": reference.reference(r).version}
                                for r in published.reference_ids],
                 "published_models": len(published.models), "rank": None, "rank_range": None, "notes": []}
        if published.models and np.isfinite(value):
            entry["rank"] = rank(value, published.models)
            if np.isfinite(low) and np.isfinite(high):
                entry["rank_range"] = [rank(high, published.models), rank(low, published.models)]
        entry["notes"] = notes(entry)
        entries.append(entry)
    return entries


def notes(entry: dict) -> list[str]:
    """Plain-language remarks a reader needs before trusting a number."""
    out = []
    value, low, high = entry["value"], entry["ci_low"], entry["ci_high"]
    if not np.isfinite(value):
        return ["no score: the benchmark's trials do not define this metric for the model"]
    ceiling = entry["noise_ceiling"] or entry["human_range"]
    if ceiling and low > ceiling[1]:
        what = "noise ceiling" if entry["noise_ceiling"] else "range of the individual people"
        out.append(f"the score lies above the human {what} ({ceiling[0]:.3g}-{ceiling[1]:.3g}), even at its "
                   "interval's lower end: the model differs from people, in the other direction")
    elif entry["human"] is not None and low > entry["human"]:
        out.append(f"the score exceeds the published human value ({entry['human']:.3g}) beyond its interval")
    if entry["rank_range"] and entry["rank_range"][1] - entry["rank_range"][0] > RANK_SLACK:
        out.append(f"too small to rank: with {entry['trials']} trials the 95 % interval spans ranks "
                   f"{entry['rank_range'][0]}-{entry['rank_range'][1]} of {entry['published_models'] + 1}")
    if not entry["published_models"]:
        out.append("no published model values to rank against")
    return out
