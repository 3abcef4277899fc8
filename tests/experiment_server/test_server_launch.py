"""A study launch on loopback: participants arrive at once while the server is SIGKILLed and restarted.

Each participant (``experiment_server.simulate``; half from Prolific, half with an entry code) starts, fetches its plan, posts its
whole sequence (every tenth post twice) with the web task's timeout-and-retry rule, and
asks for its completion code; the ``cuebench serve`` process group is SIGKILLed twice
mid-run and started again on the same port. Nothing may be lost, stored twice or answered
with a 5xx, with one waitress process and with four gunicorn workers, on SQLite and on a
real PostgreSQL server.
"""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from cuebench.counterbalance import participant_sequence
from cuebench.expdir import ExperimentDir
from cuebench.responses import KEY, ResponseStore
from stimuli.web_sample import build_sample_experiment
from experiment_server.simulate import ClientLog, ServerProcess, SimulatedParticipant, free_port
from support import fill_consent
from experiment_server.study import open_study

KILLS = 2
DUPLICATE_EVERY = 10
RUN_DEADLINE_S = 240


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("launch-template")
    build_sample_experiment(root)
    fill_consent(root)
    return root


def entry(n: int) -> dict[str, str]:
    """Half the participants come from Prolific, half with an entry code."""
    if n % 2:
        return {"PROLIFIC_PID": f"launchpid{n}", "STUDY_ID": "launch", "SESSION_ID": f"attempt{n}"}
    return {"code": f"launch{n}"}


def launch(expdir, n_participants: int, workers: int, tmp_path, database: str | None
           ) -> tuple[list[dict], ClientLog, list[int]]:
    """Run the launch; returns the participants' outcomes, what the clients saw, and the acknowledged
    answer counts at which the server was killed."""
    experiment = ExperimentDir(expdir).load()
    total = n_participants * len(participant_sequence(experiment, 0, "any", "1"))
    server = ServerProcess(expdir, free_port(), workers=workers, log_file=tmp_path / "server.log",
                           extra_args=("--database", database) if database else ())
    server.start()
    log = ClientLog()
    killed_at: list[int] = []
    finished = threading.Event()

    def killer():
        for k in range(1, KILLS + 1):
            while log.acknowledged < total * k / (KILLS + 1):
                if finished.wait(0.005):
                    return
            killed_at.append(log.acknowledged)
            server.kill()
            time.sleep(0.3)
            server.start()

    chaos = threading.Thread(target=killer)
    chaos.start()
    try:
        with ThreadPoolExecutor(max_workers=n_participants) as pool:
            outcomes = list(pool.map(
                lambda n: SimulatedParticipant(server.port, entry(n), log, timeout_s=10,
                                               deadline_s=RUN_DEADLINE_S, duplicate_every=DUPLICATE_EVERY).run(),
                range(n_participants)))
    finally:
        finished.set()
        chaos.join()
        server.stop()
    return outcomes, log, killed_at


def check_launch(template, tmp_path, n_participants: int, workers: int, database: str | None = None) -> None:
    expdir = tmp_path / "exp"
    shutil.copytree(template, expdir)
    outcomes, log, killed_at = launch(expdir, n_participants, workers, tmp_path, database)

    study = open_study(expdir, database=database)
    n_trials = outcomes[0]["trials"]
    with ResponseStore(database or expdir / "responses.sqlite") as store:
        keys = store.conn.execute(f"SELECT {', '.join(KEY)} FROM responses").fetchall()
    # Each kill fell inside the run: after the first answer and before the last one was acknowledged (on a busy
    # machine the killer thread sees the count late, so it is compared with what was acknowledged in the end).
    assert len(killed_at) == KILLS and all(0 < k < log.acknowledged for k in killed_at), (killed_at, log.acknowledged)
    assert not [s for s in log.statuses if isinstance(s, int) and s >= 500], log.statuses
    assert len(keys) == len(set(keys)) == n_participants * n_trials
    assert {o["participant"] for o in outcomes} == {p.code for p in study.db.participants(study.experiment.name)}
    assert {o["status"] for o in outcomes} == {"finished"}
    assert {o["code"] for o in outcomes} == {study.completion_code("finished")}
    assert log.retries > 0  # the kills were felt


LAUNCHES = [("sqlite", 1), ("sqlite", 4), ("postgresql", 4),
            pytest.param("postgresql", 1, marks=pytest.mark.slow)]


def database_for(backend: str, request) -> str | None:
    return request.getfixturevalue("postgres_url") if backend == "postgresql" else None


@pytest.mark.parametrize("backend, workers", LAUNCHES)
def test_launch_with_kills_loses_nothing(template, tmp_path, request, backend, workers):
    check_launch(template, tmp_path, 50, workers, database_for(backend, request))


@pytest.mark.slow
@pytest.mark.parametrize("backend, workers", [("sqlite", 1), ("sqlite", 4), ("postgresql", 1), ("postgresql", 4)])
def test_launch_of_200_with_kills_loses_nothing(template, tmp_path, request, backend, workers):
    check_launch(template, tmp_path, 200, workers, database_for(backend, request))
