"""The runners' two messages: the plan of one trial a runner shows (``TrialPlan``) and the answer it
gives back (``TrialAnswer``).

The web server sends plans to the browser and checks every answer the browser posts; the lab runner
builds the same plan for each trial it shows and writes its answers through the same model. Both
models publish their JSON Schema (``cuebench schema trial-plan`` / ``trial-answer``,
``docs/schemas/``), which the browser's messages are tested against. A plan never holds a trial id,
condition, level or correct answer (but a practice trial's, for its feedback): what a participant's
browser receives is no key to the study. An answer is bounded in every field, so that one that passed
``check_answer`` can be stored in any database the response store writes to (no integer beyond
PostgreSQL's INTEGER, no NaN, no JSON without end); a bad one fails with an ``AnswerError`` naming the
field and the value.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import CuebenchError, describe
from .trials import NOT_CLEAR, Experiment, Trial

PHASES = ("instruction", "fixation", "stimulus", "mask", "response", "iti")
"""The phases of a trial a runner measures, in the order it shows them."""
MAX_UNLIMITED_RT_MS = 24 * 3600 * 1000
"""The longest RT of a trial without a response window: a day."""
MAX_FRAMES = 10**6
"""Frames in one phase, or dropped in one trial, at most: 4.6 hours at 60 Hz, far inside the
32-bit INTEGER column of PostgreSQL (SQLite's and Python's integers are larger)."""
MAX_PHASE_MS = float(MAX_UNLIMITED_RT_MS)
REFRESH_RANGE_HZ = (20.0, 1000.0)
MAX_EVENTS = 1000
MAX_FIELD_CHARS = 8192
"""Characters of one free-form JSON field (``device``, one event) as stored, at most."""
MAX_TRIAL_EXTRA_CHARS = 32 * 1024
"""Characters of ``device`` and ``events`` of one trial together, as stored, at most: a real trial
has a few hundred; with the trial count this bounds what one session adds to the database."""

Phase = Literal[PHASES]
Milliseconds = Annotated[float, Field(ge=0, le=MAX_PHASE_MS, allow_inf_nan=False)]
Frames = Annotated[int, Field(ge=0, le=MAX_FRAMES)]


class Message(BaseModel):
    """A runner's message: no field beyond those declared, no value coerced from another type."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class PlanTiming(Message):
    """A trial's phases in ms as the runner shows them (a skipped phase is 0), which it turns into whole
    frames at the refresh rate it measured."""

    fixation: int = Field(ge=0, description="Fixation before the images, ms (0: none).")
    stimulus: int = Field(gt=0, description="The images on screen, ms.")
    mask: int = Field(ge=0, description="The noise mask after the images, ms (0: none).")
    response_window: int | None = Field(ge=0, description="Time to answer, ms; null: unlimited.")
    iti: int = Field(ge=0, description="Blank screen after the answer, ms.")
    response_from_onset: bool = Field(description="Whether the response window (and the RT) count from the "
                                                  "images' onset (DiST) rather than from the response screen's.")


class GridCell(Message):
    """One button of the label grid, where the lab's response screen has it (``human_tasks.layout``)."""

    label: str = Field(description="The answer the button gives (stored as the response).")
    name: str = Field(description="What the button shows: the label in the study's language.")
    row: int = Field(ge=0, description="Grid row, from the top.")
    col: int | None = Field(ge=0, description="Grid column; null for 'not clear', spanning the middle below.")


class TrialPlan(Message):
    """What a runner needs to show one trial, and nothing that would tell the participant the answer."""

    index: int = Field(ge=0, description="Position in the participant's sequence (or in an adaptive block): the "
                                         "answer's key in the response table.")
    trial_key: str = Field(min_length=1, description="Opaque name of the trial, sent back with the answer (the web "
                                                     "server's is a keyed hash of the trial id).")
    type: str = Field(description="The trial type (its card in cuebench.trial_types).")
    practice: bool = Field(description="A practice trial (its answer gets feedback).")
    feedback: str | None = Field(description="The right answer of a practice trial, shown as feedback; null otherwise.")
    block: int = Field(description="Block of the sequence (0: practice); an adaptive block's plans count "
                                   "down from -1.")
    break_before: bool = Field(description="Whether a break screen comes before this trial.")
    images: list[str] = Field(min_length=1, description="The images, in order (URLs on the web, files in the lab).")
    mask: str | None = Field(description="The noise mask shown after the images; null for none.")
    choices: list[str] = Field(min_length=1, description="The answers the trial accepts, in the order shown.")
    grid: list[GridCell] | None = Field(description="The label grid's buttons (response 'label-grid'); null otherwise.")
    response: str = Field(description="How the trial is answered (cuebench.trial_types.RESPONSES).")
    numbered: bool = Field(description="Whether each image is numbered 1..k below it.")
    prompt: str | None = Field(description="The response screen's words, in the study's language; null for none.")
    keys: dict[str, str] | None = Field(description="Answer -> key (response 'keys'); null otherwise.")
    instruction: str | None = Field(description="A text shown before the trial (an attention trial's instruction).")
    timing: PlanTiming
    post: str | None = Field(default=None, description="Where the answer is posted at once (adaptive trials, whose "
                                                       "next level depends on it); null: the runner's queue.")

    def message(self) -> dict:
        """The plan as a runner receives it: ``post`` only where there is one."""
        return self.model_dump(exclude={"post"} if self.post is None else None)

    @classmethod
    def build(cls, experiment: Experiment, trial: Trial, index: int, block: int, break_before: bool, *,
              trial_key: str, images: list[str], mask: str | None, grid: list[dict] | None,
              post: str | None = None) -> "TrialPlan":
        """The plan of ``trial`` at ``index`` of a sequence; where its images and mask are and the trial's key
        are the runner's (URLs and a keyed hash on the web, files and the trial id in the lab)."""
        card, timing = trial.card, trial.timing
        return cls(
            index=index, trial_key=trial_key, type=trial.trial_type, practice=trial.role == "practice",
            feedback=trial.correct if trial.role == "practice" else None, block=block, break_before=break_before,
            images=images, mask=mask, choices=allowed_responses(experiment, trial), grid=grid,
            response=card.response, numbered=card.numbered,
            prompt=card.say(card.prompt, experiment.language) if card.prompt else None,
            keys=card.answer_keys(trial) if card.response == "keys" else None, instruction=trial.instruction,
            timing={"fixation": timing.fixation or 0, "stimulus": timing.stimulus, "mask": timing.mask or 0,
                    "response_window": timing.response_window, "iti": timing.iti,
                    "response_from_onset": timing.response_from_onset},
            post=post)


def allowed_responses(experiment: Experiment, trial: Trial) -> list[str]:
    """The answers a trial accepts, in the order the runners show them: labels in the label set's display
    order, "not clear" last where the set offers it; other answers in the trial's order."""
    if trial.card.answers == "labels":
        return [label for label in experiment.label_set.displayed() if label in trial.choices or label == NOT_CLEAR]
    return list(trial.choices)


class TrialAnswer(Message):
    """What a runner measured for one trial: the answer, its RT, each phase's duration and frames."""

    trial_key: str = Field(description="The trial_key of the trial's plan.")
    response: str = Field(description="The answer, one of the plan's choices; empty when the trial timed out.")
    timed_out: bool = Field(default=False, description="No answer within the response window.")
    rt_ms: Annotated[float, Field(gt=0, le=MAX_UNLIMITED_RT_MS, allow_inf_nan=False)] | None = Field(
        default=None, description="Response time in ms from the response window's start (> 0: nobody answers "
                                  "at onset); null on a timeout.")
    timing_measured: dict[Phase, Milliseconds] = Field(default_factory=dict,
                                                       description="Phase -> measured duration in ms.")
    frames: dict[Phase, Frames] = Field(default_factory=dict, description="Phase -> frames shown.")
    dropped_frames: Frames = Field(default=0, description="Frames missed during the timed phases.")
    refresh_hz: float = Field(ge=REFRESH_RANGE_HZ[0], le=REFRESH_RANGE_HZ[1], allow_inf_nan=False,
                              description="The refresh rate the runner measured and counted frames at.")
    device: dict[str, Any] = Field(default_factory=dict, description="The runner's device and display record "
                                                                     f"(at most {MAX_FIELD_CHARS} characters as JSON).")
    events: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_EVENTS,
                                         description="The trial's event log (phases' onsets, late answers, focus "
                                                     f"changes), each at most {MAX_FIELD_CHARS} characters as JSON.")

    def stored_fields(self) -> dict:
        """The fields ``cuebench.responses.trial_row`` takes (the response empty on a timeout is stored as none)."""
        return {"response": self.response or None, "rt_ms": None if self.timed_out else self.rt_ms,
                "timed_out": int(self.timed_out), "timing_measured": dict(self.timing_measured),
                "frames": dict(self.frames), "dropped_frames": self.dropped_frames, "refresh_hz": self.refresh_hz,
                "device": dict(self.device), "events": list(self.events)}


class AnswerError(CuebenchError):
    """An answer refused: ``malformed`` (not the schema's shape: a wrong type, an unknown or missing field),
    ``invalid`` (the right shape, a value this trial cannot have) or ``foreign`` (the answer to another
    trial than the one at its index)."""

    def __init__(self, kind: Literal["malformed", "invalid", "foreign"], message: str):
        super().__init__(message)
        self.kind = kind


_OUT_OF_RANGE = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_long", "finite_number"}


def check_answer(experiment: Experiment, trial: Trial, trial_key: str, payload: Any) -> TrialAnswer:
    """``payload`` (a decoded JSON object, or the lab's values) as a ``TrialAnswer`` of ``trial``, whose plan
    gave it ``trial_key``: the one check every runner's answer passes before it is stored. A runner shows the
    response window in whole frames and reads the presses of its last frame, so an RT up to one frame past the
    window counts (the lab's 2000 ms at 59.94 Hz are 120 frames, 2002 ms)."""
    if not isinstance(payload, dict):
        raise AnswerError("malformed", "the answer must be a JSON object")
    try:
        answer = TrialAnswer.model_validate(payload)
    except ValidationError as err:
        error = err.errors()[0]
        path, problem = describe(error)
        if error["loc"][-1:] == ("[key]",):  # an unknown phase, named as the dict's key
            path, problem = ".".join(map(str, error["loc"][:-1])), f"unknown phase (known: {', '.join(PHASES)})"
        raise AnswerError("invalid" if error["type"] in _OUT_OF_RANGE else "malformed",
                          f"field {path!r}: {problem}") from None
    if answer.trial_key != trial_key:
        raise AnswerError("foreign", f"trial key {answer.trial_key!r} is not the trial at this position of this "
                                     "participant's sequence")
    _check_extra_size(answer)
    window = trial.timing.response_window
    if answer.timed_out:
        if window is None:
            raise AnswerError("invalid", "this trial has no response window, so it cannot time out")
        if answer.response != "":
            raise AnswerError("invalid", f"a timed-out trial has an empty response, got {answer.response!r}")
        return answer
    allowed = allowed_responses(experiment, trial)
    if answer.response not in allowed:
        raise AnswerError("invalid", f"response {answer.response!r} is not one of this trial's choices: {allowed}")
    if answer.rt_ms is None:
        raise AnswerError("malformed", "field 'rt_ms': is missing (only a timed-out trial has none)")
    if window is not None and answer.rt_ms > window + 1000.0 / answer.refresh_hz:
        raise AnswerError("invalid", f"field 'rt_ms' = {answer.rt_ms} is outside this trial's response window "
                                     f"(0, {window}] ms and its last frame at {answer.refresh_hz:g} Hz")
    return answer


def _check_extra_size(answer: TrialAnswer) -> None:
    """``device`` and each event fit their column; both together fit the trial's share."""
    total = 0
    for name, value in (("device", answer.device), *((f"events[{k}]", e) for k, e in enumerate(answer.events))):
        length = len(json.dumps(value))
        if length > MAX_FIELD_CHARS:
            raise AnswerError("invalid", f"field {name!r} is longer than {MAX_FIELD_CHARS} characters as JSON")
        total += length
    if total > MAX_TRIAL_EXTRA_CHARS:
        raise AnswerError("invalid", f"fields 'device' and 'events' together are longer than "
                                     f"{MAX_TRIAL_EXTRA_CHARS} characters as JSON")
