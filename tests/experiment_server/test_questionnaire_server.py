"""The questionnaire on the web server: a broken file is refused before anyone starts, a typo in a live edit keeps
participants going and shows on the admin page, and answers are stored once (a previous release's database keeps
its answers). The file's own checks are in ``tests/core/test_questionnaire.py``."""

from __future__ import annotations

import json

import pytest

from experiment_server.app import create_app
from stimuli.web_sample import build_sample_experiment


def write(root, questions) -> None:
    (root / "texts").mkdir(parents=True, exist_ok=True)
    (root / "texts" / "questionnaire.json").write_text(json.dumps({"questions": questions}))


def test_serve_refuses_a_broken_questionnaire_before_anyone_starts(tmp_path):
    build_sample_experiment(tmp_path)
    (tmp_path / "texts").mkdir(exist_ok=True)
    (tmp_path / "texts" / "questionnaire.json").write_text("{\"questions\": [")
    with pytest.raises(Exception, match="questionnaire.json is not valid JSON"):
        create_app(tmp_path)


def test_a_typo_in_a_live_edit_keeps_participants_going_and_shows_on_the_admin_page(tmp_path, caplog):
    """A researcher breaks questionnaire.json while the study runs: every participant still gets the last
    valid questionnaire and can answer it, the admin page shows the fault, and the log says it once."""
    from experiment_server.admin import set_admin_password
    from experiment_server.study import study_of
    from support import consent_nonce, login, plan, start

    build_sample_experiment(tmp_path)
    write(tmp_path, [{"id": "age", "kind": "number", "prompt": "Your age", "min": 18, "max": 99}])
    app = create_app(tmp_path)
    set_admin_password(study_of(app), "correct horse battery")
    client = app.test_client()
    (tmp_path / "texts" / "questionnaire.json").write_text('{"questions": [{"id": "age",, }]}')
    with caplog.at_level("ERROR", logger="cuebench.serve"):
        for person in ("p1", "p2"):
            consent_nonce(client)
            token = start(client, PROLIFIC_PID=f"{person}aaaaaaaaaaaaaaaaaaaaaa", STUDY_ID="s", SESSION_ID=person)
            assert [q["id"] for q in plan(client, token)["questionnaire"]] == ["age"]
        login(client)
        page = client.get("/admin/").get_data(as_text=True)
    assert 'id="faults"' in page and "texts/questionnaire.json is not valid JSON" in page and "last valid version" in page
    assert str(tmp_path) not in page  # the folder's place on the server is nobody's business
    assert len([r for r in caplog.records if "questionnaire.json" in r.getMessage()]) == 1
    assert client.post(f"/api/session/{token}/questionnaire", json={"age": 30}).status_code in (200, 201)
    write(tmp_path, [{"id": "age", "kind": "number", "prompt": "Your age", "min": 18, "max": 99}])
    assert 'id="faults"' not in client.get("/admin/").get_data(as_text=True)


def test_answers_are_stored_once_and_a_server_database_of_the_previous_release_keeps_its_answers(tmp_path):
    """Answers live in one table for the lab and the web; a database whose server kept them in a
    participants column (the previous release) has them copied over when a server opens it."""
    import sqlite3

    from cuebench.questionnaire import store_answers, stored_answers
    from cuebench.storage import open_database
    from experiment_server.db import ServerDB

    experiment = build_sample_experiment(tmp_path)
    db = ServerDB(tmp_path / "responses.sqlite", experiment.name)
    person, _ = db.start(experiment.name, 2, entry_code="old1")
    other, _ = db.start(experiment.name, 2, entry_code="old2")
    db.close()
    with sqlite3.connect(tmp_path / "responses.sqlite") as conn:  # what the previous release wrote, without a version
        conn.execute("DROP TABLE schema_version")
        conn.execute("ALTER TABLE participants ADD COLUMN questionnaire TEXT")
        conn.execute("UPDATE participants SET questionnaire=? WHERE code=?", [json.dumps({"age": 41}), person.code])
    reopened = ServerDB(tmp_path / "responses.sqlite", experiment.name)
    assert reopened.get(person.code).questionnaire == {"age": 41} and reopened.get(other.code).questionnaire is None
    reopened.close()
    conn = open_database(tmp_path / "responses.sqlite")
    try:
        assert store_answers(conn, experiment.name, "L01", {"age": 30}, runner="lab") is True
        assert store_answers(conn, experiment.name, "L01", {"age": 31}, runner="lab") is False
        stored = stored_answers(conn, experiment.name)
    finally:
        conn.close()
    assert {o: (r["answers"], r["runner"]) for o, r in stored.items()} == \
        {person.code: ({"age": 41}, "web"), "L01": ({"age": 30}, "lab")}
