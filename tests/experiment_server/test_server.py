"""The experiment server through Flask's test client on a real experiment folder and a real SQLite file."""

from __future__ import annotations

import argparse
import csv
import io
import re
import shutil
import sqlite3
import time
import zipfile
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import human_tasks.web
from cuebench import exclusions
from experiment_server import cli as server_cli
from experiment_server.admin import set_admin_password
from experiment_server.app import create_app
from experiment_server.study import ServerSetupError, study_of
from experiment_server.study_rules import StudyRules
from cuebench.trial_types import RESPONSES, cards
from cuebench.trial_types.oddity import Oddity
from experiment_server.simulate import measured_display
from support import ADMIN_PASSWORD as PASSWORD, Clock, consent_nonce, login, plan, start
from stimuli.web_sample import ATTENTION_ANSWER, build_sample_experiment
from human_tasks.masks import pink_noise_mask, trial_mask_seed
from cuebench.trials import NOT_CLEAR

PLAN_TRIAL_KEYS = {"index", "trial_key", "type", "practice", "feedback", "block", "break_before", "images", "mask",
                   "choices", "grid", "instruction", "timing", "response", "numbered", "prompt", "keys"}


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("template")
    build_sample_experiment(root)
    return root


@pytest.fixture()
def env(template, tmp_path):
    """A fresh copy of the sample experiment, its app (60 s reservations, injected clock) and a client."""
    root = tmp_path / "exp"
    shutil.copytree(template, root)
    clock = Clock()
    app = create_app(root, clock=clock, reservation_seconds=60,
                     rules=StudyRules(unanswered_per_address=100))  # one client address plays many participants
    return app, app.test_client(), clock


def answer(trial: dict, response: str | None = None, **overrides) -> dict:
    body = {"trial_key": trial["trial_key"], "response": response if response is not None else trial["choices"][0],
            "timed_out": False, "rt_ms": 640.5, "timing_measured": {"fixation": 300.2, "stimulus": 199.9},
            "frames": {"fixation": 18, "stimulus": 12}, "dropped_frames": 0, "refresh_hz": 60.0,
            "device": {"user_agent": "pytest"}, "events": [{"type": "blur", "t": 12.5}]}
    body.update(overrides)
    return body


def trial_of(study, participant_token: str, trial: dict):
    """The experiment's trial behind a plan entry (the test knows what the browser must not)."""
    participant = study.db.by_token(participant_token)
    return study.experiment.trial(study.sequence(participant)[trial["index"]].trial_id)


def good_answer(study, token: str, trial: dict) -> str:
    return trial_of(study, token, trial).correct or trial["choices"][0]


def finish_all(app, client, token, clock: Clock | None = None) -> None:
    """Answer every trial; with the app's ``clock``, 2 s apart on the server's clock, as a person answers."""
    study = study_of(app)
    for trial in plan(client, token)["trials"]:
        if clock is not None:
            clock.now += 2
        r = client.post(f"/api/session/{token}/trial/{trial['index']}", json=answer(trial, good_answer(study, token, trial)))
        assert r.status_code in (200, 201), r.get_json()


# ---------------------------------------------------------------- participant API


def test_a_text_edited_while_serving_shows_at_the_next_page_load_each_time(env):
    """Rendered texts are kept between requests, but never past an edit: one of the same length
    as before, and one right after another, each show at once."""
    app, client, _ = env
    consent = study_of(app).expdir.root / "texts" / "consent.md"
    assert "Board approval" not in client.get("/").get_data(as_text=True)
    for version in ("E-41", "E-42"):  # the second edit keeps the file's size
        consent.write_text(consent.read_text(encoding="utf-8").split("\nBoard")[0] + f"\nBoard approval {version}.\n",
                           encoding="utf-8")
        assert f"Board approval {version}." in client.get("/").get_data(as_text=True)
        assert f"Board approval {version}." in plan(client, start(client))["texts"]["consent"]


def test_plan_hides_answers_and_assignment(env):
    app, client, _ = env
    token = start(client, PROLIFIC_PID="5f0a1b2c3d4e5f6a7b8c9d0e", STUDY_ID="s1", SESSION_ID="x1")
    body = plan(client, token)
    assert set(body) == {"participant", "status", "trials", "answered", "texts", "words", "display", "calibration",
                         "questionnaire", "adaptive_trials", "ends_on_failed_attention"}
    assert body["display"] is None and body["calibration"] is None and body["questionnaire"] is None
    assert all(set(t) == PLAN_TRIAL_KEYS for t in body["trials"])
    study = study_of(app)
    classify = next(t for t in body["trials"] if t["type"] == "classify" and not t["instruction"])
    assert classify["choices"] == study.experiment.label_set.displayed() and classify["choices"][-1] == NOT_CLEAR
    assert classify["choices"][:-1] == sorted(classify["choices"][:-1])
    text = client.get(f"/api/session/{token}").get_data(as_text=True)
    assert '"correct' not in text and "assignment" not in text and "group" not in text
    hidden = [t.trial_id for t in study.experiment.trials] + list(study.experiment.assignment.arms)
    assert not [word for word in hidden if word in text]


def test_forged_token_is_refused(env):
    _, client, _ = env
    start(client, code="real1")
    forged = "A" * 32
    assert client.get(f"/api/session/{forged}").status_code == 403
    assert client.get(f"/task/{forged}").status_code == 403
    r = client.post(f"/api/session/{forged}/trial/0", json={"trial_id": "practice-astronaut", "response": "cat"})
    assert r.status_code == 403 and "unknown session token" in r.get_json()["error"]


def test_another_participants_trial_is_refused(env):
    _, client, _ = env
    mine, theirs = start(client, code="alice"), start(client, code="bob")
    my_plan, their_plan = plan(client, mine)["trials"], plan(client, theirs)["trials"]
    index = next(i for i, (a, b) in enumerate(zip(my_plan, their_plan)) if a["trial_key"] != b["trial_key"])
    r = client.post(f"/api/session/{mine}/trial/{index}", json=answer(their_plan[index]))
    assert r.status_code == 403 and their_plan[index]["trial_key"] in r.get_json()["error"]
    r = client.post(f"/api/session/{mine}/trial/{len(my_plan)}", json=answer(my_plan[0]))
    assert r.status_code == 404


def test_invalid_answers_get_clear_4xx(env):
    app, client, _ = env
    token = start(client, code="carol")
    trials = plan(client, token)["trials"]
    classify = next(t for t in trials if t["type"] == "classify")
    oddity = next(t for t in trials if t["type"] == "oddity")
    url = f"/api/session/{token}/trial/"
    r = client.post(url + str(classify["index"]), json=answer(classify, "zebra"))
    assert r.status_code == 422 and "'zebra' is not one of this trial's choices" in r.get_json()["error"]
    assert client.post(url + str(oddity["index"]), json=answer(oddity, "4")).status_code == 422
    r = client.post(url + str(oddity["index"]), json=answer(oddity, "2", rt_ms=2300.0))
    assert r.status_code == 422 and "rt_ms" in r.get_json()["error"]
    r = client.post(url + str(classify["index"]), json=answer(classify, "", timed_out=True, rt_ms=None))
    assert r.status_code == 422 and "no response window" in r.get_json()["error"]
    assert client.post(url + str(classify["index"]), json=answer(classify, extra=1)).status_code == 400
    assert client.post(url + str(classify["index"]), data="not json").status_code == 400
    r = client.post(url + str(classify["index"]), json=answer(classify, timing_measured={"stimulus": -3}))
    assert r.status_code == 422
    assert study_of(app).store.count() == 0


def test_oddity_timeout_is_stored_as_timeout(env):
    app, client, _ = env
    token = start(client, code="dave")
    oddity = next(t for t in plan(client, token)["trials"] if t["type"] == "oddity")
    r = client.post(f"/api/session/{token}/trial/{oddity['index']}", json=answer(oddity, "", timed_out=True, rt_ms=None))
    assert r.status_code == 201
    row = study_of(app).store.rows()[0]
    assert row["timed_out"] == 1 and row["response"] == "" and row["correct"] == 0 and row["rt_ms"] is None


def test_every_response_a_card_can_name_has_a_row_in_the_web_task():
    """The web task has a row per response of the cards (``RESPONSES``; the lab runner's rows are checked
    by the lab session tests), and every card people take names one of them."""
    task_js = Path(human_tasks.web.__file__).parent.joinpath("static", "task", "responses.js").read_text()
    table = task_js[task_js.index("export const RESPONSES = {"):]
    web_rows = set(re.findall(r'^  "?([\w-]+)"?: \{', table[:table.index("\n};")], flags=re.M))
    assert web_rows == set(RESPONSES) >= {c.response for c in cards().values() if c.for_people}


def test_an_experiment_with_a_trial_type_the_server_cannot_show_is_refused_at_start(template, tmp_path, monkeypatch):
    monkeypatch.setattr(Oddity, "response", "drawing")
    root = tmp_path / "exp"
    shutil.copytree(template, root)
    with pytest.raises(ServerSetupError, match=r"experiment\.json: trial .* has trial type 'oddity', whose response "
                                               r"'drawing' the web task cannot show \(it shows label-grid, keys\)"):
        create_app(root)


def test_duplicate_post_is_stored_once_and_a_changed_answer_refused(env):
    app, client, _ = env
    token = start(client, code="erin")
    trial = plan(client, token)["trials"][0]
    url = f"/api/session/{token}/trial/0"
    first, again = client.post(url, json=answer(trial)), client.post(url, json=answer(trial))
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json()["stored"] is False
    changed = client.post(url, json=answer(trial, trial["choices"][1]))
    assert changed.status_code == 409
    rows = study_of(app).store.rows()
    assert len(rows) == 1 and rows[0]["response"] == trial["choices"][0]
    assert rows[0]["events"] == [{"type": "blur", "t": 12.5}] and rows[0]["frames"]["stimulus"] == 12
    assert plan(client, token)["answered"] == [0]


def test_a_second_session_with_the_same_prolific_id_is_its_own_and_marked_for_review(env):
    """Another SESSION_ID under a Prolific ID is a session of its own (a start is never refused for
    what a link names: that would let anyone who knows the ID lock its owner out); both are
    marked for review, naming their SESSION_ID. A Prolific link without SESSION_ID is refused."""
    app, client, _ = env
    first = start(client, PROLIFIC_PID="abc123", STUDY_ID="s", SESSION_ID="one")
    second = start(client, PROLIFIC_PID="abc123", STUDY_ID="s", SESSION_ID="two")
    study = study_of(app)
    people = study.db.participants(study.experiment.name)
    assert first != second and len(people) == 2
    # both started at the same (injected) time, so their order is their random codes'
    assert all(f"SESSION_ID {p.prolific_session}:" in p.review_reason for p in people)
    assert {p.prolific_session for p in people} == {"one", "two"}
    bare = client.post("/start", data={"consent": "yes", "PROLIFIC_PID": "abc123", "start_nonce": consent_nonce(client)})
    assert bare.status_code == 400 and b"SESSION_ID" in bare.data


def test_a_repeated_start_returns_the_same_session(env):
    """A retried start (lost reply, double click, second tab) lands in the same session: keyed by
    the entry code (in the same browser), by the Prolific ID with its attempt's SESSION_ID, or by the form's nonce."""
    app, client, _ = env
    nonce = consent_nonce(client)
    assert start(client, start_nonce=nonce) == start(client, start_nonce=nonce) != start(client)
    assert start(client, code="retry1") == start(client, code="retry1")
    prolific = {"PROLIFIC_PID": "pid77", "STUDY_ID": "s", "SESSION_ID": "attempt1"}
    assert start(client, **prolific) == start(client, **prolific)
    assert len(study_of(app).db.participants(study_of(app).experiment.name)) == 4


def test_entry_needs_consent_and_valid_ids(env):
    _, client, _ = env
    assert client.post("/start", data={"code": "x1", "start_nonce": consent_nonce(client)}).status_code == 400
    r = client.get("/?PROLIFIC_PID=<script>")
    assert r.status_code == 400 and b"PROLIFIC_PID" in r.data


def test_mask_is_server_made_deterministic_and_per_trial(env):
    app, client, _ = env
    study = study_of(app)
    token = start(client, code="frank")
    masked = [t for t in plan(client, token)["trials"] if t["mask"]]
    first = client.get(masked[0]["mask"]).data
    assert client.get(masked[0]["mask"]).data == first
    assert client.get(masked[1]["mask"]).data != first
    trial = trial_of(study, token, masked[0])
    expected = pink_noise_mask(224, trial_mask_seed(trial.mask_seed, study.experiment.name, trial.trial_id))
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(first))), expected)


# ---------------------------------------------------------------- completion codes


def test_completion_code_only_after_every_trial(env):
    app, client, _ = env
    study = study_of(app)
    token = start(client, PROLIFIC_PID="pid42", STUDY_ID="s", SESSION_ID="attempt1")
    trials = plan(client, token)["trials"]
    client.post(f"/api/session/{token}/trial/0", json=answer(trials[0]))
    early = client.post(f"/api/session/{token}/complete")
    assert early.status_code == 409 and early.get_json()["missing"] == list(range(1, len(trials)))
    finish_all(app, client, token)
    done = client.post(f"/api/session/{token}/complete").get_json()
    assert done["status"] == "finished" and done["code"] == study.completion_code("finished")
    assert done["redirect"].endswith("cc=" + done["code"])
    assert client.post(f"/api/session/{token}/trial/0", json=answer(trials[0])).status_code == 409


def test_failed_attention_and_screened_out_get_their_own_codes(env):
    app, client, _ = env
    study = study_of(app)
    careless = start(client, code="careless")
    for trial in plan(client, careless)["trials"]:
        wrong = "airplane" if trial["instruction"] else good_answer(study, careless, trial)
        client.post(f"/api/session/{careless}/trial/{trial['index']}", json=answer(trial, wrong))
    failed = client.post(f"/api/session/{careless}/complete").get_json()
    screened = client.post(f"/api/session/{start(client, code='oldscreen')}/screen",
                           json={"reason": "refresh rate 30.0 Hz", **measured_display(hz=30)}).get_json()
    codes = {study.completion_code(o) for o in ("finished", "screened_out", "failed_attention")}
    assert failed["status"] == "failed_attention" and screened["status"] == "screened_out"
    assert len(codes) == 3 and {failed["code"], screened["code"]} < codes
    assert failed["redirect"] is None
    assert ATTENTION_ANSWER != "airplane"


def test_an_abandoned_session_with_a_failed_attention_check_is_excluded_alike_in_every_export_and_analyze(env, tmp_path):
    """The exclusion is recorded when the check is answered wrong, not at the end a leaver never reaches: the
    responses, psychopy, participants and model-vs-human exports and ``analyze`` all read that one decision."""
    from analysis.exclusions import apply_exclusions
    from analysis.load import load_responses
    from cuebench.export import export

    app, client, _ = env
    study = study_of(app)
    leaver = start(client, code="leaver")
    trials = plan(client, leaver)["trials"]
    last = next(i for i, t in enumerate(trials) if t["instruction"])
    for trial in trials[:last + 1]:
        wrong = "airplane" if trial["instruction"] else good_answer(study, leaver, trial)
        assert client.post(f"/api/session/{leaver}/trial/{trial['index']}", json=answer(trial, wrong)).status_code == 201
    code = study.db.by_token(leaver).code
    assert study.db.get(code).status == "in_progress"  # left without finishing
    out = tmp_path / "out"
    export(study.expdir.root, "csv", out / "responses.csv")
    export(study.expdir.root, "psychopy", out / "psychopy.csv")
    export(study.expdir.root, "participants", out / "participants.csv")
    mvh = export(study.expdir.root, "mvh", out / "mvh")
    for name in ("responses.csv", "psychopy.csv"):
        rows = [r for r in csv.DictReader(io.StringIO((out / name).read_text())) if code in r.values()]
        assert rows and {r["excluded"] for r in rows} == {"1"}, name
    (person,) = [r for r in csv.DictReader(io.StringIO((out / "participants.csv").read_text())) if r["code"] == code]
    assert person["excluded"] == "1" and person["excluded_by"] == "attention check"
    assert "airplane" in person["exclusion_reason"]
    mine = [f.relative_to(out / "mvh") for f in mvh if code in f.name]
    assert mine and all(f.parts[0] == "excluded" for f in mine)
    cleaned = apply_exclusions(load_responses([study.expdir.root]))
    assert code in set(cleaned.excluded_observers["observer"])


# ---------------------------------------------------------------- assignment


def test_assignment_balanced_when_sessions_are_abandoned(env):
    app, client, clock = env
    study = study_of(app)
    first, second = start(client, code="p1"), start(client, code="p2")
    groups = {p.code: p.group for p in study.db.participants(study.experiment.name)}
    assert sorted(groups.values()) == [0, 1]
    finish_all(app, client, first)
    client.post(f"/api/session/{first}/complete")
    clock.now += 30
    third = start(client, code="p3")  # both groups are filled (one finished, one reserved): group 0 on the tie
    clock.now += 61  # p2 and p3 abandon: their reservations lapse
    fourth = start(client, code="p4")
    by_token = {t: study.db.by_token(t).group for t in (first, second, third, fourth)}
    assert by_token[fourth] == by_token[second] != by_token[first]
    finish_all(app, client, fourth)
    client.post(f"/api/session/{fourth}/complete")
    assert study.db.fill(study.experiment.name, 2) == [1, 1]
    fifth = start(client, code="p5")
    clock.now += 45
    plan_trial = plan(client, fifth)["trials"][0]
    client.post(f"/api/session/{fifth}/trial/0", json=answer(plan_trial))  # renews the reservation
    clock.now += 45
    assert sum(study.db.fill(study.experiment.name, 2)) == 3


# ---------------------------------------------------------------- admin


def csrf_of(client, path="/admin/") -> str:
    return client.get(path).get_data(as_text=True).split('name="csrf_token" value="')[1].split('"')[0]


def test_admin_closed_until_a_password_is_set(env):
    app, client, _ = env
    assert client.get("/admin/login").status_code == 503
    with pytest.raises(Exception, match="at least"):
        set_admin_password(study_of(app), "short")
    with pytest.raises(Exception, match="at least"):
        set_admin_password(study_of(app), " " * 20)


def test_admin_refuses_without_login_and_without_csrf(env):
    app, _, _ = env
    set_admin_password(study_of(app), PASSWORD)
    client = app.test_client()
    for path in ("/admin/", "/admin/export/responses.csv", "/admin/export/psychopy.csv",
                 "/admin/export/model-vs-human.zip", "/admin/export/participants.csv"):
        r = client.get(path)
        assert r.status_code == 302 and "/admin/login" in r.headers["Location"], path
    client.get("/admin/login")
    assert client.post("/admin/login", data={"password": PASSWORD}).status_code == 400
    assert client.post("/admin/login", data={"password": "wrong password!", "csrf_token": csrf_of(client, "/admin/login")}).status_code == 401
    login(client)
    assert client.get("/admin/").status_code == 200
    assert client.post("/admin/exclude", data={"code": "x", "reason": "r"}).status_code == 400
    cookie = client.get_cookie("session")
    assert cookie.http_only and cookie.same_site == "Strict"


def test_admin_login_guessing_is_throttled(env):
    app, client, clock = env
    set_admin_password(study_of(app), PASSWORD)
    client.environ_base["REMOTE_ADDR"] = "198.51.100.7"
    wrong = [client.post("/admin/login", data={"password": f"guess number {k}", "csrf_token": csrf_of(client, "/admin/login")})
             for k in range(6)]
    assert [r.status_code for r in wrong] == [401] * 5 + [429]
    assert client.post("/admin/login", data={"password": PASSWORD, "csrf_token": csrf_of(client, "/admin/login")}).status_code == 429
    other_process = create_app(study_of(app).expdir.root, clock=clock).test_client()
    other_process.environ_base["REMOTE_ADDR"] = "198.51.100.7"
    assert other_process.post("/admin/login", data={"password": PASSWORD,
                                                    "csrf_token": csrf_of(other_process, "/admin/login")}).status_code == 429
    clock.now += 15 * 60 + 1
    login(client)


def test_admin_progress_exclusion_and_exports(env):
    from experiment_server.admin import progress

    app, client, clock = env
    study = study_of(app)
    set_admin_password(study, PASSWORD)
    done = start(client, code="finisher")
    finish_all(app, client, done)
    client.post(f"/api/session/{done}/complete")
    start(client, code="ongoing")
    admin = app.test_client()
    login(admin)
    page = admin.get("/admin/").get_data(as_text=True)
    assert "finisher" in page and "in progress" in page
    code = study.db.by_token(done).code
    r = admin.post("/admin/exclude", data={"code": code, "reason": "saw the stimuli before", "csrf_token": csrf_of(admin)})
    assert r.status_code == 302 and study.db.get(code).excluded == 1
    n_trials = len(study.sequence(study.db.get(code)))
    common = list(csv.DictReader(io.StringIO(admin.get("/admin/export/responses.csv").get_data(as_text=True))))
    assert len(common) == n_trials and {r["observer"] for r in common} == {code}
    psychopy = list(csv.DictReader(io.StringIO(admin.get("/admin/export/psychopy.csv").get_data(as_text=True))))
    assert len(psychopy) == n_trials
    archive = zipfile.ZipFile(io.BytesIO(admin.get("/admin/export/model-vs-human.zip").data))
    mvh_rows = [line for name in archive.namelist() for line in archive.read(name).decode().splitlines()[1:]]
    assert len(mvh_rows) == len(common)  # every role; a trial that is not a test trial says its role
    assert sum(",practice@" in line for line in mvh_rows) == sum(r["role"] == "practice" for r in common)
    people = list(csv.DictReader(io.StringIO(admin.get("/admin/export/participants.csv").get_data(as_text=True))))
    assert {(p["code"], p["status"], p["exclusion_reason"]) for p in people if p["excluded"] == "1"} == \
        {(code, "finished", "saw the stimuli before")}
    # "finished" counts only people who count; a session without an answer holds its place as "not begun", and
    # expires when that hold (here the 60 s reservation) lapses
    columns = ("not_begun", "in_progress", "expired", "finished", "excluded")
    assert sorted(tuple(g[c] for c in columns) for g in progress(study)) == [(0, 0, 0, 0, 1), (1, 0, 0, 0, 0)]
    clock.now += 61
    assert sorted(tuple(g[c] for c in columns) for g in progress(study)) == [(0, 0, 0, 0, 1), (0, 0, 1, 0, 0)]
    people = list(csv.DictReader(io.StringIO(admin.get("/admin/export/participants.csv").get_data(as_text=True))))
    assert sorted(p["status"] for p in people) == ["expired", "finished"]


def test_cli_sets_a_hashed_admin_password(env, monkeypatch):
    app, _, _ = env
    root = study_of(app).expdir.root
    parser = argparse.ArgumentParser()
    server_cli.register(parser.add_subparsers())
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    args = parser.parse_args(["serve", "admin-password", str(root), "--password-stdin"])
    assert args.func(args) == 0
    stored = study_of(create_app(root)).secrets.get("admin_password")
    assert stored.startswith("scrypt:") and PASSWORD not in stored


# ---------------------------------------------------------------- exclusions, pilots, assignment, exports
def admin_post(admin, path: str, code: str, reason: str):
    return admin.post(path, data={"code": code, "reason": reason, "csrf_token": csrf_of(admin)})


def test_exclusion_log_frees_the_slot_and_marks_every_export(env, tmp_path):
    from cuebench.export import export

    app, client, _ = env
    study = study_of(app)
    set_admin_password(study, PASSWORD)
    first = start(client, code="first")
    finish_all(app, client, first)
    assert client.post(f"/api/session/{first}/complete").get_json()["status"] == "finished"
    code = study.db.by_token(first).code
    group = study.db.get(code).group
    assert study.db.fill(study.experiment.name, study.n_groups)[group] == 1
    admin = app.test_client()
    login(admin)
    assert admin_post(admin, "/admin/exclude", code, "saw the stimuli before").status_code == 302
    assert admin_post(admin, "/admin/include", code, "mixed up two codes").status_code == 302
    assert study.db.get(code).excluded == 0
    assert admin_post(admin, "/admin/include", code, "again").status_code == 409  # not excluded any more
    assert admin_post(admin, "/admin/exclude", code, "saw the stimuli before").status_code == 302
    # the slot is free again: the next real participant joins the same group
    assert study.db.fill(study.experiment.name, study.n_groups)[group] == 0
    assert study.db.by_token(start(client, code="second")).group == group
    history = [(e.excluded, e.reason, e.by) for e in exclusions.history(study.store.conn, study.experiment.name)]
    assert history == [(True, "saw the stimuli before", "admin"), (False, "mixed up two codes", "admin"),
                       (True, "saw the stimuli before", "admin")]

    marked = {"excluded": "1", "exclusion_reason": "admin: saw the stimuli before"}
    common = list(csv.DictReader(open(export(study.expdir.root, "csv", tmp_path / "r.csv")[0])))
    assert common and all({k: r[k] for k in marked} == marked for r in common if r["observer"] == code)
    psychopy = list(csv.DictReader(open(export(study.expdir.root, "psychopy", tmp_path / "p.csv")[0])))
    assert all({k: r[k] for k in marked} == marked for r in psychopy if r["participant"] == code)
    mvh = export(study.expdir.root, "mvh", tmp_path / "mvh")
    assert [p.parent.name for p in mvh] == ["excluded"]
    people = {r["code"]: r for r in csv.DictReader(open(export(study.expdir.root, "participants",
                                                                tmp_path / "people.csv")[0]))}
    assert (people[code]["excluded"], people[code]["exclusion_reason"], people[code]["excluded_by"]) == \
        ("1", "saw the stimuli before", "admin")
    started = datetime.fromisoformat(people[code]["started_at"])
    assert started.tzinfo is not None and started.timestamp() == 1_000_000  # the injected clock, as ISO-8601
    assert people[code]["duration_s"] == "0.0"
    page = admin.get("/admin/").get_data(as_text=True)
    assert "admin: saw the stimuli before" in page and "Un-exclude" in page


def test_pilot_codes_hold_no_slot_and_are_stored_as_pilots(env):
    app, client, _ = env
    study = study_of(app)
    study.db.add_pilot_codes(study.experiment.name, ["pilot-tryout"])
    token = start(client, code="pilot-tryout")
    finish_all(app, client, token)
    client.post(f"/api/session/{token}/complete")
    participant = study.db.by_token(token)
    assert participant.pilot and participant.status == "finished"
    assert {r["observer_kind"] for r in study.store.rows("observer=?", [participant.code])} == {"pilot"}
    assert study.db.fill(study.experiment.name, study.n_groups) == [0] * study.n_groups


def test_a_screen_out_is_a_logged_exclusion(env):
    app, client, _ = env
    study = study_of(app)
    screened = start(client, code="screened")
    client.post(f"/api/session/{screened}/screen", json={"reason": "refresh rate 30 Hz", **measured_display(hz=30)})
    event = study.db.by_token(screened).exclusion
    assert (event.by, event.reason) == ("browser check", "browser check: refresh rate 30.0 Hz")


def test_prolific_list(env, tmp_path):
    from cuebench.export import export

    app, client, clock = env
    clock.now = time.time()  # the export reads the reservations with the real clock
    study = study_of(app)
    done = start(client, PROLIFIC_PID="aaaaaaaaaaaaaaaaaaaaaaaa", STUDY_ID="s", SESSION_ID="1")
    finish_all(app, client, done, clock)  # answers as far apart as a person's
    clock.now += 600  # the time a person takes
    client.post(f"/api/session/{done}/complete")
    gone = start(client, PROLIFIC_PID="bbbbbbbbbbbbbbbbbbbbbbbb", STUDY_ID="s", SESSION_ID="2")
    client.post(f"/api/session/{gone}/screen", json={"reason": "window too small", **measured_display(width=640)})
    running = start(client, PROLIFIC_PID="cccccccccccccccccccccccc", STUDY_ID="s", SESSION_ID="3")
    study.db.add_pilot_codes(study.experiment.name, ["pilot-preview"])
    start(client, PROLIFIC_PID="dddddddddddddddddddddddd", STUDY_ID="s", SESSION_ID="4", code="pilot-preview")
    study.db.set_excluded(study.db.by_token(running).code, True, "typed nonsense", "admin")
    rows = list(csv.DictReader(open(export(study.expdir.root, "prolific", tmp_path / "prolific.csv")[0])))
    # sorted: the test's clock stands still, so the starts tie on their time, the export's order
    assert sorted((r["participant_id"][0], r["action"]) for r in rows) == [("a", "approve"), ("b", "return"),
                                                                             ("c", "wait")]
    late = start(client, PROLIFIC_PID="eeeeeeeeeeeeeeeeeeeeeeee", STUDY_ID="s", SESSION_ID="5")
    from experiment_server.db import PARTICIPANTS

    with sqlite3.connect(study.expdir.responses_file) as conn:  # its reservation lapsed: abandoned, to review
        conn.execute(f"UPDATE {PARTICIPANTS} SET reserved_until=? WHERE code=?",
                     (time.time() - 1, study.db.by_token(late).code))
    rows = list(csv.DictReader(open(export(study.expdir.root, "prolific", tmp_path / "later.csv")[0])))
    (late,) = [r for r in rows if r["participant_id"][0] == "e"]
    assert late["action"] == "review" and late["reason"].startswith("session abandoned")


def test_the_web_grid_is_the_lab_grid(env):
    """Burgert et al.'s screen: the 16 labels alphabetically in 4 columns, row by row, "not clear" below."""
    app, client, _ = env
    token = start(client, code="grid")
    trial = next(t for t in plan(client, token)["trials"] if t["type"] == "classify")
    places = {g["label"]: (g["row"], g["col"]) for g in trial["grid"]}
    assert [g["label"] for g in trial["grid"]] == trial["choices"]
    assert (places["airplane"], places["bear"], places["bird"], places["boat"], places["truck"]) == \
        ((0, 0), (0, 1), (0, 3), (1, 0), (3, 3))
    assert places[NOT_CLEAR] == (4, None)


def test_lab_and_web_sessions_fill_one_latin_square(env):
    """`cuebench lab run` without --group takes the web's least filled group, and the web counts lab sessions."""
    from cuebench_app.cli import least_filled_group
    from cuebench.responses import trial_row
    from human_tasks.lab.session import resolve_group

    app, client, _ = env
    study = study_of(app)
    root, experiment = study.expdir.root, study.experiment
    web = start(client, code="web1")
    finish_all(app, client, web)
    client.post(f"/api/session/{web}/complete")
    assert study.db.by_token(web).group == 0
    assert resolve_group(experiment, "LAB01", [], None, lambda: least_filled_group(root)) == 1
    lab_row = trial_row(experiment, experiment.trials[0], observer="LAB01", observer_kind="human", session="1",
                        trial_index=0, response="cat", group=1)
    study.store.write(lab_row)  # a lab run from before registration; the next opening of the folder counts it
    assert least_filled_group(root) == 0 and study.db.fill(experiment.name, study.n_groups) == [1, 1]
    exclusions.record(study.store.conn, experiment.name, "LAB01", True, "fell asleep", "admin")  # slot freed
    assert least_filled_group(root) == 1 and study.db.by_token(start(client, code="web2")).group == 1


def test_withdraw_erases_a_participant_everywhere_and_keeps_only_the_count(env, tmp_path, capsys):
    """`cuebench exclude` and `cuebench withdraw` take a Prolific ID or an entry code; a withdrawal erases the
    person's responses, answers, exclusions, server record and lab files, later exports lack them, and only the
    count of withdrawals stays. The shareable database holds no client IP address."""
    from cuebench_app.cli import main
    from cuebench.exclusions import withdrawals
    from cuebench.export import export
    from cuebench.questionnaire import store_answers

    app, client, _ = env
    study = study_of(app)
    pid = "f" * 24
    token = start(client, PROLIFIC_PID=pid, STUDY_ID="s", SESSION_ID="w")
    finish_all(app, client, token)
    code = study.db.by_token(token).code
    stays = study.db.by_token(start(client, code="stays-1")).code
    store_answers(study.store.conn, study.experiment.name, code, {"comments": "mine"}, runner="web")
    lab_file = study.expdir.root / "data" / f"{code}_{study.experiment.name}_session1.csv"
    lab_file.parent.mkdir(exist_ok=True)
    lab_file.write_text("lab data")
    root = str(study.expdir.root)
    assert main(["exclude", root, "stays-1", "--reason", "by entry code", "--yes"]) == 0
    assert main(["exclude", root, pid, "--reason", "by Prolific ID", "--yes"]) == 0
    assert f"excluded {code} ({pid})" in capsys.readouterr().out
    assert main(["withdraw", root, pid, "--yes"]) == 0
    assert f"erased {code}" in capsys.readouterr().out and not lab_file.exists()
    text = (study.expdir.root / "responses.sqlite").read_bytes()
    assert code.encode() not in text and pid.encode() not in text and b"mine" not in text
    assert b"127.0.0.1" not in text  # the start rate limit stores a keyed digest of the address
    (path,) = export(study.expdir.root, "participants", tmp_path / "participants.csv")
    assert [r["code"] for r in csv.DictReader(open(path))] == [stays]
    assert withdrawals(study.store.conn, study.experiment.name) == 1
    assert main(["withdraw", root, pid, "--yes"]) == 2
    assert f"no observer, Prolific ID or entry code '{pid}'" in capsys.readouterr().err


def test_lab_sessions_are_participants_the_admin_lists_and_excludes(env):
    """`cuebench lab run` registers its session (``record_lab_session``): the admin page lists it as a
    lab session, the Exclude button and `cuebench exclude` work on it, and it fills its group from its start."""
    from cuebench_app.cli import main, record_lab_session
    from experiment_server.db import CodeTaken
    from experiment_server.exports import participant_record

    app, client, _ = env
    study = study_of(app)
    root, experiment = study.expdir.root, study.experiment
    record_lab_session(root, None, "LAB01", "1", 1, False, False)
    assert study.db.fill(experiment.name, study.n_groups) == [0, 1]  # in the room: its slot is held
    record_lab_session(root, None, "SIM01", "1", 0, True, True)  # a simulated run: a pilot, no slot
    assert study.db.fill(experiment.name, study.n_groups) == [0, 1]
    record_lab_session(root, None, "LAB01", "1", 1, False, True)  # its last trial stored
    records = {p.code: participant_record(p, study.db.clock()) for p in study.db.participants(experiment.name)}
    assert {k: records["LAB01"][k] for k in ("runner", "status", "observer_kind", "group")} == \
        {"runner": "lab", "status": "finished", "observer_kind": "human", "group": 1}
    assert (records["SIM01"]["observer_kind"], records["SIM01"]["runner"]) == ("pilot", "lab")
    web = study.db.by_token(start(client, code="web1")).code
    assert study.db.by_token(start(client, code="web2")).group == 0  # the lab session filled group 1
    with pytest.raises(CodeTaken, match="web participant"):
        record_lab_session(root, None, web, "1", 0, False, False)

    set_admin_password(study, PASSWORD)
    login(client)
    page = client.get("/admin/").get_data(as_text=True)
    assert "LAB01 (lab)" in page and "SIM01 (lab) (pilot)" in page
    r = client.post("/admin/exclude", data={"code": "LAB01", "reason": "fell asleep", "csrf_token": csrf_of(client)})
    assert r.status_code == 302 and study.db.get("LAB01").exclusion.label == "admin: fell asleep"
    assert study.db.fill(experiment.name, study.n_groups)[1] == 0  # the excluded person's slot is free again
    assert main(["exclude", str(root), "LAB01", "--undo", "--reason", "woke up", "--yes"]) == 0
    assert study.db.get("LAB01").exclusion is None and study.db.fill(experiment.name, study.n_groups)[1] == 1
    assert main(["exclude", str(root), "SIM01", "--reason", "test run", "--yes"]) == 0
    assert study.db.get("SIM01").exclusion.by.startswith("cli (")


@pytest.mark.slow
def test_the_bytes_of_an_oddity_trial_do_not_tell_the_odd_one(shared, tmp_path):
    """DiST's original photo compresses differently from its two texture syntheses, so the file
    whose size is furthest from the other two was the odd one in most triplets. Served, the three
    images of a trial have the same size, and that guess is right no more often than chance."""
    from support import dist_subset

    from cuebench_app.cli import main as cuebench

    release = dist_subset(shared / "data" / "dist", tmp_path / "dist", 30)
    assert cuebench(["stimuli", "build", "--design", "dist-import", "--images", str(release),
                     "--out", str(tmp_path / "exp")]) == 0
    app = create_app(tmp_path / "exp")
    client, experiment = app.test_client(), study_of(app).experiment
    stored_right = served_right = 0
    for trial in experiment.trials:
        paths = [experiment.stimuli[s].path for s in trial.stimuli]
        stored = [(tmp_path / "exp" / p).stat().st_size for p in paths]
        served = [len(client.get("/stimuli/" + p.split("/", 1)[1]).data) for p in paths]
        assert len(set(served)) == 1, trial.trial_id
        stored_right += furthest(stored) == int(trial.correct) - 1
        served_right += furthest(served) == int(trial.correct) - 1
    assert stored_right / len(experiment.trials) > 0.5  # the leak the test would see
    assert served_right / len(experiment.trials) <= 0.40


def furthest(sizes: list[int]) -> int:
    """The position whose size is furthest from the other two (the first on a tie)."""
    return max(range(3), key=lambda k: (sum(abs(sizes[k] - s) for s in sizes), -k))
