"""Load test of the experiment server: N simulated participants arriving at once.

Starts ``cuebench serve`` on a fresh sample experiment on 127.0.0.1 (loopback only, its
own process, ``--workers`` processes), lets N participants (``experiment_server.simulate``,
one thread and one keep-alive connection each) start a session at the same moment and
post every trial of their sequence, pausing between trials as a person would: a time
drawn uniformly from ``--trial-interval-ms LOW HIGH`` (default 1000 3000; one value: every
participant in step, the worst case; 0: back to back). Reports p50/p99 of the trial POSTs,
the p99 of all but each participant's first trial (the first ones queue behind
everybody's consent page, start and plan requests of the arrival), throughput and the
count check (answers acknowledged = rows stored). Every 201 is sent after the answer is
committed with ``synchronous=FULL``.

Baseline, in the same run: the same rows written one after another straight into a fresh
``ResponseStore`` on the same backend (no HTTP, one durable transaction each); the ratios
compare the server's POST latency and throughput with those direct writes.

``--database postgresql://USER@HOST/DB`` runs against PostgreSQL instead of the folder's
SQLite file: each run creates a scratch database on that server (and drops it after).

    .venv/bin/python benchmarks/bench_server_load.py --participants 50 200
    .venv/bin/python benchmarks/bench_server_load.py --participants 50 200 --database postgresql://me@/postgres?host=/tmp
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit, urlunsplit

from cuebench.responses import ResponseStore
from stimuli.web_sample import build_sample_experiment
from experiment_server.simulate import ClientLog, ServerProcess, SimulatedParticipant, free_port


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
             server_url: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp, scratch_database(server_url) as database, \
            scratch_database(server_url) as baseline_database:
        build_sample_experiment(tmp)
        server = ServerProcess(tmp, free_port(), workers=workers, threads=threads,
                               extra_args=("--database", database) if database else ())
        server.start()
        log = ClientLog()
        try:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(max_workers=n_participants) as pool:
                list(pool.map(lambda n: SimulatedParticipant(server.port, {"code": f"bench{n}"}, log, timeout_s=60, deadline_s=600,
                                                             trial_interval_s=interval_s).run(),
                              range(n_participants)))
            wall = time.perf_counter() - t0
        finally:
            server.stop()
        with ResponseStore(database or Path(tmp) / "responses.sqlite") as store:
            stored = store.count()
            baseline = direct_writes(store, baseline_database or Path(tmp) / "baseline.sqlite")
    latencies = log.latencies_ms
    return {"participants": n_participants, "sent": len(latencies), "stored": stored,
            "p50_ms": statistics.median(latencies), "p99_ms": percentile(latencies, 99),
            "later_p99_ms": percentile(log.later_latencies_ms, 99),
            "posts_per_s": len(latencies) / wall, "direct_p50_ms": statistics.median(baseline),
            "direct_per_s": 1000 * len(baseline) / sum(baseline), "errors": sum(
                n for s, n in log.statuses.items() if s == "network error" or s >= 500)}


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--participants", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--workers", type=int, default=1, help="server processes (1: waitress, more: gunicorn)")
    parser.add_argument("--threads", type=int, default=8, help="request threads per server process")
    parser.add_argument("--trial-interval-ms", type=float, nargs="+", default=[1000.0, 3000.0], metavar="MS",
                        help="pause between a participant's trials, uniform in LOW HIGH (a person's trial takes "
                             "1-3 s); one value: all in step; 0 = back to back")
    parser.add_argument("--database", metavar="URL",
                        help="a PostgreSQL server to run against (a scratch database is made per run); default SQLite")
    args = parser.parse_args(argv)
    if len(args.trial_interval_ms) > 2:
        parser.error("--trial-interval-ms takes LOW HIGH or one value")
    low, high = args.trial_interval_ms[0] / 1000, args.trial_interval_ms[-1] / 1000
    backend = "PostgreSQL" if args.database else "SQLite"
    print(f"server: {backend}, {args.workers} process(es) x {args.threads} threads; "
          f"trial interval {' to '.join(f'{v:g}' for v in dict.fromkeys(args.trial_interval_ms))} ms")
    print(f"{'N':>5} {'sent':>6} {'stored':>6} {'p50 ms':>8} {'p99 ms':>8} {'later p99':>9} {'direct p50':>10} "
          f"{'p50 ratio':>9} {'posts/s':>8} {'direct/s':>8} {'5xx/net':>7}")
    ok = True
    for n in args.participants:
        r = run_load(n, args.workers, args.threads, (low, high), args.database)
        ok &= r["sent"] == r["stored"] and r["errors"] == 0
        print(f"{r['participants']:>5} {r['sent']:>6} {r['stored']:>6} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
              f"{r['later_p99_ms']:>9.1f} {r['direct_p50_ms']:>10.2f} {r['p50_ms'] / r['direct_p50_ms']:>8.1f}x "
              f"{r['posts_per_s']:>8.1f} {r['direct_per_s']:>8.1f} {r['errors']:>7}", flush=True)
    print("count check (acknowledged == stored, no 5xx or network errors):", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
