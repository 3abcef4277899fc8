"""How the lab reads answers and keeps them: one row per response a trial type's card can name
(``RESPONSE_MODES``), the answer among a frame's presses (``ResponseReader``), practice feedback, and each
answer committed to the response store before the next trial (``AnswerWriter``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cuebench.exclusions import note_attention_answer
from cuebench.questionnaire import store_answers
from cuebench.responses import ResponseStore, trial_row
from cuebench.runner_contract import AnswerError, TrialPlan, check_answer
from cuebench.trials import Experiment, Trial
from cuebench.words import say

from ..layout import ResponseGrid
from .errors import LabError
from .inputs import ResponseInput
from .log import SessionLog
from .presentation import Display


@dataclass
class Outcome:
    """What one trial gave: the answer (None: none in time), its RT, the phases' measured ms and frames, the
    dropped frames."""

    response: str | None
    rt_ms: float | None
    measured: dict
    frames: dict
    dropped: int


FEEDBACK_SECONDS = 1.0
"""How long a practice trial's feedback stays up (the web task shows it as long)."""


def practice_feedback(trial: Trial, response: str | None, language: str, name_of=str) -> str:
    """What a practice trial says after the answer (the web task uses the same words), naming the right answer
    as its button does (``name_of``: ``LabelSet.name_of``)."""
    return say("feedback_correct", language) if response == trial.correct else \
        say("feedback_wrong", language, answer=name_of(trial.correct))


@dataclass(frozen=True)
class ResponseMode:
    """How the lab shows and reads one way of answering that a trial type's card names (``card.response``,
    one of ``cuebench.trial_types.RESPONSES``): a row of ``RESPONSE_MODES``. The card gives the answers, keys
    and words; the response grid places the labels, and the display draws the response screen."""

    keys: Callable[[ResponseGrid, Trial], tuple[str, ...]]
    """The keys that answer the trial."""
    draw_response: Callable[[Display, Trial], None]
    """The response screen."""
    clicks: bool
    """Whether a mouse click on the response grid answers."""
    answer_for_key: Callable[[ResponseGrid, Trial, str], str | None]
    """The answer a key press gives (None: not an answer to this trial)."""
    answer_input: Callable[[ResponseGrid, Trial, str], tuple[str, tuple[float, float] | None]]
    """The key, and the place to click (None where clicks do not answer), that give an answer: what a
    simulated participant presses."""
    key_per_label: bool
    """Whether the keyboard answers with one key per label (then every label needs a keyed place)."""


def response_mode(trial: Trial) -> ResponseMode:
    """The row of ``RESPONSE_MODES`` for the response the trial's card names; one the lab cannot show is named."""
    try:
        return RESPONSE_MODES[trial.card.response]
    except KeyError:
        raise LabError(f"trial {trial.trial_id!r} has trial type {trial.trial_type!r}, whose response "
                       f"{trial.card.response!r} the lab runner cannot show (it shows "
                       f"{', '.join(RESPONSE_MODES)})") from None


def _grid_answer(grid: ResponseGrid, trial: Trial, key: str) -> str | None:
    label = grid.label_for_key(key)
    return label if label in trial.choices else None


def _grid_input(grid: ResponseGrid, trial: Trial, answer: str) -> tuple[str, tuple[float, float]]:
    cell = grid.cell(answer)
    return cell.key, (cell.x, cell.y)


def _key_answer(grid: ResponseGrid, trial: Trial, key: str) -> str | None:
    return next((answer for answer, k in trial.card.answer_keys(trial).items() if k == key), None)


RESPONSE_MODES: dict[str, ResponseMode] = {
    "label-grid": ResponseMode(
        keys=lambda grid, trial: tuple(grid.keys), draw_response=lambda display, trial: display.draw_grid(),
        clicks=True, answer_for_key=_grid_answer, answer_input=_grid_input, key_per_label=True),
    "keys": ResponseMode(
        keys=lambda grid, trial: tuple(trial.card.answer_keys(trial).values()),
        draw_response=lambda display, trial: display.draw_prompt(trial.card.say(trial.card.prompt,
                                                                                display.experiment.language)),
        clicks=False,
        answer_for_key=_key_answer,
        answer_input=lambda grid, trial, answer: (trial.card.answer_keys(trial)[answer], None), key_per_label=False),
}
"""The lab's dispatch table: how it shows and reads each response a trial type's card can name."""


class Escape(Exception):
    """Escape was pressed before the trial was answered: the session pauses (``pacing``)."""


class ResponseReader:
    """The answers to a trial among the presses of the participant's mouse or keyboard (``input``), by the
    trial's response mode: which keys answer, which answer a key or a click on the grid gives."""

    def __init__(self, input: ResponseInput, grid: ResponseGrid):
        self.input = input
        self.grid = grid

    def keys(self, trial: Trial) -> tuple[str, ...]:
        return response_mode(trial).keys(self.grid, trial)

    def answer_input(self, trial: Trial, answer: str) -> tuple[str, tuple[float, float] | None]:
        """The key, and the place to click, that give ``answer``: what a simulated participant presses."""
        return response_mode(trial).answer_input(self.grid, trial, answer)

    def read(self, trial: Trial, keys: tuple[str, ...], accepting: bool, answer):
        """The first valid answer among this frame's presses (``answer``: the one given already, kept);
        Escape before an answer raises :class:`Escape`."""
        mode = response_mode(trial)
        for press in self.input.poll(keys if accepting else (), clicks=accepting and mode.clicks):
            if press.key == "escape":
                if answer is None:
                    raise Escape
                continue
            if answer is not None:
                continue
            if press.pos is not None:
                cell = self.grid.cell_at(*press.pos)
                label = cell.label if cell is not None and cell.label in trial.choices else None
            else:
                label = mode.answer_for_key(self.grid, trial, press.key)
            if label is not None:
                answer = (label, press.rt)
        return answer


class AnswerWriter:
    """Each answer of one run stored as one response row, committed before the next trial (a crash loses at most
    the trial on screen), with what the station measured; a failed attention check excludes the person at once."""

    def __init__(self, store: ResponseStore, experiment: Experiment, participant: str, observer_kind: str,
                 group: int, refresh_hz: float, device: dict, log: SessionLog):
        self.store, self.experiment, self.participant = store, experiment, participant
        self.observer_kind, self.group, self.refresh_hz, self.device, self.log = \
            observer_kind, group, refresh_hz, device, log

    def commit(self, plan: TrialPlan, trial: Trial, outcome: Outcome, restarts: int, session: str,
               trial_index: int, **fields) -> None:
        """Store the answer, checked as every runner's is (``cuebench.runner_contract.check_answer``)."""
        events = [{"event": "escape_pause", "then": "trial shown again"}] * restarts
        try:
            answer = check_answer(self.experiment, trial, plan.trial_key, {
                "trial_key": plan.trial_key, "response": outcome.response or "",
                "timed_out": outcome.response is None, "rt_ms": outcome.rt_ms, "timing_measured": outcome.measured,
                "frames": outcome.frames, "dropped_frames": outcome.dropped, "refresh_hz": self.refresh_hz,
                "device": self.device, "events": events})
        except AnswerError as err:
            raise LabError(f"the answer to trial {trial_index} ({trial.trial_id}) cannot be stored: {err}") from None
        row = trial_row(self.experiment, trial, observer=self.participant, observer_kind=self.observer_kind,
                        session=session, trial_index=trial_index, group=self.group, **answer.stored_fields(),
                        **fields)
        self.store.write(row)
        if note_attention_answer(self.store.conn, row) is not None:
            self.log.exp(f"attention check {trial.trial_id} failed: {self.participant} is excluded")
        self.log.exp(f"committed trial {trial_index} of session {session} ({trial.trial_id}): response "
                     f"{outcome.response!r}, rt {outcome.rt_ms} ms, dropped {outcome.dropped}")

    def commit_questionnaire(self, answers: dict) -> None:
        """The study's questionnaire answers, stored once with the person (``cuebench.questionnaire``)."""
        store_answers(self.store.conn, self.experiment.name, self.participant, answers, runner="lab")
