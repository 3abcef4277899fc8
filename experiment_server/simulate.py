"""Simulated participants and a killable server process, for launch tests and the load benchmark.

A ``SimulatedParticipant`` goes through what the web task does over HTTP: the consent page
(for the start form's nonce and the browser cookie it is bound to), start, the plan, one POST per trial, the completion code;
each request with a timeout and, on a network error, a 5xx or a 429, retried with the web
task's back-off (``human_tasks/web/static/task/server.js``: 0.5 s, doubling); any other 4xx is
final. A ``ServerProcess`` is ``cuebench serve`` in its own process group, so a test can
SIGKILL it (gunicorn master and workers alike) in the middle of a run and start it again.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

BACKOFF_FIRST_S = 0.5
NONCE = re.compile(r'name="start_nonce" value="([^"]+)"')


class LaunchError(RuntimeError):
    """A simulated participant could not finish (deadline passed or the server refused for good)."""


@dataclass
class Reply:
    status: int
    body: bytes
    location: str | None

    def json(self):
        return json.loads(self.body)


@dataclass
class ClientLog:
    """What all participants of a run saw, shared between their threads."""
    statuses: Counter = field(default_factory=Counter)
    retries: int = 0
    acknowledged: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    later_latencies_ms: list[float] = field(default_factory=list)  # all but each participant's first trial
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, status: int | None, ms: float, trial_post: bool, first_trial: bool = False) -> None:
        with self.lock:
            self.statuses[status if status is not None else "network error"] += 1
            if trial_post and status in (200, 201):
                self.acknowledged += 1
                self.latencies_ms.append(ms)
                if not first_trial:
                    self.later_latencies_ms.append(ms)


def instructed_answer(trial: dict) -> str | None:
    """The answer an attention trial asks for, in any language: the choice its instruction names last ("the
    next image shows a cat. Please click \u201cdog\u201d", "... dr\u00fccken Sie bitte 2"), the longest at a place;
    by the name its button shows ("Hund" in a German study), or the choice itself."""
    names = {**{choice: choice for choice in trial["choices"]},
             **{cell["name"]: cell["label"] for cell in trial.get("grid") or ()}}
    named = [(m.start(), len(name), label) for name, label in names.items()
             for m in re.finditer(rf"(?<!\w){re.escape(name)}(?!\w)", trial["instruction"] or "")]
    return max(named)[2] if named else None


def trial_answer(trial: dict) -> dict:
    """A plausible trial post: the instructed answer on attention trials, else the first choice."""
    response = instructed_answer(trial) or trial["choices"][0]
    return {"trial_key": trial["trial_key"], "response": response, "timed_out": False, "rt_ms": 612.0,
            "timing_measured": {"fixation": 300.1, "stimulus": 200.2}, "frames": {"fixation": 18, "stimulus": 12},
            "dropped_frames": 0, "refresh_hz": 60.0, "device": {"user_agent": "simulated"}, "events": []}


class SimulatedParticipant:
    """One participant over one keep-alive connection (re-opened after any network error).

    ``entry`` are the link's parameters: ``{"code": ...}`` or Prolific's ``PROLIFIC_PID``,
    ``STUDY_ID`` and ``SESSION_ID``. After each trial the participant pauses for a time drawn
    uniformly from ``trial_interval_s`` (low, high), seeded by the participant's name: people
    do not answer in step, and a load test whose participants all post in the same
    millisecond every second measures that artefact instead of the server."""

    def __init__(self, port: int, entry: dict[str, str], log: ClientLog, *, timeout_s: float = 10.0,
                 deadline_s: float = 120.0, max_backoff_s: float = 2.0, duplicate_every: int = 0,
                 trial_interval_s: tuple[float, float] = (0.0, 0.0)):
        self.port = port
        self.entry = entry
        self.name = "/".join(entry.values())
        self.log = log
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + deadline_s
        self.max_backoff_s = max_backoff_s
        self.duplicate_every = duplicate_every
        self.trial_interval_s = trial_interval_s
        self.pace = random.Random(self.name)
        self.conn: http.client.HTTPConnection | None = None
        self.cookies: dict[str, str] = {}

    def _once(self, method: str, path: str, body: bytes | None, headers: dict) -> Reply:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout_s)
        if self.cookies:
            headers = {**headers, "Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        self.conn.request(method, path, body=body, headers=headers)
        reply = self.conn.getresponse()
        for cookie in reply.headers.get_all("Set-Cookie") or []:
            name, _, value = cookie.split(";", 1)[0].partition("=")
            self.cookies[name.strip()] = value.strip()
        return Reply(reply.status, reply.read(), reply.getheader("Location"))

    def request(self, method: str, path: str, body: bytes | None = None, content_type: str | None = None,
                trial_post: bool = False, first_trial: bool = False) -> Reply:
        """Send until the server answers with neither a 5xx nor a 429 (the web task's rule)."""
        headers = {"Content-Type": content_type} if content_type else {}
        wait = BACKOFF_FIRST_S
        while True:
            t0 = time.perf_counter()
            try:
                reply = self._once(method, path, body, headers)
            except (OSError, http.client.HTTPException):
                reply = None
                if self.conn is not None:
                    self.conn.close()
                    self.conn = None
            self.log.record(reply.status if reply else None, (time.perf_counter() - t0) * 1000, trial_post, first_trial)
            if reply is not None and reply.status < 500 and reply.status != 429:
                return reply
            if time.monotonic() + wait > self.deadline:
                raise LaunchError(f"{self.name}: {method} {path} got no answer before the deadline")
            with self.log.lock:
                self.log.retries += 1
            time.sleep(wait)
            wait = min(2 * wait, self.max_backoff_s)

    def start(self) -> str:
        """Open the consent page and start a session; its token."""
        page = self.request("GET", f"/?{urlencode(self.entry)}")
        nonce = NONCE.search(page.body.decode()).group(1)
        form = urlencode({"consent": "yes", **self.entry, "start_nonce": nonce}).encode()
        started = self.request("POST", "/start", form, "application/x-www-form-urlencoded")
        if started.status != 303:
            raise LaunchError(f"{self.name}: start answered {started.status}: {started.body[:200]!r}")
        return started.location.rsplit("/", 1)[1]

    def run(self) -> dict:
        """Take part from the consent page to the completion code; returns the outcome the server gave."""
        token = self.start()
        plan = self.request("GET", f"/api/session/{token}").json()
        for k, trial in enumerate(plan["trials"]):
            body = json.dumps(trial_answer(trial)).encode()
            sends = 2 if self.duplicate_every and k % self.duplicate_every == 0 else 1
            for _ in range(sends):
                reply = self.request("POST", f"/api/session/{token}/trial/{trial['index']}", body, "application/json",
                                     trial_post=True, first_trial=k == 0)
                if reply.status not in (200, 201):
                    raise LaunchError(f"{self.name}: trial {trial['index']} refused: {reply.status} {reply.body!r}")
            if any(self.trial_interval_s):
                time.sleep(self.pace.uniform(*self.trial_interval_s))
        done = self.request("POST", f"/api/session/{token}/complete", b"{}", "application/json")
        if done.status != 200:
            raise LaunchError(f"{self.name}: complete answered {done.status}: {done.body!r}")
        if self.conn is not None:
            self.conn.close()
        return dict(done.json(), participant=plan["participant"], trials=len(plan["trials"]))


def measured_display(hz: float | None = 60.0, width: int = 1280, height: int = 800, touch: bool = False) -> dict:
    """The measurements the web task's browser check posts with a screen-out (``screening``):
    ``hz`` None as from a window that drew no frames."""
    return {"refresh": None if hz is None else {"hz": hz, "outlier_share": 0.0, "median_ms": 1000 / hz, "n": 150},
            "size": {"width": width, "height": height, "screen_width": width, "screen_height": height},
            "pointer": {"fine": not touch, "touch": touch}}


def fill_consent(expdir: str | Path) -> Path:
    """Fill in every ``[[...]]`` placeholder of a built study's texts (its default consent's researcher,
    purpose, approval, risks and retention) as the researcher does before serving, so that ``cuebench serve``
    starts (it refuses them unfilled: ``cuebench.texts.check_filled``); for load tests and the test suite.
    Each becomes "(test study: FIELD)". Returns the folder."""
    from cuebench.expdir import ExperimentDir
    from cuebench.texts import NAMES, PLACEHOLDER, refresh_texts, text_path

    folder = ExperimentDir(expdir)
    experiment = folder.load()
    refresh_texts(folder, experiment)
    for name in NAMES:
        path = text_path(folder, name, experiment.language)
        text = path.read_text(encoding="utf-8")
        path.write_text(PLACEHOLDER.sub(lambda m: f"(test study: {m.group(1).split(':')[0]})", text), encoding="utf-8")
    return folder.root


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServerProcess:
    """``cuebench serve EXPDIR`` on 127.0.0.1 in its own process group. Simulated participants
    all come from the loopback address, so the starts rate limit is ``start_limit`` and the cap on
    never-answered sessions per address ``unanswered_per_address`` (both by default lifted far beyond
    any simulated launch). ``cpus``: the CPUs the server (and every
    thread and worker process it starts) may run on (Linux), away from a load test's clients; ``cwd``: the
    folder it runs in (``expdir`` may be relative to it, as a user types it)."""

    def __init__(self, expdir: str | Path, port: int, *, workers: int = 1, threads: int = 8,
                 extra_args: tuple[str, ...] = (), log_file: Path | None = None, start_limit: int = 10**6,
                 cpus: set[int] | None = None, cwd: Path | None = None, unanswered_per_address: int = 10**6):
        self.args = [sys.executable, "-m", "cuebench", "serve", str(expdir), "--host", "127.0.0.1", "--port", str(port),
                     "--workers", str(workers), "--threads", str(threads), "--start-limit", str(start_limit),
                     "--unanswered-per-address", str(unanswered_per_address), *extra_args]
        self.port = port
        self.log_file = log_file
        self.cpus = cpus
        self.cwd = cwd
        self.process: subprocess.Popen | None = None

    def start(self, ready_within_s: float = 60.0) -> None:
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        self.process = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                        cwd=self.cwd, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                        preexec_fn=(lambda: os.sched_setaffinity(0, self.cpus)) if self.cpus else None)
        deadline = time.monotonic() + ready_within_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LaunchError(f"the server exited with status {self.process.returncode} while starting")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/?code=ready")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.kill()
        raise LaunchError(f"the server did not answer on port {self.port} within {ready_within_s} s")

    def kill(self) -> None:
        """SIGKILL the whole process group: no shutdown handler runs, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
