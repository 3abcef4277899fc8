"""The server on a database the first server release left (its SQL written out here): the person its admin
excluded in the participant's row stays excluded and holds no place, and the Prolific session from before
the resume map is found again from its link (``cuebench.db_schema``'s steps, read by the server's own rules)."""

from __future__ import annotations

import hashlib

import pytest

from cuebench.storage import open_database
from experiment_server.db import ServerDB, prolific_identity

PID, PROLIFIC_SESSION = "5f1a2b3c4d5e6f7a8b9c0d1e", "61a2b3c4d5e6f7a8b9c0d1e2"
FIRST_RELEASE = (
    "CREATE TABLE participants (code TEXT PRIMARY KEY, experiment TEXT NOT NULL, token_hash TEXT NOT NULL, "
    "grp INTEGER NOT NULL, status TEXT NOT NULL, session TEXT NOT NULL, prolific_pid TEXT, study_id TEXT, "
    "prolific_session TEXT, entry_code TEXT, reserved_until FLOAT, created_at FLOAT NOT NULL, finished_at FLOAT, "
    "screen_reason TEXT, excluded INTEGER, exclusion_reason TEXT)",
    "CREATE UNIQUE INDEX idx_participants_token_hash ON participants (token_hash)",
    "CREATE UNIQUE INDEX idx_participants_experiment_prolific_pid ON participants (experiment, prolific_pid)",
    "CREATE UNIQUE INDEX idx_participants_experiment_entry_code ON participants (experiment, entry_code)",
    "CREATE TABLE server_settings (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE admin_login_failures (address TEXT NOT NULL, at FLOAT NOT NULL)")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_server_goes_on_with_a_first_release_database(backend, tmp_path, request):
    location = str(tmp_path / "responses.sqlite") if backend == "sqlite" else request.getfixturevalue("postgres_url")
    old = open_database(location)
    with old.write_transaction() as conn:
        for statement in FIRST_RELEASE:
            conn.execute(statement)
        conn.executemany(
            "INSERT INTO participants (code, experiment, token_hash, grp, status, session, prolific_pid, study_id, "
            "prolific_session, entry_code, created_at, finished_at, excluded, exclusion_reason) "
            "VALUES (?, 'e', ?, ?, 'finished', '1', ?, ?, ?, ?, 1.7e9, 1.7e9, ?, ?)",
            [("P0PROLIFIC01", hashlib.sha256(b"a").hexdigest(), 0, PID, "s1", PROLIFIC_SESSION, None, 1, "no consent"),
             ("P0ENTRYCODE1", hashlib.sha256(b"b").hexdigest(), 0, None, None, None, "c1", 0, None),
             ("P0ENTRYCODE2", hashlib.sha256(b"c").hexdigest(), 1, None, None, None, "c2", None, None)])
        conn.execute("INSERT INTO server_settings (key, value) VALUES ('experiment', 'e')")
    old.close()
    db = ServerDB(location, "e")
    try:
        excluded = db.get("P0PROLIFIC01")
        assert excluded.exclusion is not None and excluded.exclusion.reason == "no consent"
        assert db.get("P0ENTRYCODE1").exclusion is None
        assert db.places(2)[0] == [1, 1]  # the excluded person's place in group 0 is free
        again, _ = db.start("e", 2, prolific_pid=PID, study_id="s1", prolific_session=PROLIFIC_SESSION,
                            identity=prolific_identity(PID, PROLIFIC_SESSION))
        assert again.code == "P0PROLIFIC01"
    finally:
        db.close()
