"""Multi-label sets scored by mean average precision with the mAP of random answers as chance, and reliance on the
chance-0 / original-1 scale: checked by hand, against scikit-learn's ``average_precision_score`` (an independent
implementation) and by enumerating every random ranking; then a multi-label set built and answered as the user
runs it."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from sklearn.metrics import average_precision_score

from analysis.multilabel import (MultiLabelError, average_precision, expected_random_ap, map_reliance, map_table,
                                 mean_average_precision)
from cuebench.labels import category_labels, single_answer


def ap_of_ranking(relevant_in_order) -> float:
    """AP of one strict ranking by hand: the mean over relevant images of (relevant so far) / rank."""
    relevant = np.asarray(relevant_in_order, dtype=bool)
    ranks = np.flatnonzero(relevant) + 1
    return float(np.mean(np.arange(1, len(ranks) + 1) / ranks))


def ap_over_every_tie_order(scores, relevant) -> float:
    """AP averaged over every order of the tied images (each order of all images consistent with the scores)."""
    scores, relevant = np.asarray(scores), np.asarray(relevant, dtype=bool)
    values = [ap_of_ranking(relevant[sorted(range(len(scores)), key=lambda i: (-scores[i], order.index(i)))])
              for order in map(list, itertools.permutations(range(len(scores))))]
    return float(np.mean(values))


@pytest.mark.validates("average precision and mean average precision of a multi-label set",
                       definition="AP = mean over relevant images of the precision at their rank, tied scores counted "
                                  "as every order of the tied images equally likely (the exact expectation); mAP = "
                                  "mean AP over the labels some image carries",
                       source="Manning, Raghavan & Schuetze 2008, Sec. 8.4; McSherry & Najork 2008 (tie-aware AP); "
                              "Burgert et al. 2025, App. B (DeepGlobe scored by mAP)",
                       reference="hand computation (distinct and tied scores); sklearn.metrics.average_precision_score "
                                 "on 200 random score/truth sets without ties; every order of the tied images "
                                 "enumerated for 30 tied sets of up to 6 images",
                       tolerance="1e-12")
def test_average_precision_by_hand_and_against_scikit_learn():
    # relevant at ranks 1 and 3: (1/1 + 2/3) / 2
    assert average_precision([.9, .8, .7, .6], [1, 0, 1, 0]) == pytest.approx(5 / 6)
    # a tie at 0.5 between a relevant and an irrelevant image: the relevant one at rank 2 (precisions 1/2, 2/4) or
    # 3 (1/3, 2/4), each order alike: ((1/2 + 1/2) / 2 + (1/3 + 1/2) / 2) / 2 = 11/24 (scikit-learn: 5/12)
    assert average_precision([.9, .5, .5, .1], [0, 1, 0, 1]) == pytest.approx(11 / 24)
    assert np.isnan(average_precision([.3, .2], [0, 0]))
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(2, 30))
        truth = rng.random(n) < rng.uniform(.1, .9)
        truth[rng.integers(n)] = True
        scores = rng.permutation(n) / n  # distinct
        assert average_precision(scores, truth) == pytest.approx(average_precision_score(truth, scores), abs=1e-12)
    for _ in range(30):
        n = int(rng.integers(2, 7))
        truth = rng.random(n) < .5
        truth[rng.integers(n)] = True
        scores = rng.integers(0, 3, n) / 2  # three score values: ties in most sets
        assert average_precision(scores, truth) == pytest.approx(ap_over_every_tie_order(scores, truth), abs=1e-12)
    scores, truth = rng.random((12, 4)), rng.random((12, 4)) < .4
    truth[0] = True
    value, _, counted = mean_average_precision(scores, truth)
    assert counted == 4 and value == pytest.approx(average_precision_score(truth, scores, average="macro"))


@pytest.mark.validates("chance level of mAP: expected AP of random answers",
                       definition="E[AP] = (R-1)/(N-1) + (N-R) H_N / (N(N-1)) for R relevant of N images; chance mAP "
                                  "= its mean over labels; tends to the prevalence R/N",
                       source="Bestgen 2015 (PBML 103), the value Burgert et al. 2025, Sec. 5.2 estimate by simulating "
                              "random predictions",
                       reference="hand enumeration of the 6 rankings of N=4, R=2 (49/72); every ranking of N=7 scored "
                                 "by sklearn; 4000 simulated random rankings of N=500; a model tying every image "
                                 "scores it exactly",
                       tolerance="exact (enumeration); 0.005 (simulation)")
def test_chance_map_is_the_expected_ap_of_random_rankings():
    # positions of the two relevant images among four: (1,2) 1, (1,3) 5/6, (1,4) 3/4, (2,3) 7/12, (2,4) 1/2, (3,4) 5/12
    assert expected_random_ap(4, 2) == pytest.approx((12 + 10 + 9 + 7 + 6 + 5) / 12 / 6)
    assert expected_random_ap(4, 1) == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    scores = np.arange(7, 0, -1)
    for r in range(1, 8):
        aps = [average_precision_score(np.isin(np.arange(7), list(pos)), scores)
               for pos in itertools.combinations(range(7), r)]
        assert expected_random_ap(7, r) == pytest.approx(np.mean(aps), abs=1e-12)
    # random rankings of 50 relevant among 500: AP = mean over relevant images of (their count so far) / rank
    rng = np.random.default_rng(1)
    ranks = np.sort(np.stack([rng.permutation(500)[:50] for _ in range(4000)]), axis=1) + 1
    simulated = np.mean(np.arange(1, 51) / ranks)
    assert expected_random_ap(500, 50) == pytest.approx(simulated, abs=.005)
    assert expected_random_ap(20000, 2000) == pytest.approx(.1, abs=.001)  # the prevalence, for large N
    # a model that ties every image has the chance AP: the stated chance and the scoring agree
    for n, r in ((4, 1), (4, 2), (7, 3), (50, 5)):
        assert average_precision(np.full(n, .3), np.arange(n) < r) == pytest.approx(expected_random_ap(n, r), abs=1e-12)
    with pytest.raises(MultiLabelError, match="relevant"):
        expected_random_ap(3, 0)


def answer_rows(observer: str, condition: str, level, scores: list[dict], categories: list[str]) -> list[dict]:
    return [{"observer": observer, "condition": condition, "level": level, "trial_type": "classify", "role": "test",
             "category": c, "model_outputs": json.dumps(s)} for s, c in zip(scores, categories)]


@pytest.mark.validates("reliance of a multi-label set on the chance-0 / original-1 scale",
                       definition="(mAP_sup - chance mAP) / (mAP_orig - chance mAP), chance from the original cell",
                       source="Burgert et al. 2025, Sec. 5.2 and App. B ('expected mean average precision' as "
                              "A_chance)",
                       reference="hand computation on a constructed response table", tolerance="1e-12")
def test_map_and_reliance_of_a_constructed_response_table():
    categories = ["car;road", "road", "car", "tree;road"]
    original = [{"car": .9, "road": .8, "tree": .1}, {"car": .2, "road": .9, "tree": .3},
                {"car": .8, "road": .1, "tree": .2}, {"car": .1, "road": .7, "tree": .9}]
    blurred = [{"car": .3, "road": .8, "tree": .1}, {"car": .6, "road": .9, "tree": .3},
               {"car": .8, "road": .1, "tree": .2}, {"car": .1, "road": .2, "tree": .9}]
    person = [{**row, "observer": "p1", "observer_kind": "human", "model_outputs": None}
              for row in answer_rows("p1", "original", None, original, categories)]
    rows = pd.DataFrame([{**row, "observer_kind": "model"} for row in answer_rows("m", "original", None, original,
                                                                                   categories)
                         + answer_rows("m", "blur", 1, blurred, categories)] + person)
    table = map_table(rows, ["car", "road", "tree"]).set_index("condition")
    assert set(table["observer"]) == {"m"}  # a person's one label per image ranks nothing
    # original: every label ranks its images first: AP 1, 1, 1
    assert table.loc["original", "mAP"] == pytest.approx(1.0) and table.loc["original", "n_labels"] == 3
    # blur: car ranks (.8 car, .6 road, .3 car;road, .1) -> (1 + 2/3)/2; road (.9 road, .8 car;road, .2 tree;road,
    # .1 car) -> 1; tree -> 1
    assert table.loc["blur", "mAP"] == pytest.approx((5 / 6 + 1 + 1) / 3)
    # chance: car and road... car 2 of 4, road 3 of 4, tree 1 of 4
    chance = (49 / 72 + (2 / 3 + 1 * (1 + 1 / 2 + 1 / 3 + 1 / 4) / 12) + (1 + 1 / 2 + 1 / 3 + 1 / 4) / 4) / 3
    assert table.loc["original", "chance_mAP"] == pytest.approx(chance)
    reliance = map_reliance(table.reset_index()).set_index("condition")
    assert reliance.loc["blur", "reliance"] == pytest.approx(((5 / 6 + 2) / 3 - chance) / (1 - chance))
    with pytest.raises(MultiLabelError, match="no score for label"):
        map_table(rows, ["car", "road", "sky"])


@pytest.mark.slow
def test_a_multi_label_set_builds_without_a_single_answer_and_a_model_is_scored_by_map(photos, tmp_path):
    from analysis.load import load_responses
    from cuebench.expdir import ExperimentDir
    from support import cuebench_in_process as cuebench

    assert category_labels(" car; road ") == ("car", "road") and single_answer("car;road") is None
    names = sorted(photos)[:4]
    labels = ["cat;dog", "dog", "car;truck", "cat"]
    (tmp_path / "set").mkdir()
    for name in names:
        Image.fromarray(photos[name]).resize((64, 64)).save(tmp_path / "set" / f"{name}.png")
    (tmp_path / "labels.csv").write_text("image,category\n" + "".join(f"{n}.png,{c}\n" for n, c in zip(names, labels)))
    common = ["--images", "set", "--labels", "labels.csv", "--workers", "1"]
    with pytest.raises(AssertionError):  # an attention check names one class: refused
        cuebench(tmp_path, "stimuli", "build", "--design", "labelled-set", *common, "--attention", "2", "--out", "refused")
    cuebench(tmp_path, "stimuli", "build", "--design", "suppression", *common, "--attention", "0",
             "--conditions", "channel_shuffle", "--out", "grid")
    experiment = ExperimentDir(tmp_path / "grid").load()
    tests = [t for t in experiment.trials if t.role == "test"]
    assert {t.category for t in tests} == set(labels)
    assert {"cat", "dog", "car", "truck"} <= set(experiment.label_set.labels)
    assert all(t.correct is None for t in tests if ";" in t.category)
    cuebench(tmp_path, "eval", "--experiment", "grid", "--model", "tf_efficientnet_lite0", "--device", "cpu", "--quiet")
    cuebench(tmp_path, "multilabel", "grid", "--out", "scores")
    table = pd.read_csv(tmp_path / "scores/map.csv").set_index("condition")
    rows = load_responses(tmp_path / "grid")
    rows = rows[(rows["role"] == "test") & (rows["condition"] == "original")]
    carried = ["car", "cat", "dog", "truck"]  # the labels some image carries; sklearn scores them independently
    scores = np.array([[json.loads(o)[label] for label in carried] for o in rows["model_outputs"]])
    truth = np.array([[label in c.split(";") for label in carried] for c in rows["category"]])
    assert table.loc["original", "mAP"] == pytest.approx(average_precision_score(truth, scores, average="macro"))
    assert table.loc["original", "n_labels"] == 4
    reliance = pd.read_csv(tmp_path / "scores/map_reliance.csv")
    assert set(reliance["condition"]) == {"channel_shuffle"}
    chance, base = table.loc["original", "chance_mAP"], table.loc["original", "mAP"]
    expected = (table.loc["channel_shuffle", "mAP"] - chance) / (base - chance) if base > chance else np.nan
    assert reliance["reliance"].iloc[0] == pytest.approx(expected, nan_ok=True)
    cuebench(tmp_path, "domain-report", "grid", "--out", "domain")  # a multi-label set in a domain: mAP's scale
    per_set = pd.read_csv(tmp_path / "domain/domain_reliance_per_set.csv")
    assert list(per_set["measure"]) == ["mAP"] and list(per_set["condition"]) == ["channel_shuffle"]
    assert per_set["chance_corrected"].iloc[0] == pytest.approx(expected, nan_ok=True)
