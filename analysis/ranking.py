"""Rank-based comparison of several methods over several data sets or conditions (BiasBed, Kalischek et al. 2023).

Reusable API (also for factor studies)::

    result = friedman_nemenyi(scores, higher_is_better=True, alpha=0.05)
    cd_diagram(result, ax=None)

``scores`` is a DataFrame with one row per data set / condition (the blocks) and one
column per method / observer; rank 1 is the best method of a row, ties share the mean
rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scikit_posthocs as sp
from scipy import stats

from cuebench.errors import CuebenchError


class RankTestError(CuebenchError, ValueError):
    """The score table cannot be rank-tested (too few methods or blocks, or missing scores)."""


@dataclass
class FriedmanResult:
    ranks: pd.DataFrame          # per block (row) ranks, 1 = best
    average_ranks: pd.Series     # R_i, sorted best first
    chi2: float                  # Friedman chi^2_F (BiasBed eq. 4)
    chi2_p: float
    f: float                     # Iman-Davenport F_F (BiasBed eq. 5)
    f_p: float
    df1: int
    df2: int
    nemenyi_p: pd.DataFrame      # pairwise Nemenyi p-values (scikit-posthocs)
    critical_difference: float   # Nemenyi CD at alpha (Demsar 2006, Sec. 3.2.2)
    alpha: float
    n_blocks: int
    n_methods: int
    note: str = ""
    """Why a statistic is empty (the Iman-Davenport F when every block ranks the methods alike)."""

    def table(self) -> pd.DataFrame:
        return pd.DataFrame({"method": self.average_ranks.index, "average_rank": self.average_ranks.to_numpy()})

    def summary(self) -> dict:
        return {"chi2": self.chi2, "chi2_p": self.chi2_p, "iman_davenport_f": self.f, "f_p": self.f_p,
                "df1": self.df1, "df2": self.df2, "critical_difference": self.critical_difference,
                "alpha": self.alpha, "blocks": self.n_blocks, "methods": self.n_methods, "note": self.note}


def friedman_nemenyi(scores: pd.DataFrame, higher_is_better: bool = True, alpha: float = 0.05) -> FriedmanResult:
    """Friedman test with the Iman-Davenport correction and the Nemenyi post-hoc test (BiasBed eqs. 4-6).

    With n methods, m blocks and average ranks R_i:
    chi^2_F = 12m / (n(n+1)) · [sum R_i^2 - n(n+1)^2 / 4], chi^2 with n-1 dof;
    F_F = (m-1) chi^2_F / (m(n-1) - chi^2_F), F with n-1 and (n-1)(m-1) dof;
    CD = q_alpha · sqrt(n(n+1) / (6m)), q_alpha the studentized range quantile / sqrt(2)
    (BiasBed's eq. 6 prints m and n swapped; this is Demsar 2006's form). When every block ranks the
    methods alike, chi^2_F = m(n-1) and F_F divides by zero: F and its p are then empty, with a note,
    and the Friedman chi^2 p stands."""
    if scores.isna().any().any():
        where = scores.isna().stack()
        row, col = where[where].index[0]
        raise RankTestError(f"score table has no value for method {col!r} in block {row!r}")
    m, n = scores.shape
    if n < 2 or m < 2:
        raise RankTestError(f"the Friedman test needs at least 2 methods and 2 blocks, got {n} method(s) and {m} block(s)")
    ranks = scores.rank(axis=1, ascending=not higher_is_better, method="average")
    avg = ranks.mean(axis=0)
    chi2 = 12 * m / (n * (n + 1)) * (np.sum(avg.to_numpy() ** 2) - n * (n + 1) ** 2 / 4)
    df1, df2 = n - 1, (n - 1) * (m - 1)
    denom = m * (n - 1) - chi2
    undefined = np.isclose(denom, 0) or denom < 0
    f = np.nan if undefined else (m - 1) * chi2 / denom
    note = ("Iman-Davenport F undefined: every block ranks the methods alike (chi2_F = m(n-1)); the Friedman "
            "chi2 test stands" if undefined else "")
    q_alpha = stats.studentized_range.ppf(1 - alpha, n, np.inf) / np.sqrt(2)
    nemenyi = sp.posthoc_nemenyi_friedman(ranks.to_numpy())
    nemenyi.index = nemenyi.columns = list(scores.columns)
    return FriedmanResult(
        ranks=ranks, average_ranks=avg.sort_values(), chi2=float(chi2), chi2_p=float(stats.chi2.sf(chi2, df1)),
        f=float(f), f_p=float(stats.f.sf(f, df1, df2)) if np.isfinite(f) else np.nan, df1=df1, df2=df2,
        nemenyi_p=nemenyi, critical_difference=float(q_alpha * np.sqrt(n * (n + 1) / (6 * m))), alpha=alpha,
        n_blocks=m, n_methods=n, note=note)


def cd_diagram(result: FriedmanResult, ax=None, title: str | None = None, colours: dict[str, str] | None = None):
    """Critical-difference diagram (Demsar 2006, Fig. 1): average ranks on an axis, methods that the
    Nemenyi test does not separate at ``alpha`` joined by a bar; ``colours`` by method name (the
    report's series colours). Returns the matplotlib axes."""
    import matplotlib.pyplot as plt

    own_figure = ax is None
    if own_figure:
        _, ax = plt.subplots(figsize=(8, 1.2 + 0.3 * result.n_methods))
    drawn = sp.critical_difference_diagram(result.average_ranks, result.nemenyi_p, ax=ax, alpha=result.alpha,
                                           label_props={"fontsize": 10}, color_palette=colours)
    for (crossbar,) in drawn["crossbars"]:  # drawn through its methods in a set's order, which Python's hash seed
        crossbar.set_xdata(sorted(crossbar.get_xdata()))  # changes from run to run: left to right, the same pixels
    test = (f"Friedman/Iman-Davenport p = {result.f_p:.3g}" if np.isfinite(result.f_p)
            else f"Friedman p = {result.chi2_p:.3g} (every block ranks alike)")
    ax.set_title(title or f"Average rank over {result.n_blocks} blocks (1 = best); CD = "
                 f"{result.critical_difference:.2f} at alpha = {result.alpha}, {test}", fontsize=10, pad=24)
    if own_figure:
        ax.figure.tight_layout()
    return ax
