"""QUEST+ adaptive blocks: the plan's checks, replay, and simulated observers whose thresholds are known (simulated
here from the documented model, not with the module's own function)."""

from __future__ import annotations

import json

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
KINDS = {"person-like": "human", "model-like": "model", "weak model": "model", "half-lapsing model": "model"}


def correct_probability(value, threshold, spread, lapse):
    """The documented model: γ + (1 − γ − λ)(1 − Φ((x − t)/s)), γ = 1/C."""
    return 1 / C + (1 - 1 / C - lapse) * (1 - norm.cdf((value - threshold) / spread))


def plan(**changes) -> AdaptivePlan:
    return plan_for_grid("patch_shuffle", range(len(GRIDS)), GRIDS, "grid", 1 / C, 40, **changes)


def run_observer(p: AdaptivePlan, true, seed: int, kind: str = "human") -> AdaptiveRun:
    rng = np.random.default_rng(seed)
    run = AdaptiveRun(p, kind)
    while not run.finished:
        level = run.next_level()
        run.update(level, bool(rng.random() < correct_probability(p.value_of(level), *true)))
    return run


def coverage(name: str, repetitions: int) -> float:
    true = OBSERVERS[name]
    runs = [run_observer(plan(), true, seed, KINDS[name]) for seed in range(repetitions)]
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
    half = AdaptiveRun.replay(run.plan, "human", run.answers[:20])
    assert half.next_level() == run.answers[20][0]
    assert AdaptiveRun.replay(run.plan, "human", run.answers).estimate() == run.estimate()
    assert run.finished and len(run.answers) == 40
    with pytest.raises(AdaptiveError, match="finished after 40 answers"):
        run.next_level()


def test_early_stop_and_prior():
    narrow = run_observer(plan(stop_ci_width=4.0), OBSERVERS["model-like"], seed=1, kind="model")
    estimate = narrow.estimate()
    assert len(narrow.answers) < 40 and estimate.ci_high - estimate.ci_low <= 4.0
    informed = AdaptiveRun(plan(prior_mean=6.0, prior_sd=1.0), "human").estimate()
    assert informed.quest_threshold == pytest.approx(6.0, abs=0.05) and informed.ci_high - informed.ci_low < 5


def test_the_lapse_grid_reaches_up_to_one_minus_chance():
    assert plan().lapses[-1] == pytest.approx(0.9) and plan().lapses[0] == 0
    two = plan_for_grid("patch_shuffle", range(len(GRIDS)), GRIDS, "grid", 1 / 2, 40)
    assert two.lapses == pytest.approx(np.arange(0, 0.46, 0.05)) and max(two.lapses) < 1 / 2


def test_estimates_are_stored_as_quest_threshold_and_old_rows_still_read():
    estimate = AdaptiveRun(plan(), "human").update(3, True)
    assert set(estimate.to_dict()) == {"quest_threshold", "ci_low", "ci_high", "trials", "lapse_prior",
                                       "lapse_prior_beta"}
    assert Estimate.from_dict(estimate.to_dict()) == estimate
    assert Estimate.from_dict(json.loads(json.dumps(estimate.to_dict()))) == estimate  # as the response row keeps it
    old = {"threshold": 7.5, "ci_low": 4.0, "ci_high": 11.0, "trials": 12}
    assert Estimate.from_dict(old) == Estimate(quest_threshold=7.5, ci_low=4.0, ci_high=11.0, trials=12,
                                               lapse_prior="flat")  # runs before people had their own lapse prior


def test_the_lapse_prior_is_stored_by_its_numbers_and_rows_with_its_name_alone_still_read():
    """The numbers are kept exactly (the name rounds them to six digits); a row stored before them carries the name
    only, from which they are read."""
    exact = AdaptiveRun(plan(people_lapse_prior=(1.0, 12.3456789)), "human").update(3, True).to_dict()
    assert (exact["lapse_prior"], exact["lapse_prior_beta"]) == ("Beta(1, 12.3457)", (1.0, 12.3456789))
    model = AdaptiveRun(plan(), "model").update(3, True).to_dict()
    assert (model["lapse_prior"], model["lapse_prior_beta"]) == ("flat", None)
    named = {"quest_threshold": 7.5, "ci_low": 4.0, "ci_high": 11.0, "trials": 12}
    assert Estimate.from_dict({**named, "lapse_prior": "Beta(1, 10)"}).lapse_prior_beta == (1.0, 10.0)
    assert Estimate.from_dict({**named, "lapse_prior": "flat"}).lapse_prior_beta is None
    with pytest.raises(AdaptiveError, match="lapse prior 'Beta 1' is neither"):
        Estimate.from_dict({**named, "lapse_prior": "Beta 1"})


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
        AdaptiveRun(p, "human").update(99, True)


@pytest.mark.validates(
    "QUEST+ level chosen next and the threshold's marginal posterior",
    definition="minimum expected posterior entropy over the (threshold, spread, lapse) grid; Bayes' rule per answer; "
               "people's lapse prior Beta(1, 20) over the lapse grid",
    source="Watson 2017, computed on plain arrays",
    reference="the questplus package's QuestPlus (the reference implementation) stepped through the same answers",
    tolerance="the same level at every step; marginal posterior within 1e-12")
def test_each_level_and_the_posterior_agree_with_questplus_itself():
    # questplus's own QuestPlus, stepped through the same answers, with the people's Beta(1, 20) lapse prior
    # written here with scipy: the same level every time and the same marginal posterior of the threshold
    from questplus import QuestPlus
    from scipy.stats import beta

    p = plan()
    quest = QuestPlus(stim_domain={"intensity": -np.asarray(p.values)},
                      param_domain={"mean": -np.asarray(p.thresholds), "sd": np.asarray(p.spreads),
                                    "lower_asymptote": np.array([1 / C]), "lapse_rate": np.asarray(p.lapses)},
                      outcome_domain={"response": ["correct", "incorrect"]},
                      prior={"lapse_rate": beta.pdf(np.asarray(p.lapses), 1, 20)}, func="norm_cdf",
                      stim_scale="linear")
    run, rng = AdaptiveRun(p, "human"), np.random.default_rng(5)
    while not run.finished:
        level = run.next_level()
        assert p.values[p.levels.index(level)] == pytest.approx(-quest.next_stim["intensity"])
        correct = bool(rng.random() < correct_probability(p.value_of(level), *OBSERVERS["person-like"]))
        run.update(level, correct)
        quest.update(stim={"intensity": -p.value_of(level)}, outcome={"response": "correct" if correct else "incorrect"})
    thresholds, marginal = run.marginal_thresholds()
    expected = dict(zip(-np.asarray(quest.param_domain["mean"]), quest.marginal_posterior["mean"]))
    assert marginal == pytest.approx([expected[t] for t in thresholds], abs=1e-12)


def test_people_get_a_lapse_prior_near_zero_and_models_a_flat_one():
    from cuebench.adaptive import lapse_weights

    p = plan()
    people = lapse_weights(p, "human")
    # Beta(1, 20) at lapses 0, 0.05, 0.1: 20, 20 * 0.95^19, 20 * 0.9^19, normalised over the grid
    assert people[1] / people[0] == pytest.approx(0.95 ** 19) and people[2] / people[0] == pytest.approx(0.9 ** 19)
    assert np.array_equal(lapse_weights(p, "pilot"), people)
    assert np.allclose(lapse_weights(p, "model"), 1 / len(p.lapses))
    assert np.allclose(lapse_weights(plan(people_lapse_prior=None), "human"), 1 / len(p.lapses))
    assert AdaptiveRun(p, "model").estimate().lapse_prior == "flat"
    assert AdaptiveRun(p, "human").estimate().lapse_prior == "Beta(1, 20)"
    with pytest.raises(SchemaError, match="people_lapse_prior"):
        plan(people_lapse_prior=(0.5, 10.0))
