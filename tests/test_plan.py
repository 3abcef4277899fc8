"""``cuebench plan``: the sample size simulated from a pilot agrees with pingouin's analytic power of the
paired t-test, and a pilot without the needed data is a one-line error."""

from __future__ import annotations

import math

import numpy as np
import pingouin
import pytest

from cuebench.app.cli import main as cuebench
from cuebench.responses import ResponseStore


def pilot_rows(people: int = 4, trials: int = 40, seed: int = 0) -> list[dict]:
    """People of different skill and one model on the same 40 trials, answers drawn at random (seeded)."""
    rng = np.random.default_rng(seed)
    rows = []
    observers = [(f"p{i}", "human", 0.55 + 0.1 * i) for i in range(people)] + [("model-a", "model", 0.6)]
    for observer, kind, p in observers:
        for t in range(trials):
            right = bool(rng.random() < p)
            rows.append({"experiment": "pilot", "observer": observer, "observer_kind": kind, "session": "1",
                         "trial_index": t, "trial_id": f"img{t}", "role": "test", "trial_type": "classify",
                         "condition": "original", "level": None, "params": {}, "category": "cat",
                         "response": "cat" if right else "dog", "correct_answer": "cat", "correct": int(right),
                         "rt_ms": 500.0 if kind == "human" else None})
    return rows


@pytest.mark.slow
def test_plan_matches_pingouins_paired_t_test_power(tmp_path, capsys):
    from analysis.exclusions import apply_exclusions
    from analysis.load import load_responses
    from analysis.plan import person_differences, plan

    with ResponseStore(tmp_path / "pilot.sqlite") as store:
        store.write_many(pilot_rows())
    scored = apply_exclusions(load_responses(tmp_path / "pilot.sqlite")).scored
    result = plan(scored, effect=0.1, power=0.8, sims=4000, seed=1)
    diffs, _ = person_differences(scored)
    d = 0.1 / diffs.std(ddof=1)
    analytic_n = pingouin.power_ttest(d=d, power=0.8, contrast="paired")
    assert result.n in (math.ceil(analytic_n) - 1, math.ceil(analytic_n), math.ceil(analytic_n) + 1)
    assert abs(result.power - pingouin.power_ttest(d=d, n=result.n, contrast="paired")) < 0.02
    assert cuebench(["plan", str(tmp_path / "pilot.sqlite"), "--effect", "0.1", "--simulations", "2000"]) == 0
    out = capsys.readouterr().out
    assert "people give power" in out and "assumptions:" in out and "sd " in out


def test_plan_without_a_model_is_a_one_line_error(tmp_path, capsys):
    with ResponseStore(tmp_path / "pilot.sqlite") as store:
        store.write_many([r for r in pilot_rows(people=2, trials=5) if r["observer_kind"] == "human"])
    assert cuebench(["plan", str(tmp_path / "pilot.sqlite"), "--effect", "0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs a model's responses" in err and "\n" not in err
