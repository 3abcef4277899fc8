"""The rules ``cuebench serve`` runs a study by: a recruitment target that closes the study (latecomers get
the researcher's page), a session time limit (``expired``), an early end on a failed attention check, the
device rules handed to the consent page, and the admin page's paged list and live data-quality panel.

In-process (``create_app`` with an injected clock) where time must pass; the target and the early end also
against real ``cuebench serve`` processes, waitress and ``--workers 2``, since they are decided across processes."""

from __future__ import annotations

import argparse
import json
import re
import shutil

import pytest

from experiment_server import cli as server_cli
from experiment_server.admin import PAGE_SIZE, set_admin_password
from experiment_server.app import create_app
from experiment_server.simulate import NONCE, ClientLog, ServerProcess, SimulatedParticipant, free_port, trial_answer
from experiment_server.study import study_of
from experiment_server.study_rules import DeviceRules, RulesError, StudyRules
from stimuli.web_sample import ATTENTION_ANSWER, build_sample_experiment
from support import ADMIN_PASSWORD as PASSWORD, Clock, fill_consent

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
DEVICE_RULES = re.compile(r"data-rules='([^']+)'")


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("template")
    build_sample_experiment(root)
    return root


@pytest.fixture()
def make_app(template, tmp_path):
    """An app on a fresh copy of the sample experiment with the given rules (60 s reservations)."""

    def make(rules: StudyRules = StudyRules()):
        root = tmp_path / "exp"
        if not root.exists():
            shutil.copytree(template, root)
        clock = Clock()
        return create_app(root, clock=clock, reservation_seconds=60, rules=rules), clock

    return make


def start(client, **entry):
    """The consent page, then the start form; the reply to the start."""
    nonce = NONCE.search(client.get("/?" + "&".join(f"{k}={v}" for k, v in entry.items())).get_data(as_text=True))
    return client.post("/start", data={"consent": "yes", "start_nonce": nonce.group(1), **entry})


def token_of(reply) -> str:
    assert reply.status_code == 303, reply.get_data(as_text=True)[:300]
    return reply.headers["Location"].rsplit("/", 1)[1]


def post(client, token: str, trial: dict, response: str | None = None):
    body = trial_answer(trial) if response is None else {**trial_answer(trial), "response": response}
    return client.post(f"/api/session/{token}/trial/{trial['index']}", json=body)


def finish(client, token: str) -> dict:
    for trial in client.get(f"/api/session/{token}").get_json()["trials"]:
        assert post(client, token, trial).status_code in (200, 201)
    return client.post(f"/api/session/{token}/complete", json={}).get_json()


def prolific(pid: str) -> dict:
    return {"PROLIFIC_PID": pid * 24, "STUDY_ID": "s", "SESSION_ID": f"x{pid}"}


def test_a_target_closes_the_study_counting_live_sessions_so_it_is_not_overshot(make_app):
    app, clock = make_app(StudyRules(target_n=2))
    clients = {who: app.test_client() for who in "abcd"}
    tokens = {who: token_of(start(clients[who], **prolific(who))) for who in "ab"}
    latecomer = start(clients["c"], **prolific("c"))  # two live sessions hold both places
    assert latecomer.status_code == 200 and "full for now" in latecomer.get_data(as_text=True)
    assert finish(clients["a"], tokens["a"])["status"] == "finished"
    clock.now += 61  # b abandons: the reservation lapses and frees the place
    tokens["c"] = token_of(start(clients["c"], **prolific("c")))
    assert finish(clients["c"], tokens["c"])["status"] == "finished"
    closed = clients["d"].get("/?" + "&".join(f"{k}={v}" for k, v in prolific("d").items()))
    page = closed.get_data(as_text=True)
    assert 'id="closed"' in page and "has all the participants it needs" in page and "consent" not in page.lower()
    # who started before comes back to their session; a pilot still gets in
    assert token_of(start(clients["b"], **prolific("b"))) == tokens["b"]
    study_of(app).db.add_pilot_codes(study_of(app).experiment.name, ["pilot-try1"])
    assert token_of(start(app.test_client(), code="pilot-try1"))
    # the researcher's text, edited while serving, is what latecomers read
    (study_of(app).expdir.root / "texts" / "closed.md").write_text("# Recruitment over\n\nThanks, we are done.\n")
    assert "we are done" in app.test_client().get("/").get_data(as_text=True)


def test_a_target_per_group_closes_when_every_group_has_it(make_app):
    app, _ = make_app(StudyRules(target_per_group=1))
    groups = study_of(app).n_groups
    for k in range(groups):
        client = app.test_client()
        assert finish(client, token_of(start(client, code=f"g{k}")))["status"] == "finished"
    assert 'id="closed"' in app.test_client().get("/").get_data(as_text=True)


def test_a_session_past_the_time_limit_ends_expired_with_its_own_page(make_app):
    app, clock = make_app(StudyRules(time_limit_min=1))
    client = app.test_client()
    token = token_of(start(client, **prolific("t")))
    trials = client.get(f"/api/session/{token}").get_json()["trials"]
    assert post(client, token, trials[0]).status_code == 201
    clock.now += 61
    ended = post(client, token, trials[1])
    outcome = ended.get_json()["outcome"]
    assert ended.status_code == 409 and outcome["status"] == "expired" and outcome["code"] is None
    assert "Time is up" in outcome["message"] and outcome["redirect"] is None
    assert client.get(f"/api/session/{token}").get_json()["outcome"] == outcome
    from experiment_server.exports import prolific_action

    person = study_of(app).db.by_token(token)
    assert person.status == "expired" and prolific_action(person, clock.now)[0] == "review"
    assert study_of(app).store.answered_indices(study_of(app).experiment.name, person.code, "1") == {0}


@pytest.mark.parametrize("ends", [True, False])
def test_a_failed_attention_check_ends_the_session_only_when_asked(make_app, ends):
    app, _ = make_app(StudyRules(end_on_failed_attention=ends))
    client = app.test_client()
    token = token_of(start(client, code="att"))
    trials = client.get(f"/api/session/{token}").get_json()["trials"]
    k = next(i for i, t in enumerate(trials) if t["instruction"])
    assert all(post(client, token, t).status_code == 201 for t in trials[:k])
    wrong = next(c for c in trials[k]["choices"] if c != ATTENTION_ANSWER)
    reply = post(client, token, trials[k], wrong).get_json()
    if not ends:
        assert "outcome" not in reply and study_of(app).db.by_token(token).status == "in_progress"
        return
    outcome = reply["outcome"]
    assert outcome["status"] == "failed_attention" and "The study has ended" in outcome["message"]
    assert outcome["code"] == study_of(app).completion_code("failed_attention")
    after = post(client, token, trials[0])  # nothing more is stored
    assert after.status_code == 409 and after.get_json()["outcome"]["status"] == "failed_attention"
    person = study_of(app).db.by_token(token)
    assert person.exclusion is not None and person.exclusion.by == "attention check"


def test_device_rules_reach_the_consent_and_task_pages(make_app):
    rules = StudyRules(device=DeviceRules(min_width=1024, min_height=700, min_hz=59, max_hz=61,
                                          browsers=("firefox",), allow_touch=True))
    app, _ = make_app(rules)
    client = app.test_client()
    consent = client.get("/").get_data(as_text=True)
    shown = json.loads(DEVICE_RULES.search(consent).group(1))
    assert shown == {"minWidth": 1024, "minHeight": 700, "minHz": 59, "maxHz": 61, "browsers": ["firefox"],
                     "allowTouch": True}
    token = token_of(start(client, code="dev"))
    assert json.loads(DEVICE_RULES.search(client.get(f"/task/{token}").get_data(as_text=True)).group(1)) == shown


def serve_args(*extra: str):
    parser = argparse.ArgumentParser()
    server_cli.register(parser.add_subparsers())
    return parser.parse_args(["serve", "EXPDIR", *extra])


def test_the_command_line_rules_and_their_errors():
    rules = server_cli.study_rules(serve_args("--target-n", "40", "--time-limit", "45", "--min-window", "1024x768",
                                              "--refresh-hz", "59-61", "--browsers", "Chrome, firefox"))
    assert (rules.target_n, rules.time_limit_min, rules.device.min_width, rules.device.min_height) == (40, 45, 1024, 768)
    assert (rules.device.min_hz, rules.device.max_hz, rules.device.browsers) == (59, 61, ("chrome", "firefox"))
    assert server_cli.study_rules(serve_args()) == StudyRules()
    for extra, words in ((("--min-window", "big"), "WIDTHxHEIGHT"), (("--refresh-hz", "61-59"), "MIN <= MAX"),
                         (("--browsers", "netscape"), "unknown netscape"), (("--target-n", "0"), "at least 1"),
                         (("--time-limit", "0"), "more than 0")):
        with pytest.raises(RulesError, match=words):
            server_cli.study_rules(serve_args(*extra))


def admin_client(app):
    set_admin_password(study_of(app), PASSWORD)
    admin = app.test_client()
    login = admin.get("/admin/login")
    admin.post("/admin/login", data={"password": PASSWORD,
                                     "csrf_token": CSRF.search(login.get_data(as_text=True)).group(1)})
    return admin


def test_the_admin_list_is_paged_and_the_quality_panel_reports_each_person(make_app):
    app, clock = make_app(StudyRules(target_n=500, time_limit_min=30))
    study = study_of(app)
    for k in range(PAGE_SIZE + 3):  # straight into the database: the pages are what is under test
        study.db.start(study.experiment.name, study.n_groups, entry_code=f"bulk{k:03d}")
    clock.now += 1  # the last to start: on the last page
    client = app.test_client()
    token = token_of(start(client, code="quality"))
    trials = client.get(f"/api/session/{token}").get_json()["trials"]
    for t in trials:
        wrong = t["instruction"] and next(c for c in t["choices"] if c != ATTENTION_ANSWER)
        assert post(client, token, t, wrong or None).status_code == 201
    admin = admin_client(app)
    first, last = admin.get("/admin/").get_data(as_text=True), admin.get("/admin/?page=2").get_data(as_text=True)
    assert first.count("<tr data-code=") == PAGE_SIZE and last.count("<tr data-code=") == 4
    assert "Page 2 of 2 (54 participants)" in last and 'data-state="open"' in first
    assert "Target: 500 people" in first and "Sessions end 30 minutes after their start" in first
    panel = admin.get("/admin/quality.json?page=2").get_json()
    assert (panel["page"], panel["pages"], panel["total"], len(panel["people"])) == (2, 2, 54, 4)
    me = next(p for p in panel["people"] if p["code"] == study.db.by_token(token).code)
    catch = sum(t["type"] == "oddity" and not t["practice"] and t["choices"] == ["1", "2", "3"] for t in trials)
    assert me["attention"] == [0, 1] and me["catch"][1] >= 1 and me["trials"] == len(trials) and catch
    assert me["median_rt_ms"] == 612 and me["fullscreen_exits"] == 0 and me["calibration"] == "none"
    assert "attention 1 wrong" in me["flags"] and any(f.startswith("excluded: ") for f in me["flags"])
    assert panel["flagged"] == 1 and admin.get("/admin/quality.json?page=x").status_code == 400


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2], ids=["waitress", "workers2"])
def test_a_served_study_ends_failed_checks_and_closes_at_its_target_across_processes(tmp_path, workers):
    """``cuebench serve --target-n 1 --end-on-failed-attention``: a wrong answer to the attention trial ends that
    session (which then holds no place), and once one session finished every process refuses the next start."""
    build_sample_experiment(tmp_path / "exp")
    fill_consent(tmp_path / "exp")
    server = ServerProcess(tmp_path / "exp", free_port(), workers=workers, threads=2,
                           extra_args=("--target-n", "1", "--end-on-failed-attention"),
                           log_file=tmp_path / "server.log")
    server.start()
    try:
        careless = SimulatedParticipant(server.port, {"code": "careless"}, ClientLog())
        token = careless.start()
        for trial in careless.request("GET", f"/api/session/{token}").json()["trials"]:
            wrong = trial["instruction"] and next(c for c in trial["choices"] if c != ATTENTION_ANSWER)
            body = json.dumps({**trial_answer(trial), **({"response": wrong} if wrong else {})}).encode()
            reply = careless.request("POST", f"/api/session/{token}/trial/{trial['index']}", body, "application/json")
            if wrong:
                assert reply.json()["outcome"]["status"] == "failed_attention"
                break
        assert SimulatedParticipant(server.port, {"code": "first"}, ClientLog()).run()["status"] == "finished"
        pages = [SimulatedParticipant(server.port, {"code": f"late{k}"}, ClientLog()).request("GET", "/?code=x").body
                 for k in range(2 * workers)]
    finally:
        server.stop()
    assert all(b'id="closed"' in page for page in pages)
