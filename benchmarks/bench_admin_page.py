"""The admin page and its live data-quality panel with many sessions (a large online study).

Fills a fresh sample experiment's database with ``--sessions`` participants (default 20,000) of
``--trials`` stored answers each, straight into the tables, then times (best of ``--repeats``) a
logged-in ``GET /admin/`` and ``GET /admin/quality.json`` through Flask's test client, with the size
of each answer. Baseline, in the same run: reading every participant once (``ServerDB.participants``),
which any page listing them all has to do; the ratio says how far a page stays from that floor.

Run it with the worktree of another version on ``PYTHONPATH`` to compare (the quality panel is
missing in versions before it; the script says so).

    .venv/bin/python benchmarks/bench_admin_page.py --sessions 20000 --trials 5
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

from cuebench.responses import ResponseStore, trial_row
from experiment_server.admin import set_admin_password
from experiment_server.app import create_app
from experiment_server.db import PARTICIPANTS, hash_token
from experiment_server.study import study_of
from stimuli.web_sample import build_sample_experiment

PASSWORD = "benchmark password"


def fill(app, sessions: int, trials: int) -> None:
    """``sessions`` finished participants spread over the groups, ``trials`` answers each."""
    study = study_of(app)
    experiment = study.experiment
    now = time.time()
    people = [(f"P{k:08d}", experiment.name, hash_token(f"t{k}"), k % study.n_groups, "finished", "1",
               now - 3600 + k * 0.01, now, 0, "web") for k in range(sessions)]
    conn = study.db.db
    with conn.write_transaction() as tx:
        tx.executemany(f"INSERT INTO {PARTICIPANTS}(code, experiment, token_hash, grp, status, session, created_at, "
                       "finished_at, pilot, runner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", people)
    shown = [t for t in experiment.trials if t.role in ("test", "catch", "attention")][:trials]
    rows = [trial_row(experiment, t, observer=code, observer_kind="human", session="1", trial_index=i,
                      response=t.choices[0], rt_ms=600.0 + i, group=group, dropped_frames=i % 2,
                      events=[{"type": "fullscreen_exit"}] if i == 0 else [])
            for code, _, _, group, *_ in people for i, t in enumerate(shown)]
    with ResponseStore(study.location) as store:
        store.write_many(rows)


def best_of(repeats: int, call) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        size = call()
        times.append(time.perf_counter() - t0)
    return min(times), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20000)
    parser.add_argument("--trials", type=int, default=5, help="stored answers per session")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "exp"
        build_sample_experiment(root)
        app = create_app(root)
        study = study_of(app)
        t0 = time.perf_counter()
        fill(app, args.sessions, args.trials)
        print(f"filled {args.sessions} sessions x {args.trials} answers in {time.perf_counter() - t0:.1f} s")
        set_admin_password(study, PASSWORD)
        client = app.test_client()
        token = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/admin/login").get_data(as_text=True))
        client.post("/admin/login", data={"password": PASSWORD, "csrf_token": token.group(1)})

        def get(path: str) -> int:
            reply = client.get(path)
            assert reply.status_code in (200, 404), reply.status_code
            return len(reply.data) if reply.status_code == 200 else -1

        floor, _ = best_of(args.repeats, lambda: len(study.db.participants(study.experiment.name)))
        print(f"baseline: every participant read once: {floor:.3f} s")
        for path in ("/admin/", "/admin/quality.json", "/admin/quality.json?page=400"):
            seconds, size = best_of(args.repeats, lambda: get(path))
            if size < 0:
                print(f"GET {path}: not in this version")
                continue
            print(f"GET {path}: {seconds:.3f} s, {size / 1e6:.2f} MB ({seconds / floor:.2f} x baseline)")


if __name__ == "__main__":
    main()
