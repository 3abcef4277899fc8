"""The response store: durable, idempotent, never overwrites a collected answer."""

import sqlite3

import pytest

from cuebench.responses import COLUMNS, ResponseConflict, ResponseError, ResponseStore


def test_write_is_idempotent_and_refuses_a_different_answer(tmp_path, response_row):
    with ResponseStore(tmp_path / "r.sqlite") as store:
        assert store.write(response_row()).stored
        assert not store.write(response_row()).stored
        with pytest.raises(ResponseConflict, match="already stored with a different 'response'"):
            store.write(response_row(response="dog"))
        assert store.count() == 1
        assert store.rows()[0]["response"] == "cat"
        assert store.rows()[0]["timing_measured"] == {"stimulus": 200.1}


def test_a_batch_is_all_or_nothing(tmp_path, response_row):
    with ResponseStore(tmp_path / "r.sqlite") as store:
        store.write(response_row(0))
        with pytest.raises(ResponseConflict):
            store.write_many([response_row(1), response_row(0, response="dog")])
        assert store.answered_indices("e", "p1", "1") == {0}


def test_store_is_wal_with_full_sync_and_survives_reopen(tmp_path, response_row):
    path = tmp_path / "r.sqlite"
    with ResponseStore(path) as store:
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == 2
        store.write(response_row(3))
    con = sqlite3.connect(path)
    assert con.execute("SELECT trial_index, rt_ms FROM responses").fetchall() == [(3, 512.5)]


@pytest.mark.parametrize("bad, words", [
    ({"observer_kind": "robot"}, "observer_kind"),
    ({"trial_id": None}, "'trial_id' is missing"),
    ({"colour": "red"}, "unknown response field 'colour'"),
])
def test_malformed_rows_are_refused(tmp_path, bad, words, response_row):
    with ResponseStore(tmp_path / "r.sqlite") as store:
        with pytest.raises(ResponseError, match=words):
            store.write(response_row(**bad))


def test_concurrent_writers_lose_nothing(tmp_path, response_row, at_once):
    path = tmp_path / "r.sqlite"
    ResponseStore(path).close()

    def writer(observer):
        with ResponseStore(path) as store:
            for i in range(40):
                store.write(response_row(i, observer=observer))
                store.write(response_row(i, observer=observer))

    assert at_once(writer, [f"p{k}" for k in range(5)]) == []
    with ResponseStore(path) as store:
        assert store.count() == 200
        assert list(store.dataframe().columns) == list(COLUMNS)


def test_a_fresh_file_opened_by_many_writers_at_once(tmp_path, response_row, at_once):
    """Every writer creates the schema if it is missing: on a fresh file they take turns, none sees "locked"."""
    path = tmp_path / "fresh.sqlite"

    def writer(observer):
        with ResponseStore(path) as store:
            store.write(response_row(0, observer=observer))

    assert at_once(writer, [f"p{k}" for k in range(8)]) == []
    with ResponseStore(path) as store:
        assert store.count() == 8


def test_group_write_refuses_a_conflict_and_keeps_the_rest(tmp_path, response_row):
    with ResponseStore(tmp_path / "r.sqlite") as store:
        store.write(response_row(0))
        outcomes = store.write_each([response_row(1), response_row(0, response="dog"), response_row(0),
                                     response_row(1)])
        assert [getattr(o, "stored", None) for o in outcomes] == [True, None, False, False]
        assert isinstance(outcomes[1], ResponseConflict)
        assert store.answered_indices("e", "p1", "1") == {0, 1} and store.rows()[0]["response"] == "cat"
