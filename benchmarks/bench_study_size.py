"""What the consent page and a start cost as a study grows: 100 sessions against 20,000.

With a recruitment target, every consent page asks whether the study is closed and every start whether a
place is free. For each size, fills a fresh sample experiment's database straight into the tables
(``--finished`` of the sessions finished with ``--trials`` answers each, one in fifty of those excluded, the
rest abandoned with a lapsed reservation), opens the app as ``serve`` does (``--target-n`` far above the
sessions, so the study stays open), and times, best of ``--repeats``, a ``GET /`` and a consent page with its
``POST /start`` through Flask's test client. Baseline, in the same run: counting every session the way the
consent page did before the place counts (``ServerDB._slot_holders``). Prints each time and the ratio of the
large study to the small one: near 1 means the cost does not grow with the study.

    .venv/bin/python benchmarks/bench_study_size.py --small 100 --large 20000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from cuebench import exclusions
from cuebench.responses import ResponseStore, trial_row
from experiment_server.app import create_app
from experiment_server.db import PARTICIPANTS, hash_token
from experiment_server.simulate import NONCE
from experiment_server.study import study_of
from experiment_server.study_rules import StudyRules
from stimuli.web_sample import build_sample_experiment


def fill(root: Path, sessions: int, finished_share: float, trials: int) -> None:
    """``sessions`` participants straight into the tables of the experiment at ``root``."""
    study = study_of(create_app(root))
    experiment = study.experiment
    now = time.time()
    finished = int(sessions * finished_share)
    people = [(f"P{k:08d}", experiment.name, hash_token(f"t{k}"), k % study.n_groups,
               "finished" if k < finished else "in_progress", "1", now - 7200 + k * 0.01,
               now - 3600 if k < finished else None, None if k < finished else now - 3600, 0, "web",
               hash_token(f"nonce:{k}"), f"{k:x>24}", f"s{k}")
              for k in range(sessions)]
    with study.db.db.write_transaction() as tx:
        tx.executemany(f"INSERT INTO {PARTICIPANTS}(code, experiment, token_hash, grp, status, session, created_at, "
                       "finished_at, reserved_until, pilot, runner, resume_hash, prolific_pid, prolific_session) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", people)
    shown = [t for t in experiment.trials if t.role in ("test", "catch", "attention")][:trials]
    rows = [trial_row(experiment, t, observer=code, observer_kind="human", session="1", trial_index=i,
                      response=t.choices[0], rt_ms=600.0 + i, group=group)
            for code, _, _, group, *_ in people[:finished] for i, t in enumerate(shown)]
    with ResponseStore(study.location) as store:
        store.write_many(rows)
        for code, *_ in people[:finished:50]:
            exclusions.record(store.conn, experiment.name, code, True, "benchmark", "admin")
    study.close()


def best_of(repeats: int, call) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(sessions: int, args) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "exp"
        build_sample_experiment(root)
        fill(root, sessions, args.finished, args.trials)
        rules = StudyRules(target_n=10 * args.large, unanswered_per_address=10**9)
        app = create_app(root, rules=rules, start_limit=10**9)  # opening counts the places once, as serve does
        study = study_of(app)

        def consent():
            assert app.test_client().get("/?code=bench").status_code == 200

        starts = iter(range(10**9))

        def consent_and_start():
            client = app.test_client()
            code = f"bench{next(starts)}"
            page = client.get(f"/?code={code}").get_data(as_text=True)
            reply = client.post("/start", data={"consent": "yes", "code": code,
                                                "start_nonce": NONCE.search(page).group(1)})
            assert reply.status_code == 303, reply.status_code

        consent()  # first request: templates, connections
        result = {"GET /": best_of(args.repeats, consent), "GET / + POST /start": best_of(args.repeats, consent_and_start),
                  "baseline: count every session": best_of(args.repeats, lambda: study.db._slot_holders(
                      study.db.db, study.experiment.name))}
        study.close()
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=20_000)
    parser.add_argument("--finished", type=float, default=0.1, help="share of the sessions that finished")
    parser.add_argument("--trials", type=int, default=5, help="answers stored per finished session")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    small, large = measure(args.small, args), measure(args.large, args)
    print(f"{'':32s} {args.small:>9d} sessions {args.large:>9d} sessions   ratio")
    for name in small:
        print(f"{name:32s} {1000 * small[name]:12.2f} ms {1000 * large[name]:12.2f} ms {large[name] / small[name]:7.2f}")


if __name__ == "__main__":
    main()
