"""The experiment database's one schema (``cuebench.db_schema``): a database in a layout an earlier release
left, written here as that release's literal SQL, upgrades to the current schema on SQLite and on a real
PostgreSQL server with its rows kept, and comes out exactly as a new database does (columns, types, keys,
indexes, read back from the database's own catalogue)."""

from __future__ import annotations

import hashlib
import json

import pytest

from cuebench import db_schema
from cuebench.responses import COLUMNS, ResponseStore
from cuebench.storage import open_database

BACKENDS = ["sqlite", "postgresql"]

SEQ = {"sqlite": "", "postgresql": ', "_seq" BIGINT GENERATED ALWAYS AS IDENTITY'}
"""The commit-order column the releases gave the responses and the exclusion log on PostgreSQL."""

RESPONSE_COLUMNS_0 = (
    'experiment TEXT, observer TEXT, observer_kind TEXT, session TEXT, trial_index INTEGER, trial_id TEXT, role TEXT, '
    'trial_type TEXT, condition TEXT, level INTEGER, params TEXT, category TEXT, texture_category TEXT, '
    'source_image TEXT, imagename TEXT, response TEXT, correct_answer TEXT, correct INTEGER, rt_ms FLOAT, '
    'timed_out INTEGER, timing_planned TEXT, timing_measured TEXT, frames TEXT, dropped_frames INTEGER, '
    'refresh_hz FLOAT, device TEXT, decision_rule TEXT, model_outputs TEXT, events TEXT, "group" INTEGER, '
    'created_at TEXT, excluded INTEGER, exclusion_reason TEXT')
RESPONSE_INDEXES = (
    "CREATE UNIQUE INDEX idx_responses_experiment_observer_session_trial_index ON responses "
    "(experiment, observer, session, trial_index)",
    "CREATE INDEX idx_responses_experiment_observer_trial_id ON responses (experiment, observer, trial_id)")
PARTICIPANTS_0 = ("code TEXT PRIMARY KEY, experiment TEXT NOT NULL, token_hash TEXT NOT NULL, grp INTEGER NOT NULL, "
                  "status TEXT NOT NULL, session TEXT NOT NULL, prolific_pid TEXT, study_id TEXT, "
                  "prolific_session TEXT, "
                  "entry_code TEXT, reserved_until FLOAT, created_at FLOAT NOT NULL, finished_at FLOAT, "
                  "screen_reason TEXT")
UNIQUE_IDS = tuple(f"CREATE UNIQUE INDEX idx_participants_{'_'.join(c)} ON participants ({', '.join(c)})"
                   for c in (("token_hash",), ("experiment", "prolific_pid"), ("experiment", "entry_code")))
EXCLUSIONS_0 = ('experiment TEXT NOT NULL, observer TEXT NOT NULL, excluded INTEGER NOT NULL, reason TEXT NOT NULL, '
                '"at" TEXT NOT NULL, "by" TEXT NOT NULL')

LAYOUTS = {
    "first server": [  # participants with their exclusion in the row, login failures by plain address
        f"CREATE TABLE participants ({PARTICIPANTS_0}, excluded INTEGER, exclusion_reason TEXT)", *UNIQUE_IDS,
        "CREATE TABLE server_settings (key TEXT PRIMARY KEY, value TEXT)",
        "CREATE TABLE admin_login_failures (address TEXT NOT NULL, at FLOAT NOT NULL)",
        f"CREATE TABLE responses ({RESPONSE_COLUMNS_0}{{seq}})", *RESPONSE_INDEXES],
    "questionnaire column": [  # the exclusion log, answers in a participants column, rate limits by plain address
        f"CREATE TABLE participants ({PARTICIPANTS_0}, pilot INTEGER, calibration TEXT, questionnaire TEXT)",
        *UNIQUE_IDS,
        "CREATE TABLE server_settings (key TEXT PRIMARY KEY, value TEXT)",
        "CREATE TABLE rate_limit_events (id TEXT PRIMARY KEY, kind TEXT NOT NULL, address TEXT NOT NULL, "
        "at FLOAT NOT NULL)",
        f"CREATE TABLE exclusions ({EXCLUSIONS_0}{{seq}})",
        f"CREATE TABLE responses ({RESPONSE_COLUMNS_0}, adaptive TEXT{{seq}})", *RESPONSE_INDEXES],
    "last without a version": [  # every table of today, as the release before versions made them
        f"CREATE TABLE participants ({PARTICIPANTS_0}, pilot INTEGER, calibration TEXT, runner TEXT, resume_hash TEXT, "
        "review_reason TEXT, first_answer_at FLOAT, start_address TEXT)",
        "CREATE UNIQUE INDEX idx_participants_token_hash ON participants (token_hash)",
        "CREATE UNIQUE INDEX idx_participants_experiment_resume_hash ON participants (experiment, resume_hash)",
        "CREATE INDEX idx_participants_experiment_prolific_pid_any ON participants (experiment, prolific_pid)",
        "CREATE INDEX idx_participants_experiment_entry_code_any ON participants (experiment, entry_code)",
        "CREATE INDEX idx_participants_experiment_status_reserved_until_any ON participants "
        "(experiment, status, reserved_until)",
        "CREATE INDEX idx_participants_start_address_reserved_until_any ON participants "
        "(start_address, reserved_until)",
        "CREATE TABLE server_settings (key TEXT PRIMARY KEY, value TEXT)",
        "CREATE TABLE rate_limit_events (id TEXT PRIMARY KEY, kind TEXT NOT NULL, address TEXT NOT NULL, "
        "at FLOAT NOT NULL)",
        "CREATE INDEX idx_rate_limit_events_kind_address ON rate_limit_events (kind, address)",
        "CREATE INDEX idx_rate_limit_events_kind_at ON rate_limit_events (kind, at)",
        "CREATE TABLE place_counts (grp INTEGER PRIMARY KEY, held INTEGER NOT NULL)",
        f"CREATE TABLE exclusions ({EXCLUSIONS_0}{{seq}})",
        "ALTER TABLE exclusions ADD COLUMN places_counted INTEGER",
        "CREATE INDEX idx_exclusions_experiment_observer ON exclusions (experiment, observer)",
        "CREATE INDEX idx_exclusions_places_counted ON exclusions (places_counted)",
        "CREATE TABLE pilot_codes (experiment TEXT NOT NULL, code TEXT NOT NULL, created_at FLOAT NOT NULL, "
        "PRIMARY KEY (experiment, code))",
        "CREATE TABLE withdrawn_sessions (experiment TEXT NOT NULL, mark TEXT PRIMARY KEY)",
        'CREATE TABLE questionnaire_answers (experiment TEXT NOT NULL, observer TEXT NOT NULL, answers TEXT NOT NULL, '
        'runner TEXT NOT NULL, "at" TEXT NOT NULL, PRIMARY KEY (experiment, observer))',
        'CREATE TABLE withdrawals (experiment TEXT NOT NULL, "at" TEXT NOT NULL)',
        f"CREATE TABLE responses ({RESPONSE_COLUMNS_0}, adaptive TEXT{{seq}})", *RESPONSE_INDEXES],
}
"""The layouts releases before versions left, each as that release's own SQL."""

PID, PROLIFIC_SESSION = "5f1a2b3c4d5e6f7a8b9c0d1e", "61a2b3c4d5e6f7a8b9c0d1e2"
DIGEST = "0123456789abcdef" * 2


@pytest.fixture(params=BACKENDS)
def location(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "responses.sqlite")
    return request.getfixturevalue("postgres_url")


def old_database(location, layout: str):
    """A database in ``layout`` with what that release stored: two sessions (a Prolific one the admin excluded
    in the first layout, an entry-code one with questionnaire answers in the layout that kept them in a
    column), the setting naming the experiment, client addresses, and one response."""
    db = open_database(location)
    with db.write_transaction() as conn:
        for statement in LAYOUTS[layout]:
            conn.execute(statement.format(seq=SEQ[conn.dialect]))
        columns = set(conn.columns("participants"))
        for code, pid, session, entry in (("P0PROLIFIC01", PID, PROLIFIC_SESSION, None),
                                          ("P0ENTRYCODE1", None, None, "c1")):
            conn.execute("INSERT INTO participants (code, experiment, token_hash, grp, status, session, prolific_pid, "
                         "prolific_session, entry_code, created_at) VALUES (?, 'e', ?, 0, 'finished', '1', ?, ?, ?, ?)",
                         [code, hashlib.sha256(code.encode()).hexdigest(), pid, session, entry, 1.7e9])
        if "excluded" in columns:
            conn.execute("UPDATE participants SET excluded=1, exclusion_reason='talked to a friend' "
                         "WHERE code='P0PROLIFIC01'")
        if "questionnaire" in columns:
            conn.execute("UPDATE participants SET questionnaire=? WHERE code='P0ENTRYCODE1'", [json.dumps({"age": 41})])
        conn.execute("INSERT INTO server_settings (key, value) VALUES ('experiment', 'e')")
        if layout == "first server":
            conn.execute("INSERT INTO admin_login_failures (address, at) VALUES ('203.0.113.9', 1.7e9)")
        else:
            conn.executemany("INSERT INTO rate_limit_events (id, kind, address, at) VALUES (?, 'start', ?, 1.7e9)",
                             [("plain", "203.0.113.9"), ("keyed", DIGEST)])
        conn.execute('INSERT INTO responses (experiment, observer, observer_kind, session, trial_index, trial_id, '
                     'role, response, rt_ms, "group") VALUES (\'e\', \'P0PROLIFIC01\', \'human\', \'1\', 0, \'t0\', '
                     '\'test\', \'cat\', 512.5, 0)')
    return db


def catalogue(db) -> dict:
    """The database's own description of every table: its columns in order (name, type, nullability, default,
    key) and its indexes (name, uniqueness, columns), read from SQLite's pragmas or PostgreSQL's catalogue.
    PostgreSQL's commit-order identity column is listed apart: ``ALTER TABLE ... ADD COLUMN`` appends, so
    where it stands among the others tells only when the table got its later columns."""
    if db.dialect == "sqlite":
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()]
        out = {}
        for table in tables:
            columns = [tuple(row[1:]) for row in db.execute(f'PRAGMA table_info("{table}")').fetchall()]
            indexes = {name: (unique, tuple(r[2] for r in db.execute(f'PRAGMA index_info("{name}")').fetchall()))
                       for _, name, unique, *_ in db.execute(f'PRAGMA index_list("{table}")').fetchall()}
            out[table] = (columns, indexes)
        return out
    tables = [t for (t,) in db.execute("SELECT table_name FROM information_schema.tables "
                                       "WHERE table_schema=current_schema()").fetchall()]
    out = {}
    for table in tables:
        columns = db.execute(
            "SELECT column_name, data_type, is_nullable, column_default, is_identity FROM information_schema.columns "
            "WHERE table_schema=current_schema() AND table_name=? ORDER BY ordinal_position", [table]).fetchall()
        indexes = dict(db.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname=current_schema() "
                                  "AND tablename=?", [table]).fetchall())
        out[table] = ([c for c in columns if c[-1] == "NO"], [c for c in columns if c[-1] == "YES"], indexes)
    return out


@pytest.fixture(scope="module")
def fresh_catalogue(tmp_path_factory, request):
    """What a new database holds, per backend (made once per module, on first use)."""
    made: dict = {}

    def of(backend: str) -> dict:
        if backend not in made:
            if backend == "sqlite":
                where = str(tmp_path_factory.mktemp("fresh") / "responses.sqlite")
            else:
                import uuid

                import psycopg

                server, name = request.getfixturevalue("postgres_server"), f"t_{uuid.uuid4().hex[:12]}"
                with psycopg.connect(server.url, autocommit=True) as conn:
                    conn.execute(f'CREATE DATABASE "{name}"')
                where = server.url.replace("/postgres?", f"/{name}?")
            db = open_database(where)
            db_schema.migrate(db)
            made[backend] = catalogue(db)
            db.close()
        return made[backend]

    return of


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_database_has_every_declared_table(backend, fresh_catalogue):
    fresh = fresh_catalogue(backend)
    assert set(fresh) == {t.name for t in db_schema.TABLES}
    columns, *_, indexes = fresh["participants"]
    assert [c[0] for c in columns] == [name for name, _ in db_schema.PARTICIPANTS.columns]
    assert {"idx_participants_experiment_resume_hash", "idx_participants_token_hash"} <= set(indexes)
    assert "idx_participants_experiment_prolific_pid" not in indexes


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_an_older_layout_upgrades_to_the_new_schema_with_its_rows_kept(location, layout, fresh_catalogue):
    db = old_database(location, layout)
    db_schema.migrate(db)
    assert db_schema.version(db) == db_schema.SCHEMA_VERSION
    assert catalogue(db) == fresh_catalogue(db.dialect)
    people = {row["code"]: row for row in db.dicts("SELECT * FROM participants")}
    assert set(people) == {"P0PROLIFIC01", "P0ENTRYCODE1"}
    assert people["P0PROLIFIC01"]["resume_hash"] == \
        hashlib.sha256(f"prolific:{PID}:{PROLIFIC_SESSION}".encode()).hexdigest()
    assert people["P0ENTRYCODE1"]["token_hash"] == hashlib.sha256(b"P0ENTRYCODE1").hexdigest()
    assert db.execute("SELECT value FROM server_settings WHERE key='experiment'").fetchone()[0] == "e"
    events = db.execute('SELECT experiment, observer, excluded, reason FROM exclusions').fetchall()
    assert events == ([("e", "P0PROLIFIC01", 1, "talked to a friend")] if layout == "first server" else [])
    answers = db.execute("SELECT observer, answers, runner FROM questionnaire_answers").fetchall()
    assert [(o, json.loads(a), r) for o, a, r in answers] == \
        ([("P0ENTRYCODE1", {"age": 41}, "web")] if layout == "questionnaire column" else [])
    addresses = [a for (a,) in db.execute("SELECT address FROM rate_limit_events").fetchall()]
    assert addresses == ([] if layout == "first server" else [DIGEST])
    assert db.execute('SELECT observer, response, rt_ms, "group" FROM responses').fetchall() == \
        [("P0PROLIFIC01", "cat", 512.5, 0)]
    steps = db.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    assert [v for (v,) in steps] == [m.version for m in db_schema.MIGRATIONS]
    db_schema.migrate(db)  # current: nothing more is recorded
    assert db.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == len(steps)
    db.close()


def test_processes_opening_an_old_database_at_once_upgrade_it_once(location, at_once):
    old_database(location, "first server").close()
    assert at_once(lambda _: ResponseStore(location).close(), range(4)) == []
    db = open_database(location)
    assert db.execute("SELECT COUNT(*), MAX(version) FROM schema_version").fetchone() == \
        (len(db_schema.MIGRATIONS), db_schema.SCHEMA_VERSION)
    db.close()


def test_a_database_of_a_newer_schema_is_refused_with_what_to_do(tmp_path):
    store = ResponseStore(tmp_path / "responses.sqlite")
    store.conn.execute("INSERT INTO schema_version (version, description, applied_at) VALUES (?, 'later', 'now')",
                       [db_schema.SCHEMA_VERSION + 1])
    store.close()
    with pytest.raises(db_schema.SchemaTooNew, match=f"schema version {db_schema.SCHEMA_VERSION + 1}, made by a newer "
                                                    "cuebench.*upgrade cuebench"):
        ResponseStore(tmp_path / "responses.sqlite")


def test_the_response_table_is_the_response_rows_model_column_for_column():
    """A field added to ``ResponseRow`` needs its column in ``db_schema.RESPONSES`` and a migration step."""
    types = {str: "TEXT", int: "INTEGER", float: "FLOAT"}
    assert db_schema.RESPONSES.columns == tuple((name, types[kind]) for name, (kind, _) in COLUMNS.items())
