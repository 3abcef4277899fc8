"""Decision rules on hand-made probability vectors and feature sets, ties included."""

from __future__ import annotations

import json

import numpy as np
import pytest

from model_eval.decisions import (DecisionError, LabelMapping, aggregate, decide_classify, decide_oddity,
                                  label_mapping, mean_cosine_distances, read_mapping_file, zscore)
from cuebench.imagenet16 import IMAGENET16_INDICES
from cuebench.labels import IMAGENET16, IMAGENET16_NAME
from cuebench.trials import NOT_CLEAR, LabelSet
from stimuli.sources import DEFAULT_LABEL_INDICES

MVH = LabelMapping(IMAGENET16_INDICES, "model-vs-human 16-class")
CHOICES = tuple(sorted(IMAGENET16)) + (NOT_CLEAR,)


def probs_with(**mass: float) -> np.ndarray:
    """A 1000-way vector with the given mass on ImageNet indices (keys 'i281' -> index 281), rest uniform."""
    p = np.zeros(1000)
    for key, value in mass.items():
        p[int(key[1:])] = value
    rest = 1.0 - p.sum()
    free = p == 0
    p[free] = rest / free.sum()
    return p


def test_imagenet16_lists_are_model_vs_human():
    assert set(IMAGENET16_INDICES) == set(IMAGENET16)
    assert IMAGENET16_INDICES["cat"] == [281, 282, 283, 284, 285, 286]
    assert IMAGENET16_INDICES["airplane"] == [404] and IMAGENET16_INDICES["knife"] == [499]
    assert IMAGENET16_INDICES["oven"] == [766] and IMAGENET16_INDICES["elephant"] == [385, 386]
    assert len(IMAGENET16_INDICES["dog"]) == 109 and len(IMAGENET16_INDICES["bird"]) == 49
    flat = [i for idx in IMAGENET16_INDICES.values() for i in idx]
    assert len(flat) == len(set(flat)) == 207


def test_mean_sum_and_burgert_disagree_as_computed_by_hand():
    p = np.zeros(1000)
    p[281], p[282] = 0.3, 0.1  # cat: sum 0.4, mean 0.4 / 6
    p[404] = 0.25  # airplane: sum = mean = 0.25
    p[152:159] = 0.05  # dog: 7 x 0.05 = 0.35 over 109 indices
    p[0] = 0.0
    mean = decide_classify(p, CHOICES, MVH, "16class-mean")
    assert mean.response == "airplane"
    assert mean.outputs["cat"] == pytest.approx(0.4 / 6)
    assert mean.outputs["dog"] == pytest.approx(0.35 / 109)
    assert NOT_CLEAR not in mean.outputs and len(mean.outputs) == 16
    total = decide_classify(p, CHOICES, MVH, "16class-sum")
    assert total.response == "cat" and total.outputs["cat"] == pytest.approx(0.4)
    assert decide_classify(p, CHOICES, MVH, "16class-burgert").response == NOT_CLEAR  # 0.4 is not > 0.5
    p[283] = 0.2  # cat's sum becomes 0.6
    assert decide_classify(p, CHOICES, MVH, "16class-burgert").response == "cat"


def test_ties_go_to_the_earliest_choice():
    p = probs_with(i404=0.4, i499=0.4)  # airplane and knife tie (mean and sum)
    assert decide_classify(p, CHOICES, MVH, "16class-mean").response == "airplane"
    assert decide_classify(p, tuple(reversed(CHOICES)), MVH, "16class-mean").response == "knife"
    assert decide_classify(p, ("knife", "airplane"), MVH, "16class-sum").response == "knife"
    # Burgert: a tie at exactly 0.5 is not above the threshold
    assert decide_classify(probs_with(i404=0.5, i499=0.5), CHOICES, MVH, "16class-burgert").response == NOT_CLEAR


def test_imagenet_top1():
    assert decide_classify(probs_with(i404=0.6), CHOICES, MVH, "imagenet-top1").response == "airplane"
    outside = decide_classify(probs_with(i967=0.9), CHOICES, MVH, "imagenet-top1")
    assert outside.response == "imagenet:967 espresso"
    assert outside.outputs["top5"][0] == [967, pytest.approx(0.9)]
    tie = probs_with(i10=0.3, i300=0.3)  # 1000-way tie: the lower index (bird's brambling)
    assert decide_classify(tie, CHOICES, MVH, "imagenet-top1").response == "bird"


def test_aggregate_matches_a_loop():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(1000), size=3)
    lists = [IMAGENET16_INDICES[c] for c in sorted(IMAGENET16)]
    want = np.array([[row[idx].mean() for idx in lists] for row in p])
    assert np.allclose(aggregate(p, lists, "mean"), want)
    assert np.allclose(aggregate(p, lists, "sum"), want * [len(i) for i in lists])


def test_oddity_hand_computed():
    # rows 1 and 2 identical, row 3 reversed: cosine distances 0, 2, 2 -> D = [1, 1, 2]
    features = np.array([[1.0, 2, 3, 4], [1.0, 2, 3, 4], [4.0, 3, 2, 1]])
    assert np.allclose(mean_cosine_distances(features), [1.0, 1.0, 2.0])
    decision = decide_oddity(features)
    assert decision.response == "3"
    assert decision.outputs == pytest.approx({"1": 1.0, "2": 1.0, "3": 2.0})


def test_oddity_z_scores_each_vector():
    z = zscore(np.array([[1.0, 2, 3, 4]]))
    assert z.mean() == pytest.approx(0) and z.std() == pytest.approx(1)
    # an affine change of one vector (scale and offset) changes nothing after z-scoring
    a = np.array([[1.0, 2, 3, 4], [1.0, 2, 3, 5], [4.0, 1, 2, 3]])
    b = a.copy()
    b[1] = 10 * b[1] + 7
    assert np.allclose(mean_cosine_distances(a), mean_cosine_distances(b))
    # without z-scoring, [1,2,3,4] and [4,3,2,1] would be close (cosine 0.67); with it they are opposite
    assert mean_cosine_distances(np.array([[1.0, 2, 3, 4], [4.0, 3, 2, 1], [4.0, 3, 2, 1]]))[0] == pytest.approx(2)


def test_oddity_tie_goes_to_the_first_position():
    # three z-scored vectors 120 degrees apart: every pairwise cosine is -0.5, every D is 1.5
    features = np.array([[1.0, 0, -1], [0.0, -1, 1], [-1.0, 1, 0]])
    assert np.allclose(mean_cosine_distances(features), 1.5)
    assert decide_oddity(features).response == "1"
    with pytest.raises(DecisionError, match="at least 3"):
        decide_oddity(features[:2])


def test_label_mappings(tmp_path):
    sixteen = label_mapping(LabelSet(IMAGENET16_NAME, IMAGENET16))
    assert sixteen.source == "model-vs-human 16-class" and sixteen.indices["truck"][0] == 555
    demo = label_mapping(LabelSet("default", tuple(DEFAULT_LABEL_INDICES), imagenet_indices=DEFAULT_LABEL_INDICES))
    assert demo.source == "label_set:default" and demo.indices["coffee"] == [967, 968, 504]
    with pytest.raises(DecisionError, match="--mapping"):
        label_mapping(LabelSet("custom", ("lizard", "bulbul")))
    as_json = tmp_path / "map.json"
    as_json.write_text(json.dumps({"lizard": [46], "bulbul": [16]}))
    assert label_mapping(LabelSet("custom", ("lizard", "bulbul")), as_json).indices == {"lizard": [46], "bulbul": [16]}
    as_csv = tmp_path / "map.csv"
    as_csv.write_text("label,imagenet_index\nlizard,46\nlizard,47\nbulbul,16\n")
    assert read_mapping_file(as_csv) == {"lizard": [46, 47], "bulbul": [16]}
    with pytest.raises(DecisionError, match="no ImageNet indices for label"):
        label_mapping(LabelSet("custom", ("lizard", "owl")), as_csv)


@pytest.mark.parametrize("content, message", [
    ("label,imagenet_index\nlizard,forty\n", "line 2: imagenet_index 'forty'"),
    ("name,index\nlizard,46\n", "needs columns 'label' and 'imagenet_index'"),
    ('{"lizard": [1000]}', "0..999"),
    ('{"lizard": [46', "not valid JSON"),
])
def test_bad_mapping_files_name_the_problem(tmp_path, content, message):
    path = tmp_path / ("m.json" if content.startswith("{") else "m.csv")
    path.write_text(content)
    with pytest.raises(DecisionError, match=message) as err:
        read_mapping_file(path)
    assert str(path) in str(err.value)


def test_choice_without_indices_is_an_error():
    with pytest.raises(DecisionError, match="'rocket'"):
        decide_classify(probs_with(i404=0.5), ("airplane", "rocket"), MVH, "16class-mean")


def _experiment(label_set: LabelSet, *trial_types: str):
    from cuebench.counterbalance import everyone_plan
    from cuebench.trials import Experiment, Stimulus, Trial

    stimuli = {f"s{k}": Stimulus(id=f"s{k}", path=f"stimuli/s{k}.png") for k in range(3)}
    labels = tuple(label for label in label_set.labels if label != NOT_CLEAR)
    trials = [Trial("c", "classify", "test", ("s0",), labels, labels[0]) if kind == "classify" else
              Trial("o", "oddity", "test", ("s0", "s1", "s2"), ("1", "2", "3"), "1") for kind in trial_types]
    return Experiment(name="toy", design="test", label_set=label_set, stimuli=stimuli, trials=trials,
                      assignment=everyone_plan(trials))


class _Observer:
    def __init__(self, classes=None):
        self.classes, self.observer_id = classes, "toy:1"


def test_each_rule_prepares_the_label_mapping_it_reads():
    """The mapping comes from the rules of the experiment's trial types: model-vs-human's lists, the observer's own
    classes, none for top-1 without index lists, none for oddity trials."""
    from model_eval.decisions import DecisionTable

    sixteen = _experiment(LabelSet(IMAGENET16_NAME, IMAGENET16), "classify", "oddity")
    table = DecisionTable.choose(None, {"classify", "oddity"})
    assert table.prepared(_Observer(), sixteen).mapping.indices["cat"] == [281, 282, 283, 284, 285, 286]
    own = table.prepared(_Observer(classes=tuple(sorted(IMAGENET16, reverse=True))), sixteen).mapping
    assert own.source == "observer:toy:1" and own.indices["truck"] == [0] and own.indices["airplane"] == [15]
    custom = _experiment(LabelSet("custom", ("lizard", "bulbul")), "classify")
    with pytest.raises(DecisionError, match="--mapping"):
        table.prepared(_Observer(), custom)
    assert DecisionTable.choose("imagenet-top1", {"classify"}).prepared(_Observer(), custom).mapping is None
    assert table.prepared(_Observer(), _experiment(LabelSet("custom", ("lizard", "bulbul")), "oddity")).mapping is None


def test_a_stored_rule_is_compared_with_the_rule_asked_for_its_own_trial_type():
    from model_eval.decisions import DecisionTable

    table = DecisionTable.choose("16class-burgert", {"classify", "oddity"})
    assert [table.asked_instead_of(r) for r in ("16class-mean", "oddity", "a-rule-removed-since")] == [
        "16class-burgert", "oddity", None]
