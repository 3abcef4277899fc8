"""Error consistency, noise ceilings and rank-test blocks against hand computations and simulations from the
documented observer models (written with numpy alone, nothing of analysis.consistency), and the rule that keeps
adaptive (QUEST+) answers out of every fixed-level statistic."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.special import expit, logit

from analysis.consistency import (ceilings_and_models, error_consistency, kappa_from_correct, mean_over_pairs,
                                  noise_ceiling, pair_matrix)
from analysis.report import AnalysisOptions, analyze, write_tables
from cuebench.responses import ResponseStore

LEVEL_ACCURACY = {0: 0.9, 1: 0.5, 2: 0.15}
"""Both observers find the high levels hard: the difficulty profile that a pooled kappa mistakes for agreement."""


def scored_rows(observer: str, kind: str, outcomes: dict[tuple[str, int], list[int]], prefix: str = "") -> list[dict]:
    """Scored test rows of one observer: ``outcomes[(condition, level)]`` lists 1/0 per trial, trial ids shared by
    every observer given the same prefix."""
    return [{"observer": observer, "observer_kind": kind, "condition": condition, "level": level,
             "trial_id": f"{prefix}{condition}-{level}-t{i}", "correct": int(c), "trial_type": "classify",
             "role": "test", "category": "cat"}
            for (condition, level), trials in outcomes.items() for i, c in enumerate(trials)]


def pooled_kappa_by_hand(a: np.ndarray, b: np.ndarray) -> float:
    """Geirhos et al. 2020, eqs. 1-3, over all trials at once (the statistic the report used to call kappa)."""
    c_obs = np.mean(a == b)
    p1, p2 = a.mean(), b.mean()
    c_exp = p1 * p2 + (1 - p1) * (1 - p2)
    return (c_obs - c_exp) / (1 - c_exp)


@pytest.mark.validates(
    "error consistency kappa per condition x level",
    definition="kappa = (c_obs - c_exp) / (1 - c_exp), c_exp = p1 p2 + (1-p1)(1-p2), within each condition x level; "
               "a pair's kappa pools the cells with >= 2 shared trials as a stratified kappa, sum_c n_c (c_obs - "
               "c_exp) / sum_c n_c (1 - c_exp), c_exp of a cell estimated over pairs of distinct trials",
    source="Geirhos et al. 2020, eqs. 1-3, within cells; stratified kappa (Barlow, Lai & Azen 1991); Hoeffding 1948 "
           "(U-statistic of p1 p2)",
    reference="hand computation (two cells) and simulation of observers independent within each level (accuracy "
              ".9, .5, .15 at three levels, 60 trials each), and of observers copying another's correctness with "
              "probability 0.8 (kappa = 0.8 by construction)",
    tolerance="hand values exact; independent: mean kappa over 190 simulated pairs within +-0.05 of 0 (pooled "
              "kappa of the same pairs, by hand, > 0.3); copiers: mean over 10 within +-0.1 of 0.8")
def test_kappa_per_condition_and_level_is_zero_for_independent_observers_and_high_for_a_copier():
    # hand: cell A a=1100 b=1000 (n 4): both 1, only a 1, neither 2; c_exp over distinct-trial pairs
    # (2*1 - 1 + 2*3 - 2) / 12 = 5/12; beyond chance 3 - 4*5/12 = 4/3 of 4*7/12 = 7/3.
    # cell B a=1000 b=1000: c_exp (1*1 - 1 + 3*3 - 3) / 12 = 1/2; beyond 4 - 2 = 2 of 2.
    # stratified kappa (4/3 + 2) / (7/3 + 2) = 10/13. Pooled over the 8 trials (plug-in): counts 2/1/0/5, p1 3/8,
    # p2 2/8, c_obs 7/8, c_exp 36/64, kappa (7/8 - 36/64) / (28/64) = 5/7.
    hand = pd.DataFrame(scored_rows("a", "human", {("blur", 0): [1, 1, 0, 0], ("blur", 1): [1, 0, 0, 0]})
                        + scored_rows("b", "human", {("blur", 0): [1, 0, 0, 0], ("blur", 1): [1, 0, 0, 0]}))
    pair = error_consistency(hand, n_boot=200, seed=0).iloc[0]
    assert pair["kappa"] == pytest.approx(10 / 13) and pair["kappa_pooled"] == pytest.approx(5 / 7)
    assert pair["cells"] == 2 and pair["n_shared"] == 8 and pair["kappa_ci_low"] <= 10 / 13 <= pair["kappa_ci_high"]

    # 20 observers independent within each level (190 pairs), and 10 who each copy one of them with probability 0.8
    rng = np.random.default_rng(7)
    trials, people, copiers = 60, 20, 10
    answers = {f"i{k}": {("blur", lv): rng.random(trials) < p for lv, p in LEVEL_ACCURACY.items()}
               for k in range(people)}
    for k in range(copiers):
        own = {key: rng.random(trials) < LEVEL_ACCURACY[key[1]] for key in answers["i0"]}
        answers[f"c{k}"] = {key: np.where(rng.random(trials) < 0.8, answers[f"i{k}"][key], own[key]) for key in own}
    df = pd.DataFrame([row for name, outcomes in answers.items() for row in scored_rows(name, "human", outcomes)])
    pairs = error_consistency(df, n_boot=0).set_index(["observer_a", "observer_b"])
    independent = pairs[[a.startswith("i") and b.startswith("i") for a, b in pairs.index]]
    both = [(a, b) for a, b in independent.index]
    pooled = [pooled_kappa_by_hand(*(np.concatenate(list(answers[o].values())) for o in pair)) for pair in both]
    assert independent["kappa_pooled"].to_numpy() == pytest.approx(pooled)
    assert len(independent) == 190 and abs(independent["kappa"].mean()) <= 0.05 and np.mean(pooled) > 0.3
    copied = [pairs.loc[(f"c{k}", f"i{k}") if (f"c{k}", f"i{k}") in pairs.index else (f"i{k}", f"c{k}"), "kappa"]
              for k in range(copiers)]
    assert np.mean(copied) == pytest.approx(0.8, abs=0.1)


SMALL_CELL_ACCURACY = (0.9, 0.8, 0.65, 0.5, 0.35)
"""Accuracy of both observers at five levels of each of four conditions: 20 cells, as a small Latin square."""


def pair_with_known_kappa(rng, kappa: float, per_cell: int) -> tuple[dict, dict]:
    """Correctness per cell of two observers with Geirhos et al.'s kappa = ``kappa`` in every cell: both right with
    probability p^2 + cov, cov = kappa (1 - c_exp) / 2, c_exp = p^2 + (1-p)^2 (then c_obs - c_exp = 2 cov),
    ``per_cell`` shared trials per cell."""
    outcomes_a, outcomes_b = {}, {}
    for c, p in enumerate(np.tile(SMALL_CELL_ACCURACY, 4)):
        cov = kappa * (1 - (p * p + (1 - p) ** 2)) / 2
        outcome = rng.choice(4, size=per_cell, p=[p * p + cov, p - p * p - cov, p - p * p - cov, (1 - p) ** 2 + cov])
        key = (f"cond{c // 5}", c % 5)
        outcomes_a[key], outcomes_b[key] = np.isin(outcome, (0, 1)), np.isin(outcome, (0, 2))
    return outcomes_a, outcomes_b


def mean_of_cell_kappas_by_hand(a: dict, b: dict) -> list[float]:
    """The estimator the report used before: the cells' plug-in kappas where defined (to be averaged unweighted)."""
    return [pooled_kappa_by_hand(a[key], b[key]) for key in a if 0 < a[key].mean() < 1 and 0 < b[key].mean() < 1]


@pytest.mark.validates(
    "error consistency kappa on few shared trials per cell",
    definition="stratified kappa over the condition x level cells with >= 2 shared trials (chance within each cell "
               "over pairs of distinct trials); cells of 1 shared trial left out",
    source="Geirhos et al. 2020, eqs. 1-3; Barlow, Lai & Azen 1991 (stratified kappa)",
    reference="simulation with numpy alone: 100 pairs with Geirhos et al.'s kappa = 0.30 in each of 20 cells "
              "(accuracy 0.9 to 0.35), 2, 3, 4 and 10 shared trials per cell",
    tolerance="mean kappa within +-0.05 of 0.30 at 3, 4 and 10 trials per cell, within +-0.1 at 2; the unweighted "
              "mean of cell kappas, by hand, > 0.35 at 3 and 2")
@pytest.mark.parametrize("per_cell", [2, 3, 4, 10])
def test_kappa_of_a_known_error_consistency_on_few_trials_per_cell(per_cell):
    rng = np.random.default_rng(per_cell)
    kappas, old = [], []
    for _ in range(100):
        a, b = pair_with_known_kappa(rng, 0.30, per_cell)
        pair = error_consistency(pd.DataFrame(scored_rows("a", "human", a) + scored_rows("b", "human", b)), n_boot=0)
        assert pair["cells"].item() == 20
        kappas.append(pair["kappa"].item())
        old += mean_of_cell_kappas_by_hand(a, b)
    print(f"{per_cell} shared trials per cell: mean kappa {np.mean(kappas):.3f}; mean of cell kappas {np.mean(old):.3f}")
    assert abs(np.mean(kappas) - 0.30) <= (0.1 if per_cell == 2 else 0.05)
    if per_cell <= 3:
        assert np.mean(old) > 0.35


@pytest.mark.validates(
    "interval of the mean human-human error consistency",
    definition="mean kappa over pairs of people with a leave-one-person-out jackknife t-interval (n-1 dof)",
    source="Arvesen 1969, jackknifing U-statistics (pairs share people, so they are not independent)",
    reference="hand computation on 3 people; simulation of kappa matrices mu + a_i + a_j + e_ij (person effects "
              "SD 0.1, pair noise SD 0.05) for 6 people",
    tolerance="hand values to 1e-9; coverage of mu >= 0.9 over 300 simulated groups (a t-interval over pairs: < 0.8)")
def test_human_human_interval_treats_people_not_pairs_as_the_sample():
    # kappa_12 = .1, kappa_13 = .2, kappa_23 = .6: mean .3; leaving out 1, 2, 3 leaves .6, .2, .1 (mean .3);
    # se^2 = 2/3 (.09 + .01 + .04); interval .3 +- t(.975, 2) se
    pairs = pd.DataFrame({"observer_a": ["p1", "p1", "p2"], "observer_b": ["p2", "p3", "p3"], "kappa": [.1, .2, .6]})
    out = mean_over_pairs(pair_matrix(pairs, ["p1", "p2", "p3"]))
    half = stats.t.ppf(0.975, 2) * np.sqrt(2 / 3 * 0.14)
    assert (out["mean"], out["ci_low"], out["ci_high"]) == pytest.approx((0.3, 0.3 - half, 0.3 + half), abs=1e-9)
    assert out["pairs"] == 3 and out["observers"] == 3
    rng = np.random.default_rng(3)
    n, mu, covered, naive = 6, 0.3, 0, 0
    people = [f"p{i}" for i in range(n)]
    upper = np.triu_indices(n, 1)
    for _ in range(300):
        effect = rng.normal(0, 0.1, n)
        kappa = mu + effect[:, None] + effect[None, :] + rng.normal(0, 0.05, (n, n))
        kappa = np.triu(kappa, 1) + np.triu(kappa, 1).T
        np.fill_diagonal(kappa, np.nan)
        values = kappa[upper]
        interval = mean_over_pairs(pd.DataFrame(kappa, index=people, columns=people))
        covered += interval["ci_low"] <= mu <= interval["ci_high"]
        t_half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
        naive += abs(values.mean() - mu) <= t_half
    assert covered / 300 >= 0.9 and naive / 300 < 0.8


def _level_study(rng, humans: int = 6, items: int = 30):
    """People whose items differ in difficulty within each level (logit spread 1.5), two models that know only
    each level's accuracy (Bernoulli at the level's rate, blind to the item) and one that knows the items."""
    rows = []
    for level, p in LEVEL_ACCURACY.items():
        p_item = expit(logit(p) + rng.normal(0, 1.5, items))
        for observer in [f"h{h}" for h in range(humans)] + ["item-model"]:
            rows += scored_rows(observer, "model" if observer == "item-model" else "human",
                                {("blur", level): rng.random(items) < p_item})
        for observer in ("level-model-1", "level-model-2"):
            rows += scored_rows(observer, "model", {("blur", level): rng.random(items) < p})
    return pd.DataFrame(rows)


@pytest.mark.validates(
    "noise ceiling within condition x level",
    definition="leave-one-participant-out agreement (Pearson r of item-wise correctness) computed within each "
               "condition x level and averaged over cells; a model's agreement with the human mean relative to it",
    source="Nili et al. 2014; Burgert et al. 2025, App. F",
    reference="simulation: people with item difficulty spread within levels; a model that knows only each "
              "level's accuracy, and one that knows the items",
    tolerance="level-only model: mean ratio to the lower bound within +-0.25 of 0 over 5 studies (the ratio "
              "pooled over levels, by hand, > 0.3); item-knowing model: ratio > 0.6")
def test_a_model_that_knows_only_how_hard_each_level_is_gets_no_share_of_the_ceiling():
    rng = np.random.default_rng(11)
    level_ratio, item_ratio, pooled_ratio = [], [], []
    for _ in range(5):
        df = _level_study(rng)
        _, relative = ceilings_and_models(df, n_splits=10)
        accuracy = relative[relative["measure"] == "accuracy"].set_index("observer")
        level_ratio += list(accuracy.loc[["level-model-1", "level-model-2"], "relative_to_lower"])
        item_ratio.append(accuracy.loc["item-model", "relative_to_lower"])
        m = df.pivot(index="trial_id", columns="observer", values="correct").astype(float)
        people = [c for c in m.columns if c.startswith("h")]
        lower = np.mean([np.corrcoef(m[h], m[[o for o in people if o != h]].mean(axis=1))[0, 1] for h in people])
        pooled_ratio.append(np.corrcoef(m["level-model-1"], m[people].mean(axis=1))[0, 1] / lower)
    assert abs(np.mean(level_ratio)) <= 0.25 and np.mean(pooled_ratio) > 0.3
    assert np.mean(item_ratio) > 0.6


@pytest.mark.validates(
    "people, pairs and trials a noise ceiling rests on",
    definition="observers: members sharing >= 1 trial with another; pairs: pairs sharing trials; items: trials "
               "answered by >= 2 members", source="Nili et al. 2014 (the ceiling needs repeated measurements)",
    reference="hand-built Latin square of 4 people where one pair shares trials", tolerance="exact")
def test_noise_ceiling_counts_only_the_people_who_share_trials():
    # a Latin square of 4 people: p1 and p2 saw the same 4 trials, p3 and p4 trials nobody else saw
    m = pd.DataFrame({"p1": [1, 0, 1, 0] + [np.nan] * 8, "p2": [1, 0, 0, 1] + [np.nan] * 8,
                      "p3": [np.nan] * 4 + [1, 1, 0, 0] + [np.nan] * 4, "p4": [np.nan] * 8 + [0, 1, 1, 0]},
                     index=[f"t{i}" for i in range(12)], dtype=float)
    c = noise_ceiling(m, "accuracy", n_splits=5)
    assert (c["observers"], c["pairs"], c["items"], c["observers_in_group"]) == (2, 1, 4, 4)
    # p1 = 1010 and p2 = 1001 correlate r = 0: both bounds rest on this one pair alone
    assert c["lower"] == pytest.approx(0.0, abs=1e-12)
    nobody = noise_ceiling(m[["p3", "p4"]], "accuracy", n_splits=5)
    assert nobody["observers"] == 0 and np.isnan(nobody["lower"])


def _adaptive_study(path) -> tuple[pd.DataFrame, int]:
    """Two people and a model answer the same fixed trials; each also runs a QUEST+ block of 6 trials on blur (session
    adaptive-blur) all answered right at levels QUEST+ chose. Returns the fixed rows and the number of adaptive ones."""
    rng = np.random.default_rng(5)
    fixed = []
    for observer, kind in (("p1", "human"), ("p2", "human"), ("m", "model")):
        outcomes = {("original", 0): rng.random(6) < 0.9, ("blur", 1): rng.random(6) < 0.6,
                    ("blur", 2): rng.random(6) < 0.4}
        fixed += scored_rows(observer, kind, outcomes)
    rows = [r | {"experiment": "toy", "session": "1", "trial_index": i, "response": "cat" if r["correct"] else "dog",
                 "correct_answer": "cat", "params": {}} for i, r in enumerate(fixed)]
    adaptive = []
    for observer, kind in (("p1", "human"), ("p2", "human"), ("m", "model")):
        for i in range(6):
            adaptive.append(rows[0] | {"observer": observer, "observer_kind": kind, "session": "adaptive-blur",
                                       "trial_index": i, "trial_id": f"q{i}-blur", "condition": "blur",
                                       "level": 2, "correct": 1, "response": "cat",
                                       "adaptive": {"quest_threshold": 1.5, "ci_low": 1.0, "ci_high": 2.0,
                                                    "trials": i + 1}})
    with ResponseStore(path) as store:
        store.write_many(rows + adaptive)
    return pd.DataFrame(fixed), len(adaptive)


def test_adaptive_trials_stay_out_of_every_fixed_level_statistic(tmp_path):
    from analysis.load import load_responses
    from analysis.plan import pilot_cells

    fixed, n_adaptive = _adaptive_study(tmp_path / "r.sqlite")
    df = load_responses([tmp_path / "r.sqlite"])
    result = analyze(df, AnalysisOptions(n_boot=20), only={"accuracy", "consistency", "ceilings", "ranks", "ttests"})
    assert result.summary["adaptive_trials"] == n_adaptive
    by_hand = fixed.groupby(["observer", "condition", "level"])["correct"].agg(["size", "mean"])
    acc = result.tables["accuracy"].set_index(["observer", "condition", "level"])
    assert acc["n"].sort_index().tolist() == by_hand["size"].sort_index().tolist()
    assert acc["accuracy"].sort_index().to_numpy() == pytest.approx(by_hand["mean"].sort_index().to_numpy())
    assert (result.tables["error_consistency"]["n_shared"] == 18).all()
    ceilings = result.tables["noise_ceilings"]
    assert set(ceilings.loc[ceilings["group"] == "human", "items"]) == {18}
    assert result.summary["ceilings"]["method"]["cells"] == 3
    assert result.summary["ranks"]["method"]["fewest_trials_per_score"] == 6
    tests = result.tables["ttests"].set_index(["condition", "level"])
    assert set(tests["n"]) == {6}  # six fixed items per cell; the QUEST+ trials (shared ids q0..q5) would add six
    assert tests.loc[("blur", 2), "model_mean"] == pytest.approx(by_hand.loc[("m", "blur", 2), "mean"])
    # the plan pairs people with the model on the fixed trials only: six items per cell, no QUEST+ answer
    cells, tests_run, answers = pilot_cells(result.cleaned.scored)
    assert tests_run == 3 and {len(cell.model_correct) for cell in cells} == {6}
    assert len(answers) == int((fixed["observer"] != "m").sum())


@pytest.mark.validates(
    "Friedman rank-test scores per block",
    definition="one accuracy per method and condition x level block (people: the mean of their accuracies)",
    source="Kalischek et al. 2023 (BiasBed), hypothesis-testing background: c_ij the averaged score of method i on "
           "data set j, ranked within each data set",
    reference="hand computation of the block accuracies", tolerance="exact")
def test_rank_test_blocks_are_condition_and_level_and_results_json_says_how_each_statistic_ran(tmp_path):
    from analysis.sections.ranks import friedman_scores

    fixed, _ = _adaptive_study(tmp_path / "r.sqlite")
    scores, trials = friedman_scores(fixed)
    assert list(scores.index) == ["blur / 1", "blur / 2", "original / 0"]
    humans = fixed[fixed["observer_kind"] == "human"].groupby(["condition", "level", "observer"])["correct"].mean()
    assert scores.loc["blur / 1", "humans (mean)"] == pytest.approx(humans.loc[("blur", 1)].mean())
    assert (trials["m"] == 6).all() and (trials["humans (mean)"] == 12).all()
    from analysis.load import load_responses

    result = analyze(load_responses([tmp_path / "r.sqlite"]), AnalysisOptions(n_boot=20),
                     only={"consistency", "ceilings", "ranks"})
    write_tables(result, tmp_path / "report")
    summary = json.loads((tmp_path / "report" / "results.json").read_text())["summary"]
    assert summary["consistency"]["method"]["kappa_unit"] == "condition x level"
    assert summary["consistency"]["method"]["cells"] == 3 and summary["consistency"]["method"]["pairs"] == 3
    assert summary["ceilings"]["method"]["observers_sharing_items"] == 2
    assert summary["ranks"]["method"]["block_unit"] == "condition x level" and summary["ranks"]["method"]["blocks"] == 3


def test_the_kappa_heat_map_marks_an_undefined_pair_instead_of_colouring_it():
    from analysis import plots

    pairs = pd.DataFrame({"observer_a": ["P01", "P01", "P02"], "observer_b": ["P02", "lite0", "lite0"],
                          "kappa": [0.3, np.nan, np.nan], "n_shared": [9, 9, 9]})
    observers = ["P01", "P02", "lite0"]
    kinds = pd.Series({"P01": "human", "P02": "human", "lite0": "model"})
    fig = plots.consistency_matrix_plot(pair_matrix(pairs, observers, "kappa"),
                                        pair_matrix(pairs, observers, "n_shared"), kinds)
    texts = sorted(t.get_text() for t in fig.axes[0].texts)
    assert texts == ["0.30", "0.30", "undef.", "undef.", "undef.", "undef."]
    assert "within each condition x level" in fig.axes[0].get_title()
