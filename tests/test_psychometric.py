"""Psychometric fits: hand-computed trend test, threshold recovery from simulated observers, and the table's notes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis.psychometric import (POOLED_HUMANS, PsychometricError, cochran_armitage, decreasing_logistic,
                                   fit_curve, level_at, psychometric_fits)
from cuebench.adaptive import stimulus_axis

GRIDS = np.arange(2, 17, dtype=float)  # patch-shuffle grid sizes g = 2..16, levels 0..14
TRUE = {"threshold": 8.0, "width": 6.0, "gamma": 1 / 8, "lambda": 0.03}


def simulate(rng, trials_per_level: int, params=TRUE, x=GRIDS):
    psi = decreasing_logistic()(x, params["threshold"], params["width"], params["gamma"], params["lambda"])
    return rng.binomial(trials_per_level, psi).astype(float), np.full(len(x), float(trials_per_level))


def test_cochran_armitage_matches_hand_computation():
    # x = 0,1,2; k = 9,5,1 of 10 each: p̄ = 0.5, T = 2(1 - 5) = -8, Var = 0.25 (10*5 - 30²/30) = 5, z = -8/√5
    z, p = cochran_armitage([0, 1, 2], [9, 5, 1], [10, 10, 10])
    assert z == pytest.approx(-3.577709, abs=1e-6)
    assert p == pytest.approx(0.000173, abs=2e-6)
    assert cochran_armitage([0, 1, 2], [10, 10, 10], [10, 10, 10]) == (0.0, 1.0)


def test_stimulus_axis_uses_the_growing_parameter_else_the_level():
    assert stimulus_axis({0: {"grid": 2}, 4: {"grid": 6}}) == ("grid", {0: 2.0, 4: 6.0})
    bilateral = {0: {"d": 4, "sigma_color": 50, "sigma_space": 75}, 2: {"d": 8, "sigma_color": 110, "sigma_space": 75}}
    assert stimulus_axis(bilateral)[0] == "d"
    joint = {0: {"patch_shuffle": {"grid": 2}}, 1: {"patch_shuffle": {"grid": 3}}}
    assert stimulus_axis(joint) == ("level", {0: 0.0, 1: 1.0})


@pytest.mark.parametrize("seed", [0, 1])
def test_fit_recovers_a_known_threshold(seed):
    rng = np.random.default_rng(seed)
    k, n = simulate(rng, 30)
    originals = float(rng.binomial(200, 1 - TRUE["lambda"]))
    row, curve = fit_curve(GRIDS, k, n, 1 / 8, reference=(originals, 200.0), seed=seed)
    sigmoid = decreasing_logistic()
    half = float(level_at(sigmoid, TRUE["gamma"] + (1 - TRUE["lambda"] - TRUE["gamma"]) / 2, TRUE))
    p75 = float(level_at(sigmoid, 0.75, TRUE))
    assert half == pytest.approx(8.0)  # the logistic's own threshold is the half-way point
    assert row["threshold_ci_low"] <= half <= row["threshold_ci_high"]
    assert row["threshold_75_ci_low"] <= p75 <= row["threshold_75_ci_high"]
    assert row["threshold"] == pytest.approx(half, abs=1.0)
    assert row["slope_ci_low"] <= row["slope"] <= row["slope_ci_high"] < 0
    assert 0 <= row["lapse_ci_low"] <= TRUE["lambda"] <= row["lapse_ci_high"]
    assert row["note"] == "" and row["reference"] == "original trials"
    assert curve[1][0] > curve[1][-1] and len(curve[0]) == len(curve[1])


def test_level_at_marks_unreachable_targets_as_infinite():
    params = {"threshold": 8.0, "width": 6.0, "gamma": 0.5, "lambda": 0.3}  # accuracy between 0.5 and 0.7
    assert level_at(decreasing_logistic(), 0.75, params) == -np.inf
    assert level_at(decreasing_logistic(), 0.4, params) == np.inf


def test_too_few_levels_and_flat_data_say_why():
    row, curve = fit_curve([2.0, 3.0], [5, 3], [8, 8], 1 / 8)
    assert curve is None and row["note"] == "not fitted: too few levels (2 < 3)"
    row, curve = fit_curve([2.0, 3.0, 4.0, 5.0], [8, 8, 8, 8], [8, 8, 8, 8], 1 / 8)
    assert curve is None and row["note"].startswith("not fitted: flat data") and np.isnan(row.get("threshold", np.nan))


def _responses(rng) -> pd.DataFrame:
    """Two people and a model: patch shuffle falls off (graded), grayscale does not (flat), channel shuffle has
    one setting, plus original trials; p2 saw only two patch-shuffle levels."""
    rows = []
    for observer, kind, threshold in (("p1", "human", 9.0), ("p2", "human", 10.0), ("m1", "model", 5.0)):
        params = {**TRUE, "threshold": threshold}
        k, _ = simulate(rng, 12, params)
        for level, (grid, correct) in enumerate(zip(GRIDS, k)):
            rows += [{"observer": observer, "observer_kind": kind, "condition": "patch_shuffle", "level": level,
                      "params": json.dumps({"grid": int(grid)}), "correct": int(i < correct)} for i in range(12)]
        rows += [{"observer": observer, "observer_kind": kind, "condition": "grayscale", "level": level,
                  "params": json.dumps({"alpha": alpha}), "correct": 1} for level, alpha in enumerate((0.2, 0.6, 1.0))]
        rows += [{"observer": observer, "observer_kind": kind, "condition": "channel_shuffle", "level": 0,
                  "params": "{}", "correct": 1}]
        rows += [{"observer": observer, "observer_kind": kind, "condition": "original", "level": None,
                  "params": "{}", "correct": int(i < 19)} for i in range(20)]
    df = pd.DataFrame(rows)
    df["level"] = df["level"].astype("Int64")
    return df


def test_every_observer_and_the_pooled_humans_get_a_row():
    fits = psychometric_fits(_responses(np.random.default_rng(3)), n_choices=8)
    table = fits.table.set_index(["observer", "condition"])
    assert set(fits.table["observer"]) == {"p1", "p2", "m1", POOLED_HUMANS}
    assert table.loc[(POOLED_HUMANS, "patch_shuffle"), "fit"] == "pooled"
    shuffle = table.xs("patch_shuffle", level="condition")
    assert (shuffle["axis"] == "grid").all() and (shuffle["reference_accuracy"] == 0.95).all()
    assert shuffle.loc["m1", "threshold"] < shuffle.loc[POOLED_HUMANS, "threshold"]
    assert table.loc[("m1", "grayscale"), "note"].startswith("not fitted: flat data")
    assert "channel_shuffle" not in set(fits.table["condition"])  # a single setting is no grid
    assert set(fits.curves["condition"]) == {"patch_shuffle"}
    assert len(fits.points[(fits.points["observer"] == "m1") & (fits.points["condition"] == "patch_shuffle")]) == 15


def test_one_level_only_is_an_error_naming_the_condition():
    df = _responses(np.random.default_rng(0))
    single = df[df["condition"].isin(["channel_shuffle", "original"])]
    with pytest.raises(PsychometricError, match="'channel_shuffle' .*one level only"):
        psychometric_fits(single, n_choices=8)


def _store(path, df: pd.DataFrame) -> None:
    """The simulated answers as response rows in a real store (what every runner writes)."""
    from cuebench.responses import ResponseStore

    rows = []
    for observer, answers in df.groupby("observer", sort=False):
        for index, row in enumerate(answers.itertuples()):
            rows.append({"experiment": "thresholds-test", "observer": observer, "observer_kind": row.observer_kind,
                         "session": "1", "trial_index": index, "trial_id": f"{row.condition}-{row.level}-{index}",
                         "role": "test", "trial_type": "classify", "condition": row.condition,
                         "level": None if pd.isna(row.level) else int(row.level), "params": row.params,
                         "category": "cat", "response": "cat" if row.correct else "dog", "correct": row.correct})
    with ResponseStore(path) as store:
        store.write_many(rows)


def test_analyze_thresholds_cli_and_report_section(tmp_path, capsys):
    from analysis.report import AnalysisOptions, write_report
    from cuebench.cli import main as cuebench

    df = _responses(np.random.default_rng(5))
    _store(tmp_path / "responses.sqlite", df[df["condition"].isin(["patch_shuffle", "original"])])
    csv = tmp_path / "thresholds.csv"
    assert cuebench(["analyze", str(tmp_path), "--metric", "thresholds", "--n-choices", "8", "--out", str(csv)]) == 0
    assert "humans (pooled)" in capsys.readouterr().out
    written = pd.read_csv(csv)
    assert set(written["observer"]) == {"p1", "p2", "m1", POOLED_HUMANS} and written["threshold"].notna().all()
    html = write_report([tmp_path], tmp_path / "report", reference=None, options=AnalysisOptions(n_choices=8),
                        progress=False).read_text()
    assert 'id="thresholds"' in html and "fitted psychometric functions" in html
    assert (tmp_path / "report" / "tables" / "thresholds.csv").is_file()


def test_analyze_thresholds_on_one_level_names_the_condition(tmp_path, capsys):
    from cuebench.cli import main as cuebench

    df = _responses(np.random.default_rng(0))
    _store(tmp_path / "responses.sqlite", df[df["condition"].isin(["channel_shuffle", "original"])])
    assert cuebench(["analyze", str(tmp_path), "--metric", "thresholds"]) == 2
    assert "'channel_shuffle' (level 0) has one level only" in capsys.readouterr().err
