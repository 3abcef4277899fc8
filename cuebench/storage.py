"""Connections to an experiment's SQLite file that many threads and processes can share.

Web server threads, several server processes and parallel model-evaluation shards all
write the same ``responses.sqlite``. SQLite allows one writer at a time; this module makes
every writer wait its turn instead of failing with "database is locked":

- WAL journal (readers never wait for the writer) with ``synchronous=FULL`` (a committed
  transaction survives a crash or power loss), and a busy timeout on every connection;
- every write is one ``BEGIN IMMEDIATE`` transaction, which takes the write lock up front,
  so two transactions never deadlock upgrading a read lock (SQLite answers that case with an
  immediate "locked" that no busy timeout waits out);
- schema changes (``CREATE ... IF NOT EXISTS``) run inside such a transaction, so two
  processes creating the same tables at once do it one after the other.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .errors import CuebenchError

DEFAULT_TIMEOUT_S = 30.0


class StorageError(CuebenchError):
    """The database file cannot be opened or stayed locked longer than the busy timeout."""


def connect(path: str | Path, timeout: float = DEFAULT_TIMEOUT_S) -> sqlite3.Connection:
    """An autocommit connection (transactions are explicit) in WAL mode with full sync."""
    path = Path(path)
    try:
        conn = sqlite3.connect(str(path), timeout=timeout, check_same_thread=False, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        _use_wal(conn, timeout)
        conn.execute("PRAGMA synchronous=FULL")
    except sqlite3.Error as err:
        raise StorageError(f"{path}: cannot open the database ({err})") from None
    return conn


def _use_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch the file to WAL once; the mode is stored in the file, so later connections only read it.

    The switch needs the file to itself and SQLite reports a concurrent switch as "locked"
    without calling the busy handler, hence the bounded retry."""
    deadline = time.monotonic() + timeout
    while conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction: the write lock first (``BEGIN IMMEDIATE``), commit on success, rollback on error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]
