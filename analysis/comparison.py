"""Human-versus-model significance tests and rank correlations between metrics.

Pairing unit of the t-tests (``pairing``):

- ``item`` (default): one pair per image x condition cell (``trial_id``) that humans and
  the model both answered: the humans' mean correctness on that trial against the model's
  correctness on it. Needs no assumption about who saw what, so it also works for Latin
  square designs where each participant sees each image in one condition only.
- ``group``: one pair per participant group (the ``group`` column of the responses, the
  assignment plan's group): the group's mean human accuracy against the model's accuracy
  on the trials that group saw (Burgert et al. 2025, App. F, n = groups).

Effect sizes of a paired test, each named by its definition (Lakens 2013):

- ``d_z`` = mean(x - y) / sd(x - y) = t / sqrt(n): the mean difference in units of the
  differences' spread, the quantity a paired t-test's power depends on. Burgert et al. 2025
  (App. F, Table 4) report this one as "Cohen's d" (their d = t / 2 with n = 4 groups).
- ``d_av`` = mean(x - y) / sqrt((sd(x)^2 + sd(y)^2) / 2) (Cumming 2012): the difference in units of
  the two sides' average spread, what pingouin's paired ``cohen_d`` reports; it ignores the pairing.

No post-hoc ("observed") power is reported: computed from the observed effect it is a one-to-one
function of the p-value (Hoenig & Heise 2001), so it adds no evidence; plan the power before the
study instead (``cuebench plan``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pingouin as pg
from scipy import stats

from cuebench.errors import CuebenchError

PAIRINGS = ("item", "group")
EXACT_MAX_N = 8
TTEST_COLUMNS = ["observer", "condition", "level", "pairing", "n", "human_mean", "model_mean", "t", "dof", "p",
                 "ci95_low", "ci95_high", "d_z", "d_av", "p_corr", "note"]


class ComparisonError(CuebenchError, ValueError):
    """A comparison was asked for with an unknown option or a column that does not exist."""


def _pairs(human: pd.DataFrame, model: pd.DataFrame, pairing: str) -> tuple[np.ndarray, np.ndarray]:
    if pairing == "item":
        h = human.groupby("trial_id")["correct"].mean()
        m = model.groupby("trial_id")["correct"].mean()
        joined = pd.concat([h, m], axis=1, join="inner")
        return joined.iloc[:, 0].to_numpy(float), joined.iloc[:, 1].to_numpy(float)
    xs, ys = [], []
    for _, g in human.dropna(subset=["group"]).groupby("group"):
        on_same = model[model["trial_id"].isin(g["trial_id"])]
        if len(on_same):
            xs.append(g["correct"].mean())
            ys.append(on_same["correct"].mean())
    return np.asarray(xs, float), np.asarray(ys, float)


def effect_sizes(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """``d_z`` and ``d_av`` of paired samples x, y (module docstring)."""
    diff = x - y
    return {"d_z": float(diff.mean() / diff.std(ddof=1)),
            "d_av": float(diff.mean() / np.sqrt((x.var(ddof=1) + y.var(ddof=1)) / 2))}


def paired_ttests(scored: pd.DataFrame, pairing: str = "item", correction: str = "holm") -> pd.DataFrame:
    """Paired two-sided t-tests of human vs model accuracy per model, condition and level (pingouin.ttest:
    t, dof, p, CI95 of the mean difference human - model) with the effect sizes ``d_z`` and ``d_av`` (module
    docstring), and p-values corrected over all tests by ``correction`` (pingouin.multicomp: holm, bonf,
    fdr_bh, ...).

    A model without human responses on the same trials gets one row with a ``note`` and no statistics."""
    if pairing not in PAIRINGS:
        raise ComparisonError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    scored = scored.assign(level=scored["level"].fillna(-1).astype(int))
    humans = scored[scored["observer_kind"] == "human"]
    if pairing == "group" and humans["group"].isna().all():
        raise ComparisonError("pairing 'group' needs the 'group' column (assignment group) in the human responses")
    rows = []
    for model, mdf in scored[scored["observer_kind"] == "model"].groupby("observer"):
        matched = False
        for (cond, level), cell in mdf.groupby(["condition", "level"]):
            hcell = humans[(humans["condition"] == cond) & (humans["level"] == level)]
            x, y = _pairs(hcell, cell, pairing)
            if len(x) < 2:
                continue
            matched = True
            base = {"observer": model, "condition": cond, "level": level, "pairing": pairing, "n": len(x),
                    "human_mean": x.mean(), "model_mean": y.mean()}
            if np.allclose(x - y, (x - y)[0]):
                rows.append(base | {"note": "human - model difference is constant: t undefined"})
                continue
            res = pg.ttest(x, y, paired=True, alternative="two-sided").iloc[0]
            lo, hi = stats.ttest_rel(x, y).confidence_interval(0.95)  # pingouin rounds its CI95 to 2 decimals
            rows.append(base | {"t": res["T"], "dof": res["dof"], "p": res["p_val"], "ci95_low": lo, "ci95_high": hi,
                                **effect_sizes(x, y), "note": ""})
        if not matched:
            rows.append({"observer": model, "pairing": pairing, "n": 0,
                         "note": "no human responses on the same trials: not tested"})
    out = pd.DataFrame(rows, columns=TTEST_COLUMNS)
    tested = out["p"].notna()
    if tested.any():
        out.loc[tested, "p_corr"] = pg.multicomp(out.loc[tested, "p"].to_numpy(float), method=correction)[1]
    out["correction"] = correction
    return out


def rank_correlation(table: pd.DataFrame, x: str, y: str, observers: list[str] | None = None,
                     index: str = "observer") -> dict:
    """Spearman rank correlation between two metric columns over a set of observers (rows of ``table``),
    as Heinert et al. (Tab. II) correlate S_cd, R_cd and cue-conflict shape bias over a model set.
    The two-sided p-value is exact (all n! pairings) up to ``EXACT_MAX_N`` observers, where the
    t approximation is poor, and scipy's t approximation above."""
    for col in (x, y):
        if col not in table.columns:
            raise ComparisonError(f"no metric column {col!r}; columns are {', '.join(map(str, table.columns))}")
    rows = table if observers is None else table[table[index].isin(observers)]
    rows = rows[[x, y]].dropna()
    a, b = rows[x].to_numpy(float), rows[y].to_numpy(float)
    if len(rows) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:  # no ranking to correlate
        return {"x": x, "y": y, "n": len(rows), "rho": np.nan, "p": np.nan}
    rho = float(stats.spearmanr(a, b).statistic)
    if len(rows) <= EXACT_MAX_N:
        p = stats.permutation_test((a,), lambda v: stats.spearmanr(v, b).statistic, permutation_type="pairings",
                                   n_resamples=np.inf).pvalue
    else:
        p = stats.spearmanr(a, b).pvalue
    return {"x": x, "y": y, "n": len(rows), "rho": rho, "p": float(p)}
