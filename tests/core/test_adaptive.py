"""QUEST+ adaptive blocks: the plan's checks, replay, and simulated observers whose thresholds are known (simulated
here from the documented model, not with the module's own function)."""

from __future__ import annotations

import numpy as np
import pytest

from scipy.stats import norm

from cuebench.adaptive import AdaptiveError, AdaptiveRun, Estimate, plan_for_grid
from cuebench.trials import AdaptivePlan, SchemaError

GRIDS = list(range(2, 17))  # patch-shuffle grid sizes, levels 0..14
C = 16
# (threshold in grid units, spread, lapse): people keep ~98 % on easy images and fall gently (Burgert et al.:
# 76 % relative accuracy at g = 6); models fall earlier and more steeply and often stay well below 100 %, down to
# 55 % or 50 % correct on the originals.
OBSERVERS = {"person-like": (9.3, 1.8, 0.02), "model-like": (5.6, 0.8, 0.15), "weak model": (5.6, 0.8, 0.45),
             "half-lapsing model": (7.0, 1.2, 0.5)}


def correct_probability(value, threshold, spread, lapse):
    """The documented model: γ + (1 − γ − λ)(1 − Φ((x − t)/s)), γ = 1/C."""
    return 1 / C + (1 - 1 / C - lapse) * (1 - norm.cdf((value - threshold) / spread))


def plan(**changes) -> AdaptivePlan:
    return plan_for_grid("patch_shuffle", range(len(GRIDS)), GRIDS, "grid", 1 / C, 40, **changes)


def run_observer(p: AdaptivePlan, true, seed: int) -> AdaptiveRun:
    rng = np.random.default_rng(seed)
    run = AdaptiveRun(p)
    while not run.finished:
        level = run.next_level()
        run.update(level, bool(rng.random() < correct_probability(p.value_of(level), *true)))
    return run


def coverage(name: str, repetitions: int) -> float:
    true = OBSERVERS[name]
    runs = [run_observer(plan(), true, seed) for seed in range(repetitions)]
    return float(np.mean([r.estimate().ci_low <= true[0] <= r.estimate().ci_high for r in runs]))


@pytest.mark.parametrize("name", sorted(OBSERVERS))
def test_simulated_observer_threshold_lies_in_the_credible_interval(name):
    assert coverage(name, 10) >= 0.9


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OBSERVERS))
@pytest.mark.validates(
    'QUEST+ posterior threshold of an adaptive block and its 95 % credible interval',
    definition='posterior over (threshold, spread, lapse) after each answer',
    source='Watson 2017',
    reference='simulated observers with known thresholds',
    tolerance='coverage >= 0.9 over 50 runs')
def test_credible_interval_coverage_over_many_repetitions(name):
    assert coverage(name, 50) >= 0.9


def test_replay_continues_exactly_where_the_run_was():
    run = run_observer(plan(), OBSERVERS["person-like"], seed=3)
    half = AdaptiveRun.replay(run.plan, run.answers[:20])
    assert half.next_level() == run.answers[20][0]
    assert AdaptiveRun.replay(run.plan, run.answers).estimate() == run.estimate()
    assert run.finished and len(run.answers) == 40
    with pytest.raises(AdaptiveError, match="finished after 40 answers"):
        run.next_level()


def test_early_stop_and_prior():
    narrow = run_observer(plan(stop_ci_width=4.0), OBSERVERS["model-like"], seed=1)
    estimate = narrow.estimate()
    assert len(narrow.answers) < 40 and estimate.ci_high - estimate.ci_low <= 4.0
    informed = AdaptiveRun(plan(prior_mean=6.0, prior_sd=1.0)).estimate()
    assert informed.quest_threshold == pytest.approx(6.0, abs=0.05) and informed.ci_high - informed.ci_low < 5


def test_the_lapse_grid_reaches_up_to_one_minus_chance():
    assert plan().lapses[-1] == pytest.approx(0.9) and plan().lapses[0] == 0
    two = plan_for_grid("patch_shuffle", range(len(GRIDS)), GRIDS, "grid", 1 / 2, 40)
    assert two.lapses == pytest.approx(np.arange(0, 0.46, 0.05)) and max(two.lapses) < 1 / 2


def test_estimates_are_stored_as_quest_threshold_and_old_rows_still_read():
    estimate = AdaptiveRun(plan()).update(3, True)
    assert set(estimate.to_dict()) == {"quest_threshold", "ci_low", "ci_high", "trials"}
    assert Estimate.from_dict(estimate.to_dict()) == estimate
    old = {"threshold": 7.5, "ci_low": 4.0, "ci_high": 11.0, "trials": 12}
    assert Estimate.from_dict(old) == Estimate(quest_threshold=7.5, ci_low=4.0, ci_high=11.0, trials=12)


def test_plan_round_trips_through_json_and_checks_its_fields():
    p = plan(prior_mean=8.0, prior_sd=3.0)
    assert AdaptivePlan.from_dict(p.to_dict()) == p
    with pytest.raises(SchemaError, match="condition 'patch_shuffle': prior_mean 20 lies outside the grid"):
        plan(prior_mean=20.0, prior_sd=2.0)
    with pytest.raises(SchemaError, match="condition 'grayscale': levels need an ordered grid of at least 3"):
        plan_for_grid("grayscale", [4], [1.0], "alpha", 1 / C, 40)
    with pytest.raises(SchemaError, match="field 'trial_count': unknown field"):
        AdaptivePlan.from_dict({**p.to_dict(), "trial_count": 3})
    with pytest.raises(AdaptiveError, match="level 99 is not on the grid"):
        AdaptiveRun(p).update(99, True)


# Pooling observers' thresholds: people differ, so the report's population row must cover the population mean
# threshold, not claim the precision of one common threshold. Observers simulated here, each a true threshold drawn
# around the population mean and a posterior summary (mean ± 1.96 sd) of a measurement with its own error.
POPULATION_MEAN, BETWEEN_SD = 9.0, 1.5


def _study(rng, observers: int, condition: str = "patch_shuffle") -> "pd.DataFrame":
    import pandas as pd

    truth = rng.normal(POPULATION_MEAN, BETWEEN_SD, observers)
    sd = rng.uniform(0.3, 1.0, observers)
    estimate = truth + rng.normal(0, sd)
    return pd.DataFrame({"observer": [f"P{i}" for i in range(observers)], "observer_kind": "human",
                         "condition": condition, "axis": "grid", "fit": "individual",
                         "quest_threshold": estimate, "ci_low": estimate - 1.96 * sd, "ci_high": estimate + 1.96 * sd,
                         "trials": 40, "observers": 1, "between_sd": np.nan, "accuracy": 0.6, "label": "", "note": ""})


@pytest.mark.validates(
    "QUEST+ population mean threshold per kind x condition",
    definition="mean of the observers' posterior means, t-interval mean ± t_{0.975,N-1} SD/sqrt(N) over N observers; "
               "prior-only observers left out",
    source="random observers (a random-effects mean with equal weights); replaces inverse-variance pooling "
           "(fixed effect, Borenstein et al. 2009 ch. 11), which assumes one common threshold",
    reference="simulated studies: thresholds ~ N(9, 1.5^2) between observers, each measured with its own error",
    tolerance="coverage of the population mean >= 0.9 over 400 studies of 3-8 observers")
def test_population_mean_interval_covers_the_mean_of_observers_who_differ():
    import pandas as pd

    from analysis.sections.adaptive import POPULATION, population_means

    rng = np.random.default_rng(0)
    studies = pd.concat([_study(rng, 3 + study % 6, f"study-{study}") for study in range(400)], ignore_index=True)
    rows = population_means(studies, {c: np.arange(2.0, 17.0) for c in studies["condition"].unique()})
    assert len(rows) == 400 and (rows["fit"] == POPULATION).all()
    assert (rows["observer"] == f"humans ({POPULATION})").all()
    coverage = np.mean((rows["ci_low"] <= POPULATION_MEAN) & (POPULATION_MEAN <= rows["ci_high"]))
    assert coverage >= 0.9, coverage


def test_population_mean_matches_a_hand_computed_t_interval():
    # estimates 8, 10, 12: mean 10, SD 2, half-width t_{0.975,2} * 2 / sqrt(3) = 4.302653 * 1.154701 = 4.968275
    from analysis.sections.adaptive import population_means

    study = _study(np.random.default_rng(1), 3).assign(quest_threshold=[8.0, 10.0, 12.0])
    row = population_means(study, {"patch_shuffle": np.arange(2.0, 17.0)}).iloc[0]
    assert row["quest_threshold"] == pytest.approx(10.0) and row["between_sd"] == pytest.approx(2.0)
    assert row["ci_high"] - 10.0 == pytest.approx(4.968275, abs=1e-5) and row["observers"] == 3


def _block_rows(observer: str, p: AdaptivePlan, answer, seed: int) -> list[dict]:
    """One observer's adaptive block as response rows (what every runner stores): QUEST+ picks the level, ``answer``
    (value, rng) -> correct, and each row carries the posterior after it."""
    import json

    rng, run, rows = np.random.default_rng(seed), AdaptiveRun(p), []
    while not run.finished:
        level = run.next_level()
        correct = bool(answer(p.value_of(level), rng))
        estimate = run.update(level, correct)
        rows.append({"observer": observer, "observer_kind": "human", "session": "adaptive-patch_shuffle",
                     "trial_index": len(rows), "condition": "patch_shuffle", "level": level,
                     "params": json.dumps({"grid": int(p.value_of(level))}), "correct": int(correct),
                     "adaptive": estimate.to_dict()})
    return rows


def test_chance_observers_are_prior_only_and_pool_into_no_interval_narrower_than_theirs():
    # two observers answering at chance: their posteriors stay the prior (interval as wide as the prior's) and must
    # not pool into a narrow interval; one observer who sees the cue keeps a threshold of their own
    import pandas as pd

    from analysis.sections.adaptive import PRIOR_ONLY, final_posteriors, grid_of, population_means

    p = plan()
    at_chance = lambda value, rng: rng.random() < 1 / C  # noqa: E731
    sees = lambda value, rng: rng.random() < correct_probability(value, 9.0, 1.5, 0.02)  # noqa: E731
    rows = _block_rows("chance-1", p, at_chance, 1) + _block_rows("chance-2", p, at_chance, 2) \
        + _block_rows("sees", p, sees, 3)
    scored = pd.DataFrame(rows)
    per = final_posteriors(scored, C).set_index("observer")
    prior = AdaptiveRun(p).estimate()
    for observer in ("chance-1", "chance-2"):
        assert per.loc[observer, "label"].startswith(PRIOR_ONLY) and "not above chance" in per.loc[observer, "note"]
        width = per.loc[observer, "ci_high"] - per.loc[observer, "ci_low"]
        assert width >= 0.9 * (prior.ci_high - prior.ci_low)  # the posterior is the prior
    assert PRIOR_ONLY not in per.loc["sees", "label"]
    assert population_means(per.reset_index(), {"patch_shuffle": grid_of(scored, "patch_shuffle")[1]}).empty


def test_thresholds_and_intervals_beyond_the_grid_are_labelled_extrapolated():
    from analysis.sections.adaptive import EXTRAPOLATED, population_means

    grids = {"patch_shuffle": np.arange(2.0, 17.0)}
    study = _study(np.random.default_rng(2), 3).assign(quest_threshold=[15.0, 16.0, 17.6], ci_low=[13.0, 14.0, 15.0],
                                                       ci_high=[17.0, 18.0, 19.5])
    row = population_means(study, grids).iloc[0]
    assert row["label"] == EXTRAPOLATED and "beyond the tested grid [2, 16]" in row["note"]
    inside = population_means(study.assign(quest_threshold=[8.0, 9.0, 10.0]), grids).iloc[0]
    assert inside["label"] == "" and "3 observers' QUEST+ thresholds, t-interval over observers" in inside["note"]
