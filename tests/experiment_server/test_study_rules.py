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
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from cuebench.errors import SchemaError
from cuebench_app.cli import main
from experiment_server import cli as server_cli
from experiment_server.admin import PAGE_SIZE, set_admin_password
from experiment_server.app import create_app
from experiment_server.simulate import NONCE, ClientLog, ServerProcess, SimulatedParticipant, free_port, trial_answer
from experiment_server.study import study_of
from experiment_server.study_rules import (RULES_FILE, DeviceRules, RulesError, StudyRules, load_rules,
                                          settle_rules)
from stimuli.web_sample import ATTENTION_ANSWER, build_sample_experiment
from support import ADMIN_PASSWORD as PASSWORD, Clock, fill_consent

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
DEVICE_RULES = re.compile(r"data-rules='([^']+)'")
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("template")
    build_sample_experiment(root)
    return root


@pytest.fixture()
def make_app(template, tmp_path):
    """An app on a fresh copy of the sample experiment (``make_app.root``) with the given rules, else those stored
    in the folder (60 s reservations)."""
    root = tmp_path / "exp"
    shutil.copytree(template, root)

    def make(rules: StudyRules | None = None):
        clock = Clock()
        return create_app(root, clock=clock, reservation_seconds=60, rules=rules), clock

    make.root = root
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
    client.environ_base["HTTP_USER_AGENT"] = FIREFOX  # the server checks the browser rule too
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
    given = server_cli.given_rules(serve_args("--target-n", "40", "--time-limit", "45", "--min-window", "1024x768",
                                              "--refresh-hz", "59-61", "--browsers", "Chrome, firefox"))
    assert given == {"target_n": 40, "time_limit_min": 45.0, "device.min_width": 1024, "device.min_height": 768,
                     "device.min_hz": 59.0, "device.max_hz": 61.0, "device.browsers": ("chrome", "firefox")}
    assert server_cli.given_rules(serve_args()) == {}  # an option not given leaves its stored rule alone
    assert server_cli.given_rules(serve_args("--target-n", "none", "--no-allow-touch", "--browsers", "any")) == {
        "target_n": None, "device.allow_touch": False, "device.browsers": ()}
    for extra, words in ((("--min-window", "big"), "WIDTHxHEIGHT"), (("--refresh-hz", "61-59"), "MIN <= MAX"),
                         (("--browsers", "netscape"), "unknown netscape")):
        with pytest.raises(RulesError, match=words):
            serve_args(*extra)
    for extra, words in ((("--target-n", "0"), "--target-n 0: must be >= 1"),
                         (("--time-limit", "0"), "--time-limit 0.0: must be > 0"),
                         (("--prolific-study-id", "a b"), "as Prolific shows it")):
        with pytest.raises(RulesError, match=words):
            StudyRules().changed(server_cli.given_rules(serve_args(*extra)))


def test_rules_are_stored_with_the_study_and_a_flag_that_would_change_one_is_refused(template, tmp_path, capsys):
    root = tmp_path / "exp"
    shutil.copytree(template, root)
    assert settle_rules(root, {"device.min_width": 800}) == StudyRules() and not (root / RULES_FILE).exists()
    capped = settle_rules(root, {"target_n": 40, "time_limit_min": 45.0})
    stored = json.loads((root / RULES_FILE).read_text())
    assert stored["rules"]["target_n"] == 40 and stored["rules"]["time_limit_min"] == 45
    assert [change["changed"] for change in stored["history"]] == [{"target_n": [None, 40],
                                                                    "time_limit_min": [None, 45]}]
    assert load_rules(root) == capped and settle_rules(root, {}) == capped == settle_rules(root, {"target_n": 40})
    with pytest.raises(RulesError) as refused:
        settle_rules(root, {"target_n": 50})
    assert "--target-n would change the stored rule target_n from 40 to 50" in str(refused.value)
    assert "--update-rules" in str(refused.value) and "\n" not in str(refused.value) and load_rules(root) == capped
    before = datetime.now(timezone.utc)
    opened = settle_rules(root, {"target_n": None, "device.browsers": ("firefox",)}, update=True)
    assert opened.target_n is None and opened.time_limit_min == 45 and load_rules(root) == opened
    history = json.loads((root / RULES_FILE).read_text())["history"]
    assert history[-1]["changed"] == {"target_n": [40, None], "device.browsers": [[], ["firefox"]]}
    assert datetime.fromisoformat(history[-1]["at"]) >= before.replace(microsecond=0) and len(history) == 2
    assert main(["serve", "rules", str(root)]) == 0  # what is in force, and each change with its time
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == (f"{root / RULES_FILE}: time limit 45 min; 60 starts per address per 10 min; places held 5 "
                        "min until a first answer, 3 such sessions per address; one completion code per Prolific ID; "
                        "devices: window >= 800x600, 48-500 Hz, browsers firefox, touch refused")
    assert [line.split(": ", 1)[1] for line in shown[1:]] == [
        "target_n null -> 40; time_limit_min null -> 45.0", 'target_n 40 -> null; device.browsers [] -> ["firefox"]']
    (root / RULES_FILE).write_text(json.dumps({"rules": {"target_n": "forty"}}))
    with pytest.raises(SchemaError, match=r"rules.json: field 'rules.target_n'"):
        load_rules(root)


def test_the_published_schema_of_rules_json_is_current_and_checks_the_file(template, tmp_path, capsys):
    """``cuebench schema rules`` prints the JSON Schema of rules.json, published as docs/schemas/rules.schema.json;
    a file ``serve`` wrote passes it (the ``jsonschema`` package), a wrong value does not."""
    import jsonschema

    assert main(["schema", "rules"]) == 0
    schema = json.loads(capsys.readouterr().out)
    published = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "rules.schema.json"
    assert json.loads(published.read_text()) == schema, \
        "rules.schema.json is out of date: run `cuebench schema rules --out docs/schemas/rules.schema.json`"
    root = tmp_path / "exp"
    shutil.copytree(template, root)
    settle_rules(root, {"target_n": 40, "device.browsers": ("firefox",)})
    checker = jsonschema.Draft202012Validator(schema)
    stored = json.loads((root / RULES_FILE).read_text())
    assert not list(checker.iter_errors(stored))
    stored["rules"]["device"]["browsers"] = ["netscape"]
    assert [e.json_path for e in checker.iter_errors(stored)] == ["$.rules.device.browsers[0]"]


def test_the_admin_page_shows_the_stored_rules_and_their_history(make_app):
    root = make_app.root
    settle_rules(root, {"target_n": 3, "start_limit": 5})
    settle_rules(root, {"target_n": 4}, update=True)
    app, _ = make_app()  # the rules from the folder's file
    assert app.config["CUEBENCH_RULES"] == StudyRules(target_n=4, start_limit=5)
    page = admin_client(app).get("/admin/").get_data(as_text=True)
    history = re.search(r'<ul id="rules-history">(.*?)</ul>', page, re.S).group(1)
    assert "Target: 4 people" in page and "At most 5 session starts" in page and "changed 2 times" in page
    assert history.index("<code>target_n</code> 3 → 4") < history.index("<code>target_n</code> null → 3")
    assert 'id="rules-stale"' not in page
    settle_rules(root, {"target_n": 6}, update=True)  # another serve --update-rules while this one runs
    assert 'id="rules-stale"' in admin_client(app).get("/admin/").get_data(as_text=True)


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
def test_a_served_study_ends_failed_checks_and_closes_at_its_target_across_processes_and_restarts(tmp_path, workers):
    """``cuebench serve --target-n 1 --end-on-failed-attention``: a wrong answer to the attention trial ends that
    session (which then holds no place), and once one session finished every process refuses the next start.
    Restarted without the options (as a new user would), the study stays closed: every process reads the rules
    from the folder; a different target is refused until ``--update-rules``, which opens the study again."""
    build_sample_experiment(tmp_path / "exp")
    fill_consent(tmp_path / "exp")

    def served(*options: str) -> ServerProcess:
        server = ServerProcess("exp", free_port(), workers=workers, threads=2, extra_args=options,
                               log_file=tmp_path / "server.log", cwd=tmp_path)
        server.start()
        return server

    server = served("--target-n", "1", "--end-on-failed-attention")
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

    server = served()  # no rule options: the stored ones
    try:
        pages = [SimulatedParticipant(server.port, {"code": f"again{k}"}, ClientLog()).request("GET", "/?code=x").body
                 for k in range(2 * workers)]
    finally:
        server.stop()
    assert all(b'id="closed"' in page for page in pages)

    refused = subprocess.run([sys.executable, "-m", "cuebench", "serve", "exp", "--port", str(free_port()),
                              "--target-n", "2"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "target_n from 1 to 2" in refused.stderr and "--update-rules" in refused.stderr
    server = served("--target-n", "2", "--update-rules")
    try:
        page = SimulatedParticipant(server.port, {"code": "reopened"}, ClientLog()).request("GET", "/?code=x").body
    finally:
        server.stop()
    assert b'name="start_nonce"' in page and load_rules(tmp_path / "exp").target_n == 2
