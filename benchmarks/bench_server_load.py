"""Load test of the experiment server: N simulated participants posting trials at once.

Starts the app under waitress on 127.0.0.1 (loopback only), lets N participants start a
session and post every trial of their sequence concurrently (one thread and one
keep-alive connection each), and reports p50/p99 POST latency and the count check
(trials sent = rows stored). Baseline, in the same run: the same rows written one after
another straight into ``ResponseStore`` (no HTTP, no concurrency); the ratios compare the
server's median POST latency and its throughput with those direct, fsync'd writes.

    .venv/bin/python benchmarks/bench_server_load.py --participants 50 200
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REQUEST_TIMEOUT_S = 60


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def payload(trial: dict) -> dict:
    return {"trial_key": trial["trial_key"], "response": trial["choices"][0], "timed_out": False, "rt_ms": 612.0,
            "timing_measured": {"fixation": 300.1, "stimulus": 200.2}, "frames": {"fixation": 18, "stimulus": 12},
            "dropped_frames": 0, "refresh_hz": 60.0, "device": {"user_agent": "bench"}, "events": []}


def participant(port: int, n: int) -> list[float]:
    """One participant: start, fetch the plan, post every trial; returns the POST latencies in ms."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    conn.request("POST", "/start", body=f"consent=yes&code=bench{n}",
                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    response = conn.getresponse()
    response.read()
    token = response.getheader("Location").rsplit("/", 1)[1]
    conn.request("GET", f"/api/session/{token}")
    trials = json.loads(conn.getresponse().read())["trials"]
    latencies = []
    for trial in trials:
        body = json.dumps(payload(trial))
        t0 = time.perf_counter()
        conn.request("POST", f"/api/session/{token}/trial/{trial['index']}", body=body,
                     headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        reply.read()
        latencies.append((time.perf_counter() - t0) * 1000)
        if reply.status != 201:
            raise RuntimeError(f"participant {n} trial {trial['index']}: HTTP {reply.status}")
    conn.close()
    return latencies


def run_load(n_participants: int, threads: int) -> dict:
    from waitress.server import create_server

    from experiment_server.app import create_app
    from experiment_server.study import study_of
    from experiment_server.sample import build_sample_experiment

    with tempfile.TemporaryDirectory() as tmp:
        build_sample_experiment(tmp)
        app = create_app(tmp)
        server = create_server(app, host="127.0.0.1", port=0, threads=threads, connection_limit=max(100, 2 * n_participants))
        runner = threading.Thread(target=server.run, daemon=True)
        runner.start()
        try:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(max_workers=n_participants) as pool:
                per_participant = list(pool.map(lambda n: participant(server.effective_port, n), range(n_participants)))
            wall = time.perf_counter() - t0
        finally:
            server.close()
            runner.join(timeout=10)
        latencies = [x for lat in per_participant for x in lat]
        store = study_of(app).store
        stored = store.count()
        baseline = direct_writes(store, Path(tmp) / "baseline.sqlite")
    return {"participants": n_participants, "sent": len(latencies), "stored": stored,
            "p50_ms": statistics.median(latencies), "p99_ms": percentile(latencies, 99),
            "posts_per_s": len(latencies) / wall, "direct_p50_ms": statistics.median(baseline),
            "direct_per_s": 1000 * len(baseline) / sum(baseline)}


def direct_writes(source_store, path: Path) -> list[float]:
    """Baseline: the same rows written straight into a fresh ResponseStore; ms per write."""
    from cuebench.responses import ResponseStore

    rows = source_store.rows()
    target = ResponseStore(path)
    times = []
    for row in rows:
        row = {k: v for k, v in row.items() if k != "created_at"}
        t0 = time.perf_counter()
        target.write(row)
        times.append((time.perf_counter() - t0) * 1000)
    target.close()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--participants", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--threads", type=int, default=8, help="waitress worker threads")
    args = parser.parse_args(argv)
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    print(f"{'N':>5} {'sent':>6} {'stored':>6} {'p50 ms':>8} {'p99 ms':>8} {'direct p50':>10} {'p50 ratio':>9} "
          f"{'posts/s':>8} {'direct/s':>8} {'throughput ratio':>16}")
    ok = True
    for n in args.participants:
        r = run_load(n, args.threads)
        ok &= r["sent"] == r["stored"]
        print(f"{r['participants']:>5} {r['sent']:>6} {r['stored']:>6} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
              f"{r['direct_p50_ms']:>10.2f} {r['p50_ms'] / r['direct_p50_ms']:>8.1f}x "
              f"{r['posts_per_s']:>8.1f} {r['direct_per_s']:>8.1f} {r['posts_per_s'] / r['direct_per_s']:>15.2f}x")
    print("count check (sent == stored):", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
