"""The study's questionnaire file: a malformed one is refused naming the file and the question, and answers are
checked against the declaration. The server's use of it is checked in
``tests/experiment_server/test_questionnaire_server.py``."""

from __future__ import annotations

import json
import re

import pytest

from cuebench.expdir import ExperimentDir
from cuebench.questionnaire import QuestionnaireError, load_questionnaire


def write(root, questions) -> None:
    (root / "texts").mkdir(parents=True, exist_ok=True)
    (root / "texts" / "questionnaire.json").write_text(json.dumps({"questions": questions}))


@pytest.mark.parametrize("questions, named", [
    ([{"id": "age", "kind": "slider", "prompt": "Age"}],
     "question 1 ('age'): 'kind' must be one of 'choice', 'text', 'likert' or 'number', got 'slider'"),
    ([{"id": "hand", "kind": "choice", "prompt": "Hand?"}], "'options' is what a choice question offers"),
    ([{"id": "a", "kind": "text", "prompt": "A"}, {"id": "a", "kind": "text", "prompt": "B"}], "a appear twice"),
    ([{"id": "a", "kind": "text", "prompt": "A"}, {"id": "Age group", "kind": "text", "prompt": "A"}],
     "question 2 ('Age group'): 'id' must start with a lower-case letter and hold only a-z, 0-9 and _"),
    ([{"id": "mood", "kind": "likert", "prompt": "Mood", "points": 2}], "question 1 ('mood'): 'points' must be at least 3"),
    ([{"id": "hand", "kind": "choice", "prompt": "Hand?", "options": ["left"]}], "'options' needs at least 2 entries"),
    ([{"id": "n", "kind": "number", "prompt": "N", "min": 5, "max": 1}], "'min' 5.0 is above 'max' 1.0"),
])
def test_a_malformed_questionnaire_names_the_file_and_the_problem(tmp_path, questions, named):
    write(tmp_path, questions)
    with pytest.raises(QuestionnaireError, match="questionnaire.json") as raised:
        load_questionnaire(ExperimentDir(tmp_path))
    assert named in str(raised.value) and "questions.0" not in str(raised.value) and "^[a-z]" not in str(raised.value)


def test_answers_are_checked_against_the_declaration():
    from cuebench.questionnaire import Questionnaire

    q = Questionnaire.model_validate({"questions": [
        {"id": "age", "kind": "number", "prompt": "Age", "required": True, "min": 18, "max": 99},
        {"id": "effort", "kind": "likert", "prompt": "Effort", "points": 5}]})
    assert q.check_answers({"age": 30, "effort": 5.0}) == {"age": 30, "effort": 5}
    assert q.check_answers({"age": 30, "effort": ""}) == {"age": 30}
    for answers, message in (({"effort": 3}, "'age' must be answered"), ({"age": True}, "must be a number"),
                             ({"age": 30, "effort": 2.5}, "whole number 1..5"), ({"age": 100}, "[18.0, 99.0]")):
        with pytest.raises(QuestionnaireError, match=re.escape(message)):
            q.check_answers(answers)
