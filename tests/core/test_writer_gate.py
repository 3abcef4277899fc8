"""One writer at a time per database inside a process, answers first (``storage.WriterGate``), on real
SQLite files opened by several threads, as a web server's threads open them."""

from __future__ import annotations

import threading
import time

import pytest

from cuebench.storage import URGENT_IN_A_ROW, StorageError, open_database


def wait_until(condition, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "the writers did not queue in time"
        time.sleep(0.005)


def test_answers_go_first_but_never_more_than_a_few_in_a_row(tmp_path):
    path = tmp_path / "responses.sqlite"
    setup = open_database(path)
    setup.execute("CREATE TABLE entered (who TEXT)")
    gate = setup._gate
    release, holding = threading.Event(), threading.Event()

    def holder():
        db = open_database(path)
        with db.write_transaction():
            holding.set()
            release.wait(10)

    def writer(who: str, urgent: bool):
        db = open_database(path)
        with db.write_transaction(urgent) as conn:
            conn.execute("INSERT INTO entered VALUES (?)", [who])

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    assert holding.wait(10)
    threads.append(threading.Thread(target=writer, args=("start", False)))
    threads[-1].start()
    wait_until(lambda: gate._waiting[False] == 1)
    answers = URGENT_IN_A_ROW + 2
    threads += [threading.Thread(target=writer, args=(f"answer{n}", True)) for n in range(answers)]
    for thread in threads[2:]:
        thread.start()
    wait_until(lambda: gate._waiting[True] == answers)
    release.set()
    for thread in threads:
        thread.join(10)
    order = [who for (who,) in setup.execute("SELECT who FROM entered ORDER BY rowid").fetchall()]
    assert len(order) == answers + 1
    assert all(who.startswith("answer") for who in order[:URGENT_IN_A_ROW])  # ahead of the start that waited first
    assert order[URGENT_IN_A_ROW] == "start"  # then the start's turn comes
    assert all(who.startswith("answer") for who in order[URGENT_IN_A_ROW + 1:])


def test_a_writer_kept_out_past_the_timeout_is_told_so(tmp_path):
    path = tmp_path / "responses.sqlite"
    release, holding = threading.Event(), threading.Event()

    def holder():
        with open_database(path).write_transaction():
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert holding.wait(10)
        with pytest.raises(StorageError, match=r"responses.sqlite: another writer held the database for over 0.2 s"):
            with open_database(path, timeout=0.2).write_transaction():
                pass
    finally:
        release.set()
        thread.join(10)


def test_a_transaction_inside_another_on_the_same_database_fails_at_once(tmp_path):
    path = tmp_path / "responses.sqlite"
    outer, inner = open_database(path), open_database(tmp_path / "." / "responses.sqlite")  # another spelling
    with outer.write_transaction():
        with pytest.raises(StorageError, match="begun inside another on the same database"):  # not the timeout's
            with inner.write_transaction():
                pass
    with inner.write_transaction():  # the gate is free again
        pass
