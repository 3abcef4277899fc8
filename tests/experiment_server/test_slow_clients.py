"""Slow and greedy clients against both servers (waitress, and gunicorn with ``--workers 2``), as
``cuebench serve`` runs them on the open internet (no proxy in front, no ``--trusted-proxies``).

Each attack is sized just beyond what stopped the former servers: 1,050 connections trickling a
request head (waitress held them all, one byte restarting its timeout each time, and took no new
connection), and 40 connections trickling a chunked or ``Expect: 100-continue`` body (gunicorn gave
each a thread that waited for the body: two processes of 8 threads stopped). The clients come
from distinct loopback addresses (127.0.0.x), so the limit per address applies to the attacker
and not to the participant. Every loop is bounded in count and time.
"""

from __future__ import annotations

import http.client
import json
import resource
import select
import shutil
import socket
import time
from urllib.parse import urlencode

import pytest

from experiment_server.answers_first import EXTRA_POSTS
from experiment_server.app import create_app
from experiment_server.request_bounds import (CONNECTIONS_PER_ADDRESS, QUESTIONNAIRE_BODY_BYTES, REQUEST_DEADLINE_S,
                                              SMALL_BODY_BYTES, TRIAL_BODY_BYTES)
from experiment_server.simulate import NONCE, ServerProcess, fill_consent, free_port, trial_answer
from stimuli.web_sample import build_sample_experiment

SERVERS = {"waitress": 1, "workers2": 2}
ATTACKER, PARTICIPANT = "127.0.0.2", "127.0.0.3"
SLOW_HEADS = 1050
SLOW_BODIES = 40
SLACK_S = 8
"""Beyond the request deadline, how long the test waits for the server to close a trickling
connection (its maintenance runs every second; the machine may be busy): still far below the
30 s a connection may stay silent, and finite whatever the server does."""


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The sample experiment, built once; each server serves a copy."""
    root = tmp_path_factory.mktemp("sample") / "exp"
    build_sample_experiment(root)
    fill_consent(root)
    return root


@pytest.fixture(scope="module", params=[pytest.param(kind, marks=pytest.mark.slow) for kind in SERVERS])
def server(request, sample, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"slow-{request.param}")
    shutil.copytree(sample, root / "exp")
    process = ServerProcess(root / "exp", free_port(), workers=SERVERS[request.param], log_file=root / "server.log")
    process.workers = SERVERS[request.param]
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module", autouse=True)
def enough_open_files():
    """The attacks hold over a thousand sockets in this process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def connect(server: ServerProcess, source: str, timeout: float = 5) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout, source_address=(source, 0))


def request(server: ServerProcess, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
            source: str = PARTICIPANT, timeout: float = 5) -> tuple[int, dict, bytes]:
    """One request from ``source`` on a connection of its own; a hang fails at ``timeout``."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        reply = conn.getresponse()
        return reply.status, dict(reply.headers), reply.read()
    finally:
        conn.close()


def started(server: ServerProcess, code: str) -> tuple[str, dict]:
    """A participant's session token and plan."""
    status, headers, page = request(server, "GET", f"/?{urlencode({'code': code})}")
    assert status == 200
    cookie = headers["Set-Cookie"].split(";", 1)[0]
    form = urlencode({"consent": "yes", "code": code, "start_nonce": NONCE.search(page.decode()).group(1)})
    status, headers, _ = request(server, "POST", "/start", form, {"Cookie": cookie,
                                                                   "Content-Type": "application/x-www-form-urlencoded"})
    assert status == 303
    token = headers["Location"].rsplit("/", 1)[1]
    return token, json.loads(request(server, "GET", f"/api/session/{token}")[2])


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (an end of stream or a reset waiting to be read)."""
    readable = select.poll()
    readable.register(sock, select.POLLIN)
    if not readable.poll(0):
        return False
    try:
        return sock.recv(4096) == b""
    except OSError:
        return True


def status_line(sock: socket.socket) -> int | None:
    """The status of the response the server sends first on ``sock``, or None if it sends none in time."""
    try:
        reply = http.client.HTTPResponse(sock)
        reply.begin()
        return reply.status
    except (OSError, http.client.HTTPException):
        return None


def test_a_trickled_request_head_is_closed_at_its_deadline_and_participants_are_served(server):
    """1,050 connections from one address each send a request head one byte a second. The server keeps
    at most ``CONNECTIONS_PER_ADDRESS`` of them (per process) and closes the rest at once; it closes the
    kept ones when their request has not arrived whole within ``REQUEST_DEADLINE_S``, however often
    a byte comes; and a participant from another address gets the consent page meanwhile."""
    attackers = []
    try:
        for _ in range(SLOW_HEADS):
            sock = connect(server, ATTACKER)
            sock.sendall(b"GET / HTTP/1.1\r\n")
            attackers.append(sock)
        pages, kept, began = [], None, time.monotonic()
        while attackers and time.monotonic() - began < REQUEST_DEADLINE_S + SLACK_S:
            attackers = [sock for sock in attackers if not closed_by_server(sock)]
            if kept is None and time.monotonic() - began > 1:
                kept = len(attackers)
            for sock in attackers:
                try:
                    sock.send(b"X")
                except OSError:
                    pass
            if len(pages) < 3:
                pages.append(request(server, "GET", "/?code=newcomer")[0])
            time.sleep(1)
        assert pages == [200, 200, 200]
        assert kept is not None and 0 < kept <= CONNECTIONS_PER_ADDRESS * server.workers
        assert attackers == []  # every one closed, though it never fell silent
    finally:
        for sock in attackers:
            sock.close()


BODY_HEADS = {
    "chunked trial": (b"POST /api/session/{token}/trial/0 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n1\r\n{", 411),
    "chunked login": (b"POST /admin/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n1\r\np", 411),
    "expecting trial": (b"POST /api/session/{token}/trial/0 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 1000\r\nExpect: 100-continue\r\n\r\n", 417),
    "expecting login": (b"POST /admin/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                        b"Content-Length: 1000\r\nExpect: 100-continue\r\n\r\n", 417),
}


def test_bodies_sent_at_the_clients_pace_are_refused_and_pages_and_stimuli_go_on(server):
    """40 connections start a chunked body or one announced with ``Expect: 100-continue`` (into a
    session and into the admin login, which needs none) and then send a byte every second: each is
    answered 411 or 417 from its head, and a participant's consent page, plan and stimulus are served
    meanwhile. A byte sent later meets a closed connection."""
    token, plan = started(server, "bystander")
    stimulus = plan["trials"][0]["images"][0]
    attackers, statuses = [], []
    try:
        for k in range(SLOW_BODIES):
            head, expected = list(BODY_HEADS.values())[k % len(BODY_HEADS)]
            sock = connect(server, ATTACKER)
            sock.sendall(head.replace(b"{token}", token.encode()))
            attackers.append((sock, expected))
        for _ in range(3):
            for sock, _ in attackers:
                try:
                    sock.send(b"0")
                except OSError:
                    pass
            assert request(server, "GET", "/?code=newcomer")[0] == 200
            assert request(server, "GET", f"/api/session/{token}")[0] == 200
            assert request(server, "GET", stimulus)[0] == 200
            time.sleep(1)
        statuses = [(status_line(sock), expected) for sock, expected in attackers]
    finally:
        for sock, _ in attackers:
            sock.close()
    assert all(status == expected for status, expected in statuses), statuses


def test_a_body_over_its_routes_limit_is_refused_from_its_head(server):
    """Content-Length one byte over a route's limit gets 413 before any of the body is sent; a trial
    answer padded to the limit is taken whole and stored."""
    token, plan = started(server, "limits")
    for path, limit in ((f"/api/session/{token}/trial/0", TRIAL_BODY_BYTES),
                        (f"/api/session/{token}/questionnaire", QUESTIONNAIRE_BODY_BYTES),
                        (f"/api/session/{token}/screen", SMALL_BODY_BYTES), ("/admin/login", SMALL_BODY_BYTES),
                        ("/start", SMALL_BODY_BYTES)):
        with connect(server, PARTICIPANT) as sock:
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {limit + 1}\r\n\r\n".encode())
            assert status_line(sock) == 413, path
    trial = plan["trials"][0]
    answer = json.dumps(trial_answer(trial)).encode()
    padded = answer + b" " * (TRIAL_BODY_BYTES - len(answer))
    status, _, body = request(server, "POST", f"/api/session/{token}/trial/{trial['index']}", padded,
                              {"Content-Type": "application/json"})
    assert status == 201, body


def test_a_sessions_posts_beyond_its_answers_and_unknown_tokens_wait_in_the_other_lane(sample, tmp_path):
    """Through the app: a token takes the answer lane only once the app has answered its session
    (the plan), and only as many times as the experiment has trials (those of experiment.json and
    of its adaptive blocks) plus the session's reports; a token the app refused never does."""
    shutil.copytree(sample, tmp_path / "exp")
    experiment = json.loads((tmp_path / "exp" / "experiment.json").read_text())
    posts = len(experiment["trials"]) + sum(block["trials"] for block in experiment.get("adaptive", [])) + EXTRA_POSTS
    app = create_app(tmp_path / "exp", insecure_cookies=True)
    budget = app.extensions["cuebench_answers"]
    client = app.test_client()
    page = client.get("/?code=lanes").get_data(as_text=True)
    start = client.post("/start", data={"consent": "yes", "code": "lanes", "start_nonce": NONCE.search(page).group(1)})
    token = start.headers["Location"].rsplit("/", 1)[1]
    assert not budget.take(token)  # nothing of the session answered yet (the start is not a session request)
    assert client.get(f"/api/session/{token}").status_code == 200
    assert client.get("/api/session/forged-token").status_code >= 400
    lane = [budget.take(token) for _ in range(posts + 3)]
    assert lane == [True] * posts + [False] * 3
    assert not budget.take("forged-token")
