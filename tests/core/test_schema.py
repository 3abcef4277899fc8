"""The trial model: round trips, and malformed files fail naming the file and the field."""

import json

import pytest

from cuebench.trials import (Experiment, LabelSet, SchemaError, Stimulus, Trial, Timing,
                            NOT_CLEAR)


def small_experiment() -> Experiment:
    labels = LabelSet("toy", ("dog", "cat", "bird"))
    stim = {"s1": Stimulus("s1", "stimuli/s1.png"), "s2": Stimulus("s2", "stimuli/s2.png"),
            "s3": Stimulus("s3", "stimuli/s3.png")}
    trials = [
        Trial("t1", "classify", "test", ("s1",), tuple(labels.displayed()), "cat", condition="original",
              category="cat"),
        Trial("t2", "oddity", "catch", ("s1", "s2", "s3"), ("1", "2", "3"), "3", condition="dist"),
    ]
    return Experiment("toy", "test", labels, stim, trials)


def test_round_trip_is_lossless():
    exp = small_experiment()
    again = Experiment.from_dict(json.loads(exp.to_json()))
    assert again.to_dict() == exp.to_dict()
    assert again.trial("t2").timing == Timing(fixation=300, stimulus=800, mask=None, response_window=2000,
                                              response_from_onset=True)
    assert again.trial("t1").timing == Timing(fixation=300, stimulus=200, mask=200, iti=500)  # Burgert et al. 2025


def test_label_display_order_is_alphabetical_with_not_clear_last():
    assert LabelSet("toy", ("dog", "cat", "bird")).displayed() == ["bird", "cat", "dog", NOT_CLEAR]
    assert LabelSet("p", ("3", "1"), display_order="given", not_clear=False).displayed() == ["3", "1"]


@pytest.mark.parametrize("mutate, field, words", [
    (lambda d: d["trials"][0].update(role="bonus"), "trials[0].role", "must be one of"),
    (lambda d: d["trials"][0].pop("trial_type"), "trials[0].trial_type", "missing"),
    (lambda d: d["trials"][0].update(correct="horse"), "trials[0].correct", "not one of the choices"),
    (lambda d: d["trials"][1].update(choices=["a", "b", "c"]), "trials[1].choices", "positions"),
    (lambda d: d["trials"][0].update(stimuli=["nope"]), "trials[0].stimuli", "unknown stimulus"),
    (lambda d: d["trials"][0]["timing"].update(stimulus=-5), "trials[0].timing.stimulus", "> 0"),
    (lambda d: d["trials"][0]["timing"].update(stimulus="200"), "trials[0].timing.stimulus", "expected int"),
    (lambda d: d["trials"][1].update(trial_id="t1"), "trials[1].trial_id", "duplicate"),
    (lambda d: d["label_set"].update(labels=["a", "a"]), "label_set.labels", "duplicates"),
    (lambda d: d.update(schema_version=99), "schema_version", "newer"),
    (lambda d: d.update(colour="red"), "colour", "unknown field"),
    (lambda d: d["stimuli"]["s2"].update(path="../../../../etc/passwd"), "stimuli.s2.path", "'../../../../etc/passwd'"),
    (lambda d: d["stimuli"]["s2"].update(path="stimuli/../../x.png"), "stimuli.s2.path", "inside the experiment"),
    (lambda d: d["stimuli"]["s2"].update(path="/etc/passwd"), "stimuli.s2.path", "inside the experiment"),
    (lambda d: d["stimuli"]["s2"].update(path="stimuli\\..\\x.png"), "stimuli.s2.path", "inside the experiment"),
])
def test_malformed_experiment_file_names_file_and_field(tmp_path, mutate, field, words):
    data = small_experiment().to_dict()
    mutate(data)
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaError) as info:
        Experiment.load(tmp_path)
    message = str(info.value)
    assert str(path) in message and f"field '{field}'" in message and words in message


def test_invalid_json_reports_line(tmp_path):
    path = tmp_path / "experiment.json"
    path.write_text('{"name": "x",\n "trials": [}')
    with pytest.raises(SchemaError, match=r"experiment.json: field '\(json\)': not valid JSON at line 2"):
        Experiment.load(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(SchemaError, match="no such file"):
        Experiment.load(tmp_path / "nowhere")
