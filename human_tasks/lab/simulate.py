"""A scripted participant for piloting and tests, answering through the window's events.

The runner tells the simulator, every frame, which screen is showing. The simulator
decides what a participant would do and when (a seeded reaction time), then acts like
hardware does: it moves the real pointer with ``Mouse.setPos`` (an OS pointer warp) and
posts ``on_key_press``/``on_mouse_press`` and their releases to the pyglet window's
event queue. PsychoPy's own handlers take them from there on the runner's next poll,
exactly as they take a real key or click, so the trial code, response timing, Escape
handling and storage are the ones a real participant goes through.

Policy (``Script``): attention and catch trials get their correct (instructed) answer;
other trials the correct one with probability ``accuracy``, otherwise another choice;
questionnaire items a random option or a fixed typed answer (a number with an upper bound is
first typed one above it, so that a pilot also goes through the refusal and the second try).
``pause_after=N`` presses Escape once on the response screen after N answers and goes
on (N on the pause screen; the interrupted trial is shown again); ``quit_after=N``
presses Escape after N answers and confirms quitting (Y). Together they pilot the pause,
quit and resume paths.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from cuebench.questionnaire import Question
from cuebench.trials import Trial


@dataclass(frozen=True)
class Script:
    accuracy: float = 0.8
    pause_after: int | None = None
    quit_after: int | None = None


@dataclass(eq=False)
class Screen:
    """What is on the display: ``continue`` (instructions, breaks), ``pause``, ``trial``
    (fixation to mask, ITI), ``response`` or ``question`` (one questionnaire item, with the
    centres of its option boxes as ``targets``; none for a typed answer); ``onset`` (PsychoPy
    clock seconds) is set by the runner at the screen's first flip. A response screen says, through
    ``answer_input`` (the runner's row for the trial type), which key and which place to click give an
    answer, so the simulator knows no trial type."""

    kind: str
    trial: Trial | None = None
    answer_input: Callable[[str], tuple[str, tuple[float, float] | None]] | None = None
    onset: float | None = None
    question: Question | None = None
    targets: list[tuple[float, float]] = field(default_factory=list)


class SimulatedParticipant:
    def __init__(self, win, mouse, input_mode: str, seed: int, script: Script = Script()):
        self.win = win
        self.mouse = mouse
        self.input_mode = input_mode
        self.rng = random.Random(seed)
        self.script = script
        self.answers = 0
        self.paused = False
        self.typed: set[str] = set()
        """Questionnaire items typed into once."""
        self._screen: Screen | None = None
        self._actions: list[tuple[float, callable]] = []

    def observe(self, screen: Screen, now: float) -> None:
        """Called once per frame; plans actions on a new screen and performs those now due."""
        if screen is not self._screen:
            self._screen = screen
            self._actions = self._plan(screen)
        while self._actions and self._actions[0][0] <= now:
            self._actions.pop(0)[1]()

    @property
    def _quitting(self) -> bool:
        return self.script.quit_after is not None and self.answers >= self.script.quit_after

    @property
    def _pausing(self) -> bool:
        return not self.paused and self.script.pause_after is not None and self.answers >= self.script.pause_after

    def _plan(self, screen: Screen) -> list[tuple[float, callable]]:
        at = screen.onset + self.rng.uniform(0.2, 0.45)
        if screen.kind == "pause":
            self.paused = True
            return self._key("y" if self._quitting else "n", at)
        if screen.kind == "trial":
            return []
        if self._quitting or (self._pausing and screen.kind == "response"):
            return self._key("escape", at)
        if screen.kind == "continue":
            return self._click((0.0, 0.0), at) if self.input_mode == "mouse" else self._key("space", at)
        if screen.kind == "question":
            return self._answer_question(screen, at)
        trial = screen.trial
        answer = self._choose(trial)
        at = screen.onset + self.rng.uniform(0.3, 0.8)
        key, place = screen.answer_input(answer)
        actions = self._click(place, at) if self.input_mode == "mouse" and place is not None else self._key(key, at)
        return [(actions[0][0], self._count_answer), *actions]

    def _answer_question(self, screen: Screen, at: float) -> list[tuple[float, callable]]:
        """A random option, clicked or keyed by its number; a typed number half-way through the allowed
        range (the one bound given; 30 without any) after a first try above it, typed text for a text
        item; each typed answer ends with Enter."""
        if screen.targets:
            k = self.rng.randrange(len(screen.targets))
            return self._click(screen.targets[k], at) if self.input_mode == "mouse" else self._key(str(k + 1), at)
        question = screen.question
        if question.kind == "number":
            bounds = [b for b in (question.min, question.max) if b is not None]
            first_try = question.id not in self.typed
            text = str(round(question.max) + 1 if first_try and question.max is not None else
                       round(sum(bounds) / len(bounds)) if bounds else 30)
        else:
            text = "no comments"
        self.typed.add(question.id)
        typing = [action for k, ch in enumerate(text) for action in self._type(ch, at + 0.1 * k)]
        return [*typing, *self._key("return", at + 0.1 * len(text) + 0.2)]

    def _type(self, ch: str, at: float) -> list[tuple[float, callable]]:
        """A character typed as a keyboard sends it: the key's press (which PsychoPy's key buffer
        keeps), the text event (which goes to the focused text box), the release."""
        handle = self.win.winHandle
        press, release = self._key("space" if ch == " " else ch, at)
        return [press, (at + 0.01, lambda: handle.dispatch_event("on_text", ch)), release]

    def _count_answer(self) -> None:
        self.answers += 1

    def _choose(self, trial: Trial) -> str:
        if trial.correct is None:
            return self.rng.choice(trial.choices)
        if trial.role in ("attention", "catch") or self.rng.random() < self.script.accuracy:
            return trial.correct
        others = [c for c in trial.choices if c != trial.correct]
        return self.rng.choice(others) if others else trial.correct

    def _key(self, name: str, at: float) -> list[tuple[float, callable]]:
        from pyglet.window import key

        symbol = getattr(key, f"_{name}" if name.isdigit() else name.upper())
        handle = self.win.winHandle
        return [(at, lambda: handle.dispatch_event("on_key_press", symbol, 0)),
                (at + 0.07, lambda: handle.dispatch_event("on_key_release", symbol, 0))]

    def _click(self, pos: tuple[float, float], at: float) -> list[tuple[float, callable]]:
        from pyglet.window import mouse

        handle = self.win.winHandle

        def press():
            self.mouse.setPos(pos)
            handle.dispatch_event("on_mouse_press", handle._mouse_x, handle._mouse_y, mouse.LEFT, 0)

        def release():
            handle.dispatch_event("on_mouse_release", handle._mouse_x, handle._mouse_y, mouse.LEFT, 0)

        return [(at, press), (at + 0.08, release)]
