"""Class-wise reliance (Burgert et al. 2025, App. I.1) on a response table built by hand."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from analysis.classwise import (class_relative_accuracy, global_relative_accuracy, kde_overlap, outlier_classes,
                                ranking_agreement, ranking_pairs, ratio_interval_mover)
from analysis.report import AnalysisOptions, analyze

CORRECT = {  # class -> right answers out of 4 on the originals, under texture and under shape suppression
    "airplane": (4, 3, 1),
    "bear": (2, 2, 1),
    "cat": (4, 1, 2),
    "dog": (0, 1, 0),  # never right on its originals: no relative accuracy
}
ARMS = (("original", None), ("bilateral", 4), ("patch_shuffle", 4))


def hand_table(observer: str = "m") -> list[dict]:
    """Four trials per class and arm; the first k of them answered right."""
    rows = []
    for category, rights in CORRECT.items():
        for (condition, level), k in zip(ARMS, rights):
            for image in range(4):
                answer = category if image < k else "oven"
                rows.append({"experiment": "toy", "observer": observer, "observer_kind": "model", "session": "1",
                             "trial_index": len(rows), "trial_id": f"{category}{image}-{condition}",
                             "role": "test", "trial_type": "classify", "condition": condition, "level": level,
                             "params": {}, "category": category, "response": answer, "correct_answer": category,
                             "correct": int(answer == category)})
    return rows


@pytest.fixture(scope="module")
def scored():
    return pd.DataFrame(hand_table())


@pytest.mark.validates("class-wise relative accuracy per class x suppression",
                       definition="r_{k,a} = A_{k,a} / A_{k,original}; undefined where A_{k,original} = 0",
                       source="Burgert et al. 2025, App. I.1", reference="hand computation on a 4-class table",
                       tolerance="exact")
def test_class_relative_accuracy_by_hand(scored):
    per_class = class_relative_accuracy(scored, {"bilateral", "patch_shuffle"}, 16).set_index(["category", "arm"])
    expected = {("airplane", "bilateral 4"): 3 / 4, ("airplane", "patch_shuffle 4"): 1 / 4,
                ("bear", "bilateral 4"): (2 / 4) / (2 / 4), ("bear", "patch_shuffle 4"): (1 / 4) / (2 / 4),
                ("cat", "bilateral 4"): 1 / 4, ("cat", "patch_shuffle 4"): 2 / 4}
    for key, value in expected.items():
        assert per_class.loc[key, "relative_accuracy"] == pytest.approx(value)
    assert per_class.loc[("dog", "bilateral 4"), "relative_accuracy"] != per_class.loc[("dog", "bilateral 4"),
                                                                                        "relative_accuracy"]  # NaN
    glob = global_relative_accuracy(scored, {"bilateral", "patch_shuffle"}).set_index("arm")
    assert glob.loc["bilateral 4", "global_relative_accuracy"] == pytest.approx((7 / 16) / (10 / 16))
    assert glob.loc["patch_shuffle 4", "global_relative_accuracy"] == pytest.approx((4 / 16) / (10 / 16))


@pytest.mark.validates("share of classes following the global ranking of two suppressions",
                       definition="with R_a > R_b over all classes pooled, the share of classes with r_{k,a} > "
                                  "r_{k,b} among those with both defined; ties do not follow",
                       source="Burgert et al. 2025, App. I.1 ('88.0 % of classes ...')",
                       reference="hand computation: airplane and bear follow, cat does not: 2/3", tolerance="exact")
def test_share_of_classes_following_the_global_ranking_by_hand(scored):
    arms = {"bilateral", "patch_shuffle"}
    per_class, glob = class_relative_accuracy(scored, arms, 16), global_relative_accuracy(scored, arms)
    pairs = ranking_pairs(per_class, glob)
    assert len(pairs) == 1
    pair = pairs.iloc[0]
    assert (pair["higher"], pair["lower"], pair["n_classes"]) == ("bilateral 4", "patch_shuffle 4", 3)
    assert pair["share_following"] == pytest.approx(2 / 3) and pair["share_tied"] == 0
    ranking = ranking_agreement(per_class, glob).iloc[0]
    assert ranking["global_order"] == "bilateral 4 > patch_shuffle 4"
    assert ranking["share_following"] == pytest.approx(2 / 3) and ranking["n_classes"] == 3


@pytest.mark.validates("outlier classes of a suppression's class distribution",
                       definition="classes outside Tukey's fences [Q1 - 1.5 IQR, Q3 + 1.5 IQR]",
                       source="Tukey 1977 (box-plot fences)", reference="hand computation", tolerance="exact")
def test_outlier_classes_by_hand():
    values = [1.0, 1.0, 0.9, 1.0, 0.1, 1.6]  # quartiles 0.925 and 1.0: fences 0.8125 and 1.1125
    per_class = pd.DataFrame({"observer": "m", "arm": "grayscale", "category": list("abcdefg"),
                              "relative_accuracy": values + [9.0], "counted": [True] * 6 + [False]})
    out = outlier_classes(per_class).set_index("category")
    assert sorted(out.index) == ["e", "f"]  # g, of too few trials, neither counts nor moves the fences
    assert out.loc["e", "side"] == "below" and out.loc["f", "side"] == "above"
    assert out.loc["e", "fence_low"] == pytest.approx(0.925 - 1.5 * 0.075)


@pytest.mark.validates("overlap of two class distributions of relative accuracy",
                       definition="integral of min(f_a, f_b) of the two Gaussian kernel density estimates",
                       source="Burgert et al. 2025, App. I.1 ('approximately 25-30 %' overlap)",
                       reference="analytic overlap of N(0,1) and N(1,1), 2 Phi(-1/2) = 0.617, from 3000 draws each",
                       tolerance="|overlap - 0.617| < 0.05")
def test_kde_overlap_matches_the_analytic_overlap_of_two_normals():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 3000), rng.normal(1, 1, 3000)
    assert kde_overlap(a, b) == pytest.approx(2 * norm.cdf(-0.5), abs=0.05)
    assert kde_overlap(a, a) == pytest.approx(1.0, abs=0.01)
    assert np.isnan(kde_overlap(np.ones(5), b))


def test_the_classwise_section_computes_for_each_model_and_draws_its_strip_plot():
    """The report's section (its full report: tests/analysis/test_report_sections.py::test_sections_follow_the_design)."""
    from analysis.load import conform
    from analysis.sections import SECTIONS

    rows = hand_table("m") + hand_table("m2")
    analysis = analyze(conform(pd.DataFrame(rows), "hand table"), AnalysisOptions(n_boot=20), only={"classwise"})
    assert "classwise" in analysis.sections
    assert analysis.tables["classwise_pairs"]["share_following"].tolist() == pytest.approx([2 / 3, 2 / 3])
    figure = SECTIONS["classwise"]().figures(analysis, None)["classwise"]
    assert len(figure.axes) == 2  # one panel per model
    # the arms are named by their transform's parameters, the condition written over its arms, not by level index
    params = {"bilateral": json.dumps({"d": 12}), "patch_shuffle": json.dumps({"grid": 4}), "original": "{}"}
    named = analyze(conform(pd.DataFrame([r | {"params": params[r["condition"]]} for r in rows]), "hand table"),
                    AnalysisOptions(n_boot=20), only={"classwise"})
    panel = SECTIONS["classwise"]().figures(named, None)["classwise"].axes[0]
    assert [t.get_text() for t in panel.get_xticklabels()] == ["d 12", "grid 4"]
    assert {t.get_text() for t in panel.texts} == {"bilateral", "patch shuffle"}
    assert panel.get_title() == "m (3 classes)"  # dog, never right on its originals, has no relative accuracy


SMALL = {  # class -> (trials, right answers) on the originals, under bilateral 4, under patch_shuffle 4
    "airplane": ((5, 5), (5, 4), (5, 2)),
    "bear": ((5, 4), (5, 4), (5, 1)),
    "cat": ((5, 3), (5, 1), (5, 2)),
    "dog": ((2, 2), (2, 0), (2, 2)),  # two trials per arm: an interval, but it does not count
}


def small_table() -> pd.DataFrame:
    rows = []
    for category, arms in SMALL.items():
        for (condition, level), (n, k) in zip(ARMS, arms):
            for image in range(n):
                answer = category if image < k else "oven"
                rows.append({"observer": "m", "observer_kind": "model", "role": "test", "trial_type": "classify",
                             "condition": condition, "level": level, "category": category,
                             "correct": int(answer == category)})
    return pd.DataFrame(rows)


@pytest.mark.validates("class-wise reliance: per-class interval, minimum trials, chance-corrected column",
                       definition="r_{k,a} with a MOVER-R 95 % interval from the two Wilson intervals; a class counts "
                                  "in the shares and outliers only with >= 3 trials on the originals and the arm; "
                                  "(A_{k,a} - 1/C) / (A_{k,orig} - 1/C) beside r",
                       source="Burgert et al. 2025, App. I.1 (plain ratio) and Sec. 5.2, Eq. 11 (chance-corrected); "
                              "Donner & Zou 2012 (MOVER-R); Wilson 1927",
                       reference="hand computation on a 4-class table with one 2-trial class; lower bound = Wilson "
                                 "lower of A_{k,a} where the baseline is 1 (derived by hand); coverage of 4000 "
                                 "simulated independent binomial pairs", tolerance="1e-12; coverage >= 0.93")
def test_classwise_intervals_minimum_trials_and_chance_corrected_by_hand():
    arms = {"bilateral", "patch_shuffle"}
    table = small_table()
    per_class = class_relative_accuracy(table, arms, 4).set_index(["category", "arm"])
    bear = per_class.loc[("bear", "patch_shuffle 4")]
    assert bear["relative_accuracy"] == pytest.approx((1 / 5) / (4 / 5))
    assert bear["chance_corrected"] == pytest.approx((1 / 5 - 1 / 4) / (4 / 5 - 1 / 4))
    assert per_class.loc[("cat", "bilateral 4"), "chance_corrected"] == pytest.approx((1 / 5 - 1 / 4) / (3 / 5 - 1 / 4))

    def wilson_low(k, n, z=1.959963984540054):  # Wilson 1927, written out here
        p = k / n
        return (p + z * z / (2 * n) - z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)

    airplane = per_class.loc[("airplane", "bilateral 4")]  # baseline 5/5: L reduces to Wilson's lower of 4/5
    assert airplane["ci_low"] == pytest.approx(wilson_low(4, 5), abs=1e-12)
    assert airplane["ci_low"] < airplane["relative_accuracy"] < airplane["ci_high"]
    dog = per_class.loc[("dog", "patch_shuffle 4")]
    assert dog["relative_accuracy"] == 1 and not dog["counted"] and dog["ci_low"] < 0.5
    assert "fewer than 3" in dog["note"]
    assert per_class.loc[("bear", "bilateral 4"), "counted"]
    # global: bilateral (14/20) / (14/20) = 1 > patch_shuffle (7/20) / (14/20); dog would not follow but does not count
    pairs = ranking_pairs(per_class.reset_index(), global_relative_accuracy(table, arms))
    pair = pairs.iloc[0]
    assert (pair["higher"], pair["n_classes"], pair["n_classes_small"]) == ("bilateral 4", 3, 1)
    assert pair["share_following"] == pytest.approx(2 / 3)  # airplane 4/5 > 2/5, bear 1 > 1/4; cat 1/3 < 2/3
    ranking = ranking_agreement(per_class.reset_index(), global_relative_accuracy(table, arms)).iloc[0]
    assert (ranking["n_classes"], ranking["n_classes_small"]) == (3, 1)
    rng = np.random.default_rng(1)  # the interval's coverage, two independent binomials drawn with numpy
    for p1, p2, n1, n2 in ((0.6, 0.8, 20, 20), (0.3, 0.9, 10, 30), (0.85, 0.95, 50, 50)):
        k1, k2 = rng.binomial(n1, p1, 4000), rng.binomial(n2, p2, 4000)
        low, high = ratio_interval_mover(k1, n1, k2, n2)
        keep = k2 > 0
        assert ((low <= p1 / p2) & (p1 / p2 <= high))[keep].mean() >= 0.93
