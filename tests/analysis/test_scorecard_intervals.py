"""The scorecard's intervals and claims hold at small n. The documented model: each of n images is answered
correctly in a setting with that setting's accuracy, independently. Its outcomes and their probabilities come
from scipy.stats.binom alone, summed exactly over every outcome, and are checked against the scorecard's
interval, its "beyond people" note and its minimum number of images."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis import scorecard
from analysis.benchmarks import Published, PublishedSet, image_list_hash
from analysis.benchmarks.dist import Dist
from analysis.benchmarks.suppression import Suppression

SIZES = (7, 30, 100)
BURGERT_HUMANS = {"global_shape": 0.965, "local_shape": 0.763}   # Table 3, the people's relative accuracy
HUMAN_ORIGINALS = 0.969                                           # Table 3, the people's accuracy on originals


def images(n: int) -> set[str]:
    return {f"image{i:03d}" for i in range(n)}


def on_simulated_set(bench, n: int) -> list:
    """The benchmark's metrics as if each of their sources had measured the n simulated images with its rule:
    the one case in which the scorecard ranks and compares with people."""
    measured = PublishedSet("the simulated set", n, image_list_hash(images(n)))
    return [replace(m, published=lambda m=m: tuple(replace(s, measured_on=measured) for s in m.published()))
            for m in bench.metrics(pd.DataFrame())]


def outcomes(n: int, accuracy: float) -> list[tuple[int, float]]:
    """Every count k of n independent answers with its probability, leaving out those under 1e-4 (their mass,
    under 0.01 in all, is counted against the interval)."""
    return [(k, w) for k, w in enumerate(stats.binom.pmf(np.arange(n + 1), n, accuracy)) if w >= 1e-4]


@pytest.mark.validates("scorecard interval of a relative accuracy and its 'beyond people' note",
                       definition="A_sup / A_orig per setting over source images; exact Beta bounds of both "
                                  "proportions carried through the ratio; 'exceeds people' only when the run is "
                                  "comparable, every setting has >= 30 images and the lower end lies above the "
                                  "published human value",
                       source="Burgert et al. 2025, Sec. 5.1 and Table 3; Clopper & Pearson 1934",
                       reference="the documented model (independent binomial answers per setting, true values = the "
                                 "people's of Table 3) summed exactly over every outcome pair with scipy.stats.binom",
                       tolerance="coverage >= 0.93 and 'beyond people' probability <= 0.03 at 7, 30 and 100 images")
@pytest.mark.parametrize("n", SIZES)
def test_relative_accuracy_interval_covers_and_rarely_claims_beyond_people(n):
    bench = Suppression()
    metrics = {m.name: m for m in on_simulated_set(bench, n)}
    for feature, human in BURGERT_HUMANS.items():
        metric = metrics[f"relative_accuracy_{feature}"]
        coverage, claims = 0.0, 1.0   # outcomes left out count as a false claim and a miss
        for k_o, w_o in outcomes(n, HUMAN_ORIGINALS):
            for k_s, w_s in outcomes(n, human * HUMAN_ORIGINALS):
                entry = scorecard.entry(bench, metric, [(k_o, n), (k_s, n)], images(n), ["16class-burgert"])
                coverage += w_o * w_s * (entry["ci_low"] <= human <= entry["ci_high"])
                claims -= w_o * w_s * (scorecard.beyond_people(entry) is None)
        assert coverage >= 0.93 and claims <= 0.03, (feature, n, coverage, claims)
        if n < scorecard.MIN_IMAGES:
            assert claims < 1e-3   # only the left-out mass: no claim at all below the minimum


@pytest.mark.validates("scorecard Jeffreys interval of a proportion",
                       definition="Beta(k + 1/2, n - k + 1/2) quantiles over source images; lower end 0 at k = 0, "
                                  "upper end 1 at k = n",
                       source="Brown, Cai & DasGupta 2001, Sec. 4.1.2",
                       reference="exact binomial coverage summed over every outcome k (scipy.stats.binom), true "
                                 "proportion = Wen et al.'s people's DiST accuracy 0.855 and Geirhos et al.'s "
                                 "people's shape bias 0.958",
                       tolerance="coverage >= 0.93 and 'beyond people' probability <= 0.03 at 7, 30 and 100 images")
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("truth", (0.855, 0.958))
def test_proportion_interval_covers_exactly_summed_over_outcomes(n, truth):
    """No sampling: the probability of every outcome k weighs whether its interval covers the truth and whether
    its note claims the model beyond the people (here: a published human value equal to the truth)."""
    bench = Dist()
    people = Published(("dist_fig5",), PublishedSet("the simulated set", n, image_list_hash(images(n))), "oddity",
                       human=truth)
    metric = replace(bench.metrics(pd.DataFrame())[0], published=lambda: (people,))
    coverage = claims = 0.0
    for k in range(n + 1):
        entry = scorecard.entry(bench, metric, [(float(k), n)], images(n), ["oddity"])
        weight = stats.binom.pmf(k, n, truth)
        coverage += weight * (entry["ci_low"] <= truth <= entry["ci_high"])
        claims += weight * (scorecard.beyond_people(entry) is not None)
    assert coverage >= 0.93 and claims <= 0.03, (n, truth, coverage, claims)


def test_seven_of_seven_is_not_a_zero_width_interval_and_gets_no_rank():
    """The bundled suppression benchmark's case: 7 photos, all right on the originals and under suppression."""
    bench = Suppression()
    metric = on_simulated_set(bench, 7)[0]
    entry = scorecard.entry(bench, metric, [(7.0, 7), (7.0, 7)], images(7), ["16class-burgert"])
    assert entry["ci_low"] < 0.8 and entry["ci_high"] > 1.2
    assert entry["rank"] is None and entry["human"] is None and scorecard.beyond_people(entry) is None
    assert entry["notes"] == ["Not ranked or compared with people: 7 images per setting, fewer than the 30 a rank "
                              "or a comparison with people needs."]
    low, high = scorecard.jeffreys(7, 7)
    assert high == 1.0 and low == pytest.approx(stats.beta.ppf(0.025, 7.5, 0.5))


@pytest.mark.validates("scorecard proportion over source images (accuracy on originals, DiST triplets, edge maps, "
                       "silhouettes)",
                       definition="per source image the mean of its scored answers; k = the sum of those means, n = "
                                  "the images with a scored answer; practice and catch trials left out",
                       source="this project (issue 49: resample source images, not trials)",
                       reference="hand count over five answers to three images", tolerance="exact")
def test_an_image_answered_several_times_counts_once():
    """Resampling unit: the source image. Three answers to one image are one image with their mean, in each
    benchmark's cell; a trial that is not a test trial (DiST, edges) is not counted."""
    from analysis.benchmarks.biasbed import Edges

    trials = pd.DataFrame({"source_image": ["a", "a", "a", "b", "c", "d"], "trial_id": list("123456"),
                           "condition": "original", "params": [{}] * 6, "correct": [1, 1, 0, 1, 0, 1],
                           "trial_type": "oddity", "role": ["test"] * 5 + ["practice"]})
    cells = {"originals": (Suppression(), trials.iloc[:5]), "triplets": (Dist(), trials),
             "edge maps": (Edges(), trials.assign(condition="edges"))}
    for name, (bench, rows) in cells.items():
        k, n = scorecard.cell_counts(rows, bench.metrics(pd.DataFrame())[0].cells[0])
        assert n == 3 and k == pytest.approx(2 / 3 + 1 + 0), name


def test_a_falling_formula_of_one_proportion_gets_its_interval_in_order():
    """An error rate 1 - p (a plug-in's metric that falls as its proportion rises): 3 right of 10 gives
    [1 - Jeffreys upper, 1 - Jeffreys lower], the Beta(3.5, 7.5) quantiles from scipy, not the ends reversed."""
    from analysis.benchmarks import Cell, Metric, condition_is

    metric = Metric("error_rate", "1 - accuracy", (Cell("x", condition_is("original")),), lambda p: 1 - p,
                    directions=(-1,))
    low, high = scorecard.interval(metric, [(3.0, 10)])
    assert (low, high) == pytest.approx((1 - stats.beta.ppf(0.975, 3.5, 7.5), 1 - stats.beta.ppf(0.025, 3.5, 7.5)))
