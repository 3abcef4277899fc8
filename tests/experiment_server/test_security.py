"""One test per attack class against a real ``cuebench serve`` on loopback, both the default
server (waitress, one process) and ``--workers 2`` (gunicorn), each on SQLite and on a real
PostgreSQL server: what a participant, another web site or a copy of the data could do to a
study, and that the server refuses it.

One server per server kind and backend for the whole module (``served``); it trusts one
reverse proxy, so each test's client sends its own ``X-Forwarded-For`` address, as a proxy
would, and the per-address limits of one test do not touch another's. The in-process cases (``create_app``) cover what needs an
injected setting: a header from an untrusted client, a database from before the secrets file.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import hmac
import http.client
import io
import json
import os
import re
import socket
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlencode

import pytest
from flask import Flask
from flask.sessions import SecureCookieSessionInterface
from werkzeug.security import generate_password_hash

from cuebench.csvsafe import FORMULA_STARTS, csv_text, frame_csv, safe_cell
from cuebench.responses import KEY, ResponseStore
from cuebench.storage import open_database
from experiment_server import cli as server_cli
from experiment_server.admin import ADMIN_SESSION_S, set_admin_password
from experiment_server.app import _RotatingKeySessions, create_app
from experiment_server.request_bounds import body_limit
from experiment_server.db import OUTCOMES, SETTINGS, WITHDRAWALS_COUNTED
from experiment_server.group_commit import GroupCommit
from experiment_server.study_rules import StudyRules
from stimuli.web_sample import build_sample_experiment
from experiment_server.server_secrets import SECRET_KEYS
from experiment_server.simulate import (NONCE, ClientLog, ServerProcess, SimulatedParticipant, free_port,
                                        measured_display, trial_answer)
from experiment_server.study import open_study, study_of
from support import commit_as_one_batch, fill_consent, first_answer

PASSWORD = "correct horse battery"
START_LIMIT = 20
HONEST = 8
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
SMALL_SCREEN = measured_display(width=640, height=480)
"""A browser check's measurements that fail it (the server screens out only on those)."""


class Browser:
    """One client with its own cookies and its own address (sent as the trusted proxy's X-Forwarded-For)."""

    def __init__(self, port: int, address: str):
        self.port = port
        self.address = address
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, body: bytes | str | None = None, content_type: str | None = None,
                headers: dict | None = None) -> tuple[int, dict, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        sent = {"X-Forwarded-For": self.address, **(headers or {})}
        if content_type:
            sent["Content-Type"] = content_type
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        conn.request(method, path, body=body, headers=sent)
        reply = conn.getresponse()
        for cookie in reply.headers.get_all("Set-Cookie") or []:
            name, _, value = cookie.split(";", 1)[0].partition("=")
            self.cookies[name] = value
        data = reply.read()
        conn.close()
        return reply.status, dict(reply.headers), data

    def form(self, path: str, fields: dict) -> tuple[int, dict, bytes]:
        return self.request("POST", path, urlencode(fields), "application/x-www-form-urlencoded")

    def start(self, **entry) -> tuple[int, str]:
        """Open the entry link and start; the status and the task token (or the page)."""
        status, _, page = self.request("GET", f"/?{urlencode(entry)}")
        if status != 200:
            return status, page.decode()
        status, headers, body = self.form("/start", {"consent": "yes", **entry,
                                                     "start_nonce": NONCE.search(page.decode()).group(1)})
        return status, headers["Location"].rsplit("/", 1)[1] if status == 303 else body.decode()

    def post_json(self, path: str, payload) -> int:
        body = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
        return self.request("POST", path, body, "application/json")[0]

    def login(self, password: str = PASSWORD) -> int:
        _, _, page = self.request("GET", "/admin/login")
        return self.form("/admin/login", {"password": password, "csrf_token": CSRF.search(page.decode()).group(1)})[0]


class Served:
    def __init__(self, expdir, server: ServerProcess, database: str | None, log_file):
        self.expdir, self.server, self.database, self.log_file = expdir, server, database, log_file
        self._addresses = iter(range(1, 250))

    def browser(self) -> Browser:
        """A client from an address of its own (TEST-NET-3)."""
        return Browser(self.server.port, f"203.0.113.{next(self._addresses)}")

    def study(self):
        return open_study(self.expdir, database=self.database)


def fresh_postgres_database(server) -> str:
    """An empty database on the session's PostgreSQL server (``postgres_url`` is per test; this one is per module)."""
    import psycopg

    name = f"sec_{os.getpid()}_{free_port()}"
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server.url.replace("/postgres?", f"/{name}?")


SERVERS = {"waitress": 1, "workers2": 2}
"""The server kinds under test and their ``--workers``: waitress in one process, gunicorn with two."""


@pytest.fixture(scope="module", params=[pytest.param((kind, backend), id=f"{kind}-{backend}", marks=pytest.mark.slow)
                                        for backend in ("sqlite", "postgresql") for kind in SERVERS])
def served(request, tmp_path_factory):
    """``cuebench serve --trusted-proxies 1`` (waitress, or ``--workers 2``) on the sample experiment,
    with an admin password."""
    kind, backend = request.param
    root = tmp_path_factory.mktemp(f"security-{kind}-{backend}")
    expdir = root / "exp"
    build_sample_experiment(expdir)
    fill_consent(expdir)
    database = fresh_postgres_database(request.getfixturevalue("postgres_server")) if backend == "postgresql" else None
    set_admin_password(open_study(expdir, database=database), PASSWORD)
    log_file = root / "server.log"
    server = ServerProcess(expdir, free_port(), workers=SERVERS[kind], log_file=log_file, start_limit=START_LIMIT,
                           unanswered_per_address=START_LIMIT, extra_args=("--trusted-proxies", "1", *(("--database", database) if database else ())))
    server.start()
    yield Served(expdir, server, database, log_file)
    server.stop()


def started(served: Served, **entry) -> tuple[Browser, str, dict]:
    browser = served.browser()
    status, token = browser.start(**entry)
    assert status == 303, token
    _, _, body = browser.request("GET", f"/api/session/{token}")
    return browser, token, json.loads(body)


def rows_of(served: Served) -> list[tuple]:
    with ResponseStore(served.database or served.expdir / "responses.sqlite") as store:
        return store.conn.execute(f"SELECT {', '.join(KEY)} FROM responses").fetchall()


# participants' writes ---------------------------------------------------------------------

POISON = [
    ("device and events beyond a trial's share", {"device": {"ua": "x" * 8000}, "events": [{"e": "x" * 8000}] * 4}),
    ("dropped_frames beyond 64 bits", {"dropped_frames": 9223372036854775808}),
    ("dropped_frames beyond PostgreSQL INTEGER", {"dropped_frames": 2**31}),
    ("frames beyond the column", {"frames": {"stimulus": 2**40}}),
    ("RT of 0", {"rt_ms": 0}),
    ("negative RT", {"rt_ms": -5}),
    ("huge device object", {"device": {"ua": "x" * 100_000}}),
]
RAW_POISON = [
    ("NaN in device", '"device": {"screen": NaN}'),
    ("Infinity in device", '"device": {"screen": Infinity}'),
    ("-Infinity as RT", '"rt_ms": -Infinity'),
    ("1e999 in device", '"device": {"screen": 1e999}'),
    ("1e999 as RT", '"rt_ms": 1e999'),
]


def poison_bodies(trial: dict) -> list[tuple[str, str | bytes]]:
    honest = trial_answer(trial)
    bodies = [(name, json.dumps({**honest, **change})) for name, change in POISON]
    bodies += [(name, json.dumps(honest)[:-1] + ", " + raw + "}") for name, raw in RAW_POISON]
    bodies += [("JSON nested 100000 deep", json.dumps(honest)[:-1] + ', "device": ' + "[" * 100_000 + "]" * 100_000
                + "}"), ("undecodable body", b"\xff\xfe{\x00"), ("not JSON", "response=cat")]
    return bodies


def test_a_poisoning_client_fails_only_itself(served):
    """One client posts answers the database could not store while honest participants take
    part: the poisoner gets a 4xx every time, every honest request succeeds, every honest
    answer is stored once."""
    poisoner, token, plan = started(served, code="poisoner")
    bodies = poison_bodies(plan["trials"][0])
    log = ClientLog()
    stop = threading.Event()
    refused: list[tuple[str, int]] = []

    def poison():
        while not stop.is_set():
            for name, body in bodies:
                refused.append((name, poisoner.post_json(f"/api/session/{token}/trial/0", body)))

    attacker = threading.Thread(target=poison)
    attacker.start()
    try:
        with ThreadPoolExecutor(max_workers=HONEST) as pool:
            outcomes = list(pool.map(lambda n: SimulatedParticipant(served.server.port, {"code": f"honest{n}"}, log,
                                                                    deadline_s=120).run(), range(HONEST)))
    finally:
        stop.set()
        attacker.join()
    assert len(refused) >= len(bodies)
    assert {name for name, status in refused if not 400 <= status < 500} == set()
    assert {s for s in log.statuses if not isinstance(s, int) or s >= 400} == set(), log.statuses
    assert {o["status"] for o in outcomes} == {"finished"}
    honest = {o["participant"] for o in outcomes}
    keys = [k for k in rows_of(served) if k[1] in honest]
    assert len(keys) == len(set(keys)) == sum(o["trials"] for o in outcomes)


def test_a_row_the_database_refuses_fails_only_its_own_request(served):
    """Validation aside, a batch of the group commit with one row the database refuses
    (an integer beyond the column: OverflowError on SQLite, NumericValueOutOfRange on
    PostgreSQL) stores the others and fails only that one."""
    study = served.study()
    people = [study.db.start(study.experiment.name, study.n_groups, entry_code=f"batch{n}")[0] for n in range(6)]
    rows = {p.code: first_answer(study, p, dropped_frames=2**63 if k == 2 else 0) for k, p in enumerate(people)}
    outcomes = commit_as_one_batch(GroupCommit(lambda: ResponseStore(study.location), study.db.renew), rows)
    assert isinstance(outcomes.pop(people[2].code), Exception)
    assert all(o.stored for o in outcomes.values())
    assert {k[1] for k in rows_of(served)} >= set(outcomes)


def crafted_body(path: str) -> bytes:
    """One quote and escaped quotes up to the route's size limit."""
    return b'"' + b'\\"' * ((body_limit(path) - 1) // 2)


def test_a_crafted_body_is_refused_at_once_and_others_go_on(served):
    """A body of one quote and escaped quotes up to the size limit made the old depth check
    quadratic (256 KiB: about 18 minutes, the server frozen for everyone): it is now refused
    like any bad body, while a participant's answer sent at the same time is stored. Every
    request has the client's timeout, so a hang fails the test."""
    _, token, _ = started(served, code="crafter")
    honest, honest_token, plan = started(served, code="bystander")
    trial = plan["trials"][0]
    with ThreadPoolExecutor(max_workers=4) as pool:
        attacks = [pool.submit(served.browser().post_json, path, crafted_body(path))
                   for path in (f"/api/session/{token}/{route}" for route in ("trial/0", "image-failed", "screen"))]
        answer = pool.submit(honest.post_json, f"/api/session/{honest_token}/trial/{trial['index']}",
                             trial_answer(trial))
        assert [a.result() for a in attacks] == [400, 400, 400] and answer.result() == 201


def test_a_scripted_session_is_marked_for_review(served):
    """Every answer posted at once, with RTs of 0.001 ms: the completion code as for anyone, but the
    admin page and the Prolific list say "review" with both reasons, not "approve"."""
    pid = "5f" + "%022x" % int(served.server.port)
    scripted, token, plan = started(served, PROLIFIC_PID=pid, STUDY_ID="s", SESSION_ID="scripted")
    for trial in plan["trials"]:
        answer = dict(trial_answer(trial), rt_ms=0.001)
        assert scripted.post_json(f"/api/session/{token}/trial/{trial['index']}", answer) == 201
    status, _, outcome = scripted.request("POST", f"/api/session/{token}/complete", b"", "application/json")
    assert status == 200 and json.loads(outcome)["status"] == "finished"
    admin = served.browser()
    assert admin.login() == 302
    page = admin.request("GET", "/admin/")[2].decode()
    rows = list(csv.DictReader(io.StringIO(admin.request("GET", "/admin/export/prolific.csv")[2].decode())))
    assert "review: finished in" in page and "100% of answers faster than 100 ms" in page
    assert [(r["action"], "less than its" in r["reason"], "faster than 100 ms" in r["reason"])
            for r in rows if r["participant_id"] == pid] == [("review", True, True)]


@pytest.mark.validates("anticipation share of a session (review flag)", definition="share of answered trials with "
                       "rt_ms < 100; review when > 0.1", source="Whelan 2008, Psychol. Rec. 58:475-482 (RT < 100 ms: "
                       "anticipation)", reference="hand count over made-up rows", tolerance="exact")
def test_a_failed_attention_check_is_for_the_researcher_to_review(served):
    """An attention trial answered against its instruction: the failed-attention code, and
    "review" naming the check in prolific.csv (a rejection is Prolific's rule to apply)."""
    pid = "6c" + "%022x" % int(served.server.port)
    careless, token, plan = started(served, PROLIFIC_PID=pid, STUDY_ID="s", SESSION_ID="careless")
    for trial in plan["trials"]:
        answer = trial_answer(trial)
        if trial["instruction"]:
            answer["response"] = next(c for c in trial["choices"] if c != answer["response"])
        assert careless.post_json(f"/api/session/{token}/trial/{trial['index']}", answer) == 201
    outcome = json.loads(careless.request("POST", f"/api/session/{token}/complete", b"", "application/json")[2])
    admin = served.browser()
    assert admin.login() == 302
    rows = list(csv.DictReader(io.StringIO(admin.request("GET", "/admin/export/prolific.csv")[2].decode())))
    assert outcome["status"] == "failed_attention"
    assert [(r["action"], "attention" in r["reason"]) for r in rows if r["participant_id"] == pid] == [("review", True)]


def test_answers_faster_than_a_person_mark_a_session_for_review():
    """1 of 10 answers under 100 ms is a person's anticipation now and then; 2 of 11 (a timeout does not
    count) is more than a tenth. The served session above shows the reason on the admin page."""
    from experiment_server.plausibility import MAX_FAST_SHARE, fast_share

    rows = [{"rt_ms": rt} for rt in [99.9] + [100.0] * 9]
    assert fast_share(rows) == 0.1 and not fast_share(rows) > MAX_FAST_SHARE
    rows += [{"rt_ms": None}, {"rt_ms": 20.0}]
    assert fast_share(rows) == 2 / 11 and fast_share(rows) > MAX_FAST_SHARE
    assert fast_share([{"rt_ms": None}]) == 0.0


def test_a_screen_out_needs_the_check_to_fail_on_the_server(served):
    """No screened-out code for a bare request, nor for measurements that pass the check: the session
    goes on. Measurements that fail it end the session with the code; the exclusion says the
    server's verdict."""
    browser, token, _ = started(served, code="screen-claim")
    path = f"/api/session/{token}/screen"
    for body in ({"reason": "refresh rate 30 Hz"}, {"reason": "refresh rate 30 Hz", **measured_display(hz=60)},
                 {"reason": "x", **measured_display(), "size": {"width": "1e999"}}):
        assert browser.post_json(path, body) == 422
    assert json.loads(browser.request("GET", f"/api/session/{token}")[2])["status"] == "in_progress"
    status, _, outcome = browser.request("POST", path, json.dumps({"reason": "refresh rate 30 Hz",
                                                                   **measured_display(hz=30)}), "application/json")
    assert status == 200 and json.loads(outcome)["status"] == "screened_out" and json.loads(outcome)["code"]
    exclusion = served.study().db.by_token(token).exclusion
    assert exclusion.reason == "browser check: refresh rate 30.0 Hz"


def test_an_ended_session_takes_no_more_reports(served):
    """/image-failed and /screen answer a token whose session has ended without reading its body:
    409, or the outcome again for a repeated screen-out (its reply may have been lost)."""
    browser, token, _ = started(served, code="ended")
    assert browser.post_json(f"/api/session/{token}/screen", {"reason": "window too small", **SMALL_SCREEN}) == 200
    crafted = crafted_body(f"/api/session/{token}/screen")
    assert browser.post_json(f"/api/session/{token}/image-failed", crafted) == 409
    assert browser.post_json(f"/api/session/{token}/image-failed", {"url": "/stimuli/x.png"}) == 409
    status, _, body = browser.request("POST", f"/api/session/{token}/screen", crafted, "application/json")
    assert status == 200 and json.loads(body)["status"] == "screened_out"


# credentials ------------------------------------------------------------------------------

def test_forged_tokens_and_cookies_are_refused(served):
    browser, token, _ = started(served, code="forger")
    assert browser.request("GET", "/api/session/" + "A" * len(token))[0] == 403
    assert browser.request("GET", f"/task/{token[:-1]}x")[0] == 403
    forger = Flask("forger")
    forger.secret_key = "a guessed key"
    cookie = SecureCookieSessionInterface().get_signing_serializer(forger).dumps({"admin_generation": 0})
    admin = served.browser()
    admin.cookies["session"] = cookie
    status, headers, _ = admin.request("GET", "/admin/")
    assert status == 302 and "/admin/login" in headers["Location"]


def test_replayed_answers_and_start_forms_are_refused(served):
    browser, token, plan = started(served, code="replayer")
    trial = plan["trials"][0]
    path = f"/api/session/{token}/trial/{trial['index']}"
    assert browser.post_json(path, trial_answer(trial)) == 201
    assert browser.post_json(path, trial_answer(trial)) == 200
    changed = dict(trial_answer(trial), response=trial["choices"][-1])
    assert browser.post_json(path, changed) == 409
    second = served.browser()
    assert second.post_json(f"/api/session/{token}/trial/1", trial_answer(plan["trials"][0])) == 403
    assert [k for k in rows_of(served) if k[1] == plan["participant"]] == [
        (served.study().experiment.name, plan["participant"], "1", trial["index"])]


def test_an_entry_code_tells_nobody_whether_it_was_used(served):
    """The same browser resumes its session; another browser gets a session of its own, answered
    exactly as a fresh code is (no "already used" to learn from), and both are marked for review."""
    first = served.browser()
    status, token = first.start(code="shared-code")
    assert status == 303 and first.start(code="shared-code") == (303, token)
    answers = [served.browser().start(code=code) for code in ("shared-code", "never-used-code")]
    assert [status for status, _ in answers] == [303, 303] and len({token, *(t for _, t in answers)}) == 3
    assert len({len(t) for _, t in answers}) == 1
    shared = [p for p in served.study().db.participants(served.study().experiment.name) if p.entry_code == "shared-code"]
    assert len(shared) == 2 and all("one of 2 sessions with this entry code" in p.review_reason for p in shared)


def test_nobody_can_squat_a_prolific_id(served):
    """Someone who knows a person's Prolific ID starts first, with a SESSION_ID of their own: the
    person still starts (their link's SESSION_ID is a session of its own), and prolific.csv says
    "review" for both rows, each naming its SESSION_ID, so the researcher approves the submission's."""
    pid = "6a" + "%022x" % (int(served.server.port) + 1)
    squatter = served.browser().start(PROLIFIC_PID=pid, STUDY_ID="s", SESSION_ID="made-up")
    owner = served.browser().start(PROLIFIC_PID=pid, STUDY_ID="s", SESSION_ID="the-real-one")
    assert [squatter[0], owner[0]] == [303, 303] and squatter[1] != owner[1]
    admin = served.browser()
    assert admin.login() == 302
    rows = list(csv.DictReader(io.StringIO(admin.request("GET", "/admin/export/prolific.csv")[2].decode())))
    mine = sorted((r["action"], r["reason"].split("SESSION_ID ")[1].split(":")[0]) for r in rows
                  if r["participant_id"] == pid)
    assert mine == [("review", "made-up"), ("review", "the-real-one")]


def test_entry_codes_from_the_cli_are_long_random_and_accepted(served, capsys):
    parser = argparse.ArgumentParser()
    server_cli.register(parser.add_subparsers())
    args = parser.parse_args(["serve", "codes", str(served.expdir), "-n", "50"])
    assert args.func(args) == 0
    codes = capsys.readouterr().out.split()
    assert len(set(codes)) == 50 and all(re.fullmatch(r"([a-z2-9]{4}-){3}[a-z2-9]{4}", c) for c in codes)
    assert served.browser().start(code=codes[0])[0] == 303


def test_only_the_researcher_makes_pilot_sessions(served, capsys):
    """``pilot=1`` added to a participant's own link changes nothing (a person, holding a slot, in the
    people's statistics); a code from ``serve codes --pilot`` starts a pilot session."""
    browser, token, plan = started(served, code="self-made-pilot", pilot="1")
    assert browser.post_json(f"/api/session/{token}/trial/0", trial_answer(plan["trials"][0])) == 201
    args = _serve_args("codes", served.expdir, "-n", "1", "--pilot", database=served.database)
    assert args.func(args) == 0
    _, pilot_token, _ = started(served, code=capsys.readouterr().out.strip())
    db = served.study().db
    assert [db.by_token(token).observer_kind, db.by_token(pilot_token).observer_kind] == ["human", "pilot"]
    assert {k[1] for k in rows_of(served)} >= {plan["participant"]}
    with ResponseStore(served.database or served.expdir / "responses.sqlite") as store:
        assert {r["observer_kind"] for r in store.rows("observer=?", [plan["participant"]])} == {"human"}


def test_admin_sessions_end_on_logout_password_change_and_rotation(served):
    admin = served.browser()
    assert admin.login() == 302
    copied = dict(admin.cookies)
    _, _, page = admin.request("GET", "/admin/")
    assert admin.form("/admin/logout", {"csrf_token": CSRF.search(page.decode()).group(1)})[0] == 302
    thief = served.browser()
    thief.cookies = copied
    assert thief.request("GET", "/admin/")[0] == 302
    assert admin.login() == 302 and admin.request("GET", "/admin/")[0] == 200
    set_admin_password(served.study(), PASSWORD)
    assert admin.request("GET", "/admin/")[0] == 302
    assert admin.login() == 302 and admin.request("GET", "/admin/")[0] == 200
    parser = argparse.ArgumentParser()
    server_cli.register(parser.add_subparsers())
    args = parser.parse_args(["serve", "rotate-secret", str(served.expdir),
                              *(("--database", served.database) if served.database else ())])
    assert args.func(args) == 0
    assert admin.request("GET", "/admin/")[0] == 302


def test_an_admin_login_ends_after_its_lifetime_however_active(tmp_path):
    """The cookie's expiry is renewed on every request; the login time it carries is not."""
    build_sample_experiment(tmp_path / "exp")
    set_admin_password(open_study(tmp_path / "exp"), PASSWORD)
    app = create_app(tmp_path / "exp")
    study = study_of(app)
    signer = _RotatingKeySessions().get_signing_serializer(app)
    statuses = []
    for age_s in (60, ADMIN_SESSION_S + 60):
        client = app.test_client()
        client.set_cookie("session", signer.dumps({"admin_generation": study.db.admin_generation(),
                                                   "login_at": time.time() - age_s}))
        statuses.append(client.get("/admin/").status_code)
    assert statuses == [200, 302]


def test_completion_codes_can_come_from_the_environment(monkeypatch):
    """Out of ``ps``: the environment gives the codes the command line does not."""
    monkeypatch.setenv("CUEBENCH_CODE_FINISHED", "CENV1234")
    monkeypatch.delenv("CUEBENCH_CODE_SCREENED_OUT", raising=False)
    monkeypatch.delenv("CUEBENCH_CODE_FAILED_ATTENTION", raising=False)
    args = _serve_args("study", "--code-screened-out", "CARG5678")
    assert server_cli.completion_codes(args) == {"finished": "CENV1234", "screened_out": "CARG5678",
                                                 "failed_attention": None}


def test_the_database_password_stays_off_the_command_line(monkeypatch, capsys):
    """A password in ``--database`` is warned about (``ps`` shows it); ``$CUEBENCH_DATABASE`` gives
    the URL instead, and libpq reads the password from ~/.pgpass or ``$PGPASSWORD``."""
    monkeypatch.setenv("CUEBENCH_DATABASE", "postgresql://study@db.example.org/cue_study")
    assert server_cli.database_url(None) == "postgresql://study@db.example.org/cue_study"
    assert capsys.readouterr().err == ""
    assert server_cli.database_url("postgresql://study:hunter2@db/cue") == "postgresql://study:hunter2@db/cue"
    warning = capsys.readouterr().err
    assert "holds a password" in warning and "~/.pgpass" in warning and "hunter2" not in warning
    monkeypatch.delenv("CUEBENCH_DATABASE")
    assert server_cli.database_url(None) is None


def test_secrets_stay_out_of_the_data(served):
    study = served.study()
    path = study.secrets.path
    assert path.parent == served.expdir.parent and stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = json.loads(path.read_text())
    assert set(stored) == set(SECRET_KEYS)
    settings = {k for (k,) in study.db.db.execute(f"SELECT key FROM {SETTINGS}").fetchall()}
    assert settings == {"experiment", "admin_generation", WITHDRAWALS_COUNTED}  # a count the place counts keep
    if served.database is None:
        database = served.expdir / "responses.sqlite"
        assert stat.S_IMODE(database.stat().st_mode) == 0o600
        raw = b"".join(f.read_bytes() for f in served.expdir.glob("responses.sqlite*"))
        assert not [k for k, v in stored.items() if v.encode() in raw]
    assert not [p for p in served.expdir.rglob("*") if p.is_file() and stored["secret_key"].encode() in p.read_bytes()]


OLD_KEY = "0f" * 32
"""The cookie and derivation key of a folder served by the version before the secrets file."""


def old_token(identity: str) -> str:
    """A session token as that version derived it: from the one key, which every copy of the folder held."""
    return hmac.new(OLD_KEY.encode(), b"start:" + identity.encode(), hashlib.sha256).hexdigest()[:32]


def previous_version_folder(root, database: str | None) -> dict:
    """A study as the version before the secrets file left it (``experiment_server/db.py`` of that
    version): its server tables, the secrets in ``server_settings``, and two sessions in progress,
    a Prolific one and an entry-code one, whose tokens that key derived."""
    expdir = root / "exp"
    build_sample_experiment(expdir)
    fill_consent(expdir)
    name = json.loads((expdir / "experiment.json").read_text())["name"]
    sessions = {"P0PROLIFIC01": ("5f1a2b3c4d5e6f7a8b9c0d1e", "prolific:5f1a2b3c4d5e6f7a8b9c0d1e:61a2b3c4d5e6f7a8b9c0d1e2"),
                "P0ENTRYCODE1": (None, "code:old-code")}
    db = open_database(database or expdir / "responses.sqlite")
    with db.write_transaction() as conn:
        conn.execute("CREATE TABLE participants (code TEXT PRIMARY KEY, experiment TEXT NOT NULL, token_hash TEXT "
                     "NOT NULL, grp INTEGER NOT NULL, status TEXT NOT NULL, session TEXT NOT NULL, prolific_pid TEXT, "
                     "study_id TEXT, prolific_session TEXT, entry_code TEXT, reserved_until FLOAT, created_at FLOAT "
                     "NOT NULL, finished_at FLOAT, screen_reason TEXT, excluded INTEGER, exclusion_reason TEXT)")
        for columns in (("token_hash",), ("experiment", "prolific_pid"), ("experiment", "entry_code")):
            conn.execute(f"CREATE UNIQUE INDEX idx_participants_{'_'.join(columns)} ON participants "
                         f"({', '.join(columns)})")
        conn.execute("CREATE TABLE server_settings (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("CREATE TABLE admin_login_failures (address TEXT NOT NULL, at FLOAT NOT NULL)")
        conn.executemany("INSERT INTO server_settings(key, value) VALUES (?, ?)", [
            ("experiment", name), ("secret_key", OLD_KEY), ("admin_password", generate_password_hash(PASSWORD)),
            ("code_finished", "CPAID123"), ("code_screened_out", "CSCREEN1"), ("code_failed_attention", "CFAIL123")])
        for group, (code, (pid, identity)) in enumerate(sessions.items()):
            conn.execute("INSERT INTO participants(code, experiment, token_hash, grp, status, session, prolific_pid, "
                         "study_id, prolific_session, entry_code, reserved_until, created_at) "
                         "VALUES (?, ?, ?, ?, 'in_progress', '1', ?, ?, ?, ?, ?, ?)",
                         [code, name, hashlib.sha256(old_token(identity).encode()).hexdigest(), group, pid,
                          "study1" if pid else None, identity.rsplit(":", 1)[1] if pid else None,
                          None if pid else "old-code", 4e9, 1.7e9])
    db.close()
    return {"expdir": expdir, "database": database, "sessions": sessions}


@pytest.mark.slow
@pytest.mark.parametrize("kind,backend", [("waitress", "sqlite"), ("workers2", "postgresql")])
def test_an_upgraded_folder_gets_new_keys_and_its_sessions_go_on(kind, backend, tmp_path, request):
    """The first serve of a folder from before the secrets file: a copy of that folder (which
    holds the old key) forges no admin cookie and computes no session token; the password and
    the completion codes move to the secrets file; the sessions in progress go on through the
    resume map, the Prolific one from its link and the entry-code one from the first browser
    that opens its link (another browser gets a session of its own); ``rotate-secret`` then
    renews both keys, with the same effect."""
    database = fresh_postgres_database(request.getfixturevalue("postgres_server")) if backend == "postgresql" else None
    old = previous_version_folder(tmp_path, database)
    if database is None:
        (old["expdir"] / "responses.sqlite").chmod(0o644)  # as that version left it
    server = ServerProcess(old["expdir"], free_port(), workers=SERVERS[kind], threads=2, log_file=tmp_path / "log",
                           extra_args=("--database", database) if database else ())
    server.start()
    try:
        forger = Flask("forger")
        forger.secret_key = OLD_KEY
        admin = Browser(server.port, "203.0.113.1")
        admin.cookies["session"] = SecureCookieSessionInterface().get_signing_serializer(forger).dumps(
            {"admin_generation": 0})
        for path in ("/admin/", "/admin/export/participants.csv"):
            status, headers, _ = admin.request("GET", path)
            assert status == 302 and "/admin/login" in headers["Location"], path
        (prolific, (pid, identity)), (entry, (_, code_identity)) = old["sessions"].items()
        for stale in (old_token(identity), old_token(code_identity)):
            assert admin.request("GET", f"/api/session/{stale}")[0] == 403
        link = {"PROLIFIC_PID": pid, "STUDY_ID": "study1", "SESSION_ID": identity.rsplit(":", 1)[1]}
        tokens = []
        for _ in range(2):
            status, token = Browser(server.port, "203.0.113.2").start(**link)
            assert status == 303 and token != old_token(identity)
            plan = json.loads(admin.request("GET", f"/api/session/{token}")[2])
            assert plan["participant"] == prolific and plan["status"] == "in_progress"
            tokens.append(token)
            args = _serve_args("rotate-secret", old["expdir"], database=database)
            assert args.func(args) == 0
        assert admin.request("GET", f"/api/session/{tokens[0]}")[0] == 403
        first = Browser(server.port, "203.0.113.3")
        status, token = first.start(code="old-code")
        assert status == 303 and json.loads(first.request("GET", f"/api/session/{token}")[2])["participant"] == entry
        assert first.start(code="old-code") == (303, token)
        second = Browser(server.port, "203.0.113.4")
        status, token = second.start(code="old-code")  # a session of its own (no "already used" oracle)
        assert status == 303 and json.loads(second.request("GET", f"/api/session/{token}")[2])["participant"] != entry
        assert admin.login() == 302 and admin.request("GET", "/admin/")[0] == 200
    finally:
        server.stop()
    study = open_study(old["expdir"], database=database)
    stored = json.loads(study.secrets.path.read_text())
    assert {stored[f"code_{o}"] for o in OUTCOMES} == {"CPAID123", "CSCREEN1", "CFAIL123"}
    assert OLD_KEY not in stored.values() and stored["secret_key"] != stored["derive_key"]
    assert study.db.take_settings(SECRET_KEYS) == {}
    if database is None:
        assert stat.S_IMODE((old["expdir"] / "responses.sqlite").stat().st_mode) == 0o600


def test_a_secrets_file_others_can_read_is_made_owner_only(tmp_path, caplog):
    build_sample_experiment(tmp_path / "exp")
    open_study(tmp_path / "exp").close()
    path = tmp_path / "exp.secrets.json"
    path.chmod(0o644)
    with caplog.at_level("WARNING"):
        open_study(tmp_path / "exp").close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [r.getMessage() for r in caplog.records if "readable by others" in r.getMessage()]
    assert not list(tmp_path.glob(".exp.secrets.json.*.tmp"))


def test_exports_of_participants_data_are_owner_only(served, tmp_path):
    """``cuebench export`` (its ``export``) writes every file 0600, like the database it reads."""
    from cuebench.export import export

    started(served, PROLIFIC_PID="6b" + "%022x" % int(served.server.port), STUDY_ID="s", SESSION_ID="perm")
    for fmt, name in (("csv", "r.csv"), ("parquet", "r.parquet"), ("participants", "p.csv"), ("prolific", "l.csv")):
        for path in export(served.expdir, fmt, tmp_path / name, served.database):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, fmt


def test_reports_of_participants_data_are_owner_only(served):
    """``cuebench report`` writes every file 0600, and so does ``cuebench analyze --out`` (SQLite: it reads
    the folder), like ``cuebench export``."""
    import subprocess
    import sys

    browser, token, plan = started(served, PROLIFIC_PID="6c" + "%022x" % int(served.server.port), STUDY_ID="s",
                                   SESSION_ID="report")
    for trial in plan["trials"]:
        assert browser.post_json(f"/api/session/{token}/trial/{trial['index']}", trial_answer(trial)) == 201
    commands = [["report", "exp", "--out", "private-report", "--reference", "none",
                 *(("--database", served.database) if served.database else ())]]
    if served.database is None:
        commands.append(["analyze", "exp", "--metric", "accuracy", "--out", "private-accuracy.csv"])
    for command in commands:
        done = subprocess.run([sys.executable, "-m", "cuebench", *command], cwd=served.expdir.parent,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    written = [p for p in served.expdir.parent.glob("private-*") if p.is_file()] + \
        [p for p in (served.expdir.parent / "private-report").rglob("*") if p.is_file()]
    assert len(written) > 5 and (served.expdir.parent / "private-report" / "report.html") in written
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in written} == {p.name: "0o600" for p in written}


@pytest.mark.slow
@pytest.mark.parametrize("kind", SERVERS)
def test_a_prolific_link_of_another_study_is_refused_before_consent(kind, tmp_path):
    """``cuebench serve --prolific-study-id``: a Prolific link whose STUDY_ID is another study's (or none) gets
    a page saying so, at the consent page and at the start (a form sent with the STUDY_ID changed); the
    study's own links and entry codes go on as before."""
    build_sample_experiment(tmp_path / "exp")
    fill_consent(tmp_path / "exp")
    server = ServerProcess(tmp_path / "exp", free_port(), workers=SERVERS[kind], start_limit=START_LIMIT,
                           extra_args=("--prolific-study-id", "ours1"))
    server.start()
    try:
        browser = Browser(server.port, "203.0.113.9")
        entry = {"PROLIFIC_PID": "5f" + "ab" * 11, "SESSION_ID": "sess1"}
        for study in ("theirs2", None):
            status, page = browser.start(**entry, **({"STUDY_ID": study} if study else {}))
            assert status == 403 and "belongs to another Prolific study" in page
        status, _, consent = browser.request("GET", f"/?{urlencode({**entry, 'STUDY_ID': 'ours1'})}")
        assert status == 200
        forged = browser.form("/start", {"consent": "yes", **entry, "STUDY_ID": "theirs2",
                                         "start_nonce": NONCE.search(consent.decode()).group(1)})
        assert forged[0] == 403 and b"belongs to another Prolific study" in forged[2]
        assert browser.start(**entry, STUDY_ID="ours1")[0] == 303
        assert Browser(server.port, "203.0.113.10").start(code="lab-code")[0] == 303
    finally:
        server.stop()


def _serve_args(*words, database: str | None = None):
    parser = argparse.ArgumentParser()
    server_cli.register(parser.add_subparsers())
    return parser.parse_args(["serve", *map(str, words), *(("--database", database) if database else ())])


# injection --------------------------------------------------------------------------------

def test_sql_injection_is_stored_as_text_or_refused(served):
    browser = served.browser()
    assert browser.start(code="x' OR '1'='1")[0] == 400
    _, token, plan = started(served, code="sqlprobe")
    trial = plan["trials"][0]
    injected = dict(trial_answer(trial), response="cat'); DROP TABLE responses; --")
    assert browser.post_json(f"/api/session/{token}/trial/{trial['index']}", injected) == 422
    reason = "'; DELETE FROM participants; --"
    assert browser.post_json(f"/api/session/{token}/screen", {"reason": reason, **SMALL_SCREEN}) == 200
    study = served.study()
    assert study.db.by_token(token).screen_reason == reason
    assert len(study.db.participants(study.experiment.name)) > 1 and rows_of(served)


def test_stored_xss_does_not_run_in_the_admin_page(served, browser):
    _, token, _ = started(served, code="xss")
    payload = "<img src=x onerror=\"window.__xss=1\"><script>window.__xss=2</script>"
    assert served.browser().post_json(f"/api/session/{token}/screen", {"reason": payload, **SMALL_SCREEN}) == 200
    page = browser.new_page()
    base = f"http://127.0.0.1:{served.server.port}"
    page.goto(f"{base}/admin/login")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/admin/")
    assert payload in page.inner_text("body")
    assert page.evaluate("() => window.__xss") is None


def test_csv_exports_neutralise_formulas(served):
    """Read as a spreadsheet with ``,`` as its list separator would, and with ``;`` (where
    ``x;=HYPERLINK(...)`` was two cells, the second a formula), no cell starts a formula."""
    hyperlink = '=HYPERLINK("http://evil.example","click")'
    for code, reason in (("-2-3", hyperlink), ("semicolon", "x;" + hyperlink)):
        _, token, _ = started(served, code=code)
        assert served.browser().post_json(f"/api/session/{token}/screen", {"reason": reason, **SMALL_SCREEN}) == 200
    admin = served.browser()
    assert admin.login() == 302
    _, _, body = admin.request("GET", "/admin/export/participants.csv")
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    mine = {r["entry_code"]: r["screen_reason"] for r in rows if r["entry_code"] in ("'-2-3", "semicolon")}
    assert mine == {"'-2-3": "'" + hyperlink, "semicolon": "x;'" + hyperlink}
    for separator in ",;":
        cells = [cell for row in csv.reader(io.StringIO(body.decode()), delimiter=separator) for cell in row]
        assert [cell for cell in cells if cell.startswith(FORMULA_STARTS) and safe_cell(cell) != cell] == []


def test_formula_cells_get_a_quote_and_numbers_stay():
    """OWASP's rule by hand: a leading = + - @ tab or CR gets a ', numbers (as numbers or text) do not;
    so does each ``;``-part, also behind the quotes and spaces a spreadsheet drops."""
    import pandas as pd

    cells = ["=1+2", "+SUM(A1)", "-2-3", "@cmd", "\tx", "\rx", "-1.5", "+3", "1e-3", "cat", "a=b", "", None, -4, 2.5,
             "x;=HYPERLINK(1)", "1;-2;+3", "a;b;", ";@x", 'x;"=1+2', 'x; ""+A1', "a; -2"]
    assert csv_text(["v"], [[c] for c in cells]) == "v\n" + "".join(
        f"{line}\n" for line in ["'=1+2", "'+SUM(A1)", "'-2-3", "'@cmd", "'\tx", "'\rx", "-1.5", "+3", "1e-3",
                                  "cat", "a=b", '""', '""', "-4", "2.5", "x;'=HYPERLINK(1)", "1;-2;+3", "a;b;", ";'@x",
                                  '"x;\'""=1+2"', '"x;\' """"+A1"', "a; -2"])
    frame = pd.DataFrame({"reason": ["=HYPERLINK(1)", "ok"], "rt": [-1.5, 2.0]})
    assert frame_csv(frame).decode() == "reason,rt\n'=HYPERLINK(1),-1.5\nok,2.0\n"


QUOTED_FORMULA = ';"=1+2'
"""A cell part a ``;``-list-separator spreadsheet reads as a quoted cell, and so as the formula ``=1+2``."""


def formula_cells(text: str) -> list[str]:
    """The cells of a CSV text that a spreadsheet would take for a formula, read with ``,`` and with ``;``
    as the list separator: after the quotes and spaces it drops, a formula character and not a number."""
    def formula(cell: str) -> bool:
        shown = cell.strip('" ')
        try:
            float(shown)
        except ValueError:
            return shown.startswith(("=", "+", "-", "@", "\t", "\r"))
        return False

    return [cell for separator in ",;" for row in csv.reader(io.StringIO(text), delimiter=separator) for cell in row
            if formula(cell)]


def test_quoted_formulas_are_neutralised_in_every_participants_export(tmp_path):
    """A ``;"=...`` part in an entry code, a screen-out reason (participants and prolific exports) and a
    questionnaire answer (participants and questionnaire exports) starts no formula in either kind of
    spreadsheet; the text is kept, behind a ``'``."""
    from cuebench.export import export
    from cuebench.questionnaire import store_answers
    from experiment_server.db import ServerDB

    root = tmp_path / "exp"
    experiment = build_sample_experiment(root)
    db = ServerDB(root / "responses.sqlite", experiment.name)
    person, _ = db.start(experiment.name, 2, entry_code="code" + QUOTED_FORMULA, prolific_pid="P" * 24,
                         study_id="S" * 24, prolific_session="Q" * 24)
    db.set_status(person.code, "screened_out", screen_reason="small screen" + QUOTED_FORMULA)
    store_answers(db.db, experiment.name, person.code, {"comments": "fine" + QUOTED_FORMULA}, runner="web")
    db.close()
    for fmt in ("participants", "prolific", "questionnaire"):
        (path,) = export(root, fmt, tmp_path / f"{fmt}.csv")
        text = path.read_text(encoding="utf-8")
        cells = [cell for row in csv.reader(io.StringIO(text)) for cell in row]
        assert any(cell.endswith(";'" + QUOTED_FORMULA[1:]) for cell in cells) and formula_cells(text) == [], text


# paths and cross-site requests ------------------------------------------------------------

def test_path_traversal_is_refused(served):
    browser = served.browser()
    for path in ("/stimuli/../experiment.json", "/stimuli/%2e%2e/experiment.json", "/stimuli/..%2fexperiment.json",
                 "/stimuli/%2e%2e%2f%2e%2e%2fexp.secrets.json", "/static/../../experiment_server/app.py",
                 "/stimuli/x%00.png"):
        status, _, body = browser.request("GET", path)
        assert status in (400, 404) and b"secret_key" not in body and b"assignment" not in body, path


def _with_hidden_data(kind: str) -> tuple[bytes, bytes]:
    """An image file (``progressive-jpeg`` or ``png``) with data a viewer never shows: a comment
    between a progressive JPEG's scans, or a chunk after PNG's IEND, and bytes after the end;
    and the file as encoded, without them."""
    import numpy as np
    from PIL import Image

    picture = Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8))
    buf = io.BytesIO()
    picture.save(buf, "JPEG", quality=90, progressive=True) if kind == "progressive-jpeg" else picture.save(buf, "PNG")
    clean = buf.getvalue()
    if kind == "progressive-jpeg":
        second_scan = clean.find(b"\xff\xda", clean.find(b"\xff\xda") + 2)
        hidden = clean[:second_scan] + b"\xff\xfe\x00\x0dHIDDEN-NOTE" + clean[second_scan:]
    else:
        hidden = clean + b"\x00\x00\x00\x0bIDATHIDDEN-NOTE\x00\x00\x00\x00"
    return hidden + b"HIDDEN-TAIL", clean


def test_no_image_is_served_with_data_after_its_end(served):
    """A stimulus file with bytes after JPEG's EOI or PNG's IEND, or a comment between a progressive
    JPEG's scans, is served without them, and decodes to the same pixels."""
    from PIL import Image

    for kind, suffix in (("progressive-jpeg", ".jpg"), ("png", ".png")):
        hidden, clean = _with_hidden_data(kind)
        path = served.expdir / "stimuli" / f"zz-hidden{suffix}"
        path.write_bytes(hidden)
        try:
            status, _, body = served.browser().request("GET", f"/stimuli/{path.name}")
        finally:
            path.unlink()
        assert status == 200 and b"HIDDEN" not in body, kind
        assert Image.open(io.BytesIO(body)).tobytes() == Image.open(io.BytesIO(clean)).tobytes(), kind


def test_cross_site_requests_are_refused(served):
    """Another site's form posts without the victim's cookies (SameSite) and cannot know a nonce."""
    victim = served.browser()
    victim.request("GET", "/?code=ignored")
    status, _, page = victim.form("/start", {"consent": "yes", "code": "attacker-chosen", "start_nonce": "0" * 32})
    assert status == 400 and b"not opened in this browser" in page
    foreign = served.browser()
    _, _, form = foreign.request("GET", "/")
    stolen_nonce = NONCE.search(form.decode()).group(1)
    assert victim.form("/start", {"consent": "yes", "code": "attacker-chosen", "start_nonce": stolen_nonce})[0] == 400
    admin = served.browser()
    assert admin.login() == 302
    assert admin.form("/admin/exclude", {"code": "P0", "reason": "csrf"})[0] == 400


def test_open_redirects_are_refused(served):
    for target, status, goes_to in (("https://evil.example/", 302, "/admin/"), ("//evil.example/admin", 302, "/admin/"),
                                    ("/admin/export/participants.csv", 302, "/admin/export/participants.csv"),
                                    ("/admin%0d%0aSet-Cookie:%20x=1", 400, None), ("/admin\\\\evil", 400, None)):
        admin = served.browser()
        _, _, page = admin.request("GET", "/admin/login")
        reply = admin.form(f"/admin/login?next={target}", {"password": PASSWORD,
                                                           "csrf_token": CSRF.search(page.decode()).group(1)})
        assert reply[0] == status, target
        if goes_to:
            assert reply[1]["Location"].split("127.0.0.1")[-1].split(f":{served.server.port}")[-1] == goes_to


# limits and headers -----------------------------------------------------------------------

SLOW_HEADS = (b"", b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
"""What a slow connection sends before it falls silent: nothing, or half a request head."""


def test_slow_connections_hold_no_thread(served):
    """Five times as many silent connections as the server has threads (idle, or half a request
    head sent) while a new participant opens the consent page: answered within 2 s. A request
    that arrives in pieces, head and body, and the next request on its kept-alive connection,
    are answered as usual."""
    held = []
    try:
        for k in range(80):
            sock = socket.create_connection(("127.0.0.1", served.server.port), timeout=5)
            sock.sendall(SLOW_HEADS[k % 2])
            held.append(sock)
        time.sleep(0.3)
        conn = http.client.HTTPConnection("127.0.0.1", served.server.port, timeout=2)
        conn.request("GET", "/?code=newcomer", headers={"X-Forwarded-For": "203.0.113.250"})
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        for sock in held:
            sock.close()
    _, token, plan = started(served, code="in-pieces")
    body = json.dumps(trial_answer(plan["trials"][0])).encode()
    head = (f"POST /api/session/{token}/trial/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"X-Forwarded-For: 203.0.113.251\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", served.server.port), timeout=10) as sock:
        for piece in (head[:20], head[20:], body[:10], body[10:]):
            sock.sendall(piece)
            time.sleep(0.05)
        reply = http.client.HTTPResponse(sock)
        reply.begin()
        reply.read()
        sock.sendall(f"GET /api/session/{token} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        again = http.client.HTTPResponse(sock)
        again.begin()
        assert (reply.status, again.status, json.loads(again.read())["answered"]) == (201, 200, [0])


def test_an_oversized_body_is_refused_before_it_is_sent(served):
    with socket.create_connection(("127.0.0.1", served.server.port), timeout=10) as sock:
        sock.sendall(b"POST /api/session/x/trial/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 52428800\r\n\r\n" + b"[" * 1000)
        answer = sock.recv(200)
    assert answer.split(b" ")[1] == b"413"


def test_starts_are_rate_limited_per_address(served):
    """Per client address behind the trusted proxy, under both servers: the address the proxy
    saw counts, whatever a client writes to the left of it in X-Forwarded-For."""
    flood = served.browser()
    statuses = [flood.start()[0] for _ in range(START_LIMIT)]
    spoofing = [flood.request("GET", "/", headers={"X-Forwarded-For": f"198.51.100.{k}, {flood.address}"})[0]
                for k in range(2)]
    statuses += [flood.start()[0] for _ in range(3)]
    assert statuses == [303] * START_LIMIT + [429] * 3 and spoofing == [200, 200]
    assert served.browser().start()[0] == 303  # another address is not affected


def test_login_guessing_is_counted_atomically_and_locks_out_no_one_else(served):
    guesser = served.browser()
    _, _, page = guesser.request("GET", "/admin/login")
    token = CSRF.search(page.decode()).group(1)
    with ThreadPoolExecutor(max_workers=30) as pool:
        statuses = list(pool.map(lambda k: guesser.form("/admin/login", {"password": f"guess {k:04d} wrong",
                                                                          "csrf_token": token})[0], range(30)))
    assert sorted(statuses) == [401] * 5 + [429] * 25
    assert guesser.login() == 429
    assert served.browser().login() == 302


@pytest.mark.slow
def test_new_participants_are_refused_before_the_disk_fills(tmp_path):
    """With less free disk than ``--min-free-disk`` (here: more than any disk has), a start is refused
    (503, a page that says to come back later), the log says why once, and so does the admin page;
    sessions already running go on storing their answers."""
    build_sample_experiment(tmp_path / "exp")
    fill_consent(tmp_path / "exp")
    study = open_study(tmp_path / "exp")
    set_admin_password(study, PASSWORD)
    _, token = study.db.start(study.experiment.name, study.n_groups, entry_code="running")
    log_file = tmp_path / "server.log"
    server = ServerProcess(tmp_path / "exp", free_port(), threads=2, log_file=log_file,
                           extra_args=("--min-free-disk", str(2**40)))
    server.start()
    try:
        refused = [Browser(server.port, "203.0.113.9").start()[0] for _ in range(2)]
        admin = Browser(server.port, "203.0.113.10")
        assert admin.login() == 302
        page = admin.request("GET", "/admin/")[2].decode()
        browser = Browser(server.port, "203.0.113.11")
        plan = json.loads(browser.request("GET", f"/api/session/{token}")[2])["trials"][0]
        stored = browser.post_json(f"/api/session/{token}/trial/0", trial_answer(plan))
    finally:
        server.stop()
    assert refused == [503, 503] and stored == 201
    assert 'id="disk"' in page and "new participants are refused" in page
    assert log_file.read_text().count("new participants are refused") == 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", SERVERS)
def test_a_proxy_the_server_does_not_trust_is_ignored_and_named_in_the_log(kind, tmp_path):
    """Without --trusted-proxies, X-Forwarded-For changes no client's address (every start counts
    against the connection's), and the log says once per process that requests come through a
    proxy the server does not trust."""
    build_sample_experiment(tmp_path / "exp")
    fill_consent(tmp_path / "exp")
    log_file = tmp_path / "server.log"
    server = ServerProcess(tmp_path / "exp", free_port(), workers=SERVERS[kind], threads=2, log_file=log_file,
                           start_limit=2)
    server.start()
    try:
        statuses = []
        for k in range(3):
            browser = Browser(server.port, f"198.51.100.{k}")
            statuses.append(browser.start()[0])
        warnings = log_file.read_text().count("which this server does not trust")
    finally:
        server.stop()
    assert statuses == [303, 303, 429]
    assert 1 <= warnings <= SERVERS[kind]


def test_an_untrusted_client_cannot_choose_its_address(tmp_path):
    build_sample_experiment(tmp_path / "exp")
    client = create_app(tmp_path / "exp", rules=StudyRules(start_limit=2)).test_client()
    statuses = []
    for k in range(3):
        nonce = NONCE.search(client.get("/").get_data(as_text=True)).group(1)
        statuses.append(client.post("/start", data={"consent": "yes", "start_nonce": nonce},
                                    headers={"X-Forwarded-For": f"198.51.100.{k}"}).status_code)
    assert statuses == [303, 303, 429]


def _secure_marks(app: Flask, base_url: str, headers: dict | None = None) -> dict[str, bool]:
    """The ``Secure`` mark of each cookie the consent page and an admin login set, asked through ``base_url``."""
    client = app.test_client()
    page = client.get("/", base_url=base_url, headers=headers).headers.getlist("Set-Cookie")
    login_page = client.get("/admin/login", base_url=base_url, headers=headers)
    login = client.post("/admin/login", base_url=base_url, headers=headers, data={
        "password": PASSWORD, "csrf_token": CSRF.search(login_page.get_data(as_text=True)).group(1)})
    assert login.status_code == 302, login.get_data(as_text=True)[:300]
    cookies = page + login.headers.getlist("Set-Cookie")
    return {c.split("=", 1)[0]: "; secure" in c.lower() for c in cookies}


def test_cookies_are_secure_unless_plain_http_to_loopback(tmp_path):
    """Python's cookie jars (``requests``) never send a Secure cookie over plain HTTP, so a script on
    the researcher's own machine needs plain cookies there; everywhere else they stay Secure."""
    build_sample_experiment(tmp_path / "exp")
    set_admin_password(open_study(tmp_path / "exp"), PASSWORD)
    plain = create_app(tmp_path / "exp")
    for loopback in ("http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080", "http://study.localhost"):
        assert _secure_marks(plain, loopback) == {"cuebench_browser": False, "session": False}, loopback
    for secure in ("https://127.0.0.1:8080", "https://study.example.org", "http://study.example.org",
                   "http://192.0.2.10:8080", "http://127.0.0.1.example.org"):
        assert _secure_marks(plain, secure) == {"cuebench_browser": True, "session": True}, secure
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "198.51.100.1"}
    assert _secure_marks(plain, "http://127.0.0.1", forwarded) == {"cuebench_browser": False, "session": False}
    proxied = create_app(tmp_path / "exp", trusted_proxies=1)
    assert _secure_marks(proxied, "http://127.0.0.1", forwarded) == {"cuebench_browser": True, "session": True}
    lab_lan = create_app(tmp_path / "exp", insecure_cookies=True)
    assert _secure_marks(lab_lan, "http://192.0.2.10:8080") == {"cuebench_browser": False, "session": False}


def test_a_failure_is_one_log_line_without_the_token(tmp_path, monkeypatch, caplog):
    build_sample_experiment(tmp_path / "exp")
    app = create_app(tmp_path / "exp")
    client = app.test_client()
    nonce = NONCE.search(client.get("/").get_data(as_text=True)).group(1)
    token = client.post("/start", data={"consent": "yes", "start_nonce": nonce}).headers["Location"].rsplit("/", 1)[1]
    monkeypatch.setattr(study_of(app), "sequence", lambda participant: 1 / 0)
    with caplog.at_level("ERROR"):
        reply = client.get(f"/api/session/{token}")
    assert reply.status_code == 500 and reply.get_json() == {"error": "the server failed; try again"}
    assert [r.getMessage() for r in caplog.records] == [
        "GET /api/session/<token> failed: ZeroDivisionError: division by zero"]
    assert not any(r.exc_info for r in caplog.records)


def test_headers_pages_and_logs(served):
    browser, token, _ = started(served, code="headers")
    for path in ("/", f"/task/{token}", "/admin/login"):
        status, headers, body = browser.request("GET", path)
        assert "script-src 'self'" in headers["Content-Security-Policy"] and headers["Referrer-Policy"] == "no-referrer"
        assert not re.search(rb"<script(?![^>]*\bsrc=)", body), path
    path = f"/api/session/{token}/trial/0"
    assert browser.post_json(path, b"[" * body_limit(path)) == 400
    server_log = served.log_file.read_text(errors="replace")
    assert "Traceback" not in server_log and token not in server_log
