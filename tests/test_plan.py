"""``cuebench plan``: the sample size simulated from a pilot agrees with pingouin's analytic power of the
paired t-test, and a pilot without the needed data is a one-line error."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pingouin
import pytest

from cuebench_app.cli import main as cuebench
from cuebench.responses import ResponseStore


def pilot_rows(people: int = 4, trials: int = 40, seed: int = 0) -> list[dict]:
    """People of different skill and one model on the same 40 trials, answers drawn at random (seeded)."""
    rng = np.random.default_rng(seed)
    observers = [(f"p{i}", "human", 0.55 + 0.1 * i) for i in range(people)] + [("model-a", "model", 0.6)]
    return [answer(observer, kind, t, bool(rng.random() < p)) for observer, kind, p in observers for t in range(trials)]


def answer(observer: str, kind: str, t: int, right: bool) -> dict:
    """One stored answer to trial ``img{t}`` (a cat), right or wrong."""
    return {"experiment": "pilot", "observer": observer, "observer_kind": kind, "session": "1",
            "trial_index": t, "trial_id": f"img{t}", "role": "test", "trial_type": "classify",
            "condition": "original", "level": None, "params": {}, "category": "cat",
            "response": "cat" if right else "dog", "correct_answer": "cat", "correct": int(right),
            "rt_ms": 500.0 if kind == "human" else None}


@pytest.mark.slow
def test_plan_matches_pingouins_paired_t_test_power(tmp_path, capsys):
    from analysis.exclusions import apply_exclusions
    from analysis.load import load_responses
    from analysis.plan import person_differences, plan

    with ResponseStore(tmp_path / "pilot.sqlite") as store:
        store.write_many(pilot_rows())
    scored = apply_exclusions(load_responses(tmp_path / "pilot.sqlite")).scored
    result = plan(scored, effect=0.1, power=0.8, sims=4000, seed=1, method="normal")
    diffs, _ = person_differences(scored)
    d = 0.1 / diffs.std(ddof=1)
    analytic_n = pingouin.power_ttest(d=d, power=0.8, contrast="paired")
    assert result.n in (math.ceil(analytic_n) - 1, math.ceil(analytic_n), math.ceil(analytic_n) + 1)
    assert abs(result.power - pingouin.power_ttest(d=d, n=result.n, contrast="paired")) < 0.02
    assert cuebench(["plan", str(tmp_path / "pilot.sqlite"), "--effect", "0.1", "--simulations", "2000"]) == 0
    out = capsys.readouterr().out
    assert "people give power" in out and "assumptions:" in out and "sd " in out
    assert "(resample," in out and "cross-check: normal differences give n =" in out and "pingouin" in out


def test_plan_without_a_model_is_a_one_line_error(tmp_path, capsys):
    with ResponseStore(tmp_path / "pilot.sqlite") as store:
        store.write_many([r for r in pilot_rows(people=2, trials=5) if r["observer_kind"] == "human"])
    assert cuebench(["plan", str(tmp_path / "pilot.sqlite"), "--effect", "0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs a model's responses" in err and "\n" not in err


def compositions(n: int, k: int):
    """Every way to draw n people from k pilot people with replacement, as counts per pilot person."""
    for cut in itertools.combinations(range(n + k - 1), k - 1):
        yield np.diff((-1, *cut, n + k - 1)) - 1


def exact_resampled_power(values, n: int, alpha: float = 0.05) -> float:
    """The power of the paired t-test on n differences drawn with replacement from ``values``, summed exactly over
    the multinomial distribution of the draws (independent of the simulation it checks)."""
    from scipy import stats
    from scipy.special import gammaln

    values, k, total = np.asarray(values, dtype=float), len(values), 0.0
    for counts in compositions(n, k):
        probability = np.exp(gammaln(n + 1) - gammaln(counts + 1).sum() - n * np.log(k))
        mean = (counts * values).sum() / n
        var = (counts * (values - mean) ** 2).sum() / (n - 1)
        rejects = abs(mean) > 1e-12 if var < 1e-15 else 2 * stats.t.sf(abs(mean) / np.sqrt(var / n), n - 1) < alpha
        total += probability * rejects
    return float(total)


def exact_pilot_rows() -> list[dict]:
    """Five people and a model on the same 20 trials: the model right on 10, the people on 7, 9, 10, 12 and 14,
    so the per-person differences are -0.15, -0.05, 0, +0.10, +0.20 (mean +0.02)."""
    observers = [(f"p{i}", "human", k) for i, k in enumerate((7, 9, 10, 12, 14))] + [("m", "model", 10)]
    return [answer(observer, kind, t, t < right) for observer, kind, right in observers for t in range(20)]


@pytest.mark.slow
def test_resampling_plan_matches_the_exact_power_of_the_shifted_bootstrap(tmp_path, capsys):
    """Differences shifted by 0.08 - 0.02 to the effect 0.08: -0.09, +0.01, +0.06, +0.16, +0.26. Summed exactly over the draws, the
    t-test's power is 0.784 at 19 people and 0.809 at 20: the plan is 20 (within the simulation's error)."""
    from analysis.exclusions import apply_exclusions
    from analysis.load import load_responses
    from analysis.plan import person_differences, plan

    with ResponseStore(tmp_path / "pilot.sqlite") as store:
        store.write_many(exact_pilot_rows())
    scored = apply_exclusions(load_responses(tmp_path / "pilot.sqlite")).scored
    diffs, _ = person_differences(scored)
    assert sorted(diffs.round(6)) == [-0.15, -0.05, 0.0, 0.1, 0.2]
    shifted = [-0.09, 0.01, 0.06, 0.16, 0.26]
    exact = {n: exact_resampled_power(shifted, n) for n in (19, 20)}
    assert exact[19] == pytest.approx(0.784, abs=1e-3) and exact[20] == pytest.approx(0.809, abs=1e-3)
    result = plan(scored, effect=0.08, power=0.8, sims=20000, seed=3)
    assert result.method == "resample" and result.n == 20
    assert result.power == pytest.approx(exact[20], abs=0.01)
    assert cuebench(["plan", str(tmp_path / "pilot.sqlite"), "--effect", "0.08", "--simulations", "20000"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("20 people give power") and "drawn with replacement from the 5 pilot people" in out


def test_bisection_finds_the_smallest_n_in_logarithmically_many_steps():
    from analysis.plan import smallest_n

    asked = []

    def power_at(n):  # a rising power curve that crosses 0.8 between 136 and 137
        asked.append(n)
        return 1 - np.exp(-n / 85.0)

    n, achieved = smallest_n(power_at, 0.8, 500)
    assert n == 137 == min(k for k in range(2, 501) if 1 - np.exp(-k / 85.0) >= 0.8)
    assert achieved == pytest.approx(1 - np.exp(-137 / 85.0)) and len(set(asked)) <= 2 * math.ceil(math.log2(500))
    assert smallest_n(power_at, 0.999, 500)[0] is None
