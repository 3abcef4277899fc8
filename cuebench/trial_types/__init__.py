"""One card per trial type: everything a runner, a model and the analysis need to know about it.

A trial type's facts used to sit in one table per runner (server, lab, web task, decision
rules, analysis); now each sits on one card, as a jsPsych plug-in's ``info`` does: which
images a trial shows and how, what the answers are and which keys give them, the default
timing, the words a participant reads, how a model decides (the choice rule) and how an
answer is scored. The web server puts the card's constants and words into each trial of
the plan it sends the browser, the lab runner draws and reads the response from them,
``model_eval`` answers with the card's choice rule and the analysis scores by the card.

A card is a ``TrialTypeCard`` subclass registered under ``[project.entry-points."cuebench.trial_types"]``
(a third-party package registers its own the same way), so a new trial type is one file:
``cuebench list trial-types`` shows them. Cards import nothing from the trial schema, which
reads them (a trial's type must have a card, its default timing and field rules come from it).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from ..errors import CuebenchError
from ..registry import Registry
from ..words import LANGUAGE, say, words

RESPONSES = ("label-grid", "keys")
"""How people answer: the label grid of the lab's response screen (buttons or their keys), or one key per
answer (the key says which; a prompt says what to press). Each runner implements these two, not each type."""


class TrialTypeCard:
    """The card of one trial type; subclasses set the class attributes and override what differs.

    ``answers`` is ``"labels"`` (the label set's, in its display order), ``"positions"`` (``"1"``..``"k"``,
    the image's place from the left) or the fixed tuple of answers (e.g. ``("same", "different")``).
    ``keys`` maps a fixed answer to the key that gives it (positions answer with their own number).
    ``timing`` holds the default phase durations in ms (``cuebench.trials.Timing``'s fields) for a
    trial that names none. ``choice_rule`` names the decision rule a model answers with by default
    (``cuebench list decision-rules``); a card whose rule is its own sets ``decide`` (and ``needs``,
    the observer output it reads: ``features`` or ``probabilities``) and the rule is registered under
    ``choice_rule`` from the card. ``score`` says how an answer is scored, ``n_choices`` and ``chance``
    what guessing scores (the analysis's chance level). ``response`` None: people do not take this type (models only).
    """

    name: ClassVar[str]
    images: ClassVar[str] = "one"
    """``one``: a single image in the centre; ``row``: the trial's images side by side (``stimuli`` order)."""
    numbered: ClassVar[bool] = False
    """Whether each image is numbered 1..k below it (the answer names a position)."""
    answers: ClassVar[str | tuple[str, ...]] = "labels"
    response: ClassVar[str | None] = "label-grid"
    keys: ClassVar[dict[str, str]] = {}
    masked: ClassVar[bool] = False
    """Whether a noise mask may follow the images (the trial's timing decides whether one does)."""
    timing: ClassVar[dict[str, Any]] = {}
    prompt: ClassVar[str | None] = None
    """The response screen's words (the ``keys`` response): what to press. Like ``how_to_answer``, a key of the
    catalogue (``cuebench.words``: a card's words, translated, sit in the fragment beside its module, e.g.
    ``oddity.words.json``) or a plug-in's own words as written (:meth:`say`)."""
    how_to_answer: ClassVar[dict[str, str]] = {}
    """The lab's words after the study's instructions, per input mode (``mouse``, ``keyboard``)."""
    choice_rule: ClassVar[str]
    needs: ClassVar[str | None] = None
    right_or_wrong: ClassVar[bool] = True
    """Whether an answer is right or wrong (the response row's ``correct``), which accuracy and every statistic on
    it read; False: the answers are scored another way (a segment trial's label map, by confusion matrices), only
    by the report sections that read such trials (``analysis.sections.base.Section.reads_segments``)."""

    # ------------------------------------------------------------------ what a trial of this type is
    def check(self, trial) -> tuple[str, str] | None:
        """What is wrong with a trial's fields for this type (the field and the reason), or None."""
        positions = tuple(str(i + 1) for i in range(len(trial.stimuli)))
        if self.answers == "positions" and trial.choices != positions:
            return "choices", f"the choices of a trial of type {self.name} are the positions 1..{len(trial.stimuli)}"
        if isinstance(self.answers, tuple) and trial.choices != self.answers:
            return "choices", f"the choices of a trial of type {self.name} are {', '.join(self.answers)}"
        return None

    def references(self, trial) -> tuple[str, ...]:
        """The stimulus ids a trial of this type names besides the images it shows (a segment trial's label mask):
        the experiment checks that each exists."""
        return ()

    def answer_keys(self, trial) -> dict[str, str]:
        """Answer -> key of the ``keys`` response, in the order the answers are offered."""
        if self.answers == "positions":
            return {c: c for c in trial.choices}
        return {c: self.keys[c] for c in trial.choices}

    def score(self, trial, response: str | None) -> int | None:
        """1 if the answer is the trial's correct one, 0 if not (a timeout or "not clear" is wrong),
        None when the trial has no correct answer."""
        if trial.correct is None:
            return None
        return int(response == trial.correct)

    def n_choices(self, choices) -> int | None:
        """C, the answers a guess picks among: the trial's choices but "not clear" (a classification's labels,
        an oddity's k positions, a same/different's two); None when guessing has no chance level (e.g. a label
        map scored pixel by pixel). A card whose guesses are not among its choices overrides this."""
        return len([c for c in choices if c != NOT_CLEAR]) or None

    def chance(self, choices) -> float | None:
        """The accuracy of guessing, 1/C (:meth:`n_choices`): the floor of chance-corrected accuracy
        (A - 1/C) / (A_orig - 1/C) (Burgert et al. 2025, Sec. 5.2) and the oddity's chance (Wen et al. 2024)."""
        n = self.n_choices(choices)
        return None if n is None else 1 / n

    # ------------------------------------------------------------------ what a participant reads
    def say(self, text: str, language: str = LANGUAGE) -> str:
        """One of the card's words (``prompt``, ``how_to_answer``) in the study's ``language``: the catalogue's
        text when ``text`` is one of its keys, else ``text`` as the card wrote it (a plug-in's own words)."""
        return words(language).get(text, text)

    def task_sentence(self, timing, facts: dict, language: str = LANGUAGE) -> str:
        """One trial of this type in the default instructions, in ``language``: what appears, for how long, how to
        answer."""
        return say("task_any", language, seconds=seconds(timing.stimulus, language),
                   answer_time=answer_time(timing, "since_image", language))

    # ------------------------------------------------------------------ how a model decides
    decide: ClassVar[Callable | None] = None
    """``decide(trial, outputs) -> (answer, numbers)`` for a card that carries its own choice rule:
    ``outputs`` is the observer's ``needs`` output for each of the trial's images, stacked."""

    @property
    def for_people(self) -> bool:
        return self.response is not None


UNTYPED = "classify"
"""The type of a response row that names none: rows written before trial types were classifications (the
model-vs-human export writes its conditions bare, and the analysis reads them back so)."""
NOT_CLEAR = "not clear"
"""The answer "I saw nothing" a label set may offer after its labels (``cuebench.trials`` exports it too)."""


def seconds(ms: int, language: str = LANGUAGE) -> str:
    """A duration as a participant reads it: ``0.2 seconds``, ``1 second``, ``2.5 seconds``."""
    value = f"{ms / 1000:g}"
    return say("seconds_one" if value == "1" else "seconds_many", language,
               value=value.replace(".", say("decimal_point", language)))


def answer_time(timing, shown: str = "since_image", language: str = LANGUAGE) -> str:
    """The sentence on how long there is to answer; ``shown`` is the catalogue key of "from the moment the
    image appears" (the words for what appears)."""
    if timing.response_window is None:
        return say("answer_no_limit", language)
    since = say(shown if timing.response_from_onset else "since_answer_screen", language)
    return say("answer_window", language, seconds=seconds(timing.response_window, language), since=since)


TRIAL_TYPES: Registry[type[TrialTypeCard]] = Registry("trial-types", entry_point_group="cuebench.trial_types")
"""Trial type name -> its card class (entry point group ``cuebench.trial_types``)."""


class UnknownTrialType(CuebenchError):
    """A trial names a type no installed card describes."""


def card(trial_type: str) -> TrialTypeCard:
    """The card of a trial type; an unknown type is named with the known ones."""
    if trial_type not in TRIAL_TYPES:
        raise UnknownTrialType(f"{trial_type!r} is not a trial type (known: {', '.join(TRIAL_TYPES.names())}; "
                               "a plug-in adds one under the entry point group cuebench.trial_types)")
    return _instance(TRIAL_TYPES[trial_type])


_INSTANCES: dict[type, TrialTypeCard] = {}


def _instance(cls: type[TrialTypeCard]) -> TrialTypeCard:
    if cls not in _INSTANCES:
        _INSTANCES[cls] = cls()
    return _INSTANCES[cls]


def cards() -> dict[str, TrialTypeCard]:
    """Every installed trial type's card, by name."""
    return {name: _instance(cls) for name, cls in TRIAL_TYPES.working()}
