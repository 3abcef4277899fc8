"""The Latin-square assignment plan and participant sequences, checked exhaustively on small designs."""

import itertools
from collections import Counter

import pytest

from cuebench.counterbalance import latin_square_plan, participant_sequence
from cuebench.trials import Experiment, LabelSet, Schedule, SchemaError, Stimulus, Trial

LABELS = LabelSet("toy", ("a", "b"))


def design(n_images: int, n_arms: int, attention: int = 0, catch: int = 0, practice: int = 0,
           schedule: Schedule | None = None) -> Experiment:
    stim = {"s": Stimulus("s", "stimuli/s.png")}
    choices = tuple(LABELS.displayed())
    trials = [Trial(f"i{i}-c{c}", "classify", "test", ("s",), choices, "a", condition=f"c{c}",
                    source_image=f"img{i}") for i in range(n_images) for c in range(n_arms)]
    trials += [Trial(f"att{k}", "classify", "attention", ("s",), choices, "b") for k in range(attention)]
    trials += [Trial(f"catch{k}", "oddity", "catch", ("s", "s", "s"), ("1", "2", "3"), "3") for k in range(catch)]
    trials += [Trial(f"prac{k}", "classify", "practice", ("s",), choices, "a") for k in range(practice)]
    exp = Experiment("toy", "test", LABELS, stim, trials, schedule=schedule or Schedule())
    exp.assignment = latin_square_plan(trials)
    return exp


@pytest.mark.parametrize("n_images, n_arms", [(n, k) for n in range(1, 8) for k in range(1, 6)])
def test_latin_square_is_balanced(n_images, n_arms):
    exp = design(n_images, n_arms)
    plan = exp.assignment
    assert len(plan.groups) == n_arms
    by_id = exp.trials_by_id()
    cells = Counter()
    for group in plan.groups:
        trials = [by_id[t] for t in group]
        # each participant sees each source image exactly once, in one condition
        assert sorted(t.source_image for t in trials) == sorted(f"img{i}" for i in range(n_images))
        cells.update((t.source_image, t.condition) for t in trials)
    # with one participant per group, every image x condition cell is seen exactly once
    assert set(cells.values()) == {1}
    assert len(cells) == n_images * n_arms
    if n_images >= n_arms:  # and each group sees every condition about equally often
        for group in plan.groups:
            counts = Counter(by_id[t].condition for t in group).values()
            assert max(counts) - min(counts) <= 1


def test_unbalanced_design_is_refused():
    exp = design(3, 2)
    trials = [t for t in exp.trials if t.trial_id != "i1-c1"]
    with pytest.raises(SchemaError, match="img1.*no trial in arm 'c1'"):
        latin_square_plan(trials)


def test_sequence_inserts_catch_and_attention_and_breaks():
    exp = design(30, 1, attention=2, catch=3, practice=2,
                 schedule=Schedule(break_every=10, catch_every=10, attention_every=15))
    seq = participant_sequence(exp, 0, "p01")
    ids = [s.trial_id for s in seq]
    assert ids[:2] == ["prac0", "prac1"] or sorted(ids[:2]) == ["prac0", "prac1"]
    roles = [exp.trial(t).role for t in ids]
    assert roles.count("test") == 30 and roles.count("catch") == 3 and roles.count("attention") == 2
    tests_before = list(itertools.accumulate(r == "test" for r in roles))
    for i, r in enumerate(roles):
        if r == "catch":
            assert tests_before[i] % 10 == 0
    assert [s.index for s in seq] == list(range(len(seq)))
    assert sum(s.break_before for s in seq) == (len(seq) - 2 - 1) // 10


def test_sequence_is_stable_per_participant_and_differs_between():
    exp = design(20, 2)
    a = participant_sequence(exp, 1, "p01")
    assert a == participant_sequence(exp, 1, "p01")
    assert [s.trial_id for s in a] != [s.trial_id for s in participant_sequence(exp, 1, "p02")]


def test_short_session_still_gets_one_attention_and_one_catch():
    exp = design(4, 1, attention=1, catch=1, schedule=Schedule(catch_every=10, attention_every=100))
    roles = [exp.trial(s.trial_id).role for s in participant_sequence(exp, 0, "p")]
    assert roles.count("attention") == 1 and roles.count("catch") == 1
