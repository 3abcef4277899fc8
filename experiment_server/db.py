"""The server's own tables (participants, settings, rate limits) beside the responses, in the experiment's database.

Responses belong to ``cuebench.responses.ResponseStore``; this module keeps who takes
part, in which group, with which session token, the settings that are not secret (which
experiment the database serves, the admin sessions' generation) and the recent requests
that rate limits count. Secrets are not here (``server_secrets``). Same database (the experiment's
responses.sqlite or PostgreSQL, ``cuebench.storage``), separate tables, same durability.
Session tokens are stored only as SHA-256 hashes.

A Prolific ID or an entry code never refuses a start: what the link names is not proof of who
opens it. Someone who learnt another person's Prolific ID could otherwise start first with
any SESSION_ID and lock that person out ("already taken part"), and a refusal of a code
"already used" would tell anyone trying codes which ones are handed out. A session is what
its start request carried (``resume_hash``, UNIQUE): the Prolific ID with Prolific's
per-attempt SESSION_ID (which is the submission's id in Prolific, and only the person's own
link carries it), or the entry code with the browser's id. A second session under one
Prolific ID or entry code is a session of its own, and every session sharing that ID is
marked for review (``shared_id_note``): Prolific lets each account submit once, so the
researcher approves the one whose SESSION_ID is the submission's.

Places: a new session *holds* its group slot for a few minutes (``hold_seconds``) until its first
stored answer, then each answer renews a longer reservation; a client address may hold only a few
never-answered live sessions (``start``). The slots held for good are counted per group in
``place_counts`` as sessions finish and exclusions change (``places``), so a consent page or a start
never counts the whole study; the live holds are an index search.

A session is resumed through a server-side map, not through its token: ``resume_hash`` is
the SHA-256 of what the start request carried (Prolific ID and SESSION_ID, entry code and
browser id, or the form's nonce), so opening the link again finds the session even after
``retire_tokens`` (new keys: the old tokens may have been computed by whoever had the old
ones) and hands out a new token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from cuebench import db_schema, exclusions, questionnaire
from cuebench.errors import CuebenchError
from cuebench.responses import TABLE as RESPONSES
from cuebench.storage import DEFAULT_TIMEOUT_S, Database, open_database

from .assignment import FILLING_STATUSES, HOLD_SECONDS, RESERVATION_SECONDS, finished_fill, least_filled

PARTICIPANTS = db_schema.PARTICIPANTS.name
SETTINGS = db_schema.SERVER_SETTINGS.name
RATE_EVENTS = db_schema.RATE_LIMIT_EVENTS.name
PILOT_CODES = db_schema.PILOT_CODES.name
ADMIN_GENERATION = "admin_generation"
WITHDRAWALS_COUNTED = "places_withdrawals"
"""The setting holding how many withdrawals the place counts have taken in (``ServerDB._catch_up``)."""
PLACE_COUNTS = db_schema.PLACE_COUNTS.name
"""Per group, the places held for good (``assignment.FILLING_STATUSES`` and lab sessions, neither pilot nor
excluded), kept as each changes (``ServerDB.places``), so a consent page or a start reads a few rows
instead of counting every session of the study."""
COUNTED = "places_counted"
"""The exclusions column marking an event the place counts have taken in (``ServerDB._catch_up``)."""
WITHDRAWN = db_schema.WITHDRAWN_SESSIONS.name
"""What stays of a withdrawn person's sessions: salted hashes that let the server refuse them (``bury_sessions``)."""
WITHDRAWAL_SALT = "withdrawal_salt"
OUTCOMES = ("finished", "screened_out", "failed_attention")
"""Final statuses; each has its own completion code."""
EXPIRED = "expired"
"""A web session that ended without finishing: stored when it ran past ``cuebench serve --time-limit``, and what
the admin page and the exports call a session still in progress whose reservation lapsed (``exports.status_now``)."""
STATUSES = ("in_progress", *OUTCOMES, EXPIRED)


LAB = "lab"
"""The ``runner`` of a session ``cuebench lab run`` registered (a web session's is ``web``, or empty in old tables)."""


class ForeignDatabase(CuebenchError):
    """The database already holds the server tables or responses of another experiment."""


class StudyFull(CuebenchError):
    """The study has reached its recruitment target (``study_rules.StudyRules.full``): no new session starts.
    ``for_good`` when the finished sessions alone reach it, else live sessions hold the places (one may lapse)."""

    def __init__(self, for_good: bool):
        super().__init__("the study has all the participants it needs" if for_good else
                         "every place of the study is taken by people taking part now")
        self.for_good = for_good


class TooManyWaiting(CuebenchError):
    """The client's address holds as many live sessions without an answer as it may (``--unanswered-per-address``)."""

    def __init__(self):
        super().__init__("sessions started from this address have not begun yet")


class PlaceLost(CuebenchError):
    """A session whose reservation lapsed comes back while every place of the study is taken."""


class SessionWithdrawn(CuebenchError):
    """A request of a session whose person withdrew (``cuebench withdraw``): nothing of it is stored any more."""

    def __init__(self):
        super().__init__("the person of this session withdrew from the study and their data were erased; "
                         "nothing more is stored")


class CodeTaken(CuebenchError):
    """A lab participant code that a web participant of the experiment already has."""


@dataclass(frozen=True)
class Participant:
    code: str
    experiment: str
    group: int
    status: str
    session: str
    prolific_pid: str | None
    study_id: str | None
    prolific_session: str | None
    entry_code: str | None
    reserved_until: float | None
    created_at: float
    finished_at: float | None
    screen_reason: str | None
    pilot: bool
    exclusion: exclusions.Exclusion | None
    """The exclusion in force (``cuebench.exclusions``), None when the person counts."""
    calibration: dict | None = None
    """The web task's screen calibration (pixels per mm, viewing distance, stimulus size), once made."""
    questionnaire: dict | None = None
    """The answers to the study's questionnaire, once given (``cuebench.questionnaire``'s table)."""
    runner: str = "web"
    """``web`` (started through the server) or ``lab`` (``cuebench lab run``, registered by ``record_lab_session``)."""
    review_reason: str | None = None
    """Why a finished session needs a look before it is approved (``plausibility``), if it does."""
    first_answer_at: float | None = None
    """When the session's first answer was stored; None while it only holds its place (``ServerDB.start``)."""

    @property
    def is_prolific(self) -> bool:
        return self.prolific_pid is not None

    @property
    def observer_kind(self) -> str:
        """What the response rows call this person: a pilot (``serve codes --pilot``) never counts as a human."""
        return "pilot" if self.pilot else "human"

    @property
    def excluded(self) -> int:
        return int(self.exclusion is not None)

    @property
    def exclusion_reason(self) -> str | None:
        return self.exclusion.reason if self.exclusion else None


@dataclass(frozen=True)
class Standing:
    """A participant as the admin page counts them (``ServerDB.standings``): the fields of :class:`Participant`
    that ``exports.status_now`` and ``admin.progress_column`` read."""
    code: str
    group: int
    status: str
    runner: str
    pilot: bool
    reserved_until: float | None
    exclusion: exclusions.Exclusion | None
    review_reason: str | None
    first_answer_at: float | None = None
    """When the session's first answer was stored; None while it only holds its place (``ServerDB.start``)."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def prolific_identity(prolific_pid: str, prolific_session: str) -> str:
    """What identifies a Prolific session's start request: the Prolific ID with Prolific's
    per-attempt SESSION_ID, which only the participant's link carries."""
    return f"prolific:{prolific_pid}:{prolific_session}"


class ServerDB:
    """Participants, reservations and settings; ``clock`` is injectable so tests can let reservations lapse.

    Safe with any number of threads and server processes: each thread has its own
    connection, every write is one transaction (``cuebench.storage``), and nothing a
    request depends on is kept in a process's memory."""

    def __init__(self, location: str | Path, experiment: str, clock: Callable[[], float] = time.time,
                 reservation_seconds: float = RESERVATION_SECONDS, timeout: float = DEFAULT_TIMEOUT_S,
                 hold_seconds: float = HOLD_SECONDS):
        self.location = location
        self.experiment = experiment
        self.clock = clock
        self.reservation_seconds = reservation_seconds
        self.hold_seconds = min(hold_seconds, reservation_seconds)
        """How long a new session holds its place before its first stored answer (``assignment.HOLD_SECONDS``)."""
        self.timeout = timeout
        self._local = threading.local()
        self._ensure_schema()

    @property
    def db(self) -> Database:
        """This thread's connection: the database serialises writers across connections,
        whereas one connection shared by server threads mixes their transactions."""
        if getattr(self._local, "db", None) is None or not self._local.db.usable:
            self._local.db = open_database(self.location, self.timeout)
        return self._local.db

    def _ensure_schema(self) -> None:
        """Bring the database to the current schema (``cuebench.db_schema``, refusing another experiment's before
        anything changes) and record which experiment it serves. The place counts are made again from the
        sessions on every opening, so nothing a writer outside the server did (``cuebench withdraw``) can leave
        them wrong."""
        db_schema.migrate(self.db, check=self._refuse_foreign)
        with self.db.write_transaction() as conn:
            self._refuse_foreign(conn)
            conn.execute(f"INSERT INTO {SETTINGS}(key, value) VALUES ('experiment', ?) ON CONFLICT DO NOTHING",
                         [self.experiment])
            self._recount_places(conn)

    def _refuse_foreign(self, conn: Database) -> None:
        """Refuse a database that already holds another experiment's participants or responses."""
        stored = conn.execute(f"SELECT value FROM {SETTINGS} WHERE key='experiment'").fetchone() \
            if conn.columns(SETTINGS) else None
        names = {stored[0]} if stored else {
            row[0] for table in (PARTICIPANTS, RESPONSES) if conn.columns(table)
            for row in conn.execute(f'SELECT DISTINCT experiment FROM "{table}"').fetchall()}
        foreign = sorted(names - {self.experiment})
        if foreign:
            raise ForeignDatabase(f"{conn.where}: this database belongs to experiment {foreign[0]!r}, not "
                                  f"{self.experiment!r}; serve that experiment's folder, or give this one its "
                                  "own database")

    # settings -------------------------------------------------------------------------
    def setting(self, key: str) -> str | None:
        return _setting(self.db, key)

    def take_settings(self, keys: tuple[str, ...]) -> dict[str, str]:
        """The settings named ``keys`` that are stored, for moving them elsewhere (``forget_settings``)."""
        marks = ",".join("?" for _ in keys)
        return dict(self.db.execute(f"SELECT key, value FROM {SETTINGS} WHERE key IN ({marks})", list(keys)).fetchall())

    def forget_settings(self, keys: tuple[str, ...]) -> None:
        """Delete settings so that nothing of them stays in the database's files (``Database.forget_deleted``)."""
        marks = ",".join("?" for _ in keys)
        self.db.secure_delete()
        with self.db.write_transaction() as conn:
            conn.execute(f"DELETE FROM {SETTINGS} WHERE key IN ({marks})", list(keys))
        self.db.forget_deleted([SETTINGS])

    def admin_generation(self) -> int:
        """The generation admin sessions must carry; ``bump_admin_generation`` ends every older session."""
        return int(self.setting(ADMIN_GENERATION) or 0)

    def bump_admin_generation(self) -> int:
        with self.db.write_transaction() as conn:
            row = conn.execute(f"SELECT value FROM {SETTINGS} WHERE key=?", [ADMIN_GENERATION]).fetchone()
            generation = int(row[0] if row else 0) + 1
            conn.execute(f"INSERT INTO {SETTINGS}(key, value) VALUES (?, ?) "
                         "ON CONFLICT(key) DO UPDATE SET value=excluded.value", [ADMIN_GENERATION, str(generation)])
        return generation

    # participants ---------------------------------------------------------------------
    def start(self, experiment: str, n_groups: int, *, prolific_pid: str | None = None, study_id: str | None = None,
              prolific_session: str | None = None, entry_code: str | None = None, identity: str | None = None,
              token: str | None = None, pilot: bool = False,
              full: Callable[[list[int]], bool] | None = None, address: str | None = None, unanswered_cap: int | None = None) -> tuple[Participant, str]:
        """Create a participant in the least filled group with a live reservation; returns it and its secret token.

        ``identity`` is what the start request carried (``participant._start_identity``) and
        ``token`` the one derived from it: a repeated start request (a double click, a retry
        after a lost reply, the link opened again) returns the participant it created, with
        that token, or through the resume map (``resume_hash``) with a new one when the keys
        changed since. An entry-code session from before the map is taken over by the first
        browser that opens its link (as then). Another identity under the same Prolific ID or
        entry code is a new session (module docstring). Excluded people and pilots hold no
        slot, so their group is refilled by the next real participant. ``full``
        (``study_rules.StudyRules.full``) closes the study: counted in the same transaction as the
        insert, so concurrent arrivals cannot overshoot the target; a pilot, and a person coming back
        to their own session, still get in; anyone else gets :class:`StudyFull`. A new session holds its
        place for ``hold_seconds`` until its first stored answer (``renew``);
        ``address`` (the client's, stored as its keyed digest until that first answer) may hold at most
        ``unanswered_cap`` such never-answered live sessions, else :class:`TooManyWaiting`. A pilot holds
        no place and is never capped. Reads the place counts and the live sessions, never every session."""
        token = token or secrets.token_urlsafe(24)
        resume = hash_token(identity) if identity else None
        code = "P" + secrets.token_hex(6).upper()
        now = self.clock()
        try:
            with self.db.write_transaction() as conn:  # count and insert in one write transaction: no two arrivals race
                self._refuse_withdrawn(conn, [hash_token(token), resume])
                taken_over = resume is not None and entry_code is not None and conn.execute(
                    f"UPDATE {PARTICIPANTS} SET token_hash=?, resume_hash=? WHERE experiment=? AND entry_code=? AND "
                    "COALESCE(resume_hash, '')='' AND COALESCE(runner, 'web')='web'",  # the entry-code index, not
                    # the resume map's, whose NULL part (sessions from before the map) may be large
                    [hash_token(token), resume, experiment, entry_code]).rowcount
                if not taken_over:
                    if self._stale(conn):
                        self._catch_up(conn)
                    held = self._held(conn, n_groups)
                    fill = [h + live for h, live in zip(held, self._live(conn, n_groups, now))]
                    digest = self.address_digest(address) if address is not None and not pilot else None
                    refusal = None if pilot else StudyFull(full(held)) if full is not None and full(fill) else \
                        TooManyWaiting() if digest is not None and unanswered_cap is not None and \
                        self._waiting(conn, digest, now) >= unanswered_cap else None
                    if refusal is not None and not self._known(conn, experiment, token, resume):
                        raise refusal
                    group = least_filled(fill)
                    conn.execute(
                        f"INSERT INTO {PARTICIPANTS}(code, experiment, token_hash, grp, status, session, prolific_pid, "
                        "study_id, prolific_session, entry_code, reserved_until, created_at, pilot, runner, "
                        "resume_hash, start_address) VALUES (?, ?, ?, ?, 'in_progress', '1', ?, ?, ?, ?, ?, ?, ?, 'web', "
                        "?, ?)",
                        [code, experiment, hash_token(token), group, prolific_pid, study_id, prolific_session,
                         entry_code, now + self.hold_seconds, now, int(pilot),
                         resume, digest])
        except self.db.integrity_errors:  # this identity started a session already
            again = self.by_token(token) or (resume and self._resume(experiment, resume, token))
            if again is None or again.experiment != experiment:
                raise
            return again, token
        return (self.by_token(token) if taken_over else self.get(code)), token

    def _waiting(self, conn: Database, digest: str, now: float) -> int:
        """The live never-answered sessions an address (its digest) started: the address's part of an index."""
        return conn.execute(f"SELECT COUNT(*) FROM {PARTICIPANTS} WHERE start_address=? AND reserved_until>? AND "
                            "status='in_progress' AND experiment=?", [digest, now, self.experiment]).fetchone()[0]

    @staticmethod
    def _known(conn: Database, experiment: str, token: str, resume: str | None) -> bool:
        """Whether a start request belongs to a session that exists (the person comes back to it)."""
        return conn.execute(f"SELECT 1 FROM {PARTICIPANTS} WHERE experiment=? AND (token_hash=? OR resume_hash=?)",
                            [experiment, hash_token(token), resume]).fetchone() is not None

    def _resume(self, experiment: str, resume: str, token: str) -> Participant | None:
        """The session this start request's identity started, now reached by ``token``; None when there is none."""
        cursor = self.db.execute(f"UPDATE {PARTICIPANTS} SET token_hash=? WHERE experiment=? AND resume_hash=?",
                                 [hash_token(token), experiment, resume])
        return self.by_token(token) if cursor.rowcount else None

    def retire_tokens(self) -> int:
        """Give every session a new random token that nobody knows (when the keys change: the
        old tokens may have been computed from the old ones); participants go on by opening
        their link again (``start`` finds them through the resume map). How many were retired."""
        with self.db.write_transaction() as conn:
            codes = [code for (code,) in conn.execute(f"SELECT code FROM {PARTICIPANTS}").fetchall()]
            conn.executemany(f"UPDATE {PARTICIPANTS} SET token_hash=? WHERE code=?",
                             [(hash_token(secrets.token_urlsafe(24)), code) for code in codes])
        return len(codes)

    def record_lab_session(self, experiment: str, code: str, session: str, group: int, pilot: bool,
                           finished: bool) -> Participant:
        """Register a lab session as a participant (once; a resumed session keeps its row), so the
        admin page lists it, can exclude it, and the participants export has it; ``finished``
        when its last trial is stored. A lab session holds its group's slot from its start
        (``_slot_holders``): the person is in the room."""
        now = self.clock()
        with self.db.write_transaction() as conn:
            row = conn.execute(f"SELECT runner FROM {PARTICIPANTS} WHERE code=?", [code]).fetchone()
            if row is not None and row[0] != LAB:
                raise CodeTaken(f"participant code {code!r} belongs to a web participant of this database; "
                                "give the lab participant another code")
            if row is None:
                self._hold_exclusions(conn)
                if self._stale(conn):  # before the session holds its place: its earlier events change nothing
                    self._catch_up(conn)
                legacy = self._holder_group(conn, code)  # counted by its answers, from a run before registration
                if legacy is not None and not pilot and not self._excluded_among(conn, [code]):
                    self._add_place(conn, legacy, -1)
                conn.execute(
                    f"INSERT INTO {PARTICIPANTS}(code, experiment, token_hash, grp, status, session, created_at, "
                    "pilot, runner) VALUES (?, ?, ?, ?, 'in_progress', ?, ?, ?, ?)",
                    [code, experiment, hash_token(secrets.token_urlsafe(24)), group, session, now, int(pilot), LAB])
                if not pilot and not self._excluded_among(conn, [code]):
                    self._add_place(conn, group, 1)
            if finished:
                conn.execute(f"UPDATE {PARTICIPANTS} SET status='finished', finished_at=? "
                             "WHERE code=? AND status='in_progress'", [now, code])
        return self.get(code)

    def get(self, code: str) -> Participant | None:
        return self._one("code=?", [code])

    def by_token(self, token: str) -> Participant | None:
        return self._one("token_hash=?", [hash_token(token)])

    def _one(self, where: str, params: list) -> Participant | None:
        rows = self.db.dicts(f"{_WITH_SHARED_IDS} WHERE {where}", params)
        if not rows:
            return None
        experiment, code = rows[0]["experiment"], rows[0]["code"]
        return _participant(rows[0], exclusions.current(self.db, experiment, code),
                            questionnaire.stored_answers(self.db, experiment, code))

    def participants(self, experiment: str, offset: int = 0, limit: int | None = None) -> list[Participant]:
        """The participants in the order they started; ``offset``/``limit``: one page of them (the admin page)."""
        excluded = exclusions.current(self.db, experiment)
        answered = questionnaire.stored_answers(self.db, experiment)
        page = f" LIMIT {int(limit)} OFFSET {int(offset)}" if limit is not None else ""
        return [_participant(r, excluded, answered) for r in self.db.dicts(
            f"{_WITH_SHARED_IDS} WHERE experiment=? ORDER BY created_at, code{page}", [experiment])]

    def standings(self, experiment: str) -> list[Standing]:
        """What the admin page's counts need of every participant, without their answers or calibration:
        a study of 20,000 sessions is counted in one light query."""
        excluded = exclusions.current(self.db, experiment)
        return [Standing(code, group, status, runner or "web", bool(pilot), until, excluded.get(code), review, first)
                for code, group, status, runner, pilot, until, review, first in self.db.execute(
                    f"SELECT code, grp, status, runner, pilot, reserved_until, review_reason, first_answer_at FROM "
                    f"{PARTICIPANTS} WHERE experiment=?", [experiment]).fetchall()]

    @staticmethod
    def _slot_holders(conn: Database, experiment: str) -> list[tuple[int, str, float | None]]:
        """``(group, status, reserved_until)`` of those who may hold a group slot, neither pilots
        nor currently excluded: the web's participants, and the lab's sessions (registered ones,
        and people in the response table of lab runs from before registration), each lab
        session holding its group's slot for good."""
        excluded = exclusions.current(conn, experiment)
        rows = conn.execute(f"SELECT code, grp, CASE WHEN runner='{LAB}' THEN '{FILLING_STATUSES[0]}' ELSE status END, "
                            f"reserved_until FROM {PARTICIPANTS} WHERE experiment=? AND COALESCE(pilot, 0)=0",
                            [experiment]).fetchall()
        lab = conn.execute(
            f'SELECT DISTINCT observer, "group" FROM "{RESPONSES}" WHERE experiment=? AND observer_kind=\'human\' '
            f'AND "group" IS NOT NULL AND observer NOT IN (SELECT code FROM {PARTICIPANTS} WHERE experiment=?)',
            [experiment, experiment]).fetchall() if conn.columns(RESPONSES) else []
        return [(group, status, until) for code, group, status, until in rows if code not in excluded] + \
            [(group, FILLING_STATUSES[0], None) for observer, group in lab if observer not in excluded]

    # places -----------------------------------------------------------------------------
    @staticmethod
    def _hold_exclusions(conn: Database) -> None:
        """Make exclusion events wait until this transaction ends (PostgreSQL; SQLite's write transaction
        already excludes every other writer): the place counts and the events they have taken in change
        together, and no event commits between reading the log and marking what was read."""
        if conn.dialect == "postgresql":
            conn.execute(f'LOCK TABLE "{exclusions.TABLE}" IN SHARE ROW EXCLUSIVE MODE')

    def _recount_places(self, conn: Database) -> None:
        """Count the places held for good from every session (``_slot_holders``), once per opening and after
        a withdrawal; every exclusion event is then taken in."""
        self._hold_exclusions(conn)
        holders = self._slot_holders(conn, self.experiment)
        held = finished_fill(1 + max((g for g, _, _ in holders), default=0), holders)
        conn.execute(f"DELETE FROM {PLACE_COUNTS}")
        conn.executemany(f"INSERT INTO {PLACE_COUNTS}(grp, held) VALUES (?, ?)", list(enumerate(held)))
        conn.execute(f'UPDATE "{exclusions.TABLE}" SET {COUNTED}=1 WHERE {COUNTED} IS NULL')
        self._set_setting(conn, WITHDRAWALS_COUNTED, str(exclusions.withdrawals(conn, self.experiment)))

    @staticmethod
    def _set_setting(conn: Database, key: str, value: str) -> None:
        conn.execute(f"INSERT INTO {SETTINGS}(key, value) VALUES (?, ?) "
                     "ON CONFLICT(key) DO UPDATE SET value=excluded.value", [key, value])

    def _stale(self, conn: Database) -> bool:
        """Whether an exclusion or a withdrawal happened that the place counts have not taken in: two reads
        of an index and a small table, whatever the study's size."""
        stored = conn.execute(f"SELECT value FROM {SETTINGS} WHERE key=?", [WITHDRAWALS_COUNTED]).fetchone()
        return conn.execute(f'SELECT 1 FROM "{exclusions.TABLE}" WHERE {COUNTED} IS NULL LIMIT 1').fetchone() \
            is not None or stored is None or int(stored[0]) != exclusions.withdrawals(conn, self.experiment)

    def _catch_up(self, conn: Database) -> None:
        """Take the exclusion events not yet counted into the place counts (inside a write transaction): for
        each person they name, the state the counts knew (the latest counted event) against the state now
        (the latest event); a person holding a place for good gives it up or takes it back. An event another
        writer has not committed yet is simply taken in next time. A withdrawal (rows deleted by
        ``cuebench withdraw``) makes the counts again from the sessions."""
        self._hold_exclusions(conn)
        stored = conn.execute(f"SELECT value FROM {SETTINGS} WHERE key=?", [WITHDRAWALS_COUNTED]).fetchone()
        if stored is None or int(stored[0]) != exclusions.withdrawals(conn, self.experiment):
            self._recount_places(conn)
            return
        named = {o for (o,) in conn.execute(f'SELECT DISTINCT observer FROM "{exclusions.TABLE}" WHERE experiment=? '
                                            f"AND {COUNTED} IS NULL", [self.experiment]).fetchall()}
        for observer in sorted(named):
            events = conn.execute(f'SELECT excluded, {COUNTED} FROM "{exclusions.TABLE}" WHERE experiment=? AND '
                                  f"observer=? ORDER BY {conn.row_order}", [self.experiment, observer]).fetchall()
            counted = [bool(x) for x, done in events if done]
            before, now = bool(counted and counted[-1]), bool(events[-1][0])
            group = self._holder_group(conn, observer)
            if before != now and group is not None:
                self._add_place(conn, group, -1 if now else 1)
            conn.execute(f'UPDATE "{exclusions.TABLE}" SET {COUNTED}=1 WHERE experiment=? AND observer=?',
                         [self.experiment, observer])
        conn.execute(f'UPDATE "{exclusions.TABLE}" SET {COUNTED}=1 WHERE {COUNTED} IS NULL AND experiment<>?',
                     [self.experiment])

    def _holder_group(self, conn: Database, code: str) -> int | None:
        """The group whose place ``code`` holds for good (a finished web session or a lab session, no pilot),
        or None; a lab observer from before registration by their stored answers."""
        row = conn.execute(f"SELECT grp, status, runner, pilot FROM {PARTICIPANTS} WHERE code=?", [code]).fetchone()
        if row is not None:
            group, status, runner, pilot = row
            return group if not pilot and (status in FILLING_STATUSES or runner == LAB) else None
        found = conn.execute(f'SELECT "group" FROM "{RESPONSES}" WHERE experiment=? AND observer=? AND '
                             "observer_kind='human' AND \"group\" IS NOT NULL LIMIT 1", [self.experiment, code]).fetchone()
        return found[0] if found else None

    @staticmethod
    def _add_place(conn: Database, group: int, change: int) -> None:
        conn.execute(f"INSERT INTO {PLACE_COUNTS}(grp, held) VALUES (?, ?) "
                     f"ON CONFLICT(grp) DO UPDATE SET held={PLACE_COUNTS}.held + excluded.held", [group, change])

    def _held(self, conn: Database, n_groups: int) -> list[int]:
        held = dict(conn.execute(f"SELECT grp, held FROM {PLACE_COUNTS}").fetchall())
        return [held.get(g, 0) for g in range(n_groups)]

    def _live(self, conn: Database, n_groups: int, now: float) -> list[int]:
        """Per group, the web sessions in progress with a live reservation, neither pilot nor excluded: a
        search of the live part of an index, however many sessions the study has had."""
        rows = conn.execute(f"SELECT code, grp FROM {PARTICIPANTS} WHERE experiment=? AND status='in_progress' AND "
                            "reserved_until>? AND COALESCE(pilot, 0)=0", [self.experiment, now]).fetchall()
        excluded = self._excluded_among(conn, [code for code, _ in rows])
        live = [0] * n_groups
        for code, group in rows:
            if code not in excluded:
                live[group] += 1
        return live

    def _excluded_among(self, conn: Database, codes: list[str]) -> set[str]:
        """Which of ``codes`` are excluded now (their latest exclusion event excludes)."""
        latest: dict[str, bool] = {}
        for k in range(0, len(codes), 500):
            chunk = codes[k:k + 500]
            for observer, excluded in conn.execute(
                    f'SELECT observer, excluded FROM "{exclusions.TABLE}" WHERE experiment=? AND observer IN '
                    f"({','.join('?' for _ in chunk)}) ORDER BY {conn.row_order}", [self.experiment, *chunk]).fetchall():
                latest[observer] = bool(excluded)
        return {code for code, excluded in latest.items() if excluded}

    def held_places(self, n_groups: int) -> list[int]:
        """Per group, the places held for good (``places``' first part), as the consent page reads them."""
        conn = self.db
        if self._stale(conn):
            with conn.write_transaction() as writing:
                self._catch_up(writing)
        return self._held(conn, n_groups)

    def places(self, n_groups: int) -> tuple[list[int], list[int]]:
        """Per group: the places held for good, and those held by live reservations (the two parts of
        ``assignment.group_fill``), from the counts and the live sessions alone. The counts are brought up
        to date first when an exclusion or a withdrawal happened since (a write, rare)."""
        return self.held_places(n_groups), self._live(self.db, n_groups, self.clock())

    def started(self, experiment: str, resume: str) -> bool:
        """Whether a session was started with this resume hash (the person comes back to it)."""
        return self.db.execute(f"SELECT 1 FROM {PARTICIPANTS} WHERE experiment=? AND resume_hash=?",
                               [experiment, resume]).fetchone() is not None

    def renew(self, codes: list[str], conn: Database | None = None) -> None:
        """Extend in-progress participants' reservations (on every stored trial); ``conn`` runs
        it inside a caller's transaction, so the answers and the renewal share one commit. The first
        answer turns a session's short hold into a reservation and forgets the address it started from."""
        now = self.clock()
        (conn or self.db).executemany(
            f"UPDATE {PARTICIPANTS} SET reserved_until=?, first_answer_at=COALESCE(first_answer_at, ?), "
            "start_address=NULL WHERE code=? AND status='in_progress'",
            [(now + self.reservation_seconds, now, code) for code in codes])

    def keep_place(self, participant: Participant, n_groups: int, full: Callable[[list[int]], bool] | None) -> None:
        """A session whose reservation lapsed takes a place again before it stores more, if one is free
        (``full`` says whether the study takes nobody more; None: uncapped); else :class:`PlaceLost`. A live
        session, a pilot and a lab session go on as they are. Counted in one write transaction with the
        taking, like a start, so returning sessions cannot overshoot the target."""
        now = self.clock()
        if participant.pilot or participant.runner == LAB or (participant.reserved_until or 0) > now:
            return
        with self.db.write_transaction() as conn:
            row = conn.execute(f"SELECT reserved_until, first_answer_at FROM {PARTICIPANTS} WHERE code=? AND "
                               "status='in_progress'", [participant.code]).fetchone()
            if row is None or (row[0] or 0) > now:
                return
            if full is not None:
                if self._stale(conn):
                    self._catch_up(conn)
                fill = [h + live for h, live in zip(self._held(conn, n_groups), self._live(conn, n_groups, now))]
                if full(fill):
                    raise PlaceLost("every place of the study is taken")
            conn.execute(f"UPDATE {PARTICIPANTS} SET reserved_until=? WHERE code=?",
                         [now + (self.reservation_seconds if row[1] is not None else self.hold_seconds),
                          participant.code])

    def set_status(self, code: str, status: str, screen_reason: str | None = None, *, n_groups: int = 1,
                   full: Callable[[list[int]], bool] | None = None) -> Participant:
        """Move an in-progress participant to a final status; a final status never changes again. A web
        session that finishes takes its place for good in the place counts, in the same transaction; when
        its reservation lapsed and ``full`` (the recruitment target) says every place is taken, it does not
        finish (:class:`PlaceLost`): finished sessions never overshoot the target."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        now = self.clock()
        finished_at = now if status != "in_progress" else None
        with self.db.write_transaction() as conn:
            row = conn.execute(f"SELECT grp, reserved_until, pilot, runner FROM {PARTICIPANTS} WHERE code=? AND "
                               "status='in_progress'", [code]).fetchone()
            holds = row is not None and status in FILLING_STATUSES and not row[2] and row[3] != LAB
            if holds:
                self._hold_exclusions(conn)
            if holds and self._stale(conn):
                self._catch_up(conn)
            if holds and full is not None and (row[1] or 0) <= now and \
                    full([h + live for h, live in zip(self._held(conn, n_groups), self._live(conn, n_groups, now))]):
                raise PlaceLost("every place of the study is taken")
            conn.execute(f"UPDATE {PARTICIPANTS} SET status=?, finished_at=?, screen_reason=?, reserved_until=NULL, "
                         "start_address=NULL WHERE code=? AND status='in_progress'",
                         [status, finished_at, screen_reason, code])
            if holds and not self._excluded_among(conn, [code]):
                self._add_place(conn, row[0], 1)
        participant = self.get(code)
        if participant is None:  # withdrawn since the request read it
            raise SessionWithdrawn()
        return participant

    def ended_sessions(self, prolific_pid: str, other_than: str, statuses: tuple[str, ...]) -> int:
        """How many sessions of this Prolific ID, besides ``other_than``, have one of ``statuses``."""
        return self.db.execute(f"SELECT COUNT(*) FROM {PARTICIPANTS} WHERE experiment=? AND prolific_pid=? AND code<>? "
                               f"AND status IN ({','.join('?' for _ in statuses)})",
                               [self.experiment, prolific_pid, other_than, *statuses]).fetchone()[0]

    def set_review(self, code: str, reason: str) -> None:
        """Mark a finished session for review (``plausibility``): the Prolific export says "review"."""
        self.db.execute(f"UPDATE {PARTICIPANTS} SET review_reason=? WHERE code=?", [reason, code])

    def set_calibration(self, code: str, record: dict) -> bool:
        """Store a participant's screen calibration (JSON) once; False when it was stored already,
        which keeps what was collected first (a reload does not overwrite it)."""
        cursor = self.db.execute(f"UPDATE {PARTICIPANTS} SET calibration=? WHERE code=? AND calibration IS NULL",
                                 [json.dumps(record, sort_keys=True), code])
        return cursor.rowcount == 1

    def set_excluded(self, code: str, excluded: bool, reason: str, by: str) -> bool:
        """Exclude a participant, or take an exclusion back (``cuebench.exclusions``, the one
        record every export, the analysis and the assignment read); False when there is no
        such participant."""
        participant = self.get(code)
        if participant is None:
            return False
        try:
            with self.while_present(code) as conn:
                exclusions.record(conn, participant.experiment, code, excluded, reason, by)
        except SessionWithdrawn:
            return False
        return True

    # withdrawals ----------------------------------------------------------------------
    @contextmanager
    def while_present(self, code: str) -> Iterator[Database]:
        """A write transaction in which ``code``'s session still exists: what a request writes about a
        person after it read their session is written only if they have not withdrawn meanwhile
        (``cuebench withdraw`` erases in one write transaction, so the two never interleave);
        else :class:`SessionWithdrawn`."""
        with self.db.write_transaction() as conn:
            if self.gone(conn, [code]):
                raise SessionWithdrawn()
            yield conn

    @staticmethod
    def gone(conn: Database, codes: list[str]) -> set[str]:
        """Those of ``codes`` whose session no longer exists (withdrawn), read in the caller's transaction."""
        marks = ",".join("?" for _ in codes)
        present = {code for (code,) in conn.execute(f"SELECT code FROM {PARTICIPANTS} WHERE code IN ({marks})",
                                                     list(codes)).fetchall()}
        return set(codes) - present

    def refuse_withdrawn(self, token: str) -> None:
        """:class:`SessionWithdrawn` when ``token`` was the token of a withdrawn session."""
        self._refuse_withdrawn(self.db, [hash_token(token)])

    @staticmethod
    def _refuse_withdrawn(conn: Database, hashes: list[str | None]) -> None:
        salt = _setting(conn, WITHDRAWAL_SALT)
        if salt is None:  # nobody withdrew yet
            return
        marks = [withdrawal_mark(salt, h) for h in hashes if h]
        if conn.execute(f"SELECT 1 FROM {WITHDRAWN} WHERE mark IN ({','.join('?' for _ in marks)})",
                        marks).fetchone() is not None:
            raise SessionWithdrawn()

    # test-mode entry codes --------------------------------------------------------------
    def add_pilot_codes(self, experiment: str, codes: list[str]) -> None:
        """Remember entry codes that start pilot sessions (``cuebench serve codes --pilot``)."""
        now = self.clock()
        with self.db.write_transaction() as conn:
            conn.executemany(f"INSERT INTO {PILOT_CODES}(experiment, code, created_at) VALUES (?, ?, ?) "
                             "ON CONFLICT DO NOTHING", [(experiment, code, now) for code in codes])

    def is_pilot_code(self, experiment: str, code: str | None) -> bool:
        return code is not None and self.db.execute(
            f"SELECT 1 FROM {PILOT_CODES} WHERE experiment=? AND code=?", [experiment, code]).fetchone() is not None

    # rate limits ----------------------------------------------------------------------
    address_key: bytes = secrets.token_bytes(32)
    """The key that turns a client address into what ``rate_limit_events`` stores (``address_digest``):
    the study sets the server's own key (kept in the secrets file, outside the shareable folder), so every
    server process counts alike and no IP address is ever written to the data file."""

    def address_digest(self, address: str) -> str:
        """A keyed one-way digest of a client address: equal addresses count together, and without the
        key nobody reading the data file can tell the address, not even by trying all 2^32 IPv4 ones."""
        return hmac.new(self.address_key, f"address:{address}".encode(), hashlib.sha256).hexdigest()[:32]

    def take_slot(self, kind: str, address: str, limit: int, window_s: float) -> str | None:
        """Count and record one request of ``kind`` from ``address`` in one transaction: the id
        of the recorded request, or None (nothing recorded) when ``limit`` requests are already
        recorded within the window. Counted over every server process; counting and recording
        together means concurrent requests cannot all slip in under the limit. The address is
        stored only as its ``address_digest``."""
        now = self.clock()
        slot = secrets.token_hex(8)
        address = self.address_digest(address)
        with self.db.write_transaction() as conn:
            conn.execute(f"DELETE FROM {RATE_EVENTS} WHERE kind=? AND at<=?", [kind, now - window_s])
            taken = conn.execute(f"SELECT COUNT(*) FROM {RATE_EVENTS} WHERE kind=? AND address=?",
                                 [kind, address]).fetchone()[0]
            if taken >= limit:
                return None
            conn.execute(f"INSERT INTO {RATE_EVENTS}(id, kind, address, at) VALUES (?, ?, ?, ?)",
                         [slot, kind, address, now])
        return slot

    def release_slot(self, slot: str) -> None:
        """Un-count a request (a login that turned out right)."""
        self.db.execute(f"DELETE FROM {RATE_EVENTS} WHERE id=?", [slot])

    def fill(self, experiment: str, n_groups: int) -> list[int]:
        """Per group: places held for good plus live reservations (``assignment.group_fill``), from ``places``."""
        return [h + live for h, live in zip(*self.places(n_groups))]

    def close(self) -> None:
        """Close this thread's connection."""
        if getattr(self._local, "db", None) is not None:
            self._local.db.close()
            self._local.db = None


def _setting(conn: Database, key: str) -> str | None:
    row = conn.execute(f"SELECT value FROM {SETTINGS} WHERE key=?", [key]).fetchone()
    return row[0] if row else None


def withdrawal_mark(salt: str, hashed: str) -> str:
    """What ``withdrawn_sessions`` keeps of a token's or a start identity's SHA-256 (``hash_token``)."""
    return hashlib.sha256(f"{salt}:{hashed}".encode()).hexdigest()


def bury_sessions(conn: Database, experiment: str, codes: list[str]) -> None:
    """Inside the transaction that erases the sessions ``codes``: keep of each only salted hashes of its
    token's and its start identity's hashes, so that the server refuses a later request of it (a token
    still in a browser, an answer on its way, the link opened again: 410) without keeping anything that
    names the person. The salt is random per database, so not even a copy of the participants table made
    before can be joined to them."""
    conn.execute(f"INSERT INTO {SETTINGS}(key, value) VALUES (?, ?) ON CONFLICT DO NOTHING",
                 [WITHDRAWAL_SALT, secrets.token_hex(16)])
    salt = _setting(conn, WITHDRAWAL_SALT)
    marks = ",".join("?" for _ in codes)
    hashes = [h for row in conn.execute(f"SELECT token_hash, resume_hash FROM {PARTICIPANTS} WHERE code IN ({marks})",
                                        list(codes)).fetchall() for h in row if h]
    conn.executemany(f"INSERT INTO {WITHDRAWN}(experiment, mark) VALUES (?, ?) ON CONFLICT DO NOTHING",
                     [(experiment, withdrawal_mark(salt, h)) for h in hashes])


_WITH_SHARED_IDS = (f"SELECT p.*, (SELECT COUNT(*) FROM {PARTICIPANTS} q WHERE q.experiment=p.experiment AND "
                    f"q.prolific_pid=p.prolific_pid) AS same_pid, (SELECT COUNT(*) FROM {PARTICIPANTS} q WHERE "
                    f"q.experiment=p.experiment AND q.entry_code=p.entry_code) AS same_code FROM {PARTICIPANTS} p")
"""Participants with how many sessions share their Prolific ID and their entry code (``shared_id_note``)."""


def shared_id_note(row: dict) -> str | None:
    """Why a session whose Prolific ID or entry code started other sessions too needs a look (module docstring)."""
    if (row.get("same_pid") or 0) > 1:
        return (f"one of {row['same_pid']} sessions with this Prolific ID; this one has SESSION_ID "
                f"{row['prolific_session']}: approve only the session whose SESSION_ID is the submission's ID in "
                "Prolific")
    if (row.get("same_code") or 0) > 1:
        return f"one of {row['same_code']} sessions with this entry code, each in another browser: a shared code?"
    return None


def _participant(row: dict, excluded: dict[str, exclusions.Exclusion], answered: dict[str, dict]) -> Participant:
    return Participant(
        code=row["code"], experiment=row["experiment"], group=row["grp"], status=row["status"], session=row["session"],
        prolific_pid=row["prolific_pid"], study_id=row["study_id"], prolific_session=row["prolific_session"],
        entry_code=row["entry_code"], reserved_until=row["reserved_until"], created_at=row["created_at"],
        finished_at=row["finished_at"], screen_reason=row["screen_reason"], pilot=bool(row.get("pilot")),
        exclusion=excluded.get(row["code"]),
        calibration=json.loads(row["calibration"]) if row.get("calibration") else None,
        questionnaire=answered[row["code"]]["answers"] if row["code"] in answered else None,
        runner=row.get("runner") or "web", first_answer_at=row.get("first_answer_at"),
        review_reason="; ".join(filter(None, (row.get("review_reason"), shared_id_note(row)))) or None)
