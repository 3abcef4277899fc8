"""Load test of the experiment server: N simulated participants arriving at once.

Starts ``cuebench serve`` on a fresh sample experiment on 127.0.0.1 (loopback only, its
own process, ``--workers`` processes), lets N participants (``experiment_server.simulate``,
one thread and one keep-alive connection each) start a session at the same moment and
post every trial of their sequence, pausing between trials as a person would: a time
drawn uniformly from ``--trial-interval-ms LOW HIGH`` (default 1000 3000; one value: every
participant in step, the worst case; 0: back to back). Reports p50/p99 of the trial POSTs,
the p99 of all but each participant's first trial (the first ones queue behind
everybody's consent page, start and plan requests of the arrival) and the slowest of those
later trials (no request may hold up another by more than 100 ms), throughput and the
count check (answers acknowledged = rows stored). Every 201 is sent after the answer is
committed with ``synchronous=FULL``. Latencies are what a participant's browser sees: from
sending the request over HTTP on loopback to the last byte of the answer. The participants are
threads of this one process. Over a whole run they use about a fifth of the CPU the server does
(1.4 s against 6.5 s), but in the arrival burst their 200 threads want the CPUs at the same
moment as the server: sharing two cores, they held the server back for up to 2.6 s in one run
and the slowest later trial ranged from 37 ms to 2.6 s over three runs of the same code. Real
participants' browsers run on their own machines, so on Linux the clients get one CPU and the
server (every process and thread of it) the others (``--share-cpus``: no separation); the first
line says which.

Baseline, in the same run: the same rows written one after another straight into a fresh
``ResponseStore`` on the same backend (no HTTP, one durable transaction each); the ratios
compare the server's POST latency and throughput with those direct writes.

``--database postgresql://USER@HOST/DB`` runs against PostgreSQL instead of the folder's
SQLite file: each run creates a scratch database on that server (and drops it after).

Then two attacks on a fresh server of the same kind: a crafted body as long as a trial answer
may be (a quote and escaped quotes, which made the old JSON depth check quadratic) posted
repeatedly while 20 participants take part (its answer time, and their trial POSTs' p99
meanwhile); and slow connections (idle, or sending half a request's head, then nothing) opened
in growing numbers, after each step timing a new participant's consent page: how many the
default server (waitress) and ``--workers 2`` (gunicorn) each survive with the page still
answered within 2 s (``--slow-steps``).

``--attack`` runs the participants instead on the default server and on ``--workers 2`` while
clients from another address attack both (issue 47's attack): 40 trickling connections (request
heads, chunked bodies and ``Expect: 100-continue`` bodies, a byte every 5 s each, reopened as
soon as the server closes one) and 12 heavy posters (sessions of their own posting bodies as long
as a trial answer may be, back to back). Goal: the participants' later-trial p99 under 250 ms, no
5xx, every answer stored.

    .venv/bin/python benchmarks/bench_server_load.py --participants 50 200
    .venv/bin/python benchmarks/bench_server_load.py --participants 50 200 --database postgresql://me@/postgres?host=/tmp
    .venv/bin/python benchmarks/bench_server_load.py --participants 200 --attack
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit, urlunsplit

from cuebench.responses import ResponseStore
from stimuli.web_sample import build_sample_experiment
from experiment_server.request_bounds import TRIAL_BODY_BYTES
from experiment_server.simulate import ClientLog, ServerProcess, SimulatedParticipant, fill_consent, free_port


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


@contextmanager
def scratch_database(server_url: str | None) -> Iterator[str | None]:
    """A fresh database on the PostgreSQL server of ``server_url``, dropped afterwards (None: SQLite)."""
    if server_url is None:
        yield None
        return
    import psycopg

    name = f"cuebench_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def run_load(n_participants: int, workers: int, threads: int, interval_s: tuple[float, float],
             server_url: str | None, cpus: set[int] | None, attack: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as tmp, scratch_database(server_url) as database, \
            scratch_database(server_url) as baseline_database:
        study = Path(tmp) / "study"  # its secrets file goes beside it, inside tmp
        build_sample_experiment(study)
        fill_consent(study)
        server = ServerProcess(study, free_port(), workers=workers, threads=threads, cpus=cpus,
                               extra_args=("--database", database) if database else ())
        server.start()
        log = ClientLog()
        attackers = Attack(server.port) if attack else None
        try:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(max_workers=n_participants) as pool:
                list(pool.map(lambda n: SimulatedParticipant(server.port, {"code": f"bench{n}"}, log, timeout_s=60, deadline_s=600,
                                                             trial_interval_s=interval_s).run(),
                              range(n_participants)))
            wall = time.perf_counter() - t0
        finally:
            seen = attackers.stop() if attackers else {}
            server.stop()
        with ResponseStore(database or study / "responses.sqlite") as store:
            stored = store.count()
            baseline = direct_writes(store, baseline_database or Path(tmp) / "baseline.sqlite")
    latencies = log.latencies_ms
    return {"participants": n_participants, "sent": len(latencies), "stored": stored,
            "p50_ms": statistics.median(latencies), "p99_ms": percentile(latencies, 99),
            "later_p99_ms": percentile(log.later_latencies_ms, 99), "later_max_ms": max(log.later_latencies_ms),
            "posts_per_s": len(latencies) / wall, "direct_p50_ms": statistics.median(baseline),
            "direct_per_s": 1000 * len(baseline) / sum(baseline), "errors": sum(
                n for s, n in log.statuses.items() if s == "network error" or s >= 500), "attack": seen}


LATER_P99_GOAL_MS = 20.0
ATTACKED_LATER_P99_GOAL_MS = 250.0
STALL_GOAL_MS = 100.0
"""The slowest later trial, end to end, bounds how long any request was held up by the others."""
CRAFTED_BODY = b'"' + b'\\"' * (TRIAL_BODY_BYTES // 2 - 1)
TRICKLERS, HEAVY_POSTERS, TRICKLE_EVERY_S = 40, 12, 5.0
TRICKLED_HEADS = (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                  b"POST /admin/login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n",
                  b"POST /admin/login HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n")
"""What a trickling connection sends first: half a request head, the head of a chunked body, the head of
a body announced with ``Expect: 100-continue``; then a byte every ``TRICKLE_EVERY_S``."""
ATTACKER_ADDRESS = "127.0.0.2"


class Attackers:
    """``TRICKLERS`` trickling connections and ``HEAVY_POSTERS`` heavy posters from ``ATTACKER_ADDRESS``
    (participants come from 127.0.0.1), each in a loop of its own until ``halt`` is set. They run in a
    process of their own (``attack``), as real attackers do not share the participants' interpreter."""

    def __init__(self, port: int, halt):
        self.port = port
        self.halt = halt
        self.lock = threading.Lock()
        self.seen: dict[str, int] = {}
        self.threads = [threading.Thread(target=self._trickle, daemon=True)]
        self.threads += [threading.Thread(target=self._post, args=(k,), daemon=True) for k in range(HEAVY_POSTERS)]
        for thread in self.threads:
            thread.start()

    def _count(self, what: str) -> None:
        with self.lock:
            self.seen[what] = self.seen.get(what, 0) + 1

    def _open(self, k: int) -> socket.socket | None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5, source_address=(ATTACKER_ADDRESS, 0))
            sock.setblocking(False)
            sock.send(TRICKLED_HEADS[k % len(TRICKLED_HEADS)])
        except OSError:
            return None
        self._count("trickling connections opened")
        return sock

    def _trickle(self) -> None:
        """Keep ``TRICKLERS`` connections open, each sending a byte every ``TRICKLE_EVERY_S``; reopen one
        the server closed (after reading what it answered) at the next round, every 0.5 s."""
        socks = [self._open(k) for k in range(TRICKLERS)]
        last = time.monotonic()
        while not self.halt.wait(0.5):
            due = time.monotonic() - last >= TRICKLE_EVERY_S
            last = time.monotonic() if due else last
            for k, sock in enumerate(socks):
                if sock is not None:
                    try:
                        answer = sock.recv(4096)
                    except BlockingIOError:
                        answer = None
                    except OSError:
                        answer = b""
                    if answer and answer.startswith(b"HTTP/1.1 100 "):  # go on sending the body, a byte at a time
                        self._count("trickling told 100 Continue")
                    elif answer is not None:  # the server answered (411, 417) or closed it
                        status = answer.split(b" ")[1].decode() if answer[:5] == b"HTTP/" else "closed"
                        self._count(f"trickling answered {status}")
                        sock.close()
                        sock = None
                    elif due:
                        try:
                            sock.send(b"X")
                        except OSError:
                            pass
                socks[k] = sock if sock is not None else self._open(k)
        for sock in socks:
            if sock is not None:
                sock.close()

    def _post(self, k: int) -> None:
        """A session of its own, then bodies as long as a trial answer may be, back to back."""
        try:
            token = SimulatedParticipant(self.port, {"code": f"heavy{k}"}, ClientLog()).start()
        except Exception:  # noqa: BLE001 - an attacker that cannot start posts nothing
            return
        conn = None
        while not self.halt.is_set():
            try:
                conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=30,
                                                          source_address=(ATTACKER_ADDRESS, 0))
                conn.request("POST", f"/api/session/{token}/trial/0", CRAFTED_BODY,
                             {"Content-Type": "application/json"})
                reply = conn.getresponse()
                reply.read()
                self._count(f"heavy posts answered {reply.status}")
            except (OSError, http.client.HTTPException):
                conn = None
                self._count("heavy posts failed")

    def stop(self) -> dict[str, int]:
        self.halt.set()
        for thread in self.threads:
            thread.join(35)
        return dict(self.seen)


def _attack(port: int, halt, results) -> None:
    """The attackers' process. It shares the participants' CPU, at the lowest priority: attackers'
    machines are their own, so the attack may cost the server, not the participants' browsers."""
    os.nice(19)
    attackers = Attackers(port, halt)
    halt.wait()
    results.put(attackers.stop())


class Attack:
    """``Attackers`` on ``port`` in another process, from now until ``stop`` (what they saw)."""

    def __init__(self, port: int):
        context = multiprocessing.get_context("spawn")
        self.halt, self.results = context.Event(), context.Queue()
        self.process = context.Process(target=_attack, args=(port, self.halt, self.results), daemon=True)
        self.process.start()

    def stop(self) -> dict[str, int]:
        self.halt.set()
        seen = self.results.get(timeout=60)
        self.process.join(10)
        return seen
CONSENT_WITHIN_S = 2.0


def crafted_body_under_load(port: int, n_participants: int = 20, n_crafted: int = 10) -> dict:
    """The crafted body posted ``n_crafted`` times, one after another, to a session of its own while
    ``n_participants`` take part: the slowest answer to it, and the participants' trial POST p99."""
    log = ClientLog()
    with ThreadPoolExecutor(max_workers=n_participants) as pool:
        runs = [pool.submit(SimulatedParticipant(port, {"code": f"crowd{n}"}, log, timeout_s=60, deadline_s=600,
                                                 trial_interval_s=(0.2, 0.6)).run) for n in range(n_participants)]
        token = SimulatedParticipant(port, {"code": "crafter"}, ClientLog()).start()
        crafted_ms, statuses = [], set()
        for _ in range(n_crafted):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            t0 = time.perf_counter()
            conn.request("POST", f"/api/session/{token}/trial/0", CRAFTED_BODY, {"Content-Type": "application/json"})
            reply = conn.getresponse()
            reply.read()
            crafted_ms.append((time.perf_counter() - t0) * 1000)
            statuses.add(reply.status)
            conn.close()
        for run in runs:
            run.result()
    return {"crafted_max_ms": max(crafted_ms), "crafted_statuses": sorted(statuses),
            "others_p99_ms": percentile(log.latencies_ms, 99)}


def consent_answered(port: int, within_s: float) -> bool:
    """Whether a new participant's consent page (a fresh connection) comes within ``within_s``."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=within_s)
        conn.request("GET", "/?code=newcomer")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


SLOW_CLIENTS = {"idle": b"", "half a request head": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "}
"""What each slow connection sends before it falls silent."""


def slow_connections_survived(port: int, steps: list[int], first_bytes: bytes) -> int:
    """Open connections that send ``first_bytes`` and then nothing, up to each of ``steps`` in turn;
    the largest count at which a new participant still got the consent page in time."""
    held: list[socket.socket] = []
    survived = 0
    try:
        for target in steps:
            while len(held) < target:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(ATTACKER_ADDRESS, 0))
                sock.sendall(first_bytes)
                held.append(sock)
            time.sleep(1.0)  # the server accepts them
            if not consent_answered(port, CONSENT_WITHIN_S):
                break
            survived = target
    finally:
        for sock in held:
            sock.close()
    return survived


def run_attacks(workers: int, threads: int, server_url: str | None, cpus: set[int] | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp, scratch_database(server_url) as database:
        study = Path(tmp) / "study"
        build_sample_experiment(study)
        fill_consent(study)
        server = ServerProcess(study, free_port(), workers=workers, threads=threads, cpus=cpus,
                               extra_args=("--database", database) if database else ())
        server.start()
        try:
            return crafted_body_under_load(server.port)
        finally:
            server.stop()


def slow_connections_per_server(threads: int, slow_steps: list[int],
                                cpus: set[int] | None) -> dict[str, dict[str, int]]:
    """How many slow connections of each kind the default server (waitress) and ``--workers 2``
    (gunicorn) survive, each a fresh server on SQLite."""
    survived = {}
    for name, workers in (("waitress, 1 process", 1), ("gunicorn, --workers 2", 2)):
        with tempfile.TemporaryDirectory() as tmp:
            study = Path(tmp) / "study"
            build_sample_experiment(study)
            fill_consent(study)
            server = ServerProcess(study, free_port(), workers=workers, threads=threads, cpus=cpus)
            server.start()
            try:
                survived[name] = {kind: slow_connections_survived(server.port, slow_steps, sent)
                                  for kind, sent in SLOW_CLIENTS.items()}
            finally:
                server.stop()
    return survived


def separate_cpus() -> tuple[set[int], set[int]] | None:
    """(the clients' CPUs, the server's): the first CPU this process may use for the clients, the
    rest for the server; None where there is one CPU or no way to choose (not Linux)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    usable = sorted(os.sched_getaffinity(0))
    return ({usable[0]}, set(usable[1:])) if len(usable) > 1 else None


def direct_writes(source_store: ResponseStore, location: str | Path) -> list[float]:
    """Baseline: the same rows written straight into a fresh ResponseStore; ms per write."""
    rows = source_store.rows()
    times = []
    with ResponseStore(location) as target:
        for row in rows:
            row = {k: v for k, v in row.items() if k != "created_at"}
            t0 = time.perf_counter()
            target.write(row)
            times.append((time.perf_counter() - t0) * 1000)
    return times


def attacked(participants: list[int], threads: int, interval_s: tuple[float, float], cpus: set[int] | None,
             where: str) -> int:
    """The participants on each server while ``Attackers`` attack it (``--attack``); 0 if every goal is met."""
    print(f"under attack ({TRICKLERS} trickling connections, {HEAVY_POSTERS} heavy posters of "
          f"{len(CRAFTED_BODY) // 1024} KiB bodies, from {ATTACKER_ADDRESS}); SQLite, {threads} threads per process; "
          f"{where}")
    ok = True
    for name, workers in (("waitress, 1 process", 1), ("gunicorn, --workers 2", 2)):
        for n in participants:
            r = run_load(n, workers, threads, interval_s, None, cpus, attack=True)
            met = r["sent"] == r["stored"] and r["errors"] == 0 and r["later_p99_ms"] < ATTACKED_LATER_P99_GOAL_MS
            ok &= met
            print(f"{name}, {n} participants: trial POST p50 {r['p50_ms']:.1f} ms, later-trial p99 "
                  f"{r['later_p99_ms']:.1f} ms (goal < {ATTACKED_LATER_P99_GOAL_MS:g} ms), slowest later trial "
                  f"{r['later_max_ms']:.1f} ms; sent {r['sent']}, stored {r['stored']}, 5xx/network errors "
                  f"{r['errors']}: {'OK' if met else 'FAILED'}", flush=True)
            print("      attackers saw: " + ", ".join(f"{what} {count}" for what, count in sorted(r["attack"].items())),
                  flush=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--participants", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--workers", type=int, default=1, help="server processes (1: waitress, more: gunicorn)")
    parser.add_argument("--threads", type=int, default=8, help="request threads per server process")
    parser.add_argument("--trial-interval-ms", type=float, nargs="+", default=[1000.0, 3000.0], metavar="MS",
                        help="pause between a participant's trials, uniform in LOW HIGH (a person's trial takes "
                             "1-3 s); one value: all in step; 0 = back to back")
    parser.add_argument("--slow-steps", type=int, nargs="+", default=[100, 200, 400, 800, 1600], metavar="N",
                        help="slow connections held open at each step of the connection attack")
    parser.add_argument("--database", metavar="URL",
                        help="a PostgreSQL server to run against (a scratch database is made per run); default SQLite")
    parser.add_argument("--attack", action="store_true",
                        help="run the participants on waitress and on --workers 2 while 40 trickling connections "
                             "and 12 heavy posters attack (SQLite); nothing else")
    parser.add_argument("--share-cpus", action="store_true",
                        help="let the simulated participants and the server share every CPU (default: the "
                             "participants on one CPU, the server on the others, where the machine has several)")
    args = parser.parse_args(argv)
    if len(args.trial_interval_ms) > 2:
        parser.error("--trial-interval-ms takes LOW HIGH or one value")
    low, high = args.trial_interval_ms[0] / 1000, args.trial_interval_ms[-1] / 1000
    backend = "PostgreSQL" if args.database else "SQLite"
    split = None if args.share_cpus else separate_cpus()
    if split is not None:
        os.sched_setaffinity(0, split[0])  # this process: the participants' threads
    cpus = split[1] if split else None
    where = (f"participants on CPU {', '.join(map(str, sorted(split[0])))}, server on CPU "
             f"{', '.join(map(str, sorted(split[1])))}" if split else "participants and server share the CPUs")
    if args.attack:
        return attacked(args.participants, args.threads, (low, high), cpus, where)
    print(f"server: {backend}, {args.workers} process(es) x {args.threads} threads; "
          f"trial interval {' to '.join(f'{v:g}' for v in dict.fromkeys(args.trial_interval_ms))} ms; {where}")
    print(f"{'N':>5} {'sent':>6} {'stored':>6} {'p50 ms':>8} {'p99 ms':>8} {'later p99':>9} {'later max':>9} "
          f"{'direct p50':>10} {'p50 ratio':>9} {'posts/s':>8} {'direct/s':>8} {'5xx/net':>7}")
    ok = True
    for n in args.participants:
        r = run_load(n, args.workers, args.threads, (low, high), args.database, cpus)
        ok &= r["sent"] == r["stored"] and r["errors"] == 0
        print(f"{r['participants']:>5} {r['sent']:>6} {r['stored']:>6} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
              f"{r['later_p99_ms']:>9.1f} {r['later_max_ms']:>9.1f} {r['direct_p50_ms']:>10.2f} "
              f"{r['p50_ms'] / r['direct_p50_ms']:>8.1f}x "
              f"{r['posts_per_s']:>8.1f} {r['direct_per_s']:>8.1f} {r['errors']:>7}", flush=True)
        print(f"      later-trial p99 at {n} participants: {r['later_p99_ms']:.1f} ms "
              f"(goal < {LATER_P99_GOAL_MS:g} ms); "
              f"slowest later trial {r['later_max_ms']:.1f} ms (goal: no request stalls another by more than "
              f"{STALL_GOAL_MS:g} ms)", flush=True)
    print("count check (acknowledged == stored, no 5xx or network errors):", "OK" if ok else "FAILED")
    attacks = run_attacks(args.workers, args.threads, args.database, cpus)
    print(f"crafted {len(CRAFTED_BODY) // 1024} KiB body: answered {attacks['crafted_statuses']} in at most "
          f"{attacks['crafted_max_ms']:.1f} ms; "
          f"20 participants meanwhile: trial POST p99 {attacks['others_p99_ms']:.1f} ms")
    for server, kinds in slow_connections_per_server(args.threads, args.slow_steps, cpus).items():
        for kind, survived in kinds.items():
            print(f"{server}: slow connections ({kind}) survived with a new participant's consent page within "
                  f"{CONSENT_WITHIN_S:g} s: {survived} (steps {' '.join(map(str, args.slow_steps))})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
