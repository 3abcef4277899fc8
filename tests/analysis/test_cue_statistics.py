"""Cue-study statistics: per-measure differences from ERM with Welch intervals, checked against scipy's own Welch
test and a hand computation, and rank tests only where the runs give enough blocks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.cue_study import MIN_BLOCKS, measure_effects, rank_tests, welch_interval


@pytest.mark.validates(
    "difference of an algorithm's measure from ERM with Welch interval",
    definition='mean_a - mean_b +- t_df sqrt(s_a^2/n_a + s_b^2/n_b), Welch-Satterthwaite df',
    source='Welch 1947',
    reference='hand computation and scipy.stats.ttest_ind(equal_var=False)',
    tolerance='exact (pytest.approx)')
def test_welch_interval_matches_a_hand_computation_and_scipy():
    a, b = [0.70, 0.74, 0.78], [0.60, 0.64]
    # means 0.74 and 0.62; s_a^2/n_a = 0.0016/3, s_b^2/n_b = 0.0008/2; SE^2 = 0.000933; df = 2.882
    difference, low, high, p = welch_interval(a, b)
    se = np.sqrt(0.0016 / 3 + 0.0008 / 2)
    df = se ** 4 / ((0.0016 / 3) ** 2 / 2 + (0.0008 / 2) ** 2 / 1)
    assert difference == pytest.approx(0.12)
    assert high - difference == pytest.approx(stats.t.ppf(0.975, df) * se)
    welch = stats.ttest_ind(a, b, equal_var=False)
    assert (low, high) == pytest.approx(tuple(welch.confidence_interval(0.95)))
    assert p == pytest.approx(welch.pvalue)
    assert np.isnan(welch_interval([0.7], b)[1]) and welch_interval([0.7], b)[0] == pytest.approx(0.08)


def _per_run(runs: int, rng) -> pd.DataFrame:
    """Runs matched by index: distinguish is always the most shape-biased, sagnet the least."""
    rows = []
    for run in range(runs):
        base = rng.normal(0, 0.01)
        for algorithm, shift in (("erm", 0.0), ("distinguish", 0.1), ("sagnet", -0.1)):
            rows.append({"algorithm": algorithm, "run": run, "dist_accuracy": 0.7 + base + shift / 2,
                         "shape_bias": 0.3 + base + shift, "original_accuracy": 0.6 + rng.normal(0, 0.05)})
    return pd.DataFrame(rows)


def test_measure_effects_are_differences_from_erm_with_intervals():
    per_run = _per_run(3, np.random.default_rng(0))
    effects = measure_effects(per_run).set_index(["measure", "algorithm"])
    assert set(effects.index.get_level_values("algorithm")) == {"distinguish", "sagnet"}
    row = effects.loc[("shape_bias", "distinguish")]
    values = per_run.pivot(index="run", columns="algorithm", values="shape_bias")
    expected = stats.ttest_ind(values["distinguish"], values["erm"], equal_var=False).confidence_interval(0.95)
    assert row["difference_from_erm"] == pytest.approx(values["distinguish"].mean() - values["erm"].mean())
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((expected.low, expected.high))
    assert row["ci_low"] > 0 and row["runs"] == 3 and row["erm_runs"] == 3 and row["note"] == ""
    single = measure_effects(per_run[per_run["run"] == 0])
    assert single["ci_low"].isna().all() and (single["note"] == "no interval: needs at least 2 runs of each "
                                                                "algorithm").all()


def test_rank_tests_need_enough_matched_runs_as_blocks():
    results, notes = rank_tests(_per_run(3, np.random.default_rng(1)))
    assert results == {} and len(notes) == 3
    assert notes[1].startswith("cue-conflict shape bias: no rank test, 3 matched run(s) as blocks")
    assert f"at least {MIN_BLOCKS}" in notes[1]
    results, notes = rank_tests(_per_run(6, np.random.default_rng(1)))
    shape = results["shape_bias"]
    # every run orders distinguish > erm > sagnet: average ranks 1, 2, 3 over m = 6 blocks, n = 3 methods,
    # chi2_F = 12m/(n(n+1)) (sum R^2 - n(n+1)^2/4) = 6 (14 - 12) = 12
    assert shape.n_blocks == 6 and shape.chi2 == pytest.approx(12.0)
    assert list(shape.average_ranks.index) == ["distinguish", "erm", "sagnet"]
    assert "original_accuracy" in results and notes == []


def _study(path, runs: int, rng) -> pd.DataFrame:
    """A study directory as ``cuebench train-cues`` leaves it: the training table and the selected checkpoints'
    stored answers to DiST oddity and cue-conflict trials; returns each run's true DiST accuracy and shape bias."""
    from cuebench.responses import ResponseStore

    training, dist, conflict, truth = [], [], [], []
    for algorithm, shape_p in (("erm", 0.3), ("distinguish", 0.6), ("sagnet", 0.2)):
        for run in range(runs):
            observer = f"{algorithm}-r{run}"
            training += [{"algorithm": algorithm, "run": run, "epoch": e, "split": "test", "accuracy": 0.6,
                          "selected": e == 1, "observer": observer} for e in range(2)]
            odd = rng.random(12) < 0.7
            shape = rng.random(16) < shape_p
            truth.append({"algorithm": algorithm, "run": run, "dist_accuracy": odd.mean(), "shape_bias": shape.mean()})
            common = {"experiment": "x", "observer": observer, "observer_kind": "model", "session": "1",
                      "role": "test", "condition": "c"}
            dist += [{**common, "experiment": "dist", "trial_index": i, "trial_id": f"t{i}",
                      "trial_type": "oddity", "category": "cat", "response": "1" if ok else "2", "correct": int(ok)}
                     for i, ok in enumerate(odd)]
            conflict += [{**common, "experiment": "cue", "trial_index": i, "trial_id": f"c{i}",
                          "trial_type": "classify", "category": "cat", "texture_category": "dog",
                          "response": "cat" if s else "dog", "correct": int(s)} for i, s in enumerate(shape)]
    pd.DataFrame(training).to_csv(path / "cue_training.csv", index=False)
    for name, rows in (("dist", dist), ("cue_conflict", conflict)):
        (path / name).mkdir()
        with ResponseStore(path / name / "responses.sqlite") as store:
            store.write_many(rows)
    return pd.DataFrame(truth)


@pytest.mark.parametrize("runs", [3, 5])
def test_cue_report_gives_effects_and_rank_tests_only_with_enough_runs(tmp_path, runs):
    from analysis.cue_study import write_cue_report

    truth = _study(tmp_path, runs, np.random.default_rng(runs))
    html = write_cue_report(tmp_path).read_text()
    effects = pd.read_csv(tmp_path / "reports" / "cue_effects.csv").set_index(["measure", "algorithm"])
    values = truth.pivot(index="run", columns="algorithm", values="shape_bias")
    expected = stats.ttest_ind(values["distinguish"], values["erm"], equal_var=False).confidence_interval(0.95)
    row = effects.loc[("shape_bias", "distinguish")]
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((expected.low, expected.high))
    assert "Difference from ERM per measure" in html
    if runs < MIN_BLOCKS:
        assert "cue-conflict shape bias: no rank test, 3 matched run(s) as blocks" in html
        assert "Iman-Davenport" not in html and not (tmp_path / "reports" / "cue_ranks_shape_bias.csv").exists()
    else:
        assert html.count("Iman-Davenport") == 3 and "5 runs\nas blocks" in html
        ranks = pd.read_csv(tmp_path / "reports" / "cue_ranks_shape_bias.csv")
        assert ranks["method"].iloc[0] == values.rank(axis=1, ascending=False).mean().idxmin()
