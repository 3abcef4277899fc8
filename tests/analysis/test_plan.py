"""``cuebench plan``: the sample size for the test the report runs (per model, condition and level, paired by item,
Holm-corrected), calibrated against a known population simulated without the project's code."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from cuebench_app.cli import main as cuebench
from cuebench.responses import ResponseStore

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_plan import calibration  # noqa: E402


def pilot_rows(people: int = 4, trials: int = 40, seed: int = 0, conditions=("original",),
               models=("model-a",)) -> list[dict]:
    """People of different skill and models on the same trials of each condition, answers drawn at random."""
    rng = np.random.default_rng(seed)
    observers = [(f"p{i}", "human", 0.55 + 0.1 * i) for i in range(people)] + [(m, "model", 0.6) for m in models]
    return [answer(observer, kind, t, bool(rng.random() < p), condition, index * trials)
            for index, condition in enumerate(conditions) for observer, kind, p in observers for t in range(trials)]


def answer(observer: str, kind: str, t: int, right: bool, condition: str = "original",
           shown_before: int = 0) -> dict:
    """One stored answer to trial ``img{t}`` (a cat) of ``condition``, right or wrong."""
    return {"experiment": "pilot", "observer": observer, "observer_kind": kind, "session": "1",
            "trial_index": shown_before + t, "trial_id": f"img{t}--{condition}", "role": "test", "trial_type": "classify",
            "condition": condition, "level": None, "params": {}, "category": "cat",
            "response": "cat" if right else "dog", "correct_answer": "cat", "correct": int(right),
            "rt_ms": 500.0 if kind == "human" else None}


def test_plan_says_when_no_number_of_people_is_enough_for_the_images_there_are(tmp_path, capsys):
    """40 images, the model right on 60 %: the item-paired test's differences (people's mean - the model's 0 or 1)
    keep an SD of about sqrt(0.6 x 0.4) = 0.49 however many people answer, so an effect of 0.1 has a
    noncentrality of at most sqrt(40) x 0.1 / 0.49 = 1.3 (power about 0.25): more images are needed."""
    with ResponseStore(tmp_path / "pilot.sqlite") as store:
        store.write_many(pilot_rows())
    assert cuebench(["plan", str(tmp_path / "pilot.sqlite"), "--effect", "0.1", "--simulations", "200",
                     "--max-n", "64"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("no n up to 64 people reaches power 0.8 for model-a on original: with its 40 "
                          "images even infinitely many people give power")
    assert "more images per condition and level are needed" in out
    assert "paired by item, two-sided, at alpha 0.05 / 1 tests (Holm's first step over the family)" in out


def test_plan_covers_the_family_the_report_corrects_over_or_one_named_test(tmp_path, capsys):
    """Two models x two conditions: the report runs 4 tests and Holm-corrects over them, so each is planned at
    alpha 0.05 / 4; --condition and --model name one of them (still at 0.05 / 4)."""
    with ResponseStore(tmp_path / "pilot.sqlite") as store:
        store.write_many(pilot_rows(trials=30, conditions=("blur", "original"), models=("m1", "m2")))
    args = ["plan", str(tmp_path / "pilot.sqlite"), "--effect=-0.3", "--simulations", "100", "--max-n", "32"]
    assert cuebench(args) == 0
    family = capsys.readouterr().out
    assert "alpha 0.05 / 4 tests" in family and family.count("\n  m") == 4  # one line per planned test
    assert cuebench([*args, "--condition", "blur", "--model", "m2"]) == 0
    one = capsys.readouterr().out
    assert "for m2 on blur (" in one and "alpha 0.05 / 4 tests" in one and "\n  m" not in one
    assert cuebench([*args, "--condition", "nope"]) == 2
    assert "no test of the report matches nope" in capsys.readouterr().err


def test_a_test_that_cannot_be_planned_is_a_note_and_the_others_are_planned(tmp_path, capsys):
    """The docs' form, ``--effect 0.1``, on a pilot whose model is right on 39 of 40 originals: people at 0.975 + 0.1
    is no accuracy, so that test is named in a note; the blur test is planned, on these images."""
    rows = pilot_rows(trials=30, conditions=("blur",))
    rows += [answer(f"p{i}", "human", t, True, "original", 1000) for i in range(4) for t in range(40)]
    rows += [answer("model-a", "model", t, t != 0, "original", 1000) for t in range(40)]
    with ResponseStore(tmp_path / "pilot.sqlite") as store:
        store.write_many(rows)
    assert cuebench(["plan", str(tmp_path / "pilot.sqlite"), "--effect", "0.1", "--simulations", "100",
                     "--max-n", "32"]) == 0
    out = capsys.readouterr().out
    assert ("note: model-a on original: the model's accuracy 0.975 +0.1 puts the people's accuracy at 1.075, outside "
            "(0, 1); not planned") in out
    assert "model-a on blur" in out.splitlines()[0] and "in accuracy on these images" in out.splitlines()[0]
    assert "alpha 0.05 / 2 tests" in out and "the effect is on these images" in out
    # every test unplannable: one line saying so
    assert cuebench(["plan", str(tmp_path / "pilot.sqlite"), "--effect", "0.6", "--condition", "original"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no test can be planned for an effect of +0.6: model-a on original" in err and "\n" not in err


@pytest.mark.slow
@pytest.mark.validates(
    "sample-size plan for the report's item-paired, Holm-corrected human-model t-tests",
    definition="smallest N whose expected power (averaged over the pilot's posterior of item and person SDs, each "
               "condition x level's location integrated out) reaches the target",
    source="Julious & Owen 2006 (expected power); Burgert et al. 2025, App. F",
    reference="known logistic population (item SD 1, person SD 0.8, 100 images, model right on 60 %) simulated "
              "with numpy/scipy only, everyone seeing every image and a 4-group Latin square; planned N re-tested "
              "on fresh studies of N people by the item-paired t-test",
    tolerance="mean achieved power >= 0.76 over 3 pilots of each of 3, 5, 10 people in each design here (0.80 asked); "
              "benchmarks/bench_plan.py: >= 0.78 for each pilot size and design over 20 pilots each (0.800, 0.813, "
              "0.817 everyone-sees-everything; 0.818, 0.818, 0.816 Latin square)")
def test_planned_n_achieves_the_power_asked_for_on_average_over_small_pilots():
    powers = {groups: calibration(pilot_sizes=(3, 5, 10), pilots=3, simulations=300, studies=300, groups=groups)
              for groups in (1, 4)}
    means = {groups: np.mean([p for values in by_size.values() for p in values]) for groups, by_size in powers.items()}
    assert min(means.values()) >= 0.76, powers


def test_plan_without_a_model_is_a_one_line_error(tmp_path, capsys):
    with ResponseStore(tmp_path / "pilot.sqlite") as store:
        store.write_many([r for r in pilot_rows(people=2, trials=5) if r["observer_kind"] == "human"])
    assert cuebench(["plan", str(tmp_path / "pilot.sqlite"), "--effect", "0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs a model's responses" in err and "\n" not in err


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
