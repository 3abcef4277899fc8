"""The study's questionnaire on the lab screen, after the last trial.

The questions are the ones the web task shows (``EXPDIR/texts/questionnaire.json``, declared and
checked by ``cuebench.questionnaire``), one per screen. Choice and Likert items are answered by
clicking an option or pressing its number; number and text items are typed into a PsychoPy
``TextBox2`` and confirmed with Enter. Enter without an answer skips an optional item; a required
one, or an answer the declaration refuses (a number out of range), says so on the screen and asks
again. Escape pauses, as on every screen of the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cuebench.questionnaire import Question, Questionnaire, QuestionnaireError

from .simulate import Screen

NUMBER_KEYS = tuple("123456789")
SUBMIT_KEY = "return"
OPTION_SIZE = {"choice": (460, 44), "likert": (60, 50)}
OPTION_STEP = {"choice": (0, -54), "likert": (72, 0)}
PROMPT_Y, OPTIONS_Y, HINT_Y, ERROR_Y = 220, 90, -250, -300


def check_answerable(questionnaire: Questionnaire, input_mode: str) -> None:
    """With the keyboard as the only input, every option must have a number key (1-9)."""
    if input_mode != "keyboard":
        return
    for question in questionnaire.questions:
        count = len(question.options or ()) if question.kind == "choice" else \
            question.points if question.kind == "likert" else 0
        if count > len(NUMBER_KEYS):
            raise QuestionnaireError(f"question {question.id!r} offers {count} options, more than the keyboard's "
                                     f"{len(NUMBER_KEYS)} number keys; run the session with --input mouse")


def option_values(question: Question) -> list:
    """What each option box answers, in screen order."""
    return list(question.options) if question.kind == "choice" else list(range(1, question.points + 1))


def option_positions(question: Question) -> list[tuple[float, float]]:
    """Box centres in window pixels: a column for choices, a centred row for a Likert scale."""
    n = len(option_values(question))
    dx, dy = OPTION_STEP[question.kind]
    x0 = -dx * (n - 1) / 2
    return [(x0 + k * dx, OPTIONS_Y + k * dy) for k in range(n)]


@dataclass
class LabQuestionnaire:
    """Shows the questions through the runner's window, frame loop, input and pause screen."""

    win: object
    input: object
    frame: Callable[[Screen, Callable[[], None]], float]
    pause: Callable[[], None]
    log: Callable[[str], None]
    say: Callable[..., str]
    """The screen's words in the study's language (the runner's ``say``)."""

    def ask_all(self, questionnaire: Questionnaire) -> dict:
        """Every question in turn; the answers as ``Questionnaire.check_answers`` stores them."""
        self.input.clear()
        self.input.start()
        answers = {}
        for question in questionnaire.questions:
            value = self._ask(question)
            if value is not None:
                answers[question.id] = value
        return questionnaire.check_answers(answers)

    def _ask(self, question: Question):
        error = ""
        while True:
            self.input.clear()  # keys typed into an earlier screen stay in PsychoPy's buffer otherwise
            raw, how = self._typed(question, error) if question.kind in ("number", "text") else \
                self._chosen(question, error)
            if raw is None:
                self.log(f"questionnaire: {question.id!r} left empty ({how})")
                if not question.required:
                    return None
                error = self.say("lab_question_required")
                continue
            try:
                value = question.check(raw)
            except QuestionnaireError as err:
                self.log(f"questionnaire: {err}; asked again")
                error = self._what_fits(question)
                continue
            self.log(f"questionnaire: {question.id!r} answered {value!r} ({how})")
            return value

    def _texts(self, question: Question, hint: str, error: str) -> list:
        from psychopy import visual

        prompt = visual.TextStim(self.win, text=question.prompt + (" *" if question.required else ""),
                                 pos=(0, PROMPT_Y), height=28, wrapWidth=1000, color=(1, 1, 1), autoLog=False)
        skip = "" if question.required else self.say("lab_question_skip")
        return [prompt, visual.TextStim(self.win, text=hint + skip, pos=(0, HINT_Y), height=20, wrapWidth=1000,
                                        color=(1, 1, 1), autoLog=False),
                visual.TextStim(self.win, text=error, pos=(0, ERROR_Y), height=22, wrapWidth=1000,
                                color=(1, 0.6, 0.6), autoLog=False)]

    def _chosen(self, question: Question, error: str) -> tuple:
        """The value of the option clicked or keyed (None for Enter: skip) and how it was given."""
        from psychopy import visual

        values, positions = option_values(question), option_positions(question)
        width, height = OPTION_SIZE[question.kind]
        boxes = [(visual.Rect(self.win, width=width, height=height, pos=pos, fillColor=(-0.6, -0.6, -0.6),
                              lineColor=(0.6, 0.6, 0.6), autoLog=False),
                  visual.TextStim(self.win, text=f"{k + 1}   {value}" if question.kind == "choice" else str(value),
                                  pos=pos, height=22, color=(1, 1, 1), autoLog=False))
                 for k, (value, pos) in enumerate(zip(values, positions))]
        stims = [s for box in boxes for s in box] + self._texts(
            question, self.say("lab_question_click"), error)
        if question.kind == "likert" and question.anchors:
            (x_first, y), (x_last, _) = positions[0], positions[-1]
            stims += [visual.TextStim(self.win, text=anchor, pos=(x, y - 50), height=18, color=(1, 1, 1), autoLog=False)
                      for anchor, x in zip(question.anchors, (x_first, x_last))]
        screen = Screen("question", question=question, targets=positions)
        keys = (*NUMBER_KEYS[:len(values)], SUBMIT_KEY)
        while True:
            for press in self._presses(screen, stims, keys, clicks=True):
                if press.key == SUBMIT_KEY:
                    return None, "enter"
                if press.key is not None:
                    return values[int(press.key) - 1], f"key {press.key}"
                for value, (rect, _) in zip(values, boxes):
                    if rect.contains(press.pos):
                        return value, "click"

    def _typed(self, question: Question, error: str) -> tuple:
        """The text typed before Enter (a number parsed as one; None when nothing was typed) and how."""
        from psychopy import visual

        box = visual.TextBox2(self.win, text="", editable=True, pos=(0, OPTIONS_Y - 60), size=(600, 120),
                              letterHeight=24, color=(1, 1, 1), fillColor=(-0.6, -0.6, -0.6),
                              borderColor=(0.6, 0.6, 0.6), placeholder="", autoLog=False)
        self.win.currentEditable = box
        stims = [box, *self._texts(question, self.say("lab_question_type"), error)]
        screen = Screen("question", question=question)
        try:
            while not any(p.key == SUBMIT_KEY for p in self._presses(screen, stims, (SUBMIT_KEY,), clicks=False)):
                pass
            text = box.text.strip()
        finally:
            self.win.removeEditable(box)
        if not text or question.kind == "text":
            return text or None, "typed"
        try:
            return float(text) if any(c in text for c in ".eE") else int(text), "typed"
        except ValueError:
            return text, "typed"  # not a number: ``Question.check`` refuses it and the screen says what fits

    def _presses(self, screen: Screen, stims: list, keys: tuple[str, ...], clicks: bool) -> list:
        """One frame of the screen and the presses since the last; Escape opens the pause screen."""
        self.frame(screen, lambda: [s.draw() for s in stims])
        presses = self.input.poll(keys, clicks=clicks)
        if any(p.key == "escape" for p in presses):
            self.pause()
            self.input.clear()
            return []
        return presses

    def _what_fits(self, question: Question) -> str:
        """What the screen says when an answer does not fit the question's declaration."""
        if question.kind == "number":
            bounds = (self.say("lab_question_from", min=f"{question.min:g}") if question.min is not None else "") \
                + (self.say("lab_question_to", max=f"{question.max:g}") if question.max is not None else "")
            return self.say("lab_question_number", bounds=bounds)
        return self.say("lab_question_shorter")
