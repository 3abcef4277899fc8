"""The same storage rules on SQLite and on a real PostgreSQL server: idempotency, refusal,
writers at once, identical exports, and a clear error for an unusable database URL. The stages on PostgreSQL
(the web server, the analysis, the models, the command's --database) are checked in
``tests/system/test_postgres_stages.py``."""

from __future__ import annotations

import pytest

from cuebench.export import export
from cuebench.responses import ResponseConflict, ResponseStore
from cuebench.storage import StorageError, open_database

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def location(request, tmp_path):
    if request.param == "sqlite":
        return tmp_path / "responses.sqlite"
    return request.getfixturevalue("postgres_url")


def test_same_rules_on_both_backends(location, response_row):
    with ResponseStore(location) as store:
        assert store.write(response_row()).stored and not store.write(response_row()).stored
        with pytest.raises(ResponseConflict, match="already stored with a different 'response'"):
            store.write(response_row(response="dog"))
        with pytest.raises(ResponseConflict):
            store.write_many([response_row(1), response_row(0, response="dog")])
        outcomes = store.write_each([response_row(2), response_row(0, response="dog")])
        assert outcomes[0].stored and isinstance(outcomes[1], ResponseConflict)
        assert store.answered_indices("e", "p1", "1") == {0, 2}
        assert [r["response"] for r in store.rows()] == ["cat", "cat"]
        assert store.rows()[0]["timing_measured"] == {"stimulus": 200.1}


def test_questionnaire_answers_are_stored_once_on_both_backends(location):
    from cuebench.questionnaire import store_answers, stored_answers

    with ResponseStore(location) as store:
        assert store_answers(store.conn, "e", "p1", {"age": 30, "hand": "left"}, runner="lab")
        assert not store_answers(store.conn, "e", "p1", {"age": 31}, runner="web")
        assert store_answers(store.conn, "e", "p2", {"age": 22}, runner="web")
        stored = stored_answers(store.conn, "e")
    assert {o: (r["answers"], r["runner"]) for o, r in stored.items()} == \
        {"p1": ({"age": 30, "hand": "left"}, "lab"), "p2": ({"age": 22}, "web")}


def test_writers_at_once_on_a_fresh_database(location, response_row, at_once):
    def writer(observer):
        with ResponseStore(location) as store:
            for i in range(20):
                store.write(response_row(i, observer=observer))
                store.write(response_row(i, observer=observer))

    assert at_once(writer, [f"p{k}" for k in range(6)]) == []
    with ResponseStore(location) as store:
        assert store.count() == 120


def test_exports_are_byte_identical(tmp_path, postgres_url, web_sample, response_row):
    expdir = web_sample[0]
    rows = [response_row(i, observer=f"p{k}", response=("cat", "dog", None)[i % 3],
                         rt_ms=None if i == 1 else 400.25 + i, experiment="web-sample", condition="gray", category="cat")
            for k in range(3) for i in range(4)]
    for location in (expdir / "responses.sqlite", postgres_url):
        with ResponseStore(location) as store:
            for r in rows:
                store.write(dict(r, created_at="2026-01-01T00:00:00.000+00:00"))
    outputs = {}
    for name, database in (("sqlite", None), ("postgresql", postgres_url)):
        files = [*export(expdir, "csv", tmp_path / name / "r.csv", database),
                 *export(expdir, "mvh", tmp_path / name / "mvh", database)]
        outputs[name] = {p.relative_to(tmp_path / name).as_posix(): p.read_bytes() for p in files}
    assert outputs["sqlite"] == outputs["postgresql"] and len(outputs["sqlite"]) == 4


@pytest.mark.parametrize("fault, words", [("unreachable", "cannot connect to"), ("credentials", "cannot connect to")])
def test_unusable_database_url_is_a_clear_error(postgres_server, fault, words):
    if fault == "unreachable":
        url = "postgresql://cuebench@127.0.0.1:1/nowhere?connect_timeout=2"
    else:
        url = postgres_server.url.replace("cuebench@", "nobody:secret@")
    with pytest.raises(StorageError, match=words) as err:
        open_database(url)
    assert "secret" not in str(err.value)
