"""Checks on everything a browser posts for one trial, before it reaches the response store.

The browser is not trusted: the trial must be the one at that index of *this*
participant's sequence, the answer must be in the trial's choice set, a timeout only
where the trial has a response window, the RT inside that window, and the timing log
well-formed. Each failure is a ``Rejected`` with the HTTP status the server answers and a
message naming the field and value.
"""

from __future__ import annotations

import math
from typing import Any

from cuebench.errors import CuebenchError
from cuebench.trials import NOT_CLEAR, Experiment, Trial

PHASES = ("instruction", "fixation", "stimulus", "mask", "response", "iti")
FIELDS = ("trial_key", "response", "timed_out", "rt_ms", "timing_measured", "frames", "dropped_frames",
          "refresh_hz", "device", "events")
MAX_UNLIMITED_RT_MS = 24 * 3600 * 1000
MAX_EVENTS = 1000
REFRESH_RANGE_HZ = (20.0, 1000.0)


class Rejected(CuebenchError):
    """A request the server refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def allowed_responses(experiment: Experiment, trial: Trial) -> list[str]:
    """The answers a trial accepts, in display order: the grid order for labels (with
    "not clear" last when the label set offers it), positions 1..k for oddity."""
    if trial.trial_type == "oddity":
        return list(trial.choices)
    return [label for label in experiment.label_set.displayed() if label in trial.choices or label == NOT_CLEAR]


def _number(payload: dict, name: str, low: float, high: float, *, optional: bool = False) -> float | None:
    value = payload.get(name)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Rejected(400, f"field {name!r} must be a number, got {value!r}")
    if not low <= value <= high:
        raise Rejected(422, f"field {name!r} = {value} is outside {low}..{high}")
    return float(value)


def _phase_map(payload: dict, name: str, kind: type) -> dict:
    value = payload.get(name, {})
    if not isinstance(value, dict):
        raise Rejected(400, f"field {name!r} must be an object of phase -> value")
    for phase, v in value.items():
        if phase not in PHASES:
            raise Rejected(422, f"field {name!r}: unknown phase {phase!r} (known: {', '.join(PHASES)})")
        ok = isinstance(v, int) if kind is int else isinstance(v, (int, float))
        if isinstance(v, bool) or not ok or v < 0 or (kind is float and not math.isfinite(v)):
            raise Rejected(422, f"field {name}.{phase} must be a non-negative {kind.__name__}, got {v!r}")
    return value


def check_trial_post(experiment: Experiment, trial: Trial, trial_key: str, payload: Any) -> dict:
    """The measured fields of a valid trial post, ready for ``cuebench.responses.trial_row``.

    ``trial_key`` is the opaque key the plan gave the browser for the trial at this index."""
    if not isinstance(payload, dict):
        raise Rejected(400, "the request body must be a JSON object")
    unknown = sorted(set(payload) - set(FIELDS))
    if unknown:
        raise Rejected(400, f"unknown field {unknown[0]!r}")
    if payload.get("trial_key") != trial_key:
        raise Rejected(403, f"trial key {payload.get('trial_key')!r} is not the trial at this position of this "
                            "participant's sequence")
    timed_out = payload.get("timed_out", False)
    if not isinstance(timed_out, bool):
        raise Rejected(400, f"field 'timed_out' must be true or false, got {timed_out!r}")
    response = payload.get("response")
    if not isinstance(response, str):
        raise Rejected(400, f"field 'response' must be a string, got {response!r}")
    window = trial.timing.response_window
    if timed_out:
        if window is None:
            raise Rejected(422, "this trial has no response window, so it cannot time out")
        if response != "":
            raise Rejected(422, f"a timed-out trial has an empty response, got {response!r}")
        rt = None
    else:
        allowed = allowed_responses(experiment, trial)
        if response not in allowed:
            raise Rejected(422, f"response {response!r} is not one of this trial's choices: {allowed}")
        rt = _number(payload, "rt_ms", 0.0, float(window if window is not None else MAX_UNLIMITED_RT_MS))
    events = payload.get("events", [])
    if not isinstance(events, list) or len(events) > MAX_EVENTS or not all(isinstance(e, dict) for e in events):
        raise Rejected(422, f"field 'events' must be a list of at most {MAX_EVENTS} objects")
    device = payload.get("device", {})
    if not isinstance(device, dict):
        raise Rejected(400, "field 'device' must be an object")
    dropped = payload.get("dropped_frames", 0)
    if isinstance(dropped, bool) or not isinstance(dropped, int) or dropped < 0:
        raise Rejected(422, f"field 'dropped_frames' must be a non-negative integer, got {dropped!r}")
    return {
        "response": response or None,
        "rt_ms": rt,
        "timed_out": int(timed_out),
        "timing_measured": _phase_map(payload, "timing_measured", float),
        "frames": _phase_map(payload, "frames", int),
        "dropped_frames": dropped,
        "refresh_hz": _number(payload, "refresh_hz", *REFRESH_RANGE_HZ),
        "device": device,
        "events": events,
    }
