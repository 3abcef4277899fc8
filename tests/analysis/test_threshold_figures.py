"""Figures of thresholds and reliance: what the tables say (labels, intervals) is drawn, and grid axes tick at
whole grid values."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import plots

GRIDS = np.arange(2.0, 17.0)


def _tick_values(ax) -> np.ndarray:
    lo, hi = ax.get_xlim()
    ticks = np.asarray(ax.get_xticks(), dtype=float)
    return ticks[(ticks >= lo) & (ticks <= hi)]


def test_adaptive_figure_names_prior_only_and_extrapolated_rows_and_ticks_whole_grid_cells():
    row = {"observer_kind": "human", "condition": "patch_shuffle", "axis": "grid", "fit": "individual", "trials": 40,
           "observers": 1, "between_sd": np.nan, "accuracy": 0.5}
    table = pd.DataFrame([
        {**row, "observer": "P1", "quest_threshold": 7.3, "ci_low": 6.1, "ci_high": 8.4, "label": "", "note": ""},
        {**row, "observer": "P2", "quest_threshold": 9.0, "ci_low": -1.5, "ci_high": 18.9,
         "label": "prior-only, extrapolated", "note": "prior-only: ...; extrapolated: ..."},
        {**row, "observer": "P3", "quest_threshold": 17.6, "ci_low": 15.9, "ci_high": 19.2, "label": "extrapolated",
         "note": "extrapolated: ..."}])
    fig = plots.adaptive_thresholds(table)
    rows = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "P2 · QUEST+ [prior-only, extrapolated]" in rows and "P3 · QUEST+ [extrapolated]" in rows
    assert "P1 · QUEST+" in rows
    ticks = _tick_values(fig.axes[0])
    assert len(ticks) and np.allclose(ticks, np.round(ticks))


def test_psychometric_panels_tick_whole_grid_cells():
    who = {"observer": "m1", "observer_kind": "model", "fit": "individual", "condition": "patch_shuffle",
           "axis": "grid"}
    accuracy = 1 / 16 + (1 - 1 / 16) / (1 + np.exp(GRIDS - 8))
    points = pd.DataFrame({**who, "level": range(15), "x": GRIDS, "k": accuracy * 20, "n": 20.0,
                           "accuracy": accuracy})
    curves = pd.DataFrame({**who, "x": np.linspace(2, 16, 50), "accuracy": np.interp(np.linspace(2, 16, 50), GRIDS,
                                                                                      accuracy)})
    fits = pd.DataFrame([{**who, "guess_rate": 1 / 16, "reference_accuracy": 1.0, "threshold_halfway": 8.0,
                          "threshold_halfway_ci_low": 7.5, "threshold_halfway_ci_high": 8.5}])
    fig = plots.psychometric_curves(points, curves, fits)
    ticks = _tick_values(fig.axes[0])
    assert len(ticks) and np.allclose(ticks, np.round(ticks))


def test_reliance_figure_draws_the_human_interval_of_a_single_level_condition():
    # channel shuffle has one setting: the table's human t-interval must show as a whisker (a band of one point
    # would draw nothing)
    levels = pd.DataFrame({"condition": ["channel_shuffle"], "level": [0], "params": ["{}"]})
    relative = pd.DataFrame({"observer": ["m1"], "observer_kind": ["model"], "condition": ["channel_shuffle"],
                             "level": [0], "relative_accuracy": [0.7]})
    humans = pd.DataFrame({"condition": ["channel_shuffle"], "observer_kind": ["human"], "level": [0],
                           "relative_accuracy": [0.9], "t_ci_low": [0.8], "t_ci_high": [0.97], "observers": [5]})
    fig = plots.reliance_profiles(relative, humans, levels)
    whiskers = [c for c in fig.axes[0].containers if c.get_label() == "humans, 95 % t-interval"]
    assert len(whiskers) == 1, [c.get_label() for c in fig.axes[0].containers]
    (segment,) = whiskers[0].lines[2][0].get_segments()
    assert np.allclose(segment[:, 1], [0.8, 0.97])
