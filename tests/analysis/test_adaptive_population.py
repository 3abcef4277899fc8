"""The report's pooling of QUEST+ blocks (``analysis.sections.adaptive``): each observer's final posterior, the
population mean over observers, prior-only and extrapolated labels. People are simulated here from the documented
model (numpy and the standard library only); QUEST+ itself (``cuebench.adaptive``) is tested in
``tests/core/test_adaptive.py``."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.sections.adaptive import EXTRAPOLATED, PRIOR_ONLY, final_posteriors, grid_of, population_means
from cuebench.adaptive import AdaptiveRun, plan_for_grid
from cuebench.trials import AdaptivePlan

GRIDS = list(range(2, 17))  # patch-shuffle grid sizes, levels 0..14
C = 16

# The population mean end to end: people simulated here from the documented model (numpy and the standard library
# only, nothing of the code under test), QUEST+ (AdaptiveRun) choosing every level, and the report's pooling of the
# final posteriors (final_posteriors, then population_means) as the system under test.
# Each design: (alternatives C, trials per block, population mean threshold in grid units, between-observer SD,
# observers per study). Means in the grid's middle and two units inside either end of the 2-16 grid.
STUDY_DESIGNS = [(3, 20, 9.0, 1.5, 8), (16, 30, 4.0, 0.5, 8), (3, 40, 14.0, 0.0, 6), (16, 20, 14.0, 1.0, 8)]
STUDIES = 12
PEOPLE_SPREAD, PEOPLE_LAPSE = (0.8, 2.0), (0.0, 0.05)  # uniform ranges of each person's s and lambda


def person_correct(value: float, threshold: float, spread: float, lapse: float, choices: int) -> float:
    """gamma + (1 - gamma - lambda)(1 - Phi((x - t)/s)) with 1 - Phi(z) = erfc(z / sqrt 2) / 2."""
    return 1 / choices + (1 - 1 / choices - lapse) * 0.5 * math.erfc((value - threshold) / (spread * math.sqrt(2)))


def simulated_study(design, seed: int):
    """One study of the design: the report's population row and the true thresholds of its observers."""
    choices, trials, mean, between_sd, observers = design
    rng = np.random.default_rng(seed)
    p = plan_for_grid("patch_shuffle", range(len(GRIDS)), GRIDS, "grid", 1 / choices, trials)
    rows, truths = [], rng.normal(mean, between_sd, observers)
    for person, threshold in enumerate(truths):
        spread, lapse = rng.uniform(*PEOPLE_SPREAD), rng.uniform(*PEOPLE_LAPSE)
        run = AdaptiveRun(p, "human")
        while not run.finished:
            level = run.next_level()
            correct = bool(rng.random() < person_correct(p.value_of(level), threshold, spread, lapse, choices))
            rows.append({"observer": f"P{person}", "observer_kind": "human", "condition": "patch_shuffle",
                         "level": level, "params": {"grid": int(p.value_of(level))}, "trial_index": len(run.answers),
                         "correct": int(correct), "adaptive": run.update(level, correct).to_dict()})
    per = final_posteriors(pd.DataFrame(rows), choices)
    return population_means(per, {"patch_shuffle": np.asarray(GRIDS, dtype=float)}).iloc[0], truths


@pytest.fixture(scope="module")
def quest_studies() -> dict:
    return {design: [simulated_study(design, 100 * number + study) for study in range(STUDIES)]
            for number, design in enumerate(STUDY_DESIGNS)}


@pytest.mark.validates(
    "QUEST+ population mean threshold per kind x condition",
    definition="mean of the observers' posterior thresholds, t-interval mean ± t_{0.975,N-1} SD/sqrt(N) over N "
               "observers; prior-only observers left out; each observer's posterior median, people's QUEST+ lapse "
               "prior Beta(1, 20) over the lapse grid",
    source="QUEST+ (Watson 2017); a random-effects mean with equal weights, not inverse-variance pooling (fixed "
           "effect, Borenstein et al. 2009 ch. 11); a lapse prior near 0 as psignifit's Beta(1, 10) (Schuett et al. "
           "2016), concentrated further by simulation",
    reference="48 simulated studies run end to end through QUEST+: C = 3 and 16, 20-40 trials, between-observer SD "
              "0-1.5, means in the grid's middle and 2 units from its ends, people's lapses 0-0.05",
    tolerance="coverage of the population mean >= 0.9; |bias| <= 0.25 grid units per design")
def test_quest_population_mean_covers_and_is_unbiased_end_to_end(quest_studies):
    """48 studies (4 designs x 12) of 6-8 simulated people each, every answer chosen by QUEST+ and pooled as the
    report pools. Monte Carlo error: coverage is a share of 48 studies (SE 0.03 at a true 0.95); the bias of a design is
    the mean of its 12 studies' pooled mean minus the mean of their observers' true thresholds, i.e. the mean error of
    72-96 observers' estimates (SE about 0.1 grid units)."""
    covered, biases = [], {}
    for design, studies in quest_studies.items():
        mean = design[2]
        covered += [row["ci_low"] <= mean <= row["ci_high"] for row, _ in studies]
        biases[design] = float(np.mean([row["quest_threshold"] - truths.mean() for row, truths in studies]))
    assert np.mean(covered) >= 0.9, (np.mean(covered), biases)
    assert all(abs(bias) <= 0.25 for bias in biases.values()), biases


def _study(rng, observers: int, condition: str = "patch_shuffle") -> pd.DataFrame:
    """Per-observer rows as final_posteriors gives them, for the pooling's hand-computed cases."""
    estimate = rng.normal(9.0, 1.5, observers)
    return pd.DataFrame({"observer": [f"P{i}" for i in range(observers)], "observer_kind": "human",
                         "condition": condition, "axis": "grid", "fit": "individual",
                         "quest_threshold": estimate, "ci_low": estimate - 1.5, "ci_high": estimate + 1.5,
                         "trials": 40, "observers": 1, "between_sd": np.nan, "accuracy": 0.6, "lapse_prior": "Beta(1, 20)",
                         "label": "", "note": ""})


def test_population_mean_matches_a_hand_computed_t_interval():
    # estimates 8, 10, 12: mean 10, SD 2, half-width t_{0.975,2} * 2 / sqrt(3) = 4.302653 * 1.154701 = 4.968275
    study = _study(np.random.default_rng(1), 3).assign(quest_threshold=[8.0, 10.0, 12.0])
    row = population_means(study, {"patch_shuffle": np.arange(2.0, 17.0)}).iloc[0]
    assert row["quest_threshold"] == pytest.approx(10.0) and row["between_sd"] == pytest.approx(2.0)
    assert row["ci_high"] - 10.0 == pytest.approx(4.968275, abs=1e-5) and row["observers"] == 3


def _block_rows(observer: str, p: AdaptivePlan, answer, seed: int, kind: str = "human") -> list[dict]:
    """One observer's adaptive block as response rows (what every runner stores): QUEST+ picks the level, ``answer``
    (value, rng) -> correct, and each row carries the posterior after it."""
    rng, run, rows = np.random.default_rng(seed), AdaptiveRun(p, kind), []
    while not run.finished:
        level = run.next_level()
        correct = bool(answer(p.value_of(level), rng))
        estimate = run.update(level, correct)
        rows.append({"observer": observer, "observer_kind": kind, "session": "adaptive-patch_shuffle",
                     "trial_index": len(rows), "condition": "patch_shuffle", "level": level,
                     "params": json.dumps({"grid": int(p.value_of(level))}), "correct": int(correct),
                     "adaptive": estimate.to_dict()})
    return rows


def test_chance_observers_are_prior_only_and_pool_into_no_interval_narrower_than_theirs():
    # two people answering at chance: rarely lapsing (the people's lapse prior), they read as a threshold below the
    # easiest level, are labelled prior-only and must not pool; a model at chance keeps the prior (flat lapse prior);
    # one observer who sees the cue keeps a threshold of their own
    from analysis.sections.adaptive import PRIOR_ONLY, final_posteriors, grid_of, population_means

    p = plan_for_grid("patch_shuffle", range(len(GRIDS)), GRIDS, "grid", 1 / C, 40)
    at_chance = lambda value, rng: rng.random() < 1 / C  # noqa: E731
    sees = lambda value, rng: rng.random() < person_correct(value, 9.0, 1.5, 0.02, C)  # noqa: E731
    rows = _block_rows("chance-1", p, at_chance, 1) + _block_rows("chance-2", p, at_chance, 2) \
        + _block_rows("sees", p, sees, 3)
    scored = pd.DataFrame(rows)
    per = final_posteriors(scored, C).set_index("observer")
    for observer in ("chance-1", "chance-2"):
        assert per.loc[observer, "label"].startswith(PRIOR_ONLY) and "not above chance" in per.loc[observer, "note"]
        assert per.loc[observer, "ci_low"] < GRIDS[0]
    model = final_posteriors(pd.DataFrame(_block_rows("chance-model", p, at_chance, 4, kind="model")), C).iloc[0]
    prior = AdaptiveRun(p, "model").estimate()
    assert model["label"].startswith(PRIOR_ONLY)
    assert model["ci_high"] - model["ci_low"] >= 0.8 * (prior.ci_high - prior.ci_low)  # mostly the prior
    assert PRIOR_ONLY not in per.loc["sees", "label"]
    assert population_means(per.reset_index(), {"patch_shuffle": grid_of(scored, "patch_shuffle")[1]}).empty


def test_thresholds_and_intervals_beyond_the_grid_are_labelled_extrapolated():
    grids = {"patch_shuffle": np.arange(2.0, 17.0)}
    study = _study(np.random.default_rng(2), 3).assign(quest_threshold=[15.0, 16.0, 17.6], ci_low=[13.0, 14.0, 15.0],
                                                       ci_high=[17.0, 18.0, 19.5])
    row = population_means(study, grids).iloc[0]
    assert row["label"] == EXTRAPOLATED and "beyond the tested grid [2, 16]" in row["note"]
    inside = population_means(study.assign(quest_threshold=[8.0, 9.0, 10.0]), grids).iloc[0]
    assert inside["label"] == "" and "3 observers' QUEST+ thresholds, t-interval over observers" in inside["note"]
