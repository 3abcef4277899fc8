"""Psychometric fits against independent truth: observers simulated from the documented model
ψ(x) = γ + (1 − γ − λ)(1 − F(x)) by a generator written here (not the fitting code's), interval coverage
over seeds, an independent maximum-likelihood fit with scipy, the hand-computed trend test, and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import optimize

from analysis.psychometric import CHANCE_FLOOR, FREE_FLOOR, POOLED_HUMANS, PsychometricError, chosen_model, \
    cochran_armitage, fit_curve, logistic_scale, model_parameters, psychometric_fits
from cuebench.adaptive import stimulus_axis

GRIDS = np.arange(2, 17, dtype=float)  # patch-shuffle grid sizes g = 2..16, levels 0..14


def accuracy(x, location, scale, floor, lapse):
    """The documented model with a logistic F of location m and scale s: γ + (1 − γ − λ) / (1 + e^((x − m)/s))."""
    return floor + (1 - floor - lapse) / (1 + np.exp((np.asarray(x, float) - location) / scale))


def halfway(location, scale, floor, lapse, chance, original):
    """Hand-inverted truth: x where accuracy = chance + (original − chance)/2."""
    target = chance + (original - chance) / 2
    falling = (target - floor) / (1 - floor - lapse)  # = 1/(1 + e^((x − m)/s))
    return location + scale * np.log(1 / falling - 1)


def simulate(rng, trials_per_level: int, location=8.0, scale=1.5, floor=1 / 8, lapse=0.03, x=GRIDS):
    k = rng.binomial(trials_per_level, accuracy(x, location, scale, floor, lapse)).astype(float)
    return k, np.full(len(x), float(trials_per_level))


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


# (alternatives C, lapse λ, trials per level): chance floors, lapses 0.05-0.5, 2-16 alternatives, few and many trials
SCENARIOS = [(2, 0.05, 40), (4, 0.2, 12), (8, 0.1, 20), (16, 0.5, 30), (16, 0.3, 8), (8, 0.4, 60)]


def covered(seed: int, scenario) -> dict[str, bool]:
    """Whether the true half-way threshold, lapse and slope lie in the fit's 95 % intervals for one simulated observer
    whose originals are answered at its ceiling 1 − λ (so the half-way point is the logistic's location)."""
    choices, lapse, n = scenario
    rng = np.random.default_rng(seed)
    location, scale, chance = rng.uniform(6, 11), rng.uniform(0.8, 2.0), 1 / choices
    k, trials = simulate(rng, n, location, scale, chance, lapse)
    originals = float(rng.binomial(200, 1 - lapse))
    row, _ = fit_curve(GRIDS, k, trials, chance, reference=(originals, 200.0), seed=seed)
    true_slope = -(1 - chance - lapse) / (4 * scale)  # dψ/dx at the location: F' = 1/(4s)
    return {"threshold": row["threshold_halfway_ci_low"] <= location <= row["threshold_halfway_ci_high"],
            "lapse": row["lapse_ci_low"] <= lapse <= row["lapse_ci_high"],
            "slope": row["slope_ci_low"] <= true_slope <= row["slope_ci_high"]}


def coverage(seeds) -> dict[str, float]:
    hits = [covered(seed, SCENARIOS[seed % len(SCENARIOS)]) for seed in seeds]
    return {name: float(np.mean([h[name] for h in hits])) for name in hits[0]}


@pytest.mark.slow
def test_intervals_cover_the_true_threshold_lapse_and_slope_at_about_the_nominal_rate():
    # 24 observers, four per scenario: a 95 % interval misses at most three with probability 0.97
    rates = coverage(range(24))
    assert min(rates.values()) >= 21 / 24, rates


def independent_ml_fit(x, k, n, chance):
    """Maximum-likelihood fit of the documented model with scipy (location, log scale, lapse), floor at chance."""
    def negative_log_likelihood(theta):
        p = np.clip(accuracy(x, theta[0], np.exp(theta[1]), chance, theta[2]), 1e-12, 1 - 1e-12)
        return -(k * np.log(p) + (n - k) * np.log(1 - p)).sum()

    best = optimize.minimize(negative_log_likelihood, [9.0, 0.0, 0.1], method="L-BFGS-B",
                             bounds=[(0, 20), (-3, 3), (0, 1 - chance - 1e-3)])
    return best.x[0], np.exp(best.x[1]), best.x[2]


@pytest.mark.parametrize("choices,lapse", [(16, 0.4), (2, 0.1)])
def test_psignifit_agrees_with_an_independent_maximum_likelihood_fit(choices, lapse):
    rng = np.random.default_rng(7)
    k, n = simulate(rng, 200, location=8.0, scale=1.5, floor=1 / choices, lapse=lapse)
    location, scale, ml_lapse = independent_ml_fit(GRIDS, k, n, 1 / choices)
    result, model = chosen_model(GRIDS, k, n, 1 / choices, overdispersed=False)
    best = model_parameters(result.parameter_estimate)  # psignifit's point estimate (MAP, flat priors inside range)
    assert model == CHANCE_FLOOR and best["floor"] == pytest.approx(1 / choices)
    assert best["location"] == pytest.approx(location, abs=0.05) and best["lapse"] == pytest.approx(ml_lapse, abs=0.01)
    assert logistic_scale(best["width"]) == pytest.approx(scale, rel=0.03)
    row, _ = fit_curve(GRIDS, k, n, 1 / choices)  # no originals: the half-way point is the location
    assert row["threshold_halfway_ci_low"] <= location <= row["threshold_halfway_ci_high"]
    assert row["lapse_ci_low"] <= ml_lapse <= row["lapse_ci_high"]
    assert row["slope_ci_low"] <= -(1 - 1 / choices - ml_lapse) / (4 * scale) <= row["slope_ci_high"]
    assert abs(ml_lapse - lapse) < 0.03 and abs(location - 8.0) < 0.3


def test_a_lapse_of_0_4_is_reported_as_the_lapse_and_no_75_percent_point():
    rng = np.random.default_rng(1)
    k, n = simulate(rng, 40, location=8.0, scale=1.5, floor=1 / 16, lapse=0.4)  # accuracy never above 0.6
    row, curve = fit_curve(GRIDS, k, n, 1 / 16, reference=(float(rng.binomial(200, 0.6)), 200.0))
    assert row["lapse_ci_low"] <= 0.4 <= row["lapse_ci_high"] and row["lapse"] == pytest.approx(0.4, abs=0.08)
    assert row["floor"] == pytest.approx(1 / 16) and np.isnan(row.get("threshold_75", np.nan))
    assert "never reaches 75 % correct" in row["note"]
    assert curve[1].max() < 0.75 and curve[1][0] > curve[1][-1]


def test_no_75_percent_point_is_extrapolated_below_the_grid():
    # ceiling 0.7 (4 alternatives, lapse 0.3), already falling at the easiest level: accuracy never reaches 75 %
    rng = np.random.default_rng(11)
    k, n = simulate(rng, 40, location=6.0, scale=1.2, floor=1 / 4, lapse=0.3)
    row, _ = fit_curve(GRIDS, k, n, 1 / 4)
    assert accuracy(GRIDS, 6.0, 1.2, 1 / 4, 0.3).max() < 0.75 and np.isnan(row.get("threshold_75", np.nan))
    assert "never reaches 75 % correct on the measured grid" in row["note"]


def test_accuracy_levelling_off_above_chance_gets_a_free_floor():
    # falls from 0.95 to a floor of 0.45 (16 classes): the true half-way point to chance is where ψ = 0.506
    rng = np.random.default_rng(2)
    truth = {"location": 7.0, "scale": 1.2, "floor": 0.45, "lapse": 0.05}
    k, n = simulate(rng, 60, **truth)
    row, _ = fit_curve(GRIDS, k, n, 1 / 16, reference=(190.0, 200.0))
    expected = halfway(**truth, chance=1 / 16, original=0.95)
    assert row["model"] == FREE_FLOOR and row["floor_ci_low"] <= 0.45 <= row["floor_ci_high"]
    assert row["threshold_halfway_ci_low"] <= expected <= row["threshold_halfway_ci_high"]
    assert "levels off above chance" in row["note"]


def test_a_floor_above_the_halfway_level_gives_no_threshold_but_says_so():
    rng = np.random.default_rng(4)
    k, n = simulate(rng, 60, location=7.0, scale=1.0, floor=0.7, lapse=0.02)  # half-way to chance would be 0.52
    row, curve = fit_curve(GRIDS, k, n, 1 / 16, reference=(196.0, 200.0))
    assert np.isnan(row.get("threshold_halfway", np.nan)) and "does not fall half-way to chance" in row["note"]
    assert row["model"] == FREE_FLOOR and curve is not None


def test_goodness_of_fit_flags_data_the_model_cannot_describe():
    rng = np.random.default_rng(5)
    k, n = simulate(rng, 100, location=8.0, scale=1.5, floor=1 / 8, lapse=0.05)
    good, _ = fit_curve(GRIDS, k, n, 1 / 8)
    bumpy = k.copy()
    bumpy[::2] = np.clip(bumpy[::2] + 30, 0, 100)  # alternate levels 30 answers better: no sigmoid fits that
    bad, _ = fit_curve(GRIDS, bumpy, n, 1 / 8)
    assert good["deviance_p"] > 0.05 and bad["deviance_p"] < 0.01 and bad["deviance"] > 3 * good["deviance"]


def test_too_few_levels_and_flat_data_say_why():
    row, curve = fit_curve([2.0, 3.0], [5, 3], [8, 8], 1 / 8)
    assert curve is None and row["note"] == "not fitted: too few levels (2 < 3)"
    row, curve = fit_curve([2.0, 3.0, 4.0, 5.0], [8, 8, 8, 8], [8, 8, 8, 8], 1 / 8)
    assert curve is None and row["note"].startswith("not fitted: flat data")
    assert np.isnan(row.get("threshold_halfway", np.nan))


C = 16
# (observer, kind, location of the fall, lapse): people whose accuracy never exceeds 0.6, and a model that is
# better on the originals but falls earlier
OBSERVERS = (("p1", "human", 8.0, 0.4), ("p2", "human", 8.0, 0.4), ("m1", "model", 5.0, 0.1))
SCALE, TRIALS, ORIGINALS = 1.5, 24, 60


def _responses(rng) -> pd.DataFrame:
    """Two people and a model simulated from the documented model: patch shuffle falls off (graded), grayscale does
    not (flat), channel shuffle has one setting, plus original trials answered at the ceiling 1 − λ."""
    rows = []
    for observer, kind, location, lapse in OBSERVERS:
        k, _ = simulate(rng, TRIALS, location, SCALE, 1 / C, lapse)
        for level, (grid, correct) in enumerate(zip(GRIDS, k)):
            rows += [{"observer": observer, "observer_kind": kind, "condition": "patch_shuffle", "level": level,
                      "params": json.dumps({"grid": int(grid)}), "correct": int(i < correct)} for i in range(TRIALS)]
        rows += [{"observer": observer, "observer_kind": kind, "condition": "grayscale", "level": level,
                  "params": json.dumps({"alpha": alpha}), "correct": 1} for level, alpha in enumerate((0.2, 0.6, 1.0))]
        rows += [{"observer": observer, "observer_kind": kind, "condition": "channel_shuffle", "level": 0,
                  "params": "{}", "correct": 1}]
        originals = rng.binomial(ORIGINALS, 1 - lapse)
        rows += [{"observer": observer, "observer_kind": kind, "condition": "original", "level": None,
                  "params": "{}", "correct": int(i < originals)} for i in range(ORIGINALS)]
    df = pd.DataFrame(rows)
    df["level"] = df["level"].astype("Int64")
    return df


@pytest.mark.slow
def test_every_observer_and_the_pooled_humans_get_a_row():
    df = _responses(np.random.default_rng(3))
    fits = psychometric_fits(df, n_choices=C)
    table = fits.table.set_index(["observer", "condition"])
    assert set(fits.table["observer"]) == {"p1", "p2", "m1", POOLED_HUMANS}
    assert table.loc[(POOLED_HUMANS, "patch_shuffle"), "fit"] == "pooled"
    shuffle = table.xs("patch_shuffle", level="condition")
    originals = df[df["condition"] == "original"].groupby("observer")["correct"].mean()
    assert (shuffle["axis"] == "grid").all() and shuffle.loc["m1", "reference_accuracy"] == originals["m1"]
    assert shuffle.loc[POOLED_HUMANS, "reference_accuracy"] == pytest.approx(originals[["p1", "p2"]].mean())
    assert shuffle.loc["m1", "threshold_halfway"] < shuffle.loc[POOLED_HUMANS, "threshold_halfway"]
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


@pytest.mark.slow
def test_analyze_thresholds_cli_recovers_the_pooled_observer_and_writes_the_report(tmp_path, capsys):
    from analysis.report import AnalysisOptions, write_report
    from cuebench.app.cli import main as cuebench

    df = _responses(np.random.default_rng(5))
    _store(tmp_path / "responses.sqlite", df[df["condition"].isin(["patch_shuffle", "original"])])
    csv = tmp_path / "thresholds.csv"
    assert cuebench(["analyze", str(tmp_path), "--metric", "thresholds", "--n-choices", str(C), "--out", str(csv)]) == 0
    assert "humans (pooled)" in capsys.readouterr().out
    written = pd.read_csv(csv).set_index("observer")
    assert set(written.index) == {"p1", "p2", "m1", POOLED_HUMANS}
    pooled, model = written.loc[POOLED_HUMANS], written.loc["m1"]
    # people answer the originals at 1 − λ = 0.6, so their half-way point is the location of the fall, 8
    assert pooled["threshold_halfway_ci_low"] <= 8.0 <= pooled["threshold_halfway_ci_high"]
    assert pooled["lapse_ci_low"] <= 0.4 <= pooled["lapse_ci_high"] and pooled["lapse"] == pytest.approx(0.4, abs=0.1)
    assert np.isnan(pooled["threshold_75"]) and "never reaches 75 % correct" in pooled["note"]
    assert model["threshold_halfway_ci_low"] <= 5.0 <= model["threshold_halfway_ci_high"]
    assert model["lapse_ci_low"] <= 0.1 <= model["lapse_ci_high"] and np.isfinite(model["threshold_75"])
    html = write_report([tmp_path], tmp_path / "report", reference=None, options=AnalysisOptions(n_choices=C),
                        progress=False).read_text()
    assert 'id="thresholds"' in html and "fitted psychometric functions" in html
    assert (tmp_path / "report" / "tables" / "thresholds.csv").is_file()


def test_analyze_thresholds_on_one_level_names_the_condition(tmp_path, capsys):
    from cuebench.app.cli import main as cuebench

    df = _responses(np.random.default_rng(0))
    _store(tmp_path / "responses.sqlite", df[df["condition"].isin(["channel_shuffle", "original"])])
    assert cuebench(["analyze", str(tmp_path), "--metric", "thresholds"]) == 2
    assert "'channel_shuffle' (level 0) has one level only" in capsys.readouterr().err


def test_analyze_quest_thresholds_reads_each_blocks_last_estimate_old_and_new_keys(tmp_path, capsys):
    from cuebench.app.cli import main as cuebench
    from cuebench.responses import ResponseStore

    def answer(observer, index, estimate):
        return {"experiment": "quest-test", "observer": observer, "observer_kind": "model", "session":
                "adaptive-patch_shuffle", "trial_index": index, "trial_id": f"patch_shuffle-{index}", "role": "test",
                "trial_type": "classify", "condition": "patch_shuffle", "level": 3,
                "params": json.dumps({"grid": 5}), "category": "cat", "response": "cat", "correct": 1,
                "adaptive": estimate}

    rows = [answer("new", i, {"quest_threshold": 6.0 + i, "ci_low": 2.0, "ci_high": 12.0 - i, "trials": i + 1})
            for i in range(3)]
    rows += [answer("old", i, {"threshold": 9.0 - i, "ci_low": 4.0, "ci_high": 14.0, "trials": i + 1})
             for i in range(2)]  # stored before the estimate was named quest_threshold
    with ResponseStore(tmp_path / "responses.sqlite") as store:
        store.write_many(rows)
    csv = tmp_path / "quest.csv"
    assert cuebench(["analyze", str(tmp_path), "--metric", "quest-thresholds", "--out", str(csv)]) == 0
    table = pd.read_csv(csv).set_index("observer")
    assert table.loc["new", ["quest_threshold", "ci_low", "ci_high", "trials"]].tolist() == [8.0, 2.0, 10.0, 3]
    assert table.loc["old", ["quest_threshold", "ci_low", "ci_high", "trials"]].tolist() == [8.0, 4.0, 14.0, 2]
    assert (table["condition"] == "patch_shuffle").all()
    empty = tmp_path / "none"
    empty.mkdir()
    _store(empty / "responses.sqlite", _responses(np.random.default_rng(0)).query("condition == 'original'"))
    assert cuebench(["analyze", str(empty), "--metric", "quest-thresholds"]) == 2
    assert "needs answers of adaptive (QUEST+) blocks" in capsys.readouterr().err
