"""The runners' messages (``cuebench.runner_contract``): a trial's plan as a runner receives it, and the one
check every answer passes, against hand-written expectations and against the published JSON Schemas
(checked by the ``jsonschema`` package, an implementation of its own)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from cuebench.runner_contract import AnswerError, TrialPlan, check_answer
from cuebench.trials import Experiment

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "experiment_v1.json"
SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
LABELS = ["airplane", "bear", "bicycle", "bird", "boat", "bottle", "car", "cat", "chair", "clock", "dog", "elephant",
          "keyboard", "knife", "oven", "truck"]
"""The sample's labels in alphabetical order (its label set's display order), "not clear" after them."""


@pytest.fixture(scope="module")
def sample() -> Experiment:
    return Experiment.load(SAMPLE)


def published(kind: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{kind}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def honest(**change) -> dict:
    answer = {"trial_key": "k", "response": "cat", "timed_out": False, "rt_ms": 612.5,
              "timing_measured": {"fixation": 300.1, "stimulus": 200.2}, "frames": {"fixation": 18, "stimulus": 12},
              "dropped_frames": 0, "refresh_hz": 60.0, "device": {"user_agent": "x"}, "events": [{"type": "blur"}]}
    return {**answer, **change}


def test_the_plans_of_a_classification_and_an_oddity_trial(sample):
    classify = TrialPlan.build(sample, sample.trial("practice-astronaut"), 0, 0, False, trial_key="k0",
                               images=["/stimuli/a.png"], mask="/mask/0.png", grid=None).message()
    assert classify == {
        "index": 0, "trial_key": "k0", "type": "classify", "practice": True, "feedback": None, "block": 0,
        "break_before": False, "images": ["/stimuli/a.png"], "mask": "/mask/0.png", "choices": LABELS + ["not clear"],
        "grid": None, "response": "label-grid", "numbered": False, "prompt": None, "keys": None, "instruction": None,
        "timing": {"fixation": 300, "stimulus": 200, "mask": 200, "response_window": None, "iti": 500,
                   "response_from_onset": False}}
    oddity = TrialPlan.build(sample, sample.trial("catch-flower"), 7, -1, True, trial_key="k7",
                             images=["a", "b", "c"], mask=None, grid=None, post="/answer/7").message()
    shown = ("choices", "keys", "numbered", "response", "feedback", "mask", "post", "timing")
    assert {k: oddity[k] for k in shown} == {
        "choices": ["1", "2", "3"], "keys": {"1": "1", "2": "2", "3": "3"}, "numbered": True, "response": "keys",
        "feedback": None, "mask": None, "post": "/answer/7",
        "timing": {"fixation": 500, "stimulus": 800, "mask": 0, "response_window": 2000, "iti": 500,
                   "response_from_onset": True}}
    assert oddity["prompt"]  # the card's words: which key names which image
    for plan in (classify, oddity):
        published("trial-plan").validate(plan)
        assert not {"trial_id", "correct", "condition", "level", "category"} & set(plan)


def test_an_honest_answer_passes_and_is_stored_as_measured(sample):
    answer = check_answer(sample, sample.trial("chelsea-original"), "k", honest())
    assert answer.stored_fields() == {
        "response": "cat", "rt_ms": 612.5, "timed_out": 0, "timing_measured": {"fixation": 300.1, "stimulus": 200.2},
        "frames": {"fixation": 18, "stimulus": 12}, "dropped_frames": 0, "refresh_hz": 60.0,
        "device": {"user_agent": "x"}, "events": [{"type": "blur"}]}
    timeout = check_answer(sample, sample.trial("rocket-original-oddity"), "k",
                           honest(response="", timed_out=True, rt_ms=None))
    assert timeout.stored_fields()["response"] is None and timeout.stored_fields()["timed_out"] == 1
    in_last_frame = check_answer(sample, sample.trial("rocket-original-oddity"), "k",
                                 honest(response="2", rt_ms=2016.6))
    assert in_last_frame.rt_ms == 2016.6  # 2000 ms and one frame of 16.67 ms at 60 Hz
    published("trial-answer").validate(honest())
    published("trial-answer").validate(honest(response="", timed_out=True, rt_ms=None))


REFUSED = [
    ("an unknown field", honest(trial_id="chelsea-original"), "malformed", "field 'trial_id': unknown field"),
    ("no trial key", {k: v for k, v in honest().items() if k != "trial_key"}, "malformed",
     "field 'trial_key': is missing"),
    ("a number as the response", honest(response=7), "malformed", "field 'response': expected str, got int 7"),
    ("a string as timed_out", honest(timed_out="no"), "malformed", "field 'timed_out': expected bool, got str 'no'"),
    ("true as the RT", honest(rt_ms=True), "malformed", "field 'rt_ms'"),
    ("a list as the device", honest(device=[1]), "malformed", "field 'device': expected an object"),
    ("a float as a frame count", honest(frames={"stimulus": 12.5}), "malformed", "field 'frames.stimulus'"),
    ("an unknown phase", honest(timing_measured={"warmup": 3.0}), "malformed",
     "field 'timing_measured.warmup': unknown phase"),
    ("events not objects", honest(events=["blur"]), "malformed", "field 'events[0]': expected an object"),
    ("an RT of 0", honest(rt_ms=0), "invalid", "field 'rt_ms': must be > 0"),
    ("a negative phase", honest(timing_measured={"stimulus": -3}), "invalid",
     "field 'timing_measured.stimulus': must be >= 0"),
    ("frames beyond PostgreSQL's INTEGER", honest(dropped_frames=2**31), "invalid",
     "field 'dropped_frames': must be <= 1000000"),
    ("a refresh rate of 5 Hz", honest(refresh_hz=5.0), "invalid", "field 'refresh_hz': must be >= 20.0"),
    ("1001 events", honest(events=[{}] * 1001), "invalid", "field 'events'"),
]
"""Answers refused whatever the trial: of the wrong shape ("malformed") or out of range ("invalid")."""


@pytest.mark.parametrize("name, payload, kind, message", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_malformed_or_invalid_answer_is_refused_by_the_check_and_the_schema(sample, name, payload, kind, message):
    with pytest.raises(AnswerError, match=f"^{re.escape(message)}") as refused:
        check_answer(sample, sample.trial("chelsea-original"), "k", payload)
    assert refused.value.kind == kind
    assert not published("trial-answer").is_valid(payload)


TRIAL = [
    ("another trial's key", "chelsea-original", honest(trial_key="other"), "foreign",
     "trial key 'other' is not the trial at this position"),
    ("a label not among the choices", "chelsea-original", honest(response="zebra"), "invalid",
     "response 'zebra' is not one of this trial's choices"),
    ("a position beyond the triplet", "rocket-original-oddity", honest(response="4"), "invalid",
     "response '4' is not one of this trial's choices: ['1', '2', '3']"),
    ("an RT past the 2000 ms window", "rocket-original-oddity", honest(response="2", rt_ms=2300.0), "invalid",
     "field 'rt_ms' = 2300.0 is outside this trial's response window (0, 2000] ms and its last frame at 60 Hz"),
    ("an RT past the window's last frame", "rocket-original-oddity", honest(response="2", rt_ms=2016.8), "invalid",
     "field 'rt_ms' = 2016.8 is outside this trial's response window"),
    ("a timeout without a window", "chelsea-original", honest(response="", timed_out=True, rt_ms=None), "invalid",
     "this trial has no response window, so it cannot time out"),
    ("a timeout with an answer", "rocket-original-oddity", honest(response="1", timed_out=True), "invalid",
     "a timed-out trial has an empty response, got '1'"),
    ("an answer without an RT", "chelsea-original", honest(rt_ms=None), "malformed", "field 'rt_ms': is missing"),
    ("a device beyond its column", "chelsea-original", honest(device={"ua": "x" * 8200}), "invalid",
     "field 'device' is longer than 8192 characters as JSON"),
    ("device and events beyond the trial's share", "chelsea-original",
     honest(device={"ua": "x" * 8000}, events=[{"e": "x" * 8000}] * 4), "invalid",
     "fields 'device' and 'events' together are longer than 32768 characters"),
]


@pytest.mark.parametrize("name, trial_id, payload, kind, message", TRIAL, ids=[t[0] for t in TRIAL])
def test_what_only_the_trial_tells_is_refused_by_the_check(sample, name, trial_id, payload, kind, message):
    with pytest.raises(AnswerError, match=f"^{re.escape(message[:40])}") as refused:
        check_answer(sample, sample.trial(trial_id), "k", payload)
    assert (refused.value.kind, str(refused.value)[:len(message)]) == (kind, message)
