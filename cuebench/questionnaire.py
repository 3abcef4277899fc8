"""An optional questionnaire the researcher declares for a study (demographics, free text, Likert
items), shown after the last trial and stored once with the participant.

It lives beside the study's texts, in ``EXPDIR/texts/questionnaire.json``, so editing it needs no
rebuild and no package change; it is validated when a server or runner starts (a bad file is a
one-line error naming the file and the question), and every answer given is checked against it
(:meth:`Questionnaire.check_answers`) before it is stored. The web task and the lab runner store
the answers in one table of the experiment's database (:func:`store_answers`), one row per person,
written once: a reload, a resumed session or a repeated post keeps what was answered first.
"""

from __future__ import annotations

import json
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .db_schema import QUESTIONNAIRE_ANSWERS
from .errors import CuebenchError
from .expdir import ExperimentDir
from .storage import Database, utc_now

QUESTIONNAIRE_FILE = "questionnaire.json"
ANSWERS_TABLE = QUESTIONNAIRE_ANSWERS.name
ANSWER_COLUMN_PREFIX = "q_"
"""An answer's column in the exports: ``q_<question id>``."""
RUNNERS = ("web", "lab")
MAX_TEXT_ANSWER = 2000
"""Characters of one free-text answer."""


class QuestionnaireError(CuebenchError, ValueError):
    """A questionnaire file or a set of answers that does not fit the declaration; ``question``: the id of the
    question an answer does not fit (the web task then asks the participant, in the study's language, to
    check that answer, while the message is for the log)."""

    def __init__(self, message: str, question: str | None = None):
        super().__init__(message)
        self.question = question


class Question(BaseModel):
    """One item: ``choice`` (one of ``options``), ``text`` (free text), ``likert`` (1..``points``,
    ``anchors`` naming the two ends) or ``number`` (between ``min`` and ``max``)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z][a-z0-9_]{0,31}$", description="column name in the participants export")
    kind: Literal["choice", "text", "likert", "number"]
    prompt: str = Field(min_length=1, max_length=500)
    required: bool = False
    options: list[str] | None = Field(None, min_length=2, max_length=20)
    points: int = Field(7, ge=3, le=11)
    anchors: tuple[str, str] | None = None
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _fits_its_kind(self) -> "Question":
        if (self.kind == "choice") != (self.options is not None):
            raise ValueError("'options' is what a choice question offers, and only a choice question has them")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"'min' {self.min} is above 'max' {self.max}")
        return self

    def check(self, value) -> str | float | int:
        """The stored form of one answer, or QuestionnaireError naming the question."""
        where = f"answer to {self.id!r}"
        if self.kind == "text":
            if not isinstance(value, str) or len(value) > MAX_TEXT_ANSWER:
                raise QuestionnaireError(f"{where} must be text of at most {MAX_TEXT_ANSWER} characters", self.id)
            return value
        if self.kind == "choice":
            if value not in self.options:
                raise QuestionnaireError(f"{where} must be one of {self.options}, got {value!r}", self.id)
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise QuestionnaireError(f"{where} must be a number, got {value!r}", self.id)
        if self.kind == "likert":
            if value not in range(1, self.points + 1):
                raise QuestionnaireError(f"{where} must be a whole number 1..{self.points}, got {value!r}", self.id)
            return int(value)
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise QuestionnaireError(f"{where} must lie in [{self.min}, {self.max}], got {value!r}", self.id)
        return value


class Questionnaire(BaseModel):
    model_config = ConfigDict(extra="forbid")

    questions: list[Question] = Field(min_length=1, max_length=50)

    @model_validator(mode="after")
    def _ids_unique(self) -> "Questionnaire":
        ids = [q.id for q in self.questions]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"question ids must be unique: {', '.join(twice)} appear twice")
        return self

    @property
    def ids(self) -> list[str]:
        return [q.id for q in self.questions]

    def check_answers(self, answers) -> dict:
        """Answers as stored: every key a declared question, every value of its kind, every required
        question answered; an unanswered optional question is left out."""
        if not isinstance(answers, dict):
            raise QuestionnaireError("the answers must be an object of question id -> answer")
        unknown = sorted(set(answers) - set(self.ids))
        if unknown:
            raise QuestionnaireError(f"no question has the id {unknown[0]!r} (questions: {', '.join(self.ids)})")
        stored = {}
        for question in self.questions:
            value = answers.get(question.id)
            if value is None or value == "":
                if question.required:
                    raise QuestionnaireError(f"question {question.id!r} must be answered", question.id)
                continue
            stored[question.id] = question.check(value)
        return stored


def load_questionnaire(expdir: ExperimentDir) -> Questionnaire | None:
    """The study's questionnaire, None when it has none; a malformed file names itself and the problem."""
    path = expdir.root / "texts" / QUESTIONNAIRE_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Questionnaire.model_validate(data)
    except json.JSONDecodeError as err:
        raise QuestionnaireError(f"{path} is not valid JSON: {err}") from None
    except ValidationError as err:
        raise QuestionnaireError(f"{path}: {in_words(err.errors()[0], data)}") from None


ID_RULE = "must start with a lower-case letter and hold only a-z, 0-9 and _ (at most 32 characters)"


def in_words(error: dict, data) -> str:
    """A validation error as the researcher who wrote the file reads it: "question 2 ('age'): ..."
    instead of pydantic's ``questions.1.id`` and its regular expressions."""
    loc, kind, got = list(error["loc"]), error["type"], error.get("input")
    where = "the file"
    if loc[:1] == ["questions"] and len(loc) > 1 and isinstance(loc[1], int):
        question = data["questions"][loc[1]] if isinstance(data, dict) else None
        named = f" ({question['id']!r})" if isinstance(question, dict) and isinstance(question.get("id"), str) else ""
        where, loc = f"question {loc[1] + 1}{named}", loc[2:]
    field = f"'{loc[0]}'" if loc else ""
    if kind == "missing":
        problem = f"{field} is missing"
    elif kind == "extra_forbidden":
        known = Question.model_fields if where != "the file" else Questionnaire.model_fields
        problem = f"{field} is not a field here (fields: {', '.join(known)})"
    elif kind == "string_pattern_mismatch" and loc[:1] == ["id"]:
        problem = f"'id' {ID_RULE}, got {got!r}"
    elif kind == "literal_error":
        problem = f"{field} must be one of {error['ctx']['expected']}, got {got!r}"
    elif kind in ("too_short", "too_long", "string_too_short", "string_too_long"):
        ctx = error["ctx"]
        bound = f"at least {ctx['min_length']}" if "short" in kind else f"at most {ctx['max_length']}"
        unit = "characters" if kind.startswith("string") else "entries"
        size = len(got) if isinstance(got, (str, list)) else got
        problem = f"{field} needs {bound} {unit}, got {size}"
    elif kind in ("greater_than_equal", "less_than_equal"):
        bound = error["ctx"]["ge" if kind.startswith("greater") else "le"]
        problem = f"{field} must be {'at least' if kind.startswith('greater') else 'at most'} {bound}, got {got!r}"
    elif kind == "value_error":
        problem = str(error["ctx"]["error"])
    else:
        problem = f"{field} {error['msg'][0].lower()}{error['msg'][1:]}".strip()
    return f"{where}: {problem}"


def store_answers(db: Database, experiment: str, observer: str, answers: dict, runner: str) -> bool:
    """Store a person's checked answers once; False when they were stored already (the first stay)."""
    if runner not in RUNNERS:
        raise ValueError(f"runner must be one of {RUNNERS}, got {runner!r}")
    cursor = db.execute(f'INSERT INTO "{ANSWERS_TABLE}" (experiment, observer, answers, runner, "at") '
                        "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                        [experiment, observer, json.dumps(answers, sort_keys=True), runner, utc_now()])
    return cursor.rowcount == 1


def stored_answers(db: Database, experiment: str, observer: str | None = None) -> dict[str, dict]:
    """Observer -> ``{"answers", "runner", "at"}`` of everyone who answered the questionnaire (``observer``:
    of that one only)."""
    one = " AND observer=?" if observer is not None else ""
    rows = db.execute(f'SELECT observer, answers, runner, "at" FROM "{ANSWERS_TABLE}" WHERE experiment=?{one} '
                      'ORDER BY "at", observer', [experiment, *([observer] if observer is not None else [])]).fetchall()
    return {observer: {"answers": json.loads(answers), "runner": runner, "at": at}
            for observer, answers, runner, at in rows}
