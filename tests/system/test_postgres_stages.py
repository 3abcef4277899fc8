"""Every stage on a real PostgreSQL server as on SQLite: the web server survives a database restart and a stop
during a group commit, its admin area works, the analysis reads the same table, models answer into it, and the
command's ``--database`` reaches the store of lab, report and eval. The storage rules themselves are checked in
``tests/core/test_storage_backends.py``."""

from __future__ import annotations

import pytest

from cuebench.responses import ResponseStore
from cuebench.storage import StorageError
from stimuli.web_sample import build_sample_experiment
from support import commit_as_one_batch, first_answer


@pytest.mark.slow
def test_server_recovers_when_postgresql_restarts(tmp_path, postgres_server, postgres_url):
    """Every connection is cut (a database restart): requests in flight may fail with a 5xx,
    which the web task retries; then the server reconnects and nothing is lost."""
    from experiment_server.app import create_app
    from experiment_server.simulate import NONCE, trial_answer
    from experiment_server.study import study_of

    expdir = tmp_path / "exp"
    build_sample_experiment(expdir)
    app = create_app(expdir, database=postgres_url)
    client = app.test_client()
    nonce = NONCE.search(client.get("/").get_data(as_text=True)).group(1)
    token = client.post("/start", data={"consent": "yes", "code": "restart1", "start_nonce": nonce}
                        ).headers["Location"].rsplit("/", 1)[1]
    trials = client.get(f"/api/session/{token}").get_json()["trials"]
    statuses = [client.post(f"/api/session/{token}/trial/0", json=trial_answer(trials[0])).status_code]
    postgres_server.restart()
    for trial in trials[1:]:
        for _ in range(3):  # the web task's retries
            statuses.append(client.post(f"/api/session/{token}/trial/{trial['index']}",
                                        json=trial_answer(trial)).status_code)
            if statuses[-1] < 500:
                break
    assert statuses[0] == 201 and statuses[-1] == 201 and sum(s >= 500 for s in statuses) <= 2
    with ResponseStore(postgres_url) as store:
        assert store.answered_indices("web-sample", study_of(app).db.by_token(token).code, "1") == set(range(len(trials)))


def test_admin_area_on_postgresql(tmp_path, postgres_url):
    """Progress, exclusion and every export read the PostgreSQL tables."""
    from experiment_server.admin import set_admin_password
    from experiment_server.app import create_app
    from experiment_server.simulate import NONCE, trial_answer
    from experiment_server.study import study_of

    expdir = tmp_path / "exp"
    build_sample_experiment(expdir)
    app = create_app(expdir, database=postgres_url)
    study = study_of(app)
    set_admin_password(study, "correct horse battery")
    client = app.test_client()
    nonce = NONCE.search(client.get("/").get_data(as_text=True)).group(1)
    token = client.post("/start", data={"consent": "yes", "code": "a1", "start_nonce": nonce}
                        ).headers["Location"].rsplit("/", 1)[1]
    trials = client.get(f"/api/session/{token}").get_json()["trials"]
    for trial in trials:
        assert client.post(f"/api/session/{token}/trial/{trial['index']}", json=trial_answer(trial)).status_code == 201
    assert client.post(f"/api/session/{token}/complete").get_json()["status"] == "finished"
    admin = app.test_client()
    csrf = admin.get("/admin/login").get_data(as_text=True).split('name="csrf_token" value="')[1].split('"')[0]
    assert admin.post("/admin/login", data={"password": "correct horse battery", "csrf_token": csrf}).status_code == 302
    page = admin.get("/admin/").get_data(as_text=True)
    code = study.db.by_token(token).code
    assert code in page
    exported = admin.get("/admin/export/responses.csv").get_data(as_text=True).splitlines()
    assert len(exported) == 1 + len(trials) and not (expdir / "responses.sqlite").exists()
    for path in ("/admin/export/psychopy.csv", "/admin/export/model-vs-human.zip", "/admin/export/participants.csv"):
        assert admin.get(path).status_code == 200, path
    csrf = page.split('name="csrf_token" value="')[1].split('"')[0]
    assert admin.post("/admin/exclude", data={"code": code, "reason": "test", "csrf_token": csrf}).status_code == 302
    assert study.db.get(code).excluded == 1


def test_analysis_reads_the_same_table_from_postgresql(tmp_path, postgres_url, response_row):
    from analysis.load import load_responses

    expdir = tmp_path / "exp"
    build_sample_experiment(expdir)
    rows = [response_row(i, observer=f"p{k}", experiment="web-sample", condition="gray", category="cat",
                         created_at="2026-01-01T00:00:00.000+00:00") for k in range(2) for i in range(3)]
    for location in (expdir / "responses.sqlite", postgres_url):
        with ResponseStore(location) as store:
            store.write_many(rows)
    from_postgres = load_responses([expdir], database=postgres_url)
    assert from_postgres.equals(load_responses([expdir])) and len(from_postgres) == 6


def test_lab_report_and_eval_take_the_database_option(tmp_path, capsys):
    """``--database`` reaches the store: an unreachable server is a clear error before anything runs."""
    from cuebench_app.cli import main

    expdir = tmp_path / "exp"
    build_sample_experiment(expdir)
    url = "postgresql://cuebench@127.0.0.1:1/study?connect_timeout=2"
    assert main(["lab", "run", str(expdir), "--participant", "P01", "--database", url]) == 2
    assert main(["report", str(expdir), "--database", url, "--out", str(tmp_path / "report")]) == 2
    assert main(["eval", "--experiment", str(expdir), "--model", "tf_efficientnet_lite0", "--device", "cpu",
                 "--database", url]) == 2
    err = capsys.readouterr().err
    assert err.count("cannot connect to postgresql://cuebench@127.0.0.1:1/study") == 3
    assert not (expdir / "responses.sqlite").exists() and not (tmp_path / "report").exists()


@pytest.mark.slow
def test_models_answer_into_postgresql(tmp_path, postgres_url):
    """``eval --database``: a model's answers go to PostgreSQL, and resuming with another rule is
    refused there as on SQLite."""
    from model_eval.evaluate import evaluate_experiment
    from model_eval.models import ModelError

    expdir = tmp_path / "exp"
    experiment = build_sample_experiment(expdir)
    run = dict(device="cpu", progress=False, workers=0, database=postgres_url)
    summary = evaluate_experiment(expdir, ["tf_efficientnet_lite0"], **run)
    with ResponseStore(postgres_url) as store:
        assert store.count() == len(experiment.trials) == summary.runs[0].answered_now
    assert not (expdir / "responses.sqlite").exists()
    with pytest.raises(ModelError, match="already answered trials of web-sample with rule 16class-mean"):
        evaluate_experiment(expdir, ["tf_efficientnet_lite0"], rule="16class-burgert", **run)


@pytest.mark.slow
def test_every_request_of_a_batch_is_answered_while_postgresql_is_down(tmp_path, postgres_server, postgres_url):
    """Fault injection: the database stops while answers queue for one group commit, and the store
    cannot be opened again. Every request of the batch gets that error (the server answers 503
    with Retry-After, which the web task retries) instead of waiting for good; once the
    database is back, the same answers are stored."""
    from experiment_server.app import RETRY_AFTER_S, create_app
    from experiment_server.group_commit import GroupCommit
    from experiment_server.simulate import NONCE, trial_answer
    from experiment_server.study import open_study

    expdir = tmp_path / "exp"
    build_sample_experiment(expdir)
    study = open_study(expdir, database=postgres_url)
    people = [study.db.start(study.experiment.name, study.n_groups, entry_code=f"outage{n}")[0] for n in range(4)]
    rows = {p.code: first_answer(study, p) for p in people}
    commit = GroupCommit(lambda: ResponseStore(postgres_url), study.db.renew)
    client = create_app(expdir, database=postgres_url).test_client()
    nonce = NONCE.search(client.get("/").get_data(as_text=True)).group(1)
    token = client.post("/start", data={"consent": "yes", "start_nonce": nonce}).headers["Location"].rsplit("/", 1)[1]
    plan = client.get(f"/api/session/{token}").get_json()["trials"][0]
    postgres_server.pg_ctl("stop", "-m", "immediate")
    try:
        outcomes = commit_as_one_batch(commit, rows)
        reply = client.post(f"/api/session/{token}/trial/0", json=trial_answer(plan))
    finally:
        postgres_server.start()
    assert {type(o) for o in outcomes.values()} == {StorageError}
    assert reply.status_code == 503 and reply.headers["Retry-After"] == str(RETRY_AFTER_S)
    assert [commit.write(row, code).stored for code, row in rows.items()] == [True] * len(rows)
    retried = [client.post(f"/api/session/{token}/trial/0", json=trial_answer(plan)).status_code for _ in range(3)]
    assert 201 in retried[:2]  # a connection cut by the restart fails the first request that finds it, at most
