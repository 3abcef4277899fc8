"""The experiment's database: SQLite in the experiment folder (the default) or PostgreSQL.

Web server threads, several server processes (on one host or several) and parallel
model-evaluation shards all write one response table. ``open_database`` gives a
``Database``: one connection with the SQL the project uses written once (``?``
placeholders, double-quoted names), and ``write_transaction``, which lets one writer in at
a time and makes the others wait instead of failing:

- SQLite: WAL journal (readers never wait for the writer) with ``synchronous=FULL`` (a
  committed transaction survives a crash or power loss) and a busy timeout; every write is
  ``BEGIN IMMEDIATE``, which takes the write lock up front, so two transactions never
  deadlock upgrading a read lock (SQLite answers that with an immediate "locked" that no
  busy timeout waits out).
- PostgreSQL (psycopg 3): every write transaction first takes one transaction-level
  advisory lock, the same serialisation across hosts; commits are durable with the
  server's default ``synchronous_commit``.

Inside one process the writers of a database first queue at its ``WriterGate``: the next one
goes in the moment the last one commits, where SQLite's busy handler would have them poll with
sleeps of up to 100 ms (a web server's answer waited 130-450 ms behind a burst of session
starts that way), and a transaction marked ``urgent`` (a participant's answers) goes before the
others waiting.

The tables themselves, and the migrations of older databases, are ``cuebench.db_schema``'s; it changes a
database inside a write transaction, so two processes opening the same database at once take turns.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator
from urllib.parse import unquote, urlsplit, urlunsplit

from .errors import CuebenchError

DEFAULT_TIMEOUT_S = 30.0
POSTGRES_SCHEMES = ("postgresql", "postgres")
WRITER_LOCK_KEY = 0x637565
"""PostgreSQL advisory-lock key every cuebench write transaction takes ("cue")."""


class StorageError(CuebenchError):
    """The database cannot be reached or opened, or stayed locked longer than the busy timeout."""


def utc_now() -> str:
    """The UTC ISO-8601 time (milliseconds) stored with rows and events."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def is_database_url(location: str | Path) -> bool:
    return isinstance(location, str) and location.split(":", 1)[0] in POSTGRES_SCHEMES


def redacted(url: str) -> str:
    """The URL without its password (``user:PASSWORD@host`` and ``?password=PASSWORD``), for messages and logs."""
    parts = urlsplit(url)
    user, at, host = parts.netloc.rpartition("@")
    netloc = f"{user.partition(':')[0]}:***@{host}" if at and ":" in user else parts.netloc
    query = "&".join(_redacted_parameter(item) for item in parts.query.split("&")) if parts.query else ""
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _redacted_parameter(item: str) -> str:
    key = item.partition("=")[0]
    return f"{key}=***" if unquote(key).strip().lower() == "password" else item


URGENT_IN_A_ROW = 8
"""Urgent write transactions let in one after another while another writer waits; then that one goes."""


class WriterGate:
    """One writer at a time among this process's connections to one database, urgent ones first.

    A waiter is woken the moment the writer before it is done (SQLite's busy handler, which
    serialises the processes, polls instead). Urgent writers go before others, at most
    ``URGENT_IN_A_ROW`` in a row while another waits, so a stream of answers never locks out a
    start; nobody waits longer than the database's busy timeout."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._holder: int | None = None
        self._waiting = {True: 0, False: 0}
        self._urgent_in_a_row = 0

    def _may_enter(self, urgent: bool) -> bool:
        if self._holder is not None:
            return False
        if urgent:
            return not (self._waiting[False] and self._urgent_in_a_row >= URGENT_IN_A_ROW)
        return not self._waiting[True] or self._urgent_in_a_row >= URGENT_IN_A_ROW

    @contextmanager
    def turn(self, urgent: bool, timeout: float, where: str) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._holder == me:  # would wait for itself until the timeout
                raise StorageError(f"{where}: a write transaction was begun inside another on the same database")
            self._waiting[urgent] += 1
            try:
                if not self._cond.wait_for(lambda: self._may_enter(urgent), timeout):
                    raise StorageError(f"{where}: another writer held the database for over {timeout:g} s")
            finally:
                self._waiting[urgent] -= 1
            self._holder = me
            self._urgent_in_a_row = self._urgent_in_a_row + 1 if urgent else 0
        try:
            yield
        finally:
            with self._cond:
                self._holder = None
                self._cond.notify_all()


_GATES: dict[str, WriterGate] = {}
_GATES_LOCK = threading.Lock()


def writer_gate(key: str) -> WriterGate:
    """The process's gate of the database ``key`` names (a SQLite file's real path, a server URL)."""
    with _GATES_LOCK:
        return _GATES.setdefault(key, WriterGate())


class Database:
    """One connection to SQLite or PostgreSQL. ``conn`` is the driver's own connection; ``timeout``
    bounds every wait for the write lock."""

    def __init__(self, conn, dialect: str, where: str, timeout: float = DEFAULT_TIMEOUT_S, gate_key: str | None = None):
        self.conn = conn
        self.dialect = dialect
        self.where = where
        self.timeout = timeout
        self._gate = writer_gate(gate_key or where)
        if dialect == "postgresql":
            import psycopg

            self.integrity_errors: tuple[type[Exception], ...] = (psycopg.errors.IntegrityError,)
        else:
            self.integrity_errors = (sqlite3.IntegrityError,)

    @property
    def usable(self) -> bool:
        """False once a PostgreSQL connection is closed or broken (server restarted, network cut):
        the owner then opens a new one instead of failing every later request."""
        return self.dialect == "sqlite" or not (self.conn.closed or self.conn.broken)

    def _sql(self, sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s") if self.dialect == "postgresql" else sql

    def execute(self, sql: str, params: Iterable[Any] = ()):
        """Run one statement; returns the driver's cursor (``fetchone``, ``fetchall``, ``rowcount``)."""
        return self.conn.execute(self._sql(sql), list(params))

    def executemany(self, sql: str, rows: Iterable[Iterable[Any]]) -> None:
        if self.dialect == "postgresql":
            with self.conn.cursor() as cursor:
                cursor.executemany(self._sql(sql), [list(r) for r in rows])
        else:
            self.conn.executemany(sql, rows)

    def dicts(self, sql: str, params: Iterable[Any] = ()) -> list[dict]:
        cursor = self.execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    @contextmanager
    def write_transaction(self, urgent: bool = False) -> Iterator[Database]:
        """One write transaction, writers one at a time (``urgent`` ones first in this process: ``WriterGate``):
        commit on success, rollback on error."""
        with self._gate.turn(urgent, self.timeout, self.where):
            if self.dialect == "postgresql":
                self.conn.execute("BEGIN")
                self.conn.execute("SELECT pg_advisory_xact_lock(%s)", [WRITER_LOCK_KEY])
            else:
                self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def columns(self, table: str) -> list[str]:
        """The table's column names, in order; empty when there is no such table."""
        if self.dialect == "postgresql":
            return [r[0] for r in self.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema=current_schema() "
                "AND table_name=? ORDER BY ordinal_position", [table]).fetchall()]
        return [row[1] for row in self.conn.execute(f'PRAGMA table_info("{table}")')]

    @property
    def row_order(self) -> str:
        """The column giving storage (commit) order: SQLite's rowid, a PostgreSQL identity column."""
        return '"_seq"' if self.dialect == "postgresql" else "rowid"

    @property
    def row_order_column(self) -> str:
        """What ``CREATE TABLE`` adds for ``row_order`` (nothing on SQLite)."""
        return ', "_seq" BIGINT GENERATED ALWAYS AS IDENTITY' if self.dialect == "postgresql" else ""

    def secure_delete(self) -> None:
        """From now on, SQLite overwrites what this connection deletes with zeros in the pages it frees
        (a no-op on PostgreSQL, whose table files ``forget_deleted`` rewrites)."""
        if self.dialect == "sqlite":
            self.conn.execute("PRAGMA secure_delete=ON")

    def forget_deleted(self, tables: Iterable[str]) -> list[str]:
        """Leave no copy of rows deleted from ``tables`` in the database's files, where this connection can
        reach them; returns what may still hold them, for the user to hear.

        SQLite: ``VACUUM`` rebuilds the file without free pages, then the write-ahead log (which held
        the rows' earlier versions, and now the rebuilt pages) is checkpointed into the file and
        truncated to zero bytes. A server using the file meanwhile keeps working: the checkpoint waits
        (busy timeout) until its reads end; its later writes start a new log. PostgreSQL: ``VACUUM
        (FULL)`` writes each table, its indexes and TOAST into new files and unlinks the old ones (plain
        ``VACUUM`` would only mark the dead rows' space free, bytes still there) and ``ANALYZE`` samples
        the planner's statistics again (they hold sampled column values; a superuser's connection also
        drops the old ones and rewrites their catalog), then a ``CHECKPOINT`` and a switch to a new WAL
        segment where the role is allowed them. What the
        server wrote to its WAL before stays there until it recycles and overwrites those segments,
        and WAL archives and backups keep what they hold: the returned notes say so."""
        tables = [t for t in tables if self.columns(t)]
        with self._gate.turn(False, self.timeout, self.where):
            return self._forget_sqlite() if self.dialect == "sqlite" else self._forget_postgres(tables)

    def _forget_sqlite(self) -> list[str]:
        unfinished = StorageError(
            f"{self.where}: the deleted rows are gone from the tables, but another connection held the database "
            f"for over {self.timeout:g} s, so its file may still hold copies of them; stop the server and run: "
            f"sqlite3 {self.where} 'VACUUM; PRAGMA wal_checkpoint(TRUNCATE)'")
        try:
            self.conn.execute("VACUUM")
            deadline = time.monotonic() + self.timeout
            while self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:  # busy: a reader still at it
                if time.monotonic() > deadline:
                    raise unfinished
                time.sleep(0.05)
        except sqlite3.OperationalError:  # locked past the busy timeout
            raise unfinished from None
        return []

    def _forget_postgres(self, tables: list[str]) -> list[str]:
        import psycopg

        superuser = self.execute("SELECT rolsuper FROM pg_roles WHERE rolname=current_user").fetchone()[0]
        try:
            for table in tables:
                self.conn.execute(f'VACUUM (FULL) "{table}"')
            if superuser:  # ANALYZE of a table left empty keeps its old statistics: dropped first
                self.execute("DELETE FROM pg_catalog.pg_statistic WHERE starelid = "
                             "ANY(SELECT to_regclass(format('%I', t)) FROM unnest(?::text[]) t)", [tables])
            for table in tables:
                self.conn.execute(f'ANALYZE "{table}"')
            if superuser:
                self.conn.execute("VACUUM (FULL) pg_catalog.pg_statistic")
        except psycopg.errors.LockNotAvailable:
            raise StorageError(f"{self.where}: the deleted rows are gone from the tables, but another connection held "
                               f"a table for over {self.timeout:g} s, so its files may still hold them; when the "
                               f"server is quiet, run in psql: VACUUM (FULL, ANALYZE) {', '.join(tables)}") from None
        notes = [] if superuser else [
            "the planner's statistics (pg_catalog.pg_statistic, which samples column values) were made again, but "
            "that catalog keeps the old values of a table left empty, and its file keeps replaced ones until "
            "autovacuum reuses the space: a superuser can run VACUUM (FULL) pg_catalog.pg_statistic"]
        for statement, what in (("CHECKPOINT", "CHECKPOINT"), ("SELECT pg_switch_wal()", "pg_switch_wal()")):
            try:
                self.conn.execute(statement)
            except psycopg.errors.InsufficientPrivilege:
                notes.append(f"this role may not run {what} (a superuser, or pg_checkpoint/EXECUTE on "
                             "pg_switch_wal, may)")
        notes.append("PostgreSQL's write-ahead log keeps the deleted rows until the server recycles its older "
                     "segments, and WAL archives and backups keep what they hold: ask the database's administrator")
        return notes

    def close(self) -> None:
        self.conn.close()


def open_database(location: str | Path, timeout: float = DEFAULT_TIMEOUT_S) -> Database:
    """A ``postgresql://`` URL, or the path of a SQLite file (created if missing)."""
    if is_database_url(location):
        return _open_postgres(str(location), timeout)
    return Database(connect(location, timeout), "sqlite", str(location), timeout, os.path.realpath(location))


def _open_postgres(url: str, timeout: float) -> Database:
    try:
        import psycopg
    except ImportError:
        raise StorageError("a postgresql:// database needs psycopg: pip install 'cuebench[postgres]'") from None
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(timeout)))
        conn.execute(f"SET lock_timeout = {int(timeout * 1000)}")
    except psycopg.Error as err:
        reason = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise StorageError(f"cannot connect to {redacted(url)}: {reason}") from None
    return Database(conn, "postgresql", redacted(url), timeout)


def connect(path: str | Path, timeout: float = DEFAULT_TIMEOUT_S) -> sqlite3.Connection:
    """An autocommit SQLite connection (transactions are explicit) in WAL mode with full sync.

    A new file is created readable by its owner only (0600; SQLite gives its journal files
    the same mode), and an older one is made so: it holds participants' answers."""
    path = Path(path)
    try:
        if not path.exists() and path.parent.is_dir():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError as err:
        raise StorageError(f"{path}: cannot create the database ({err.strerror})") from None
    _owner_only(path)
    try:
        conn = sqlite3.connect(str(path), timeout=timeout, check_same_thread=False, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        _use_wal(conn, timeout)
        conn.execute("PRAGMA synchronous=FULL")
    except sqlite3.Error as err:
        raise StorageError(f"{path}: cannot open the database ({err})") from None
    return conn


def _owner_only(path: Path) -> None:
    """A database made before files were created 0600, and its journal files, readable by their owner
    only from now on (where the owner runs this; someone else's file is left as it is)."""
    if os.name != "posix":
        return
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            if stat.S_IMODE(file.stat().st_mode) & 0o077:
                os.chmod(file, 0o600)
        except OSError:
            continue


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
