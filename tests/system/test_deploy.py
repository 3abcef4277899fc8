"""The production set-up of docs/deploy.md, run as the files in docs/deploy/ say: Debian's nginx with TLS in front
of ``cuebench serve --workers 2`` on PostgreSQL, started by the systemd unit's command line.

One participant takes part in chromium over HTTPS through nginx while the server is stopped and started again
mid-study (as ``systemctl restart`` does, without any rule option: the study's rules are in its folder);
every answer is stored once and the study's target still holds afterwards. nginx hands the server each
client's address (``--trusted-proxies 1``): a client cannot choose its own. Slow clients trickling request
heads and bodies through nginx never reach the server, and an honest page still loads meanwhile. The nightly
backup's command (pg_dump) and the restore script give back every answer. The configuration files are used
as they are, only their ports, paths and certificate replaced (``placed`` fails if one of those is not there).
"""

from __future__ import annotations

import http.client
import os
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import tarfile
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest

from conftest import postgres_bin, unavailable
from cuebench.counterbalance import participant_sequence
from cuebench.expdir import ExperimentDir
from cuebench.responses import KEY, ResponseStore, trial_row
from cuebench.words import say
from experiment_server.simulate import NONCE, fill_consent, free_port
from experiment_server.study_rules import load_rules
from stimuli.web_sample import build_sample_experiment
from test_journey import take_part

pytestmark = pytest.mark.slow

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy"
NGINX = Path("/usr/sbin/nginx")
PRODUCTION_ROOT = "/srv/cuebench"
"""Where the units keep the installation, the study folder and the backups (replaced by the test's folder)."""
RULES = ("--target-n", "3", "--start-limit", "2")
RESTART_AFTER_ANSWERS = 2
"""The sample study's blocks are [0], [1, 2, 3], [4, 5, 6]: the restart comes in the middle of a block whose images
are loaded, so the server has the rest of that block plus the web task's image retries (about 8 s) to be back
before the next block's images are fetched."""
ATTACKERS = 30
"""Connections per attack (a head and a body attack, each from a loopback address of its own)."""
HONEST_DEADLINE_S = 5.0
ATTACK_MARGIN_S = 4.0
"""How long after nginx's head deadline (client_header_timeout) a trickled head may still be open."""


def placed(text: str, replacements: dict[str, str]) -> str:
    """``text`` with each production value replaced by the test's; each must be there, or the file changed
    under the test."""
    for old, new in replacements.items():
        assert old in text, f"{old!r} is no longer in the deployment file; update tests/system/test_deploy.py"
        text = text.replace(old, new)
    return text


def unit_command(name: str, root: Path, database: str) -> tuple[list[str], dict[str, str]]:
    """A systemd unit's ``ExecStart`` and ``Environment`` as they run here: its paths under ``root``, the
    database ``database``, the installed ``cuebench`` this interpreter's."""
    text = (DEPLOY / name).read_text()
    environment = dict(line.split("=", 2)[1:] for line in text.splitlines() if line.startswith("Environment="))
    assert environment["CUEBENCH_DATABASE"].startswith("postgresql://")
    environment["CUEBENCH_DATABASE"] = database
    environment = {key: value.replace(PRODUCTION_ROOT, str(root)) for key, value in environment.items()}
    command = shlex.split(next(line for line in text.splitlines() if line.startswith("ExecStart=")).split("=", 1)[1])
    cuebench = f"{PRODUCTION_ROOT}/cuebench/.venv/bin/cuebench"
    command = [sys.executable, "-m", "cuebench", *command[1:]] if command[0] == cuebench else command
    return [word.replace(PRODUCTION_ROOT, str(root)) for word in command], environment


class Service:
    """The server unit's command in a process group of its own, stopped as systemd stops it (SIGTERM)."""

    def __init__(self, command: list[str], environment: dict[str, str], cwd: Path, port: int, log: Path):
        self.command, self.environment, self.cwd, self.port, self.log = command, environment, cwd, port, log
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(self.command, cwd=self.cwd, env={**os.environ, **self.environment},
                                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: self.process.poll() is None and answers("127.0.0.1", self.port), 60,
                 f"cuebench serve on port {self.port} (log: {self.log})")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)


def answers(host: str, port: int, tls: bool = False) -> bool:
    try:
        conn = (http.client.HTTPSConnection(host, port, timeout=2, context=ssl._create_unverified_context()) if tls
                else http.client.HTTPConnection(host, port, timeout=2))
        conn.request("GET", "/?code=ready")
        return conn.getresponse().status == 200
    except OSError:
        return False


def wait_for(condition, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} was not ready within {within_s} s")


@pytest.fixture()
def nginx(tmp_path):
    """Debian's nginx as a child of the test (no daemon), with docs/deploy/cuebench-nginx.conf in its http block."""
    if not NGINX.exists():
        unavailable("Debian's nginx (/usr/sbin/nginx) is not installed (apt-get install nginx)")
    if shutil.which("openssl") is None:
        unavailable("openssl is not installed (apt-get install openssl)")
    root = tmp_path / "nginx"
    root.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "1", "-subj", "/CN=study.example.org", "-keyout", root / "key.pem", "-out",
                    root / "cert.pem"], check=True, capture_output=True)
    ports = {"http": free_port(), "https": free_port(), "app": free_port()}
    site = placed((DEPLOY / "cuebench-nginx.conf").read_text(), {
        "listen 80;": f"listen 127.0.0.1:{ports['http']};",
        "listen 443 ssl http2;": f"listen 127.0.0.1:{ports['https']} ssl http2;",
        "/etc/letsencrypt/live/study.example.org/fullchain.pem": str(root / "cert.pem"),
        "/etc/letsencrypt/live/study.example.org/privkey.pem": str(root / "key.pem"),
        "server 127.0.0.1:8080;": f"server 127.0.0.1:{ports['app']};",
        "/var/log/nginx/cuebench-access.log": str(root / "access.log")})
    (root / "cuebench.conf").write_text(site)
    (root / "nginx.conf").write_text(f"""daemon off;
{'user root;' if os.geteuid() == 0 else ''}
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {root}/body; proxy_temp_path {root}/proxy; fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi; scgi_temp_path {root}/scgi;
    include {root}/cuebench.conf;
}}
""")
    process = subprocess.Popen([NGINX, "-p", root, "-c", root / "nginx.conf", "-e", root / "error.log"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: process.poll() is None and _listening(ports["https"]), 20, "nginx")
        yield {**ports, "root": root, "site": site}
    finally:
        process.terminate()
        process.wait(timeout=20)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def https(port: int, source: str) -> http.client.HTTPSConnection:
    """A connection to nginx from the loopback address ``source`` (each client address its own)."""
    return http.client.HTTPSConnection("127.0.0.1", port, timeout=HONEST_DEADLINE_S, source_address=(source, 0),
                                       context=ssl._create_unverified_context())


def start_session(port: int, source: str, code: str, forwarded_for: str | None = None) -> tuple[int, str]:
    """Consent page, then the start form, from ``source`` (claiming to be ``forwarded_for``): the start's status
    and page."""
    spoof = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
    conn = https(port, source)
    conn.request("GET", f"/?code={code}", headers=spoof)
    reply = conn.getresponse()
    page = reply.read().decode()
    cookies = "; ".join(c.split(";", 1)[0] for c in reply.headers.get_all("Set-Cookie") or [])
    form = urllib.parse.urlencode({"consent": "yes", "code": code, "start_nonce": NONCE.search(page).group(1)})
    conn.request("POST", "/start", form, {"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookies,
                                          **spoof})
    reply = conn.getresponse()
    return reply.status, reply.read().decode()


def trickle(port: int, source: str, head: bytes, body_bytes: int, seconds: float, over: threading.Event
            ) -> list[float | None]:
    """``ATTACKERS`` connections from ``source``, each sending ``head`` one byte a second (``body_bytes`` = 0) or
    ``head`` at once and then its announced body one byte a second, for ``seconds`` or until ``over`` is set (a
    head attack sets it when nginx has closed all of its connections): when nginx closed each, seconds after
    the start (None: still open at the end)."""
    context = ssl._create_unverified_context()
    conns, closed = [], [None] * ATTACKERS
    for _ in range(ATTACKERS):
        raw = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
        conn = context.wrap_socket(raw)
        if body_bytes:
            conn.sendall(head)
        conn.settimeout(0.01)
        conns.append(conn)
    start, sent = time.monotonic(), 0
    while time.monotonic() - start < seconds and not over.is_set():
        piece = head[sent:sent + 1] if not body_bytes else b"x"
        sent += 1
        for k, conn in enumerate(conns):
            if closed[k] is not None:
                continue
            try:
                conn.sendall(piece)
                if conn.recv(4096) == b"":
                    closed[k] = time.monotonic() - start
            except (ssl.SSLWantReadError, socket.timeout):
                pass
            except OSError:
                closed[k] = time.monotonic() - start
        if not body_bytes and None not in closed:
            over.set()
        time.sleep(1.0)
    for conn in conns:
        conn.close()
    return closed


def connections_to(port: int) -> int:
    """Established TCP connections to 127.0.0.1:``port`` on this machine (Linux's /proc/net/tcp): how many
    nginx holds open to the server."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[2].endswith(f":{port:04X}") and row.split()[3] == "01")


def seconds_of(site: str, directive: str) -> float:
    return float(re.search(rf"^\s*{directive}\s+(\d+)s;", site, re.M).group(1))


def restart_after(service: Service, database: str, answers_stored: int, done: dict) -> threading.Thread:
    """Stop and start the server (as ``systemctl restart``) once ``answers_stored`` answers are in the database."""
    import psycopg

    def watch():
        deadline = time.monotonic() + 120
        with psycopg.connect(database, autocommit=True) as conn:
            while time.monotonic() < deadline:
                if conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0] >= answers_stored:
                    service.stop()
                    service.start()
                    done["restarted"] = True
                    return
                time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def second_database(url: str) -> str:
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return re.sub(r"/[^/?]+\?", f"/{name}?", url, count=1)


def contents(database: str) -> dict[str, list]:
    """Every row of every table of the study (server tables included), in a fixed order."""
    import psycopg

    with psycopg.connect(database) as conn:
        tables = [name for (name,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")]
        return {table: sorted(map(repr, conn.execute(f'SELECT * FROM "{table}"').fetchall())) for table in tables}


def test_a_study_behind_nginx_on_postgresql_survives_a_restart_slow_clients_and_a_restore(tmp_path, nginx, browser,
                                                                                          postgres_url):
    build_sample_experiment(tmp_path / "study")
    fill_consent(tmp_path / "study")
    subprocess.run([sys.executable, "-m", "cuebench", "serve", "rules", "study", *RULES], cwd=tmp_path, check=True,
                   capture_output=True)
    command, environment = unit_command("cuebench.service", tmp_path, postgres_url)
    command = placed(" ".join(command), {"--port 8080": f"--port {nginx['app']}", "--workers 4": "--workers 2"})
    service = Service(command.split(" "), environment, tmp_path, nginx["app"], tmp_path / "server.log")
    service.start()
    try:
        port = nginx["https"]
        # nginx gives the server the address it saw, whatever a client claims: two starts from 127.0.0.2, then
        # its start limit (2) refuses the third; a participant from 127.0.0.1 is not counted with them.
        spoofed = [start_session(port, "127.0.0.2", f"spoof{k}", f"198.51.100.{k}")[0] for k in range(3)]
        assert spoofed == [303, 303, 429]
        large = https(port, "127.0.0.2")
        large.putrequest("POST", "/start")
        large.putheader("Content-Length", str(300 * 1024))
        large.endheaders()
        assert large.getresponse().status == 413  # refused from its announced length, nothing of it read
        plain = http.client.HTTPConnection("127.0.0.1", nginx["http"], timeout=5)
        plain.request("GET", "/?code=x")
        assert plain.getresponse().status == 301

        done: dict = {}
        watcher = restart_after(service, postgres_url, RESTART_AFTER_ANSWERS, done)
        page = browser.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 800}).new_page()
        outcome = take_part(page, f"https://127.0.0.1:{port}", "code=deploy1")
        watcher.join(timeout=60)
        assert done.get("restarted") and outcome["status"] == "finished"
        experiment = ExperimentDir(tmp_path / "study").load()
        with ResponseStore(postgres_url) as store:
            keys = store.conn.execute(f"SELECT {', '.join(KEY)} FROM responses").fetchall()
        assert len(keys) == len(set(keys)) == len(participant_sequence(experiment, 0, "any", "1"))
        # restarted without rule options: the stored target (3) still holds, so a newcomer waits
        status, text = start_session(port, "127.0.0.3", "late1")
        assert status == 200 and say("full_for_now_title", "en") in text
        assert load_rules(tmp_path / "study").target_n == 3

        # slow clients through nginx: trickled heads are cut at its head deadline, trickled bodies wait in nginx;
        # an honest consent page loads within its deadline all the while
        head_deadline = seconds_of(nginx["site"], "client_header_timeout")
        attack_s = head_deadline + ATTACK_MARGIN_S
        body = b"POST /start HTTP/1.1\r\nHost: study.example.org\r\nContent-Length: 4000\r\n" \
               b"Content-Type: application/x-www-form-urlencoded\r\n\r\n"
        attacks = {"head": (b"GET /?code=slow HTTP/1.1\r\nHost: study.example.org\r\nX-Padding: " + b"x" * 64, 0,
                            "127.0.0.4"), "body": (body, 4000, "127.0.0.5")}
        closed: dict[str, list] = {}
        over = threading.Event()
        threads = [threading.Thread(target=lambda k=k, a=a: closed.__setitem__(
            k, trickle(port, a[2], a[0], a[1], attack_s, over))) for k, a in attacks.items()]
        for thread in threads:
            thread.start()
        honest, upstream, idle = [], [], connections_to(nginx["app"])  # idle: nginx's kept-alive ones
        time.sleep(1.0)
        while any(thread.is_alive() for thread in threads):
            upstream.append(connections_to(nginx["app"]))
            t0 = time.monotonic()
            conn = https(port, "127.0.0.1")
            conn.request("GET", "/?code=honest")
            reply = conn.getresponse()
            honest.append((reply.status, b'name="start_nonce"' in reply.read(), time.monotonic() - t0))
            conn.close()
            time.sleep(0.5)
        for thread in threads:
            thread.join()
        assert len(honest) >= 5 and all(status == 200 and form and took < HONEST_DEADLINE_S
                                               for status, form, took in honest), honest
        assert all(at is not None and at <= head_deadline + ATTACK_MARGIN_S for at in closed["head"]), closed
        assert sum(at is None for at in closed["body"]) == ATTACKERS, closed["body"]  # nginx holds them, unanswered
        assert max(upstream) - idle < ATTACKERS / 2, (idle, upstream)  # and passes none of them on to the server

        # the nightly backup, then a restore into an empty database gives back every answer
        backup, backup_env = unit_command("cuebench-backup.service", tmp_path, postgres_url)
        backup = placed(" ".join(backup), {f"{tmp_path}/cuebench-backup.sh": str(DEPLOY / "cuebench-backup.sh")})
        path = f"{postgres_bin()}:{os.environ['PATH']}"
        subprocess.run(backup.split(" "), env={**os.environ, **backup_env, "PATH": path}, check=True,
                       capture_output=True)
        dumps = sorted((tmp_path / "backups").glob("responses-*.dump"))
        assert len(dumps) == 1 and len(list((tmp_path / "backups").glob("secrets-*.json"))) == 1
        restored = second_database(postgres_url)
        subprocess.run([DEPLOY / "cuebench-restore.sh", dumps[0], tmp_path / "study"],
                       env={**os.environ, "CUEBENCH_DATABASE": restored, "PATH": path}, check=True,
                       capture_output=True)
        original = contents(postgres_url)
        assert contents(restored) == original and len(original["responses"]) == len(keys)
    finally:
        service.stop()
    log = (nginx["root"] / "access.log").read_text()
    assert "/task/TOKEN" in log and "127.0.0.1" not in log and "deploy1" not in log


def test_a_sqlite_backup_taken_while_answers_arrive_restores_a_consistent_study(tmp_path):
    """The backup script without ``CUEBENCH_DATABASE`` copies responses.sqlite with SQLite's online backup while
    another connection goes on committing answers (as a server does); the restore script puts it back in place
    of the study's database (the one it replaces kept beside it), whole and with every answer it held."""
    experiment = build_sample_experiment(tmp_path / "study")
    (tmp_path / "study.secrets.json").write_text("{}")
    written, stop = [], threading.Event()

    def answer():
        with ResponseStore(tmp_path / "study" / "responses.sqlite") as store:
            for k in range(100_000):
                if stop.is_set():
                    return
                store.write(trial_row(experiment, experiment.trials[k % len(experiment.trials)], observer=f"p{k}",
                                      observer_kind="human", session="1", trial_index=0, response="cat", group=0))
                written.append(k)

    writer = threading.Thread(target=answer)
    writer.start()
    wait_for(lambda: len(written) >= 20, 30, "the first answers")
    try:
        subprocess.run([DEPLOY / "cuebench-backup.sh", "study", "backups"], cwd=tmp_path, check=True,
                       capture_output=True, env={k: v for k, v in os.environ.items() if k != "CUEBENCH_DATABASE"})
    finally:
        stop.set()
        writer.join()
    copy = next((tmp_path / "backups").glob("responses-*.sqlite"))
    assert oct(copy.stat().st_mode & 0o777) == "0o600"
    with sqlite3.connect(copy) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        held = sorted(int(o[1:]) for (o,) in conn.execute("SELECT observer FROM responses"))
    assert held == list(range(len(held))) and 20 <= len(held) <= len(written)  # every answer up to a moment
    with tarfile.open(next((tmp_path / "backups").glob("study-*.tar.gz"))) as archive:
        names = archive.getnames()
    assert "study/experiment.json" in names and not any("responses.sqlite" in name for name in names)
    assert len(list((tmp_path / "backups").glob("secrets-*.json"))) == 1

    subprocess.run([DEPLOY / "cuebench-restore.sh", copy, "study"], cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "study" / "responses.sqlite.before-restore").exists()
    with ResponseStore(tmp_path / "study" / "responses.sqlite") as store:
        assert len(store.rows("experiment=?", [experiment.name])) == len(held)
