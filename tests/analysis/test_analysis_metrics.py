"""Every metric against values worked out by hand on small tables (the arithmetic is in the comments)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from analysis import metrics
from analysis.comparison import paired_ttests, rank_correlation
from analysis.consistency import error_consistency, kappa_from_correct, noise_ceiling, spearman_brown
from analysis.ranking import RankTestError, cd_diagram, friedman_nemenyi


def rows(observer, kind, condition, level, outcomes, **extra):
    """Scored rows: one per outcome (1/0), trial ids t0, t1, ... within the condition/level."""
    return [{"observer": observer, "observer_kind": kind, "condition": condition, "level": level,
             "trial_id": f"{condition}-{level}-t{i}", "correct": c, "trial_type": "classify", "role": "test",
             "category": "cat", "texture_category": None, "response": "cat" if c else "dog", "group": None} | extra
            for i, c in enumerate(outcomes)]


def table(*parts) -> pd.DataFrame:
    df = pd.DataFrame([r for part in parts for r in part])
    df["level"] = df["level"].astype("Int64")
    return df


@pytest.mark.validates(
    "Wilson 95 % interval of an observer's accuracy per condition x level",
    definition='(p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)',
    source='Wilson 1927; Brown, Cai & DasGupta 2001, Eq. 4',
    reference='hand computation (k = 8, n = 10)',
    tolerance='1e-4')
def test_wilson_interval_matches_hand_computation():
    # k=8, n=10, z=1.96: centre (0.8 + 0.19208)/1.38416 = 0.71675; half 1.96*sqrt(0.016+0.009604)/1.38416 = 0.22658
    lo, hi = metrics.wilson_ci(8, 10)
    assert lo == pytest.approx(0.49016, abs=1e-4)
    assert hi == pytest.approx(0.94332, abs=1e-4)
    lo0, hi0 = metrics.wilson_ci(0, 5)
    assert lo0 == pytest.approx(0.0) and 0 < hi0 < 1


@pytest.mark.validates(
    'mean accuracy over observers with t-interval and percentile bootstrap interval',
    definition='mean +- t_{n-1} s / sqrt(n); percentiles 2.5/97.5 of resampled means',
    source='Student 1908; Efron & Tibshirani 1993',
    reference="hand computation (t-interval); bootstrap interval inside the data's range and reproducible by seed",
    tolerance='1e-4')
def test_t_interval_and_bootstrap_across_observers():
    # mean 0.8, sd 0.2, se 0.11547, t_{0.975, 2} = 4.302653 -> half width 0.49683
    mean, lo, hi = metrics.t_ci([0.6, 0.8, 1.0])
    assert (mean, lo, hi) == pytest.approx((0.8, 0.30317, 1.29683), abs=1e-4)
    assert np.isnan(metrics.t_ci([0.7])[1])
    b_lo, b_hi = metrics.bootstrap_ci([0.6, 0.8, 1.0], seed=3)
    assert 0.6 <= b_lo <= 0.8 <= b_hi <= 1.0
    assert metrics.bootstrap_ci([0.6, 0.8, 1.0], seed=3) == (b_lo, b_hi)


@pytest.mark.validates(
    'relative accuracy A_sup / A_orig and chance-corrected accuracy',
    definition='A_sup / A_orig; (A_sup - 1/C) / (A_orig - 1/C)',
    source='Burgert et al. 2025, Sec. 5.1 and 5.2',
    reference='hand computation (8/10 and 4/10, C = 4)',
    tolerance='exact (pytest.approx)')
def test_accuracy_and_relative_accuracy():
    # original 8/10 correct, patch_shuffle level 1: 4/10 -> relative 0.4/0.8 = 0.5;
    # chance-corrected with C = 4: (0.4 - 0.25) / (0.8 - 0.25) = 0.272727
    df = table(rows("A", "model", "original", None, [1] * 8 + [0] * 2),
               rows("A", "model", "patch_shuffle", 1, [1] * 4 + [0] * 6))
    acc = metrics.accuracy(df)
    ps = acc[acc["condition"] == "patch_shuffle"].iloc[0]
    assert (ps["n"], ps["k"], ps["accuracy"]) == (10, 4, 0.4)
    rel = metrics.relative_accuracy(acc, n_choices=4).iloc[0]
    assert rel["relative_accuracy"] == pytest.approx(0.5)
    assert rel["chance_corrected"] == pytest.approx(0.15 / 0.55)
    with pytest.raises(metrics.MetricError):
        metrics.relative_accuracy(acc, n_choices=1)


def test_relative_accuracy_drops_observer_without_baseline():
    df = table(rows("A", "model", "original", None, [1, 1]), rows("A", "model", "bilateral", 0, [1, 0]),
               rows("B", "model", "bilateral", 0, [1, 1]))
    rel = metrics.relative_accuracy(metrics.accuracy(df), n_choices=16)
    assert list(rel["observer"]) == ["A"]


def test_group_accuracy_t_and_bootstrap():
    df = table(rows("h1", "human", "original", None, [1, 1, 0, 0, 1]),  # 0.6
               rows("h2", "human", "original", None, [1, 1, 1, 1, 0]),  # 0.8
               rows("h3", "human", "original", None, [1, 1, 1, 1, 1]))  # 1.0
    g = metrics.group_accuracy(metrics.accuracy(df)).iloc[0]
    assert g["observers"] == 3
    # t-interval 0.30317 to 1.29683 (above), clipped to the proportion's range
    assert (g["accuracy"], g["t_ci_low"], g["t_ci_high"]) == pytest.approx((0.8, 0.30317, 1.0), abs=1e-4)
    assert g["boot_ci_low"] <= 0.8 <= g["boot_ci_high"]
    # all 15 trials pooled, 12 right: Wilson by hand, centre (0.8 + 0.128049)/1.256097 = 0.738836,
    # half 1.959964*sqrt(0.0106667 + 0.0042683)/1.256097 = 0.190689 (statsmodels' proportion_confint agrees)
    assert (g["wilson_low"], g["wilson_high"]) == pytest.approx((0.548146, 0.929525), abs=1e-5)


def test_group_intervals_stay_on_the_scale_and_need_three_observers_for_t():
    two = table(rows("h1", "human", "original", None, [1, 0, 0, 0, 0]),  # 0.2
                rows("h2", "human", "original", None, [1, 1, 1, 1, 1]))  # 1.0
    g = metrics.group_accuracy(metrics.accuracy(two)).iloc[0]
    # t(0.975, 1) = 12.706 would give 0.6 +- 5.08: no t-interval from two people
    assert np.isnan(g["t_ci_low"]) and np.isnan(g["t_ci_high"])
    assert 0.0 <= g["boot_ci_low"] <= g["boot_ci_high"] <= 1.0
    # 6 of 10 trials: Wilson centre (0.6 + 0.19208)/1.38415 = 0.57226, half 1.96*sqrt(0.024 + 0.0096)/1.38415 = 0.25955
    assert (g["wilson_low"], g["wilson_high"]) == pytest.approx((0.31267, 0.83182), abs=1e-4)
    relative = pd.DataFrame({"observer": ["h1", "h2", "h3"], "observer_kind": "human", "condition": "blur",
                             "level": 0, "relative_accuracy": [0.05, 0.1, 1.6]})
    r = metrics.group_accuracy(relative, "relative_accuracy").iloc[0]
    assert r["t_ci_low"] == 0.0  # 0.5833 - 4.3027 * 0.8808 / sqrt(3) < 0: a ratio of accuracies is never negative
    assert r["t_ci_high"] == pytest.approx(0.58333 + 4.302653 * 0.88081 / np.sqrt(3), abs=1e-3)


@pytest.mark.validates(
    'shape bias per observer and per category',
    definition='shape decisions / (shape + texture decisions) over images whose shape and texture classes differ',
    source='Geirhos et al. 2019, Sec. 3',
    reference='hand count of five trials',
    tolerance='exact')
def test_shape_bias_counts_only_conflicting_images():
    # 4 conflict trials answered shape, shape, texture, other; one same-class image (ignored): 2 / (2 + 1)
    base = {"observer": "m", "observer_kind": "model", "role": "test", "condition": "cue-conflict", "level": 0}
    df = pd.DataFrame([
        base | {"trial_id": "a", "category": "cat", "texture_category": "dog", "response": "cat", "correct": 1},
        base | {"trial_id": "b", "category": "car", "texture_category": "dog", "response": "car", "correct": 1},
        base | {"trial_id": "c", "category": "cat", "texture_category": "boat", "response": "boat", "correct": 0},
        base | {"trial_id": "d", "category": "cat", "texture_category": "dog", "response": "knife", "correct": 0},
        base | {"trial_id": "e", "category": "cat", "texture_category": "cat", "response": "dog", "correct": 0},
    ])
    sb = metrics.shape_bias(df).iloc[0]
    assert (sb["n_shape"], sb["n_texture"], sb["shape_bias"]) == (2, 1, pytest.approx(2 / 3))
    per_cat = metrics.shape_bias(df, by_category=True).set_index("category")
    assert per_cat.loc["cat", "shape_bias"] == pytest.approx(0.5)  # a shape, c texture, d neither
    assert per_cat.loc["car", "shape_bias"] == 1.0


@pytest.mark.validates(
    'cue-decomposition shape bias S_cd and robustness R_cd',
    definition='S_cd = (Q_S/s) / (Q_S/s + Q_T/t), R_cd = (Q_S + Q_T) / (2 Q_O)',
    source='Heinert et al., Eqs. 3-5',
    reference='R_cd from the published Q_O, Q_S, Q_T of ConvNeXt L and VGG19 (Heinert et al., Table I); hand computation of S_cd',
    tolerance='3 decimals (R_cd); exact (S_cd)')
def test_cue_decomposition_against_heinert_table_1_and_hand_values():
    # R_cd = (Q_S + Q_T) / (2 Q_O): ConvNeXt L (0.838 + 0.969) / 1.992 = 0.907, VGG19 (0.228 + 0.774) / 1.966 = 0.510
    q = pd.DataFrame({"observer": ["ConvNeXt L", "VGG19"], "observer_kind": "model",
                      "Q_O": [0.996, 0.983], "Q_S": [0.838, 0.228], "Q_T": [0.969, 0.774]})
    out = metrics.cue_decomposition_scores(q).set_index("observer")
    assert round(out.loc["ConvNeXt L", "R_cd"], 3) == 0.907
    assert round(out.loc["VGG19", "R_cd"], 3) == 0.510
    # two models with Q_S, Q_T = (0.8, 0.4) and (0.4, 0.8): s = t = 0.6, S_cd(M1) = 0.8 / 1.2 = 2/3;
    # model set {M1}: s = 0.8, t = 0.4 -> S_cd(M1) = 1 / (1 + 1) = 0.5, S_cd(M2) = 0.5 / (0.5 + 2) = 0.2
    q2 = pd.DataFrame({"observer": ["M1", "M2"], "observer_kind": "model", "Q_O": 1.0, "Q_S": [0.8, 0.4],
                       "Q_T": [0.4, 0.8]})
    assert metrics.cue_decomposition_scores(q2).set_index("observer")["S_cd"]["M1"] == pytest.approx(2 / 3)
    one = metrics.cue_decomposition_scores(q2, model_set=["M1"]).set_index("observer")["S_cd"]
    assert (one["M1"], one["M2"]) == (pytest.approx(0.5), pytest.approx(0.2))
    with pytest.raises(metrics.MetricError, match="nope"):
        metrics.cue_decomposition_scores(q2, model_set=["nope"])


def test_cue_decomposition_from_responses_needs_all_three_conditions():
    df = table(rows("m", "model", "original", None, [1, 1]), rows("m", "model", "shape_cue", None, [1, 0]),
               rows("m", "model", "texture_cue", None, [0, 0]), rows("h", "human", "original", None, [1, 1]),
               rows("h", "human", "shape_cue", None, [1, 1]), rows("h", "human", "texture_cue", None, [1, 0]))
    cd = metrics.cue_decomposition(df).set_index("observer")
    # model set = {m}: s = 0.5, t = 0 would divide by zero for S_cd; R_cd(m) = (0.5 + 0) / 2 = 0.25
    assert cd.loc["m", "R_cd"] == pytest.approx(0.25)
    assert cd.loc["h", "R_cd"] == pytest.approx(0.75)
    with pytest.raises(metrics.MetricError, match="texture_cue"):
        metrics.cue_decomposition(df[df["condition"] != "texture_cue"])


@pytest.mark.validates(
    'oddity (DiST) accuracy, catch trials apart',
    definition='fraction of trials whose odd image was picked; chance 1/3 for responses without their experiment',
    source='Wen et al. 2024, Sec. 3',
    reference='hand count',
    tolerance='exact')
def test_oddity_accuracy_keeps_catch_trials_apart():
    test = table(rows("h", "human", "dist", None, [1, 1, 0], trial_type="oddity"))
    catch = table(rows("h", "human", "dist", None, [1, 0], trial_type="oddity", role="catch"))
    out = metrics.oddity_accuracy(test, catch).set_index("role")
    assert out.loc["test", "accuracy"] == pytest.approx(2 / 3)
    assert out.loc["catch", "accuracy"] == pytest.approx(0.5)
    assert list(out["chance"]) == pytest.approx([1 / 3, 1 / 3])  # no chance column: DiST's triplets assumed
    assert out.loc["test", "chance_corrected"] == pytest.approx((2 / 3 - 1 / 3) / (1 - 1 / 3))


@pytest.mark.validates(
    'oddity chance and chance-corrected accuracy from the trial type card',
    definition='chance 1/k for k images (the oddity card); (A - 1/k) / (1 - 1/k)',
    source='Wen et al. 2024, Sec. 3; Macmillan & Creelman 2005, Ch. 4',
    reference='hand computation',
    tolerance='exact')
def test_a_four_image_oddity_is_judged_against_one_quarter():
    """The experiment's trials carry the choices; the card turns them into each trial's chance, the metric averages."""
    from analysis.chance import experiment_n_choices, with_chance
    from cuebench.trial_types import card
    from cuebench.trials import Experiment, LabelSet, Stimulus, Trial

    assert card("classify").chance(("cat", "dog", "not clear")) == 0.5 and card("segment").chance(("label map",)) is None
    images = {k: Stimulus(id=k, path=f"stimuli/{k}.png") for k in "abcd"}
    trials = ([Trial(f"quad-None-t{i}", "oddity", "test", tuple("abcd"), ("1", "2", "3", "4"), "1") for i in range(4)]
              + [Trial(f"dist-None-t{i}", "oddity", "test", tuple("abc"), ("1", "2", "3"), "1") for i in range(3)])
    experiment = Experiment(name="odd", design="dist", label_set=LabelSet("x", ("x",)), stimuli=images, trials=trials)
    assert experiment_n_choices(experiment) == (4, "oddity")  # the most common C among the test trials
    answers = table(rows("h", "human", "quad", None, [1, 0, 1, 0], trial_type="oddity"),
                    rows("h", "human", "dist", None, [1, 0, 0], trial_type="oddity"))
    out = metrics.oddity_accuracy(with_chance(answers, experiment)).set_index("condition")
    assert (out.loc["quad", "accuracy"], out.loc["quad", "chance"]) == (0.5, 0.25)
    assert out.loc["quad", "chance_corrected"] == pytest.approx((0.5 - 0.25) / (1 - 0.25))
    assert out.loc["dist", "chance"] == pytest.approx(1 / 3) and out.loc["dist", "chance_corrected"] == pytest.approx(0)
    assert set(out["chance_from"]) == {"trial type's card"}


@pytest.mark.validates(
    'error consistency kappa of two observers',
    definition='kappa = (c_obs - c_exp) / (1 - c_exp), c_exp = p1 p2 + (1 - p1)(1 - p2)',
    source='Geirhos et al. 2020, Sec. 2',
    reference='hand computation (kappa 1/2, 1, -1, undefined)',
    tolerance='exact')
def test_kappa_hand_values_including_perfect_agreement():
    # a = 1100, b = 1000: c_obs = 3/4, p1 = 1/2, p2 = 1/4, c_exp = 1/8 + 3/8 = 1/2, kappa = (3/4 - 1/2) / (1/2) = 1/2
    c_obs, c_exp, kappa = kappa_from_correct([1, 1, 0, 0], [1, 0, 0, 0])
    assert (c_obs, c_exp, kappa) == pytest.approx((0.75, 0.5, 0.5))
    # c_obs = 1 with c_exp = 1/2: kappa = 1
    assert kappa_from_correct([1, 1, 0, 0], [1, 1, 0, 0])[2] == pytest.approx(1.0)
    # c_obs = 1 with both always right: c_exp = 1, kappa undefined
    assert np.isnan(kappa_from_correct([1, 1, 1], [1, 1, 1])[2])
    # errors on complementary trials: c_obs = 0, c_exp = 1/2, kappa = -1
    assert kappa_from_correct([1, 1, 0, 0], [0, 0, 1, 1])[2] == pytest.approx(-1.0)


def test_error_consistency_pairs_on_shared_trials_only():
    a = rows("h1", "human", "original", None, [1, 1, 0, 0])
    b = rows("h2", "human", "original", None, [1, 0, 0, 0, 1, 1])  # t4, t5 not seen by h1
    m = rows("m", "model", "original", None, [1, 1])
    pairs = error_consistency(table(a, b, m), n_boot=200, seed=1).set_index(["observer_a", "observer_b"])
    hh = pairs.loc[("h1", "h2")]
    assert hh["n_shared"] == 4 and hh["pair"] == "human-human"
    # one cell, 1100 vs 1000: chance over distinct-trial pairs (2*1 - 1 + 2*3 - 2) / 12 = 5/12, so kappa =
    # (3/4 - 5/12) / (7/12) = 4/7 (the plug-in c_exp 1/2 of kappa_from_correct gives 1/2)
    assert hh["kappa"] == pytest.approx(4 / 7)
    assert hh["kappa_ci_low"] <= hh["kappa_ci_high"]
    hm = pairs.loc[("h1", "m")]
    assert hm["n_shared"] == 2 and hm["pair"] == "human-model"
    assert np.isnan(hm["kappa"])  # both right on both shared trials: c_exp = 1


@pytest.mark.validates(
    'noise ceiling (leave-one-out lower and upper bounds, split-half Spearman-Brown)',
    definition='correlation of each observer with the mean of the others (lower) and of all (upper)',
    source='Nili et al. 2014',
    reference='hand computation (r = 0 and 1/sqrt(3))',
    tolerance='1e-12')
def test_noise_ceiling_hand_example():
    # X = 1010, Y = 1001, Z = 1100. Mean of the others is uncorrelated with each one (r = 0, lower bound);
    # mean of all = (1, 1/3, 1/3, 1/3) correlates r = (1/3) / (1 * sqrt(1/3)) = 1/sqrt(3) with each (upper bound).
    m = pd.DataFrame({"X": [1, 0, 1, 0], "Y": [1, 0, 0, 1], "Z": [1, 1, 0, 0]}, index=list("abcd"), dtype=float)
    c = noise_ceiling(m, "accuracy", n_splits=20)
    assert c["lower"] == pytest.approx(0.0, abs=1e-12)
    assert c["upper"] == pytest.approx(1 / np.sqrt(3))
    same = pd.DataFrame({o: [1, 1, 0, 0] for o in "ABCD"}, dtype=float)
    for measure in ("accuracy", "kappa"):
        perfect = noise_ceiling(same, measure, n_splits=10)
        assert perfect["lower"] == perfect["upper"] == perfect["split_half_sb"] == pytest.approx(1.0)
    # Spearman-Brown: 2 * 0.5 / 1.5
    assert spearman_brown(0.5) == pytest.approx(2 / 3)


@pytest.mark.validates(
    "paired t-test human vs model per condition x level (t, dof, p, 95 % CI)",
    definition="t = mean(d) / (sd(d) / sqrt(n)) over the items' differences d = people's mean correctness - model's",
    source="Burgert et al. 2025, App. F", reference="hand computation",
    tolerance="1e-4")
@pytest.mark.validates(
    "effect size d_z of the paired t-test", definition="d_z = mean(d) / sd(d) = t / sqrt(n)",
    source="Lakens 2013, Eq. 6; Burgert et al. 2025 Table 4 ('Cohen's d' = t / 2 at n = 4)",
    reference="hand computation", tolerance="1e-4")
@pytest.mark.validates(
    "effect size d_av of the paired t-test",
    definition="d_av = mean(d) / sqrt((sd(x)^2 + sd(y)^2) / 2)", source="Cumming 2012; Lakens 2013, Eq. 10",
    reference="hand computation", tolerance="1e-4")
def test_paired_ttest_hand_values_and_unmatched_model():
    # items t0..t3: humans (h1, h2) mean correctness x = 1, .5, 1, .5; model y = 1, 0, 0, 0.
    # d = 0, .5, 1, .5: mean .5, sd sqrt(.5/3) = .40825, t = .5 / (.40825 / 2) = 2.4495, dof 3;
    # d_z = .5 / .40825 = 1.2247 = t / sqrt(4); d_av = .5 / sqrt((1/12 + 1/4) / 2) = .5 / .40825 = 1.2247 too here,
    # so a second case tells them apart: x = 1, .5, 1, 0, y = 1, 0, 0, 0: d = 0, .5, 1, 0, mean .375,
    # sd(d) = sqrt(((.375)^2 + (.125)^2 + (.625)^2 + (.375)^2) / 3) = .47871, d_z = .78335;
    # sd(x)^2 = var(1, .5, 1, 0) = .22917, sd(y)^2 = .25: d_av = .375 / sqrt(.23958) = .76613
    df = table(rows("h1", "human", "bilateral", 0, [1, 1, 1, 1]), rows("h2", "human", "bilateral", 0, [1, 0, 1, 0]),
               rows("m", "model", "bilateral", 0, [1, 0, 0, 0]), rows("lonely", "model", "grayscale", 0, [1, 0, 1]))
    out = paired_ttests(df).set_index("observer")
    r = out.loc["m"]
    assert (r["n"], r["t"], r["dof"]) == (4, pytest.approx(2.4495, abs=1e-4), 3)
    from scipy import stats

    assert r["p"] == pytest.approx(2 * stats.t.sf(2.4495, 3), abs=1e-4)
    assert r["d_z"] == pytest.approx(1.2247, abs=1e-4) == r["t"] / 2
    assert r["d_av"] == pytest.approx(1.2247, abs=1e-4)
    assert "power" not in out.columns and "cohen_d" not in out.columns
    assert r["ci95_low"] < 0.5 < r["ci95_high"]
    assert "no human responses" in out.loc["lonely", "note"] and np.isnan(out.loc["lonely", "p"])
    other = table(rows("h1", "human", "blur", 0, [1, 1, 1, 0]), rows("h2", "human", "blur", 0, [1, 0, 1, 0]),
                  rows("m", "model", "blur", 0, [1, 0, 0, 0]))
    r = paired_ttests(other).iloc[0]
    assert r["d_z"] == pytest.approx(0.78335, abs=1e-4) and r["d_av"] == pytest.approx(0.76613, abs=1e-4)
    assert r["d_z"] == pytest.approx(r["t"] / 2)


@pytest.mark.validates(
    "d_z reproduces Burgert et al.'s published Cohen's d", definition="d_z = t / sqrt(n)",
    source="Burgert et al. 2025, App. F, Table 4 (n = 4 groups)",
    reference="published t and d: 24.76 -> 12.38, 48.16 -> 24.08, 79.65 -> 39.83, 17.38 -> 8.69",
    tolerance="0.01 (the table's rounding)")
def test_d_z_is_the_effect_size_burgert_et_al_report():
    """Table 4 of Burgert et al. gives t and 'Cohen's d' of four paired tests with n = 4 groups: d = t / 2 in every
    row. Four differences with a given t have d_z = t / sqrt(4) through the project's function."""
    from analysis.comparison import effect_sizes

    for t, published in ((24.76, 12.38), (48.16, 24.08), (79.65, 39.83), (17.38, 8.69)):
        d = np.array([-1.5, -0.5, 0.5, 1.5])  # sd sqrt(5/3); shift the mean so that t = mean / (sd / 2)
        d = d + t * d.std(ddof=1) / 2
        assert effect_sizes(d, np.zeros(4))["d_z"] == pytest.approx(published, abs=0.01)


def test_paired_ttests_holm_correction_and_group_pairing():
    df = table(rows("h1", "human", "a", 0, [1, 1, 1, 1], group=0), rows("h2", "human", "a", 0, [1, 0, 1, 1], group=1),
               rows("m", "model", "a", 0, [0, 0, 1, 0]),
               rows("h1", "human", "b", 0, [1, 1, 0, 1], group=0), rows("h2", "human", "b", 0, [1, 1, 1, 0], group=1),
               rows("m", "model", "b", 0, [1, 0, 0, 0]))
    out = paired_ttests(df, correction="holm")
    p = out["p"].to_numpy()
    # Holm with two tests: the smaller p doubled, the larger max(its own, that) (capped at 1)
    small, large = sorted(p)
    assert sorted(out["p_corr"]) == pytest.approx(sorted([min(1, 2 * small), min(1, max(large, 2 * small))]))
    grouped = paired_ttests(df, pairing="group")
    assert (grouped.dropna(subset=["n"])["n"] <= 2).all()


@pytest.mark.validates(
    'Friedman test with Iman-Davenport F and Nemenyi critical difference',
    definition='chi2_F = 12N/(k(k+1)) (sum R_j^2 - k(k+1)^2/4); F = (N-1) chi2_F / (N(k-1) - chi2_F); CD = q_alpha sqrt(k(k+1)/6N)',
    source='Demsar 2006, Sec. 3.2.2; Kalischek et al. 2023 (BiasBed)',
    reference='hand computation with ties',
    tolerance='1e-5')
def test_friedman_with_ties_matches_hand_computation():
    # ranks (1 = best): b1 A1 B2.5 C2.5 | b2 A2 B1 C3 | b3 all 2 -> R = 5/3, 11/6, 5/2
    # chi2 = 12*3/(3*4) * (25/9 + 121/36 + 25/4 - 12) = 3 * 0.38889 = 1.16667
    # F = 2 * 1.16667 / (3*2 - 1.16667) = 0.48276, df (2, 4); CD = 2.3437 * sqrt(3*4 / 18) = 1.9137
    scores = pd.DataFrame({"A": [0.9, 0.7, 0.5], "B": [0.8, 0.9, 0.5], "C": [0.8, 0.6, 0.5]}, index=["b1", "b2", "b3"])
    r = friedman_nemenyi(scores)
    assert r.average_ranks.to_dict() == pytest.approx({"A": 5 / 3, "B": 11 / 6, "C": 2.5})
    assert r.chi2 == pytest.approx(7 / 6)
    assert r.f == pytest.approx(0.48276, abs=1e-5)
    assert (r.df1, r.df2) == (2, 4)
    assert r.critical_difference == pytest.approx(1.9137, abs=1e-3)
    assert r.nemenyi_p.shape == (3, 3) and (r.nemenyi_p.to_numpy() <= 1).all()
    lower = friedman_nemenyi(-scores, higher_is_better=False)
    assert lower.average_ranks.to_dict() == pytest.approx(r.average_ranks.to_dict())
    import matplotlib

    matplotlib.use("Agg")
    ax = cd_diagram(r)
    assert "CD = 1.91" in ax.get_title()


def test_friedman_refuses_gaps_and_single_blocks():
    with pytest.raises(RankTestError, match="'B'"):
        friedman_nemenyi(pd.DataFrame({"A": [0.1, 0.2], "B": [0.3, None]}))
    with pytest.raises(RankTestError, match="at least 2"):
        friedman_nemenyi(pd.DataFrame({"A": [0.1], "B": [0.3]}))


@pytest.mark.validates(
    'Spearman rank correlation between metrics over models, exact p',
    definition='rho = 1 - 6 sum d^2 / (n(n^2 - 1)); p over all n! pairings',
    source='Heinert et al., Tab. II',
    reference='hand computation (rho 0.8, p 16/120)',
    tolerance='exact')
def test_spearman_rank_correlation_exact_p():
    # ranks 12345 vs 21435: sum d^2 = 4, rho = 1 - 6*4 / (5*24) = 0.8; |rho| >= 0.8 in 16 of 120 pairings: p = 0.1333
    t = pd.DataFrame({"observer": list("abcde"), "S_cd": [1, 2, 3, 4, 5], "shape_bias": [2, 1, 4, 3, 5]})
    r = rank_correlation(t, "S_cd", "shape_bias")
    assert (r["n"], r["rho"], r["p"]) == (5, pytest.approx(0.8), pytest.approx(16 / 120))
    assert rank_correlation(t, "S_cd", "shape_bias", observers=["a", "b"])["n"] == 2
    constant = t.assign(shape_bias=0.5)  # every model equal: no ranking, no correlation, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = rank_correlation(constant, "S_cd", "shape_bias")
    assert r["n"] == 5 and np.isnan(r["rho"]) and np.isnan(r["p"])
    from analysis.comparison import ComparisonError

    with pytest.raises(ComparisonError, match="R_cd"):
        rank_correlation(t, "R_cd", "S_cd")


def test_multinomial_bootstrap_matches_resampling_trials():
    # counts 50/10/20/20 of 100 trials: p1 = 0.6, p2 = 0.7, c_exp = 0.42 + 0.12 = 0.54, kappa = (0.7 - 0.54) / 0.46
    a = np.array([1] * 50 + [1] * 10 + [0] * 20 + [0] * 20)
    b = np.array([1] * 50 + [0] * 10 + [1] * 20 + [0] * 20)
    assert kappa_from_correct(a, b)[2] == pytest.approx(0.16 / 0.46)
    from analysis.consistency import bootstrap_kappa

    rng = np.random.default_rng(0)
    fast = bootstrap_kappa(a, b, 4000, rng)
    idx = rng.integers(0, 100, size=(4000, 100))
    slow = kappa_from_correct(a[idx], b[idx])[2]
    assert np.percentile(fast, [2.5, 50, 97.5]) == pytest.approx(np.percentile(slow, [2.5, 50, 97.5]), abs=0.03)


def test_relative_accuracy_is_empty_with_a_note_where_its_denominator_is_not_positive():
    # A: originals 0/4, suppressed 1/4 -> A_sup / 0 and (0.25 - 0.5) / (0 - 0.5) have no meaning;
    # B: originals 2/4 = chance 1/2 (C = 2), suppressed 1/4 -> relative 0.25 / 0.5 = 0.5, chance-corrected empty;
    # C: originals 3/4, suppressed 1/4 -> relative 1/3, chance-corrected (0.25 - 0.5) / (0.75 - 0.5) = -1
    df = table(rows("A", "human", "original", None, [0, 0, 0, 0]), rows("A", "human", "blur", 1, [1, 0, 0, 0]),
               rows("B", "human", "original", None, [1, 1, 0, 0]), rows("B", "human", "blur", 1, [1, 0, 0, 0]),
               rows("C", "human", "original", None, [1, 1, 1, 0]), rows("C", "human", "blur", 1, [1, 0, 0, 0]))
    rel = metrics.relative_accuracy(metrics.accuracy(df), n_choices=2).set_index("observer")
    assert np.isnan(rel.loc["A", "relative_accuracy"]) and np.isnan(rel.loc["A", "chance_corrected"])
    assert rel.loc["A", "note"] == metrics.NO_BASELINE
    assert rel.loc["B", "relative_accuracy"] == pytest.approx(0.5) and np.isnan(rel.loc["B", "chance_corrected"])
    assert rel.loc["B", "note"] == metrics.AT_CHANCE
    assert (rel.loc["C", "relative_accuracy"], rel.loc["C", "chance_corrected"]) == (pytest.approx(1 / 3),
                                                                                     pytest.approx(-1.0))
    assert rel.loc["C", "note"] == ""
    assert np.isfinite(rel[["relative_accuracy", "chance_corrected"]].fillna(0).to_numpy()).all()


def test_shape_bias_and_cue_accuracies_carry_wilson_intervals_of_their_counts():
    # 3 shape and 1 texture decision (one answer naming neither is not counted): p = 3/4, n = 4, z = 1.95996:
    # centre (0.75 + 0.48018) / 1.96036 = 0.62753, half 1.95996 * sqrt(0.046875 + 0.060023) / 1.96036 = 0.32689
    # -> [0.3006, 0.9544]
    base = {"observer": "h", "observer_kind": "human", "role": "test", "condition": "cue-conflict", "level": 0,
            "category": "cat", "texture_category": "dog"}
    answers = ["cat", "cat", "cat", "dog", "boat"]
    df = pd.DataFrame([base | {"trial_id": f"t{i}", "response": a, "correct": int(a == "cat")}
                       for i, a in enumerate(answers)])
    sb = metrics.shape_bias(df).iloc[0]
    assert (sb["shape_bias"], sb["ci_low"], sb["ci_high"]) == (0.75, pytest.approx(0.3006, abs=1e-4),
                                                               pytest.approx(0.9544, abs=1e-4))
    # Q_S = 2/4: Wilson [0.15, 0.85] (symmetric about 1/2); Q_O = 4/4: [0.5101, 1]; Q_T = 0/3: [0, 0.5615]
    cues = table(rows("m", "model", "original", None, [1, 1, 1, 1]), rows("m", "model", "shape_cue", None, [1, 0, 1, 0]),
                 rows("m", "model", "texture_cue", None, [0, 0, 0]))
    q = metrics.cue_decomposition(cues).iloc[0]
    assert (q["Q_S_low"], q["Q_S_high"]) == (pytest.approx(0.15, abs=1e-4), pytest.approx(0.85, abs=1e-4))
    assert (q["Q_O_low"], q["Q_O_high"]) == (pytest.approx(0.5101, abs=1e-4), pytest.approx(1.0))
    assert (q["Q_T_low"], q["Q_T_high"]) == (pytest.approx(0.0, abs=1e-12), pytest.approx(0.5615, abs=1e-4))
    assert (q["n_O"], q["n_S"], q["n_T"]) == (4, 4, 3)
    # the model set's mean Q_T is 0: S_cd has no scale t, so it is empty with a note; R_cd = (0.5 + 0) / 2
    assert np.isnan(q["S_cd"]) and "no S_cd" in q["note"] and q["R_cd"] == pytest.approx(0.25)


def test_ceiling_ratios_and_spearman_brown_never_divide_by_zero():
    from analysis.consistency import ceiling_note, ratio_to_ceiling

    # the report once crashed on agree / upper with upper = 0 (ZeroDivisionError)
    assert np.isnan(ratio_to_ceiling(0.3, 0.0)) and np.isnan(ratio_to_ceiling(0.3, -0.2))
    assert ratio_to_ceiling(0.3, 0.6) == pytest.approx(0.5)
    assert "no ratio" in ceiling_note({"observers": 3, "lower": -0.5, "upper": 0.0})
    # Spearman-Brown 2r / (1 + r) is undefined at r = -1 (two halves that disagree perfectly)
    assert np.isnan(spearman_brown(-1.0)) and spearman_brown(-0.5) == pytest.approx(-2.0)
    # two people who disagree on every item: the halves correlate r = -1, the stepped-up value is empty
    opposite = pd.DataFrame({"X": [1, 0, 1, 0], "Y": [0, 1, 0, 1]}, dtype=float)
    c = noise_ceiling(opposite, "accuracy", n_splits=4)
    assert c["split_half"] == pytest.approx(-1.0) and np.isnan(c["split_half_sb"])


def test_iman_davenport_f_is_empty_when_every_block_ranks_alike():
    # A > B > C in all 3 blocks: R = 1, 2, 3; chi2 = 12*3/(3*4) * (1 + 4 + 9 - 3*16/4) = 6 = m(n-1), so
    # F = (m-1) chi2 / (m(n-1) - chi2) divides by zero; the Friedman p is chi2(2).sf(6) = exp(-3) = 0.049787
    scores = pd.DataFrame({"A": [0.9, 0.8, 0.7], "B": [0.6, 0.5, 0.4], "C": [0.3, 0.2, 0.1]}, index=["b1", "b2", "b3"])
    r = friedman_nemenyi(scores)
    assert r.chi2 == pytest.approx(6.0) and r.chi2_p == pytest.approx(0.049787, abs=1e-6)
    assert np.isnan(r.f) and np.isnan(r.f_p) and "every block ranks the methods alike" in r.note
