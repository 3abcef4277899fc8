"""A withdrawal erases exactly the person who withdrew, everywhere, and the server takes nothing more of them.

The study the researcher runs: person A comes through Prolific twice (a first session finished with a
questionnaire answer, a retry later left in progress), person B types A's Prolific ID as their entry code.
Everything runs as the researcher runs it: ``cuebench serve`` (waitress on SQLite, ``--workers 2`` on
PostgreSQL, which serve, exclude and withdraw find through ``$CUEBENCH_DATABASE``), and ``cuebench
exclude``/``withdraw``/``report`` as commands from the study's folder. What is expected comes from the
construction: which sessions are A's, which words A wrote, which note the researcher typed.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests

from experiment_server.simulate import NONCE, ServerProcess, fill_consent, free_port, trial_answer
from stimuli.web_sample import build_sample_experiment
from support import commit_as_one_batch, first_answer

PID = "5f1e2d3c4b5a69788796a5b4"
"""A's Prolific ID, and B's entry code."""
A_FIRST, A_RETRY = "sessionAfirst0001", "sessionAretry0002"
A_WORDS, B_WORDS = "my grandmother's garden in Tartu", "nothing to add from B"
NOTE = "excluded while checking the retries of 5f1e"
QUESTIONNAIRE = {"questions": [{"id": "comments", "kind": "text", "prompt": "Anything to tell us?"}]}


def cuebench(cwd: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    """The command as a researcher types it in the study's folder (no terminal: stdin is not one)."""
    done = subprocess.run([sys.executable, "-m", "cuebench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, "MPLBACKEND": "Agg"})
    assert (done.returncode == 0) == ok, f"cuebench {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


class Browser:
    """One participant's browser: consent, start, answers, questionnaire, completion."""

    def __init__(self, base: str, **entry: str):
        self.base, self.http = base, requests.Session()
        consent = self.http.get(f"{base}/", params=entry, timeout=30)
        started = self.http.post(f"{base}/start", data={"consent": "yes", **entry,
                                                        "start_nonce": NONCE.search(consent.text).group(1)},
                                 allow_redirects=False, timeout=30)
        assert started.status_code == 303, started.text
        self.token = started.headers["Location"].rsplit("/", 1)[1]
        self.plan = self.http.get(f"{base}/api/session/{self.token}", timeout=30).json()
        self.code = self.plan["participant"]

    def answer(self, index: int) -> requests.Response:
        trial = self.plan["trials"][index]
        return self.http.post(f"{self.base}/api/session/{self.token}/trial/{index}", json=trial_answer(trial),
                              timeout=30)

    def take_part(self, trials: int, words: str | None = None, finish: bool = False) -> None:
        for index in range(trials):
            assert self.answer(index).status_code == 201
        if words is not None:
            posted = self.http.post(f"{self.base}/api/session/{self.token}/questionnaire",
                                    json={"comments": words}, timeout=30)
            assert posted.status_code == 201, posted.text
        if finish:
            assert self.http.post(f"{self.base}/api/session/{self.token}/complete", json={},
                                  timeout=30).json()["status"] == "finished"


def rows(work: Path, fmt: str, database: tuple[str, ...], out: str | None = None) -> list[dict]:
    """An export's rows, written by ``cuebench export``'s own function (in the test's process: a command each
    would cost seconds) to ``out`` (default: beside the folder)."""
    from cuebench.export import export

    (path,) = export(work / "exp", fmt, work / (out or f"{fmt}.csv"), database[1] if database else None)
    return list(csv.DictReader(io.StringIO(path.read_text())))


def holding(files: list[Path], secrets: tuple[str, ...]) -> dict[str, list[str]]:
    """file -> which of ``secrets`` its bytes hold, for the files that exist and hold any."""
    found = {}
    for path in files:
        data = path.read_bytes() if path.exists() else b""
        if any(secret.encode() in data for secret in secrets):
            found[str(path)] = [secret for secret in secrets if secret.encode() in data]
    return found


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The sample experiment with a questionnaire, built once for both back ends."""
    root = tmp_path_factory.mktemp("built") / "exp"
    build_sample_experiment(root)
    fill_consent(root)
    (root / "texts").mkdir(exist_ok=True)
    (root / "texts" / "questionnaire.json").write_text(json.dumps(QUESTIONNAIRE))
    return root


@pytest.fixture(params=["sqlite-waitress", "postgresql-workers2"])
def backend(request, built, tmp_path, monkeypatch):
    """(the study's folder, the ``--database`` of export and report, the server's extra arguments, the raw
    database files to search after the withdrawal)."""
    work = tmp_path / "study"
    shutil.copytree(built, work / "exp")
    if request.param.startswith("sqlite"):
        database = work / "exp" / "responses.sqlite"
        return work, (), (), lambda: [database.with_name(database.name + suffix) for suffix in ("", "-wal", "-shm")]
    postgres_server = request.getfixturevalue("postgres_server")
    url = request.getfixturevalue("postgres_url")
    monkeypatch.setenv("CUEBENCH_DATABASE", url)
    return work, ("--database", url), ("--workers", "2"), lambda: postgres_table_files(postgres_server, url)


def postgres_table_files(server, url: str) -> list[Path]:
    """The files of every table, index and TOAST relation of the study's database and of the planner's
    statistics (which sample column values), as PostgreSQL's catalogue names them: where dead rows would
    linger without VACUUM FULL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")  # what the buffers hold is in the files
        paths = [p for (p,) in conn.execute(
            "SELECT pg_relation_filepath(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE (n.nspname IN ('public', 'pg_toast') AND c.relkind IN ('r', 'i', 't') OR "
            "c.oid = 'pg_catalog.pg_statistic'::regclass) AND pg_relation_filepath(c.oid) IS NOT NULL").fetchall()]
    return [f for p in paths for f in (server.data / p).parent.glob(Path(p).name + "*")]


@pytest.mark.slow
def test_withdrawal_erases_every_session_of_one_person_and_nothing_of_another(backend, tmp_path):
    work, database, server_args, raw_files = backend
    server = ServerProcess(work / "exp", free_port(), extra_args=server_args, log_file=tmp_path / "server.log")
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        a_first = Browser(base, PROLIFIC_PID=PID, STUDY_ID="study1", SESSION_ID=A_FIRST)
        a_first.take_part(len(a_first.plan["trials"]), A_WORDS, finish=True)
        a_retry = Browser(base, PROLIFIC_PID=PID, STUDY_ID="study1", SESSION_ID=A_RETRY)
        a_retry.take_part(2)
        b = Browser(base, code=PID)
        b.take_part(3, B_WORDS)
        a_codes = {a_first.code, a_retry.code}

        # the name is A's Prolific ID and B's entry code: refused, naming both, until the namespace is said
        said = cuebench(work, "withdraw", "exp", PID, "--yes", ok=False).stderr
        assert all(code in said for code in (*a_codes, b.code)) and "--prolific-id" in said and \
            "--entry-code" in said and "nothing was changed" in said
        said = cuebench(work, "exclude", "exp", "--prolific-id", PID, "--reason", NOTE, ok=False).stderr
        assert "add --yes" in said  # no terminal to ask in
        excluded = cuebench(work, "exclude", "exp", "--prolific-id", PID, "--reason", NOTE, "--yes").stdout
        if database:  # what autovacuum does in time: the planner's statistics sample the rows, A's values among them
            import psycopg

            with psycopg.connect(database[1], autocommit=True) as conn:
                conn.execute("ANALYZE")
        assert {line.split()[1] for line in excluded.splitlines() if line.startswith("excluded ")} == a_codes
        before = {r["code"]: r["excluded"] for r in rows(work, "participants", database, "exp/export/participants.csv")}
        assert before == {a_first.code: "1", a_retry.code: "1", b.code: "0"}

        # an answer on its way while the withdrawal runs: stored before it (then erased) or refused after
        in_flight = threading.Thread(target=lambda: a_retry.answer(2))
        in_flight.start()
        said = cuebench(work, "withdraw", "exp", "--prolific-id", PID, "--yes").stdout
        in_flight.join()
        assert {line.split()[1].rstrip(":") for line in said.splitlines() if line.startswith("erased ")} == a_codes
        assert f"removed {work / 'exp' / 'export' / 'participants.csv'}" in said
        assert "2 session(s) erased" in said

        # nothing more of A is taken: the retry's token, the first session's link opened again
        assert a_retry.answer(3).status_code == 410
        again = requests.Session()
        consent = again.get(f"{base}/", params={"PROLIFIC_PID": PID, "STUDY_ID": "study1", "SESSION_ID": A_FIRST})
        restart = again.post(f"{base}/start", data={"consent": "yes", "PROLIFIC_PID": PID, "STUDY_ID": "study1",
                                                    "SESSION_ID": A_FIRST,
                                                    "start_nonce": NONCE.search(consent.text).group(1)},
                             allow_redirects=False, timeout=30)
        assert restart.status_code == 410 and "withdrew" in restart.text
        a_secrets = (*a_codes, A_FIRST, A_RETRY, A_WORDS, NOTE)
        assert holding(raw_files(), a_secrets) == {}  # with the server's connections open
        assert b.answer(3).status_code == 201  # B goes on
    finally:
        server.stop()

    people = {r["code"]: r for r in rows(work, "participants", database)}
    assert people.keys() == {b.code} and people[b.code]["entry_code"] == PID
    answers = rows(work, "csv", database)
    assert {r["observer"] for r in answers} == {b.code} and len(answers) == 4
    assert [r["q_comments"] for r in rows(work, "questionnaire", database)] == [B_WORDS]
    assert not any(r["participant_id"] == PID for r in rows(work, "prolific", database))
    assert holding(raw_files(), a_secrets) == {}
    assert holding(raw_files(), (b.code, B_WORDS))  # the search finds what is there
    if database:  # the count the report's methods paragraph reads (the sentence itself: the SQLite run)
        from analysis.load import withdrawal_count

        assert withdrawal_count([work / "exp"], database=database[1]) == 1
    else:
        cuebench(work, "report", "exp", "--out", "report", "--n-boot", "20", "--reference", "none")
        methods = re.sub(r"\s+", " ", (work / "report" / "report.html").read_text())
        assert "1 participant was analysed" in methods and "1 person withdrew after taking part" in methods


def test_an_answer_on_its_way_during_a_withdrawal_is_refused_and_its_neighbours_stored(built, tmp_path):
    """Two answers queued for one group commit, one of a person whose withdrawal commits meanwhile (their
    request read the session before): that one is refused in the transaction that would store it, the
    other is stored; the withdrawn session's token and its start identity are refused from then on, while
    the database keeps only salted hashes of them."""
    from cuebench_app.withdraw import erase
    from experiment_server.db import WITHDRAWN, SessionWithdrawn, hash_token, prolific_identity
    from experiment_server.study import open_study

    shutil.copytree(built, tmp_path / "exp")
    study = open_study(tmp_path / "exp")
    name = study.experiment.name
    identity = prolific_identity(PID, A_FIRST)
    leaving, token = study.db.start(name, study.n_groups, prolific_pid=PID, prolific_session=A_FIRST,
                                    identity=identity, token=study.start_token(identity))
    staying, _ = study.db.start(name, study.n_groups, entry_code=PID)
    rows = {person.code: first_answer(study, person) for person in (leaving, staying)}
    outcomes = commit_as_one_batch(study.answers, rows, while_waiting=lambda: erase(study.store, name, [leaving.code]))
    assert isinstance(outcomes[leaving.code], SessionWithdrawn) and outcomes[staying.code].stored
    assert {r["observer"] for r in study.store.rows()} == {staying.code}
    with pytest.raises(SessionWithdrawn):
        study.db.refuse_withdrawn(token)
    with pytest.raises(SessionWithdrawn):  # the link opened again
        study.db.start(name, study.n_groups, prolific_pid=PID, prolific_session=A_FIRST, identity=identity,
                       token=study.start_token(identity))
    with pytest.raises(SessionWithdrawn):  # a questionnaire answer or an exclusion of theirs arriving now
        with study.db.while_present(leaving.code):
            pass
    marks = {m for (m,) in study.db.db.execute(f"SELECT mark FROM {WITHDRAWN}").fetchall()}
    assert len(marks) == 2 and not marks & {hash_token(token), hash_token(identity)}


def test_withdraw_asks_on_a_terminal_and_refuses_an_empty_database_option(built, tmp_path, capsys):
    """On a terminal the sessions are listed and a "no" changes nothing, a "y" erases; ``--database ""``
    is an error, not a new empty responses.sqlite."""
    import pty

    from experiment_server.study import open_study

    work = tmp_path / "study"
    shutil.copytree(built, work / "exp")
    study = open_study(work / "exp")
    person, _ = study.db.start(study.experiment.name, study.n_groups, entry_code="lab-visit-07")
    study.db.close()

    def typed(answer: str) -> str:
        leader, follower = pty.openpty()
        with subprocess.Popen([sys.executable, "-m", "cuebench", "withdraw", "exp", "lab-visit-07"], cwd=work,
                              stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as run:
            os.close(follower)
            os.write(leader, answer.encode() + b"\n")
            said = run.communicate(timeout=120)[0]
        os.close(leader)
        return said

    said = typed("n")
    assert "lab-visit-07 is the entry code of 1 session(s):" in said and person.code in said
    assert "nothing was changed" in said and study.db.get(person.code) is not None
    assert f"erased {person.code}" in typed("y") and study.db.get(person.code) is None

    from cuebench_app.cli import main

    empty = tmp_path / "empty"
    shutil.copytree(built, empty)
    assert main(["withdraw", str(empty), "someone", "--database", "", "--yes"]) == 2
    assert "--database is empty" in capsys.readouterr().err and not (empty / "responses.sqlite").exists()


def test_the_files_in_the_folder_that_name_the_person_are_found_and_the_experiment_s_own_are_not(tmp_path):
    """The lab runner's files of the person's sessions (a log naming nobody too), an export naming their entry
    code, a zip, a Parquet file and a large file naming their code, and a report whose table names them (the
    whole report);
    not the texts, stimuli or other files, even where their bytes happen to hold the entry code."""
    import zipfile

    import pandas as pd

    from cuebench.expdir import ExperimentDir
    from cuebench_app.people import Person, Session
    from cuebench_app.withdraw import CHUNK, files_naming

    root = tmp_path / "exp"
    person = Person("entry_code", "visit-7", (Session("P0A1B2C3D4E5F", "web", "finished", entry_code="visit-7"),))
    files = {"data/P0A1B2C3D4E5F_exp_session1.csv": "P0A1B2C3D4E5F,cat", "data/P0A1B2C3D4E5F_exp_session1.log": "x",
             "data/P99_exp_session1.csv": "P99,dog", "export/people.csv": "code,entry_code\nP1,visit-7",
             "reports/report.html": "<p>2 participants</p>", "reports/tables/observers.csv": "P0A1B2C3D4E5F,0.9",
             "texts/consent.md": "Your code is like visit-7.", "stimuli/a.png": "visit-7", "notes.txt": "pilot notes"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    with zipfile.ZipFile(root / "export" / "mvh.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("human/subject-01.csv", "subj\n" + "P0A1B2C3D4E5F\n" * 50)
    pd.DataFrame({"observer": ["P0A1B2C3D4E5F"] * 50}).to_parquet(root / "export" / "responses.parquet")
    (root / "export" / "large.csv").write_bytes(b"x" * (CHUNK - 5) + b"P0A1B2C3D4E5F")  # across a read's border
    found = files_naming(ExperimentDir(root), person, "exp")
    assert [str(p.relative_to(root)) for p in found] == [
        "data/P0A1B2C3D4E5F_exp_session1.csv", "data/P0A1B2C3D4E5F_exp_session1.log", "export/large.csv",
        "export/mvh.zip", "export/people.csv", "export/responses.parquet", "reports"]
