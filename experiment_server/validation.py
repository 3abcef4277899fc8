"""Checks on everything a browser posts, before it reaches the response store.

The browser is not trusted: every request body must be UTF-8 JSON of finite numbers, nested at
most a few levels (``parse_json_body``); a trial's answer is then checked by the runners' contract
(``cuebench.runner_contract.check_answer``: the trial at that index of *this* participant's sequence,
an answer in its choice set, a timeout only where it has a response window, the RT inside that
window, every field bounded so that nothing a browser sends can fail in the database), and a screen
calibration here. An answer that passed is stored, and a bad one fails only its own request. Each
failure is a ``Rejected`` with the HTTP status the server answers and a message naming the field and
value.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from cuebench.errors import CuebenchError
from cuebench.runner_contract import AnswerError, check_answer
from cuebench.trials import Experiment, Trial
from human_tasks.web.constants import VIEWING_DISTANCE_CM

MAX_JSON_DEPTH = 8
"""Nesting of a request body at most (the trial post needs 3: body, device or event, value)."""
_NOT_STRUCTURE = bytes(set(range(256)) - set(b'"[]{}'))
_STEP = bytes.maketrans(b'[{]}"', bytes([1, 1, 255, 255, 0]))
"""A bracket as a step of the nesting depth, +1 or -1 (255 as a signed byte); a quote as none."""
ANSWER_STATUS = {"malformed": 400, "invalid": 422, "foreign": 403}
"""The HTTP status of each kind of refused answer (``cuebench.runner_contract.AnswerError``)."""


class Rejected(CuebenchError):
    """A request the server refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _refuse_constant(name: str):
    raise Rejected(400, f"the request body holds {name}, which is not a JSON number")


def required_text(payload: Any, field: str, meaning: str) -> str:
    """The non-empty string ``payload[field]`` of a JSON object body; 400 naming the field and what it
    should hold otherwise."""
    value = payload.get(field) if isinstance(payload, dict) else None
    if not isinstance(value, str) or not value:
        raise Rejected(400, f"field {field!r} ({meaning}) is missing")
    return value


def parse_json_body(data: bytes) -> Any:
    """The decoded request body; 400 for anything but UTF-8 JSON of finite numbers nested at
    most ``MAX_JSON_DEPTH`` deep (Python's parser accepts NaN and Infinity, and nesting
    deep enough exhausts its recursion)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected(400, "the request body is not UTF-8 text") from None
    if _depth_bound_exceeded(data):
        raise Rejected(400, f"the request body is JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except ValueError as err:
        raise Rejected(400, f"the request body is not valid JSON ({err})") from None


def _finite_float(literal: str) -> float:
    """A JSON number as a float; 400 for one beyond the float range (``1e999``), which Python reads as infinity."""
    value = float(literal)
    if not math.isfinite(value):
        raise Rejected(400, f"the request body holds the number {literal[:40]}, beyond the range of a float")
    return value


def _depth_bound_exceeded(data: bytes) -> bool:
    """Whether brackets outside strings nest deeper than ``MAX_JSON_DEPTH``, checked before
    parsing in passes linear in the body whatever it holds (a regex that strips strings with
    their escapes restarts at every quote of ``"\\"\\"...`` and is quadratic). Escaped
    backslashes go, then escaped quotes; every quote left opens or closes a string, and the
    brackets between two of them do not count. The bytes are read before decoding: in UTF-8
    no byte of a multi-byte character is a quote, a backslash or a bracket."""
    structure = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    in_string = np.cumsum(np.frombuffer(structure, np.uint8) == ord('"'), dtype=np.int64) % 2
    steps = np.frombuffer(structure.translate(_STEP), np.int8) * (1 - in_string)
    return bool(steps.size) and int(steps.cumsum().max()) > MAX_JSON_DEPTH


def _number(payload: dict, name: str, low: float, high: float) -> float:
    value = payload.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Rejected(400, f"field {name!r} must be a number, got {value!r}")
    if not low <= value <= high:
        raise Rejected(422, f"field {name!r} = {value} is outside [{low}, {high}]")
    return float(value)


def check_trial_post(experiment: Experiment, trial: Trial, trial_key: str, payload: Any) -> dict:
    """The measured fields of a valid trial post, ready for ``cuebench.responses.trial_row``.

    ``trial_key`` is the opaque key the plan gave the browser for the trial at this index."""
    try:
        return check_answer(experiment, trial, trial_key, payload).stored_fields()
    except AnswerError as err:
        raise Rejected(ANSWER_STATUS[err.kind], str(err)) from None


CALIBRATION_FIELDS = {"px_per_mm": (0.5, 40.0), "viewing_distance_cm": VIEWING_DISTANCE_CM,
                      "stimulus_css_px": (8.0, 10000.0), "device_pixel_ratio": (0.25, 8.0)}
"""Bounds of the screen calibration's numbers: CSS pixels per mm (a 96-dpi screen has 3.78; a card
matched on any real screen lies far inside), eye-to-screen distance, the resulting image size."""
CALIBRATION_METHODS = ("card+entered-distance", "card+blind-spot")
BLIND_SPOT_DEGREES = 13.5
"""How far from fixation the blind spot lies, the angle the virtual chinrest takes (Li, Joo, Yeatman &
Reinecke 2020, Sci. Rep. 10:904): the web task measures how many mm from the fixation square the
dot vanishes, and the distance is mm / tan(13.5 deg)."""
BLIND_SPOT_SWEEPS = (1, 20)
BLIND_SPOT_MM = (5.0, 1000.0)


def blind_spot_distance_cm(sweeps_mm: list[float]) -> float:
    """Viewing distance from the blind spot: the mean dot-to-square distance over tan(13.5 deg)."""
    return sum(sweeps_mm) / len(sweeps_mm) / math.tan(math.radians(BLIND_SPOT_DEGREES)) / 10.0


def check_calibration(payload: Any) -> dict:
    """The screen calibration as stored: the card's pixels per mm, the viewing distance, the image
    size they give (``capped`` when the window was too small for it) and the method; a distance
    measured from the blind spot comes with its sweeps and must be the distance they give."""
    if not isinstance(payload, dict):
        raise Rejected(400, "the request body must be a JSON object")
    unknown = sorted(set(payload) - {*CALIBRATION_FIELDS, "method", "capped", "card_moved", "blind_spot_mm"})
    if unknown:
        raise Rejected(400, f"unknown field {unknown[0]!r}")
    record = {name: _number(payload, name, *bounds) for name, bounds in CALIBRATION_FIELDS.items()}
    if payload.get("method") not in CALIBRATION_METHODS:
        raise Rejected(422, f"field 'method' must be one of {CALIBRATION_METHODS}, got {payload.get('method')!r}")
    if not isinstance(payload.get("capped"), bool):
        raise Rejected(400, f"field 'capped' must be true or false, got {payload.get('capped')!r}")
    if payload["method"] == "card+blind-spot":
        record["blind_spot_mm"] = _blind_spot_sweeps(payload.get("blind_spot_mm"), record["viewing_distance_cm"])
    elif "blind_spot_mm" in payload:
        raise Rejected(422, "field 'blind_spot_mm' belongs to method 'card+blind-spot' only")
    if not isinstance(payload.get("card_moved", False), bool):
        raise Rejected(400, f"field 'card_moved' must be true or false, got {payload.get('card_moved')!r}")
    moved = {"card_moved": payload["card_moved"]} if "card_moved" in payload else {}  # absent: not recorded
    return {**record, "method": payload["method"], "capped": payload["capped"], **moved}


def _blind_spot_sweeps(sweeps: Any, distance_cm: float) -> list[float]:
    low, high = BLIND_SPOT_SWEEPS
    if not isinstance(sweeps, list) or not low <= len(sweeps) <= high:
        raise Rejected(422, f"field 'blind_spot_mm' must be a list of {low} to {high} distances in mm")
    values = [_number({"blind_spot_mm": v}, "blind_spot_mm", *BLIND_SPOT_MM) for v in sweeps]
    measured = blind_spot_distance_cm(values)
    if abs(measured - distance_cm) > 0.05:
        raise Rejected(422, f"field 'viewing_distance_cm' = {distance_cm} is not the {measured:.2f} cm that "
                            f"'blind_spot_mm' gives")
    return values
