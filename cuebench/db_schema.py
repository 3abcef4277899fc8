"""The experiment database's schema: every table and index cuebench keeps, the schema's version, and the
ordered migrations that bring a database an earlier release left to the current layout.

One database per experiment (``cuebench.storage``: the folder's responses.sqlite, or PostgreSQL) holds the
responses and what the runners and the server keep beside them. Every table is declared here and nowhere
else; ``migrate`` runs when a ``ResponseStore`` or the server's ``ServerDB`` opens the database:

- a current database is only read (the version table, two catalogue queries) and left alone;
- a new one gets every declared table and index, and the current version;
- an older one is brought up by the steps of ``MIGRATIONS`` after its version, in order.

Creating or upgrading happens in one write transaction (``Database.write_transaction``: one writer at a
time across threads, processes and hosts, DDL included on both backends), so two processes opening an old
database at once upgrade it once, and a step that fails leaves the database as it was.

Releases before the schema had a version wrote none: their databases are version 0 and may hold any layout
those releases made, from the first server tables on, so each of the steps written for them checks what
is there before it changes it. A later change of layout is a new step at the end of ``MIGRATIONS``
together with the changed declaration; ``tests/core/test_db_schema.py`` checks that a database upgraded
from an older layout and a new one come out alike, and that the response table matches
``cuebench.responses.ResponseRow``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable

from .errors import CuebenchError
from .storage import Database, utc_now


class SchemaTooNew(CuebenchError):
    """The database was made by a newer cuebench, whose layout this one does not know."""


@dataclass(frozen=True)
class Index:
    name: str
    columns: tuple[str, ...]
    unique: bool = False

    def create(self, table: str) -> str:
        columns = ", ".join(f'"{c}"' for c in self.columns)
        return f'CREATE {"UNIQUE " if self.unique else ""}INDEX IF NOT EXISTS "{self.name}" ON "{table}" ({columns})'


@dataclass(frozen=True)
class Table:
    """A table: its columns as (name, SQL declaration), a composite primary key if any, its indexes, and
    whether it keeps commit order (``Database.row_order``: SQLite's rowid, a PostgreSQL identity column)."""

    name: str
    columns: tuple[tuple[str, str], ...]
    primary_key: tuple[str, ...] = ()
    indexes: tuple[Index, ...] = ()
    row_order: bool = False

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    def create(self, db: Database) -> str:
        parts = [f'"{name}" {declared}' for name, declared in self.columns]
        if self.primary_key:
            parts.append(f"PRIMARY KEY ({', '.join(self.primary_key)})")
        return f'CREATE TABLE "{self.name}" ({", ".join(parts)}{db.row_order_column if self.row_order else ""})'


def _index(table: str, *columns: str, unique: bool = False, suffix: str = "") -> Index:
    """An index named as the releases before this module named theirs, so an existing one is recognised."""
    return Index(f"idx_{table}_{'_'.join(columns)}{suffix}", columns, unique)


RESPONSE_KEY = ("experiment", "observer", "session", "trial_index")
"""What identifies one answer: a row is stored once per key (``ResponseStore``)."""

RESPONSES = Table("responses", (
    ("experiment", "TEXT"), ("observer", "TEXT"), ("observer_kind", "TEXT"), ("session", "TEXT"),
    ("trial_index", "INTEGER"), ("trial_id", "TEXT"), ("role", "TEXT"), ("trial_type", "TEXT"), ("condition", "TEXT"),
    ("level", "INTEGER"), ("params", "TEXT"), ("category", "TEXT"), ("texture_category", "TEXT"),
    ("source_image", "TEXT"), ("imagename", "TEXT"), ("response", "TEXT"), ("correct_answer", "TEXT"),
    ("correct", "INTEGER"), ("rt_ms", "FLOAT"), ("timed_out", "INTEGER"), ("timing_planned", "TEXT"),
    ("timing_measured", "TEXT"), ("frames", "TEXT"), ("dropped_frames", "INTEGER"), ("refresh_hz", "FLOAT"),
    ("device", "TEXT"), ("decision_rule", "TEXT"), ("model_outputs", "TEXT"), ("events", "TEXT"), ("group", "INTEGER"),
    ("created_at", "TEXT"), ("excluded", "INTEGER"), ("exclusion_reason", "TEXT"), ("adaptive", "TEXT")),
    indexes=(_index("responses", *RESPONSE_KEY, unique=True),
             _index("responses", "experiment", "observer", "trial_id")),
    row_order=True)
"""One row per observer per trial (``cuebench.responses.ResponseRow`` is the row's model, column for column)."""

EXCLUSIONS = Table("exclusions", (
    ("experiment", "TEXT NOT NULL"), ("observer", "TEXT NOT NULL"), ("excluded", "INTEGER NOT NULL"),
    ("reason", "TEXT NOT NULL"), ("at", "TEXT NOT NULL"), ("by", "TEXT NOT NULL"), ("places_counted", "INTEGER")),
    indexes=(_index("exclusions", "experiment", "observer"), _index("exclusions", "places_counted")),
    row_order=True)
"""The exclusion log (``cuebench.exclusions``); ``places_counted`` marks the events the server's place counts
have taken in."""

WITHDRAWALS = Table("withdrawals", (("experiment", "TEXT NOT NULL"), ("at", "TEXT NOT NULL")))
"""One row per withdrawal, with the date only (``cuebench.exclusions.record_withdrawal``)."""

QUESTIONNAIRE_ANSWERS = Table("questionnaire_answers", (
    ("experiment", "TEXT NOT NULL"), ("observer", "TEXT NOT NULL"), ("answers", "TEXT NOT NULL"),
    ("runner", "TEXT NOT NULL"), ("at", "TEXT NOT NULL")), primary_key=("experiment", "observer"))
"""A person's questionnaire answers, once, from the lab or the web (``cuebench.questionnaire``)."""

PARTICIPANTS = Table("participants", (
    ("code", "TEXT PRIMARY KEY"), ("experiment", "TEXT NOT NULL"), ("token_hash", "TEXT NOT NULL"),
    ("grp", "INTEGER NOT NULL"), ("status", "TEXT NOT NULL"), ("session", "TEXT NOT NULL"), ("prolific_pid", "TEXT"),
    ("study_id", "TEXT"), ("prolific_session", "TEXT"), ("entry_code", "TEXT"), ("reserved_until", "FLOAT"),
    ("created_at", "FLOAT NOT NULL"), ("finished_at", "FLOAT"), ("screen_reason", "TEXT"), ("pilot", "INTEGER"),
    ("calibration", "TEXT"), ("runner", "TEXT"), ("resume_hash", "TEXT"), ("review_reason", "TEXT"),
    ("first_answer_at", "FLOAT"), ("start_address", "TEXT")),
    indexes=(_index("participants", "token_hash", unique=True),
             _index("participants", "experiment", "resume_hash", unique=True),
             _index("participants", "experiment", "prolific_pid", suffix="_any"),
             _index("participants", "experiment", "entry_code", suffix="_any"),
             _index("participants", "experiment", "status", "reserved_until", suffix="_any"),
             _index("participants", "start_address", "reserved_until", suffix="_any")))
"""The server's sessions, web and lab (``experiment_server.db``)."""

SERVER_SETTINGS = Table("server_settings", (("key", "TEXT PRIMARY KEY"), ("value", "TEXT")))
"""The server's settings that are not secret (which experiment the database serves, admin generation ...)."""

RATE_LIMIT_EVENTS = Table("rate_limit_events", (
    ("id", "TEXT PRIMARY KEY"), ("kind", "TEXT NOT NULL"), ("address", "TEXT NOT NULL"), ("at", "FLOAT NOT NULL")),
    indexes=(_index("rate_limit_events", "kind", "address"), _index("rate_limit_events", "kind", "at")))
"""Recent requests the rate limits count, by a keyed digest of the client address."""

PLACE_COUNTS = Table("place_counts", (("grp", "INTEGER PRIMARY KEY"), ("held", "INTEGER NOT NULL")))
"""Per group, the places held for good (``experiment_server.db.ServerDB.places``)."""

PILOT_CODES = Table("pilot_codes", (
    ("experiment", "TEXT NOT NULL"), ("code", "TEXT NOT NULL"), ("created_at", "FLOAT NOT NULL")),
    primary_key=("experiment", "code"))
"""Entry codes that start pilot sessions (``cuebench serve codes --pilot``)."""

WITHDRAWN_SESSIONS = Table("withdrawn_sessions", (("experiment", "TEXT NOT NULL"), ("mark", "TEXT PRIMARY KEY")))
"""Salted hashes of withdrawn sessions' tokens, so the server refuses them (``experiment_server.db.bury_sessions``)."""

SCHEMA_VERSIONS = Table("schema_version", (
    ("version", "INTEGER PRIMARY KEY"), ("description", "TEXT NOT NULL"), ("applied_at", "TEXT NOT NULL")))
"""One row per migration step applied (or one for the version a new database was made at): the database's
version is the largest."""

TABLES = (RESPONSES, EXCLUSIONS, WITHDRAWALS, QUESTIONNAIRE_ANSWERS, PARTICIPANTS, SERVER_SETTINGS,
          RATE_LIMIT_EVENTS, PLACE_COUNTS, PILOT_CODES, WITHDRAWN_SESSIONS, SCHEMA_VERSIONS)


# migrations ---------------------------------------------------------------------------------------------
def _create_missing_tables(conn: Database) -> None:
    """Tables an older release never made (a database only the lab runner or a model evaluation wrote has no
    server tables): a table that is not there holds nothing to carry over, so it is made as declared now."""
    for table in TABLES:
        if not conn.columns(table.name):
            conn.execute(table.create(conn))


def _add_missing_columns(conn: Database) -> None:
    """Columns added to a table after its first release (participants' ``pilot`` to ``start_address``,
    the exclusion log's ``places_counted``, the responses' ``adaptive``), appended, empty in older rows."""
    for table in TABLES:
        present = set(conn.columns(table.name))
        for name, declared in table.columns:
            if name not in present:
                conn.execute(f'ALTER TABLE "{table.name}" ADD COLUMN "{name}" {declared}')


OLD_EXCLUSION_BY = "admin (before the exclusion log)"
"""``by`` of the exclusion events made from the first releases' ``participants.excluded`` column."""


def _exclusions_out_of_participants(conn: Database) -> None:
    """The first releases marked an admin's exclusion in the participant's row (``excluded``,
    ``exclusion_reason``); the exclusion log replaced those columns without reading them, so such a
    person counted again. Each becomes an event of the log (unless the log has one for them already), then
    the columns go."""
    if "excluded" not in conn.columns(PARTICIPANTS.name):
        return
    logged = {(e, o) for e, o in conn.execute(f'SELECT experiment, observer FROM "{EXCLUSIONS.name}"').fetchall()}
    rows = conn.execute(f'SELECT experiment, code, exclusion_reason FROM "{PARTICIPANTS.name}" WHERE excluded=1 '
                        "ORDER BY created_at").fetchall()
    conn.executemany(f'INSERT INTO "{EXCLUSIONS.name}" (experiment, observer, excluded, reason, "at", "by") '
                     "VALUES (?, ?, 1, ?, ?, ?)",
                     [(experiment, code, reason or "excluded (no reason recorded)", utc_now(), OLD_EXCLUSION_BY)
                      for experiment, code, reason in rows if (experiment, code) not in logged])
    for column in ("excluded", "exclusion_reason"):
        conn.execute(f'ALTER TABLE "{PARTICIPANTS.name}" DROP COLUMN "{column}"')


def _questionnaire_out_of_participants(conn: Database) -> None:
    """A server release kept the questionnaire answers in a participants column (``questionnaire``, JSON)
    before they moved to their own table, shared with the lab: copied there (where the table has the
    person's answers already, those stay: they are the ones stored first), then the column goes."""
    if "questionnaire" not in conn.columns(PARTICIPANTS.name):
        return
    conn.execute(f'INSERT INTO "{QUESTIONNAIRE_ANSWERS.name}" (experiment, observer, answers, runner, "at") '
                 f'SELECT experiment, code, questionnaire, \'web\', ? FROM "{PARTICIPANTS.name}" '
                 "WHERE questionnaire IS NOT NULL ON CONFLICT DO NOTHING", [utc_now()])
    conn.execute(f'ALTER TABLE "{PARTICIPANTS.name}" DROP COLUMN "questionnaire"')


def _resume_map(conn: Database) -> None:
    """Prolific sessions started before the resume map existed enter it: ``resume_hash`` is the SHA-256 of
    ``prolific:<PROLIFIC_PID>:<SESSION_ID>`` (``experiment_server.db.prolific_identity``, hashed by
    ``hash_token``). Entry-code sessions cannot: their browser id was never stored; the first browser
    that opens their link takes them over (``ServerDB.start``)."""
    rows = conn.execute(f'SELECT code, prolific_pid, prolific_session FROM "{PARTICIPANTS.name}" WHERE resume_hash '
                        "IS NULL AND prolific_pid IS NOT NULL AND prolific_session IS NOT NULL").fetchall()
    conn.executemany(f'UPDATE "{PARTICIPANTS.name}" SET resume_hash=? WHERE code=?',
                     [(hashlib.sha256(f"prolific:{pid}:{session}".encode()).hexdigest(), code)
                      for code, pid, session in rows])


OLD_LOGIN_FAILURES = "admin_login_failures"
"""The first releases' login-throttling table, which stored plain client addresses."""
DIGEST_LENGTH = 32
"""Hex characters of the keyed address digests ``rate_limit_events`` stores (``ServerDB.address_digest``)."""


def _no_plain_addresses(conn: Database) -> None:
    """No client address stays in the data file: the first releases' login-failure table goes, and rate-limit
    events stored with the plain address (before the keyed digest) are deleted; they only counted recent
    requests."""
    conn.execute(f'DROP TABLE IF EXISTS "{OLD_LOGIN_FAILURES}"')
    rows = conn.execute(f'SELECT id, address FROM "{RATE_LIMIT_EVENTS.name}"').fetchall()
    conn.executemany(f'DELETE FROM "{RATE_LIMIT_EVENTS.name}" WHERE id=?',
                     [(slot,) for slot, address in rows
                      if len(address) != DIGEST_LENGTH or not set(address) <= set("0123456789abcdef")])


def _indexes(conn: Database) -> None:
    """Every declared index; the first releases' unique indexes on (experiment, Prolific ID) and (experiment,
    entry code) go, since another SESSION_ID or browser under one ID is a session of its own."""
    for columns in (("experiment", "prolific_pid"), ("experiment", "entry_code")):
        conn.execute(f'DROP INDEX IF EXISTS "{_index(PARTICIPANTS.name, *columns).name}"')
    for table in TABLES:
        for index in table.indexes:
            conn.execute(index.create(table.name))


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Database], None]


MIGRATIONS = (
    Migration(1, "tables an older release never made", _create_missing_tables),
    Migration(2, "columns added after a table's first release", _add_missing_columns),
    Migration(3, "exclusions out of the participants' rows into the exclusion log", _exclusions_out_of_participants),
    Migration(4, "questionnaire answers out of the participants' rows into their table",
              _questionnaire_out_of_participants),
    Migration(5, "Prolific sessions from before the resume map enter it", _resume_map),
    Migration(6, "no plain client address in the data file", _no_plain_addresses),
    Migration(7, "indexes as declared", _indexes),
)
"""The steps from version 0 (a release before versions) to ``SCHEMA_VERSION``, in order. A database from before
versions may be in any layout those releases made, so steps 1 to 7 check what is there before they change it."""
SCHEMA_VERSION = MIGRATIONS[-1].version


def version(db: Database) -> int:
    """The database's schema version: 0 for a database from before versions (or an empty one)."""
    if not db.columns(SCHEMA_VERSIONS.name):
        return 0
    return db.execute(f'SELECT MAX(version) FROM "{SCHEMA_VERSIONS.name}"').fetchone()[0] or 0


def migrate(db: Database, check: Callable[[Database], None] | None = None) -> None:
    """Bring the database to ``SCHEMA_VERSION`` (module docstring): nothing is written when it is current.
    ``check(conn)`` runs inside the write transaction before anything changes, and may refuse the database by
    raising (the server refuses another experiment's). A database of a newer schema is a :class:`SchemaTooNew`."""
    if _current(db):
        return
    with db.write_transaction() as conn:
        if _current(conn):  # another process made or upgraded it while this one waited
            return
        if check is not None:
            check(conn)
        at = version(conn)
        if not any(conn.columns(table.name) for table in TABLES):
            for table in TABLES:
                conn.execute(table.create(conn))
                for index in table.indexes:
                    conn.execute(index.create(table.name))
            _record(conn, SCHEMA_VERSION, "created")
            return
        for step in MIGRATIONS[at:]:
            step.apply(conn)
            _record(conn, step.version, step.description)


def _current(db: Database) -> bool:
    at = version(db)
    if at > SCHEMA_VERSION:
        raise SchemaTooNew(f"{db.where}: this database has schema version {at}, made by a newer cuebench than this "
                           f"one (which knows versions up to {SCHEMA_VERSION}); upgrade cuebench to open it")
    return at == SCHEMA_VERSION


def _record(conn: Database, number: int, description: str) -> None:
    conn.execute(f'INSERT INTO "{SCHEMA_VERSIONS.name}" (version, description, applied_at) VALUES (?, ?, ?)',
                 [number, description, utc_now()])
