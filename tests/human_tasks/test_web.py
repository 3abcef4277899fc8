"""The web task end to end: a scripted participant in Debian's chromium against a real waitress server.

Completes the sample experiment (practice, classification and oddity trials, one attention
and one catch trial), reloads mid-session, and checks that it resumes at the right trial
and that the database ends with exactly one row per trial, each with measured timing.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
from PIL import Image

from experiment_server.app import create_app
from experiment_server.screening import browser_of, check_failure
from experiment_server.study import study_of
from stimuli.web_sample import ATTENTION_ANSWER, build_sample_experiment
from human_tasks.timing import ms_to_frames

SESSION_DEADLINE_S = 180
RELOAD_AFTER_INDEX = 3
OUTAGE_S = 4.0
OUTAGE_AT_INDEX = 4
"""The first trial of the last block: its images are loaded, so the participant can go on offline."""
QUEUE = "JSON.parse(localStorage.getItem('cuebench-queue:' + document.getElementById('session').dataset.token) || '{}')"
"""The task page's queue of answers not yet acknowledged (task/server.js keeps it in localStorage)."""

pytestmark = pytest.mark.slow


@pytest.fixture()
def live_server(tmp_path):
    """The app under waitress on a free loopback port, stopped after the test."""
    from waitress.server import create_server

    build_sample_experiment(tmp_path)
    app = create_app(tmp_path)
    server = create_server(app, host="127.0.0.1", port=0, threads=4)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.effective_port}", study_of(app)
    server.close()
    thread.join(timeout=10)


def _state(page) -> tuple[str, int | None]:
    data = page.evaluate("() => [document.body?.dataset.state || '', document.body?.dataset.trialIndex || '']")
    return data[0], int(data[1]) if data[1] else None


def _take_part(page, base: str, outage_s: float = 0.0, screens: dict | None = None, code: str = "webtester1") -> dict:
    """Answer every screen until the completion code appears. The first oddity trial is left
    unanswered (a timeout); trial RELOAD_AFTER_INDEX's POST is cut off by the network, and
    the page is reloaded while that answer waits in the local queue. With ``outage_s`` the
    page is not reloaded: the server is unreachable for that long from trial
    OUTAGE_AT_INDEX on while the participant goes on answering. ``screens`` maps a page state
    (calibration, questionnaire) to what the participant does there, given the page."""
    page.goto(f"{base}/?code={code}")
    page.check("#consent")
    page.click("#start")
    instructed = None
    answered: set[int] = set()
    result = {"first_after_reload": None, "queued_at_reload": None, "unanswered": None, "most_queued": 0,
              "feedback": None}
    reloaded = False
    outage_until = None
    deadline = time.monotonic() + SESSION_DEADLINE_S
    while time.monotonic() < deadline:
        state, index = _state(page)
        if state in ("response-grid", "response-keys") and index not in answered:
            if reloaded and result["first_after_reload"] is None:
                result["first_after_reload"] = index
            if index == OUTAGE_AT_INDEX and outage_s and outage_until is None:
                page.route("**/api/session/**", lambda route: route.abort("connectionreset"))
                outage_until = time.monotonic() + outage_s
            elif index == RELOAD_AFTER_INDEX and not reloaded and not outage_s:
                page.route(f"**/trial/{index}", lambda route: route.abort())
        if outage_until is not None and time.monotonic() > outage_until:
            page.unroute("**/api/session/**")
            outage_until = float("inf")
        if outage_until is not None and outage_until < float("inf"):
            queued = page.evaluate(f"() => Object.keys({QUEUE}).length")
            result["most_queued"] = max(result["most_queued"], queued)
        if screens and state in screens:
            screens[state](page)
        elif state in ("instructions", "fullscreen", "break", "instruction") and page.is_visible("#continue"):
            if state == "instruction":
                instructed = re.search(r"click \W*(\w+)", page.inner_text("#instruction")).group(1)
            page.click("#continue")
        elif state == "response-grid" and index not in answered:
            page.click(f"#grid button[data-label='{instructed or 'cat'}']")
            instructed = None
            answered.add(index)
        elif state == "response-keys" and index not in answered:
            if result["unanswered"] is None:
                result["unanswered"] = index
            else:
                page.keyboard.press("1")
            answered.add(index)
        elif state == "iti" and index == RELOAD_AFTER_INDEX and not reloaded and not outage_s:
            result["queued_at_reload"] = page.evaluate(f"() => Object.keys({QUEUE})")
            page.unroute(f"**/trial/{index}")
            page.reload()
            reloaded = True
        elif state == "feedback":
            result["feedback"] = page.inner_text("#feedback")
        elif state == "done":
            return dict(result, code=page.inner_text("#code"), status=page.get_attribute("#code", "data-status"),
                        page=page.inner_text("#screen"))
        time.sleep(0.02)
    raise AssertionError(f"the session did not finish within {SESSION_DEADLINE_S} s (last state {_state(page)})")


def test_participant_completes_session_with_reload(live_server, browser):
    base, study = live_server
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    result = _take_part(page, base)

    participant = study.db.participants(study.experiment.name)[0]
    sequence = study.sequence(participant)
    rows = study.store.rows("observer=?", [participant.code])
    assert sorted(r["trial_index"] for r in rows) == list(range(len(sequence)))
    assert [r["trial_id"] for r in sorted(rows, key=lambda r: r["trial_index"])] == [s.trial_id for s in sequence]
    assert result["queued_at_reload"] == [str(RELOAD_AFTER_INDEX)]
    assert result["first_after_reload"] == RELOAD_AFTER_INDEX + 1
    assert result["status"] == "finished" and result["code"] == study.completion_code("finished")
    assert participant.status == "finished"

    timed_out = {r["trial_index"] for r in rows if r["timed_out"]}
    assert result["unanswered"] in timed_out
    row = next(r for r in rows if r["trial_index"] == result["unanswered"])
    assert row["response"] == "" and row["correct"] == 0 and row["timing_measured"]["response"] >= 2000 - 20
    roles = {r["role"] for r in rows}
    assert {"practice", "test", "attention", "catch"} <= roles
    practice = next(t for t in study.experiment.trials if t.role == "practice")
    assert practice.correct is None and result["feedback"] is None  # a practice trial without an answer says nothing
    attention = next(r for r in rows if r["role"] == "attention")
    assert attention["response"] == ATTENTION_ANSWER and attention["correct"] == 1
    exact = 0
    for row in rows:
        assert row["timing_measured"]["stimulus"] > 0 and row["refresh_hz"] > 0
        assert row["rt_ms"] is not None or row["timed_out"] == 1
        planned = ms_to_frames(row["timing_planned"]["stimulus"], row["refresh_hz"]).frames
        exact += row["frames"]["stimulus"] == planned
        phases = [e["phase"] for e in row["events"] if e["type"] == "phase"]
        assert phases[-1] in ("stimulus", "mask") and "stimulus" in phases
    types = {r["trial_type"] for r in rows}
    assert types == {"classify", "oddity"}
    share = exact / len(rows)
    check = rows[-1]["device"]["refresh"]
    print(f"\nimage phases lasting exactly the planned frames: {exact}/{len(rows)} = {share:.0%} "
          f"at {rows[0]['refresh_hz']:.1f} Hz (browser check: {check['outlier_share']:.0%} irregular intervals); "
          f"stimulus ms measured: {json.dumps([round(r['timing_measured']['stimulus'], 1) for r in rows])}")


def test_participant_goes_on_through_a_network_outage(live_server, browser):
    """The server is unreachable for a few seconds mid-session: answers wait in the local queue,
    the participant keeps answering, and every answer arrives once the connection is back."""
    base, study = live_server
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    result = _take_part(page, base, outage_s=OUTAGE_S)
    participant = study.db.participants(study.experiment.name)[0]
    rows = study.store.rows("observer=?", [participant.code])
    assert result["most_queued"] >= 2
    assert sorted(r["trial_index"] for r in rows) == list(range(len(study.sequence(participant))))
    assert result["status"] == "finished" and result["code"] == study.completion_code("finished")


def test_a_german_study_shows_german_answer_buttons_and_stores_the_labels(tmp_path, photos, browser):
    """``--language de`` on photos of two of the 16 classes: the grid's 16 buttons and "not clear" read as a German
    dictionary lists the nouns, the participant clicks "Katze" and "Flasche", and the stored answers are "cat" and
    "bottle"; the consent page states ``--time-limit 45`` in German."""
    from waitress.server import create_server

    from experiment_server.study_rules import StudyRules
    from support import cuebench_in_process

    for folder, photo in (("cat", "chelsea"), ("bottle", "coffee")):
        (tmp_path / "bilder" / folder).mkdir(parents=True)
        Image.fromarray(photos[photo]).save(tmp_path / "bilder" / folder / f"{photo}.png")
    cuebench_in_process(tmp_path, "stimuli", "build", "--design", "labelled-set", "--images", "bilder", "--language",
                        "de", "--attention", "0", "--workers", "1", "--out", "exp")
    app = create_app(tmp_path / "exp", rules=StudyRules(time_limit_min=45))
    server = create_server(app, host="127.0.0.1", port=0, threads=2)
    threading.Thread(target=server.run, daemon=True).start()
    base, study = f"http://127.0.0.1:{server.effective_port}", study_of(app)
    buttons, clicked = {}, {"cat": "Katze", "bottle": "Flasche"}

    def answer(page):
        state, index = _state(page)
        if state == "response-grid" and index not in buttons:
            buttons[index] = page.eval_on_selector_all("#grid button", "bs => bs.map(b => b.textContent)")
            category = study.experiment.trial(study.sequence(study.db.participants(study.experiment.name)[0])[index]
                                              .trial_id).category
            page.click(f"#grid button:text-is('{clicked[category]}')")

    try:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{base}/?code=de-buttons")
        assert page.inner_text("#time-limit") == ("Sie haben ab Ihrem Start höchstens 45 Minuten Zeit, um die Studie "
                                                  "abzuschließen; danach endet Ihre Sitzung, und die Antworten, die Sie "
                                                  "gegeben haben, bleiben gespeichert.")
        result = _take_part(page, base, screens={"response-grid": answer}, code="de-buttons")
    finally:
        server.close()
    assert result["status"] == "finished" and len(buttons) == 2
    german_order = ["Auto", "Bär", "Boot", "Elefant", "Fahrrad", "Flasche", "Flugzeug", "Hund", "Katze", "Lastwagen",
                    "Messer", "Ofen", "Stuhl", "Tastatur", "Uhr", "Vogel", "nicht erkennbar"]
    assert list(buttons.values()) == [german_order, german_order]
    rows = study.store.rows("observer=?", [study.db.participants(study.experiment.name)[0].code])
    assert sorted((r["category"], r["response"], r["correct"]) for r in rows) == [("bottle", "bottle", 1),
                                                                                   ("cat", "cat", 1)]


def test_small_screens_and_phones_are_told_what_to_change_before_consent(live_server, browser, tmp_path):
    """The device rules run on the consent page: a small window and a touch-only phone never see the consent
    form, each is told what to change, and nothing is stored; maximising the window lets the person go on. A
    window made small after consenting is screened out by the task's check before the instructions, with the
    same advice and its own code. The windows are small on a large screen: the rule judges the window."""
    base, study = live_server
    large_screen = {"width": 1920, "height": 1080}
    small = browser.new_page(viewport={"width": 640, "height": 480}, screen=large_screen)
    small.goto(f"{base}/?PROLIFIC_PID=smallscreen01")
    assert small.is_visible("#device-check") and not small.is_visible("#consent-form")
    assert "at least 800 × 600 pixels (it is 640 × 480 now)" in small.inner_text("#device-fix")
    small.screenshot(path=str(tmp_path / "device-small.png"), full_page=True)
    small.set_viewport_size({"width": 1024, "height": 768})
    small.wait_for_selector("#consent-form", state="visible")
    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True).new_page()
    phone.goto(f"{base}/?code=phone1")
    assert phone.get_attribute("#device-check", "data-reason") == "phone or tablet (touch screen, no mouse)"
    assert "use a computer" in phone.inner_text("#device-fix")
    assert study.db.participants(study.experiment.name) == []
    _, token = study.db.start(study.experiment.name, study.n_groups, entry_code="shrunk1")
    late = browser.new_page(viewport={"width": 640, "height": 480}, screen=large_screen)
    late.goto(f"{base}/task/{token}")
    late.wait_for_selector("#code", timeout=30_000)
    assert late.get_attribute("#code", "data-status") == "screened_out"
    assert late.inner_text("#code") == study.completion_code("screened_out")
    assert "at least 800 × 600" in late.inner_text("#screen-fix") and not late.is_visible("#instructions-text")
    late.screenshot(path=str(tmp_path / "device-screened-out.png"), full_page=True)
    participant = study.db.participants(study.experiment.name)[0]
    assert participant.status == "screened_out" and "window too small" in participant.screen_reason


def test_device_rules_from_the_command_line_run_before_consent(tmp_path, browser):
    """``serve --browsers firefox --refresh-hz 100-200``: chromium is told which browser to use, and (once it may
    use any browser) a 60 Hz display is told the refresh rate it needs, each before the consent form shows; the
    rules' other verdicts are checked on made-up devices."""
    from waitress.server import create_server

    from experiment_server.study_rules import DeviceRules, StudyRules

    build_sample_experiment(tmp_path)
    servers, apps = [], []
    for browsers in (("firefox",), ()):
        rules = StudyRules(device=DeviceRules(min_hz=100, max_hz=200, browsers=browsers))
        apps.append(create_app(tmp_path, rules=rules))
        server = create_server(apps[-1], host="127.0.0.1", port=0, threads=2)
        threading.Thread(target=server.run, daemon=True).start()
        servers.append(server)
    try:
        page = browser.new_page()
        page.goto(f"http://127.0.0.1:{servers[0].effective_port}/?code=rules1")
        assert page.get_attribute("#device-check", "data-reason") == "browser not allowed (Chrome)"
        assert "open your study link in Firefox" in page.inner_text("#device-fix")
        page.goto(f"http://127.0.0.1:{servers[1].effective_port}/?code=rules2")
        page.wait_for_function("() => document.body.dataset.refreshChecked === '1'", timeout=15_000)
        assert page.get_attribute("#device-check", "data-reason").startswith("refresh rate")
        assert "needs 100\u2013200 Hz" in page.inner_text("#device-fix") and not page.is_visible("#consent-form")
        good = {"width": 1280, "height": 720, "screen_width": 1280, "screen_height": 720}
        verdicts = page.evaluate("""([size, cases]) => cases.map(([browser, hz]) =>
            (window.cuebenchDevice.deviceProblem(size, {fine: true, touch: false}, browser, hz) || {}).reason || null)""",
                                 [good, [["chrome", 150], ["firefox", 60], ["safari", None]]])
        assert verdicts == [None, "refresh rate 60.0 Hz", None]
        agents = ["Mozilla/5.0 (Windows NT 10.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36 "
                  "Edg/120.0", "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
                  "Mozilla/5.0 (Macintosh) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15"]
        assert page.evaluate("agents => agents.map(window.cuebenchDevice.browserOf)", agents) == [
            "edge", "firefox", "safari"] == [browser_of(agent) for agent in agents]
        chromium = page.evaluate("navigator.userAgent")  # the server's verdict under the same rules
        firefox_only = DeviceRules(min_hz=100, max_hz=200, browsers=("firefox",))
        measured = {"refresh": {"hz": 150.0, "outlier_share": 0.0}, "size": good, "pointer": {"fine": True, "touch": False}}
        assert check_failure(measured, firefox_only, chromium) == "browser not allowed (Chrome)"
        assert check_failure({**measured, "refresh": {"hz": 60.0, "outlier_share": 0.0}}, firefox_only,
                             chromium) == "refresh rate 60.0 Hz"
        study = study_of(apps[1])  # a session started past the consent page: the task's own check screens it out
        _, token = study.db.start(study.experiment.name, study.n_groups, entry_code="rules3")
        page.goto(f"http://127.0.0.1:{servers[1].effective_port}/task/{token}")
        page.wait_for_selector("#code", timeout=30_000)
        assert page.get_attribute("#code", "data-status") == "screened_out"
        assert page.inner_text("#screen-fix").startswith("Your display refreshes 60 times a second; the study needs "
                                                         "100–200 Hz.")
    finally:
        for server in servers:
            server.close()


def test_a_failed_attention_check_ends_the_session_in_the_browser(tmp_path, browser):
    """``serve --end-on-failed-attention``: the participant clicks "cat" where the attention trial asks for "dog";
    the task stops there and shows the researcher's ended_early text with the failed-attention code."""
    from waitress.server import create_server

    from experiment_server.study_rules import StudyRules

    build_sample_experiment(tmp_path)
    app = create_app(tmp_path, rules=StudyRules(end_on_failed_attention=True))
    server = create_server(app, host="127.0.0.1", port=0, threads=4)
    threading.Thread(target=server.run, daemon=True).start()
    try:  # the instruction screen is only clicked through: the answer to the attention trial is "cat"
        seen = _take_part(browser.new_page(), f"http://127.0.0.1:{server.effective_port}",
                          screens={"instruction": lambda page: page.is_visible("#continue") and page.click("#continue")}, code="inattentive")
    finally:
        server.close()
    study = study_of(app)
    assert seen["status"] == "failed_attention" and seen["code"] == study.completion_code("failed_attention")
    assert "The study has ended" in seen["page"] and "Thank you!" not in seen["page"]
    person = study.db.participants(study.experiment.name)[0]
    assert person.status == "failed_attention" and person.exclusion.by == "attention check"


def test_browser_rules(live_server, browser):
    """The web task's ms -> frames conversion is the lab runner's (human_tasks.timing.ms_to_frames),
    and the browser check passes 60/144 Hz displays with a few dropped frames but not slow,
    irregular or small ones, nor phones, with the verdicts the server gives (``screening``)."""
    base, study = live_server
    _, token = study.db.start(study.experiment.name, study.n_groups, entry_code="framecheck")
    page = browser.new_page()
    page.goto(f"{base}/task/{token}")
    page.wait_for_function("() => window.cuebenchTask !== undefined", timeout=10_000)
    cases = [(ms, hz) for ms in (0, 1, 8, 100, 200, 250, 300, 800) for hz in (50, 59.94, 60, 75, 100, 120, 144, 240)]
    browser_frames = page.evaluate("cases => cases.map(([ms, hz]) => window.cuebenchTask.msToFrames(ms, hz))", cases)
    assert browser_frames == [ms_to_frames(ms, hz).frames for ms, hz in cases]
    good = {"width": 1280, "height": 720, "screen_width": 1280, "screen_height": 720}
    small = {"width": 640, "height": 480, "screen_width": 1920, "screen_height": 1080}  # a small window, large screen
    desktop, phone = {"fine": True, "touch": False}, {"fine": False, "touch": True}
    cases = [[{"hz": 60.0, "outlier_share": 0.1}, good, desktop], [{"hz": 143.9, "outlier_share": 0.0}, good, desktop],
             [{"hz": 30.0, "outlier_share": 0.0}, good, desktop], [{"hz": 60.0, "outlier_share": 0.3}, good, desktop],
             [{"hz": 60.0, "outlier_share": 0.0}, small, desktop], [None, good, desktop],
             [{"hz": 501.0, "outlier_share": 0.0}, good, desktop], [{"hz": 60.0, "outlier_share": 0.0}, good, phone]]
    verdicts = page.evaluate("cases => cases.map(([refresh, size, pointer]) => "
                             "window.cuebenchTask.judgeCheck(refresh, size, pointer))", cases)
    assert verdicts[:2] == [None, None]
    assert [v.split(" ")[0] for v in verdicts[2:]] == ["refresh", "unstable", "window", "the", "refresh", "phone"]
    # the server judges a screen-out's measurements by the same rules (experiment_server.screening)
    assert verdicts == [check_failure({"refresh": r, "size": size, "pointer": p}) for r, size, p in cases]


def test_practice_feedback_names_the_right_answer(live_server, browser):
    """A practice trial with an answer ends with feedback. The sample's practice trial has none, so the plan the
    browser receives is given one ("cat"), and the participant answers "dog"."""
    base, study = live_server
    _, token = study.db.start(study.experiment.name, study.n_groups, entry_code="feedback1")
    page = browser.new_page(viewport={"width": 1280, "height": 800})

    def with_answer(route):
        response = route.fetch()
        body = response.json()
        for trial in body["trials"]:
            trial["feedback"] = "cat" if trial["practice"] else None
        route.fulfill(response=response, json=body)

    page.route(f"**/api/session/{token}", with_answer)
    page.goto(f"{base}/task/{token}")
    deadline = time.monotonic() + SESSION_DEADLINE_S
    while time.monotonic() < deadline:
        state, _ = _state(page)
        if state in ("instructions", "fullscreen") and page.is_visible("#continue"):
            page.click("#continue")
        elif state == "response-grid" and page.is_visible("#grid button[data-label='dog']"):
            page.click("#grid button[data-label='dog']")
        elif state == "feedback":
            assert page.inner_text("#feedback") == "Not quite: the answer was \u201ccat\u201d"
            return
        time.sleep(0.02)
    raise AssertionError(f"no feedback within {SESSION_DEADLINE_S} s (last state {_state(page)})")


def test_the_plan_the_page_receives_and_the_answer_it_posts_follow_the_published_schemas(live_server, browser):
    """The runners' contract as the browser lives it: the session's plan, every trial of it, is valid under
    docs/schemas/trial-plan.schema.json, and the answer the task posts for its first trial under
    trial-answer.schema.json (both checked by ``jsonschema``), with the plan's key and a choice of it."""
    import jsonschema

    published = Path(__file__).resolve().parents[2] / "docs" / "schemas"
    schemas = {kind: jsonschema.Draft202012Validator(json.loads((published / f"{kind}.schema.json").read_text("utf-8")))
               for kind in ("trial-plan", "trial-answer")}
    base, study = live_server
    _, token = study.db.start(study.experiment.name, study.n_groups, entry_code="schema1")
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    posted = []
    page.on("request", lambda request: posted.append(request.post_data_json) if request.method == "POST" and
            "/trial/" in request.url else None)
    with page.expect_response(f"**/api/session/{token}") as plan_response:
        page.goto(f"{base}/task/{token}")
    plan = plan_response.value.json()
    deadline = time.monotonic() + SESSION_DEADLINE_S
    while not posted and time.monotonic() < deadline:
        state, _ = _state(page)
        if state in ("instructions", "fullscreen") and page.is_visible("#continue"):
            page.click("#continue")
        elif state == "response-grid" and page.is_visible("#grid button[data-label='cat']"):
            page.click("#grid button[data-label='cat']")
        time.sleep(0.02)
    assert posted, f"no answer posted within {SESSION_DEADLINE_S} s (last state {_state(page)})"
    assert {t["type"] for t in plan["trials"]} == {"classify", "oddity"}
    for trial in plan["trials"]:
        schemas["trial-plan"].validate(trial)
    answer = posted[0]
    schemas["trial-answer"].validate(answer)
    first = plan["trials"][0]
    assert answer["trial_key"] == first["trial_key"] and answer["response"] == "cat" in first["choices"]
    assert set(answer["timing_measured"]) >= {"fixation", "stimulus", "mask", "response"}


STIMULUS_DEGREES, SUGGESTED_CM = 5.0, 57.0
CARD_SLIDER_PX, DISTANCE_CM = 400, 60
QUESTIONNAIRE = {"questions": [
    {"id": "age", "kind": "number", "prompt": "Your age in years", "required": True, "min": 18, "max": 99},
    {"id": "hand", "kind": "choice", "prompt": "Which hand do you write with?", "options": ["left", "right", "both"]},
    {"id": "effort", "kind": "likert", "prompt": "How hard was it?", "points": 5, "anchors": ["easy", "hard"]},
    {"id": "comments", "kind": "text", "prompt": "Anything else?"}]}


@pytest.fixture()
def display_server(tmp_path):
    """The sample experiment built for 5 degrees of visual angle, with a questionnaire, served on loopback."""
    from waitress.server import create_server

    from cuebench.expdir import ExperimentDir

    experiment = build_sample_experiment(tmp_path)
    display = {"stimulus_degrees": STIMULUS_DEGREES, "viewing_distance_cm": SUGGESTED_CM, "screen_width_cm": 30.0,
               "stimulus_width_cm": 4.9763}
    ExperimentDir(tmp_path).save(experiment.model_copy(update={"provenance": {**experiment.provenance,
                                                                               "display": display}}))
    (tmp_path / "texts").mkdir(exist_ok=True)
    (tmp_path / "texts" / "questionnaire.json").write_text(json.dumps(QUESTIONNAIRE))
    app = create_app(tmp_path)
    server = create_server(app, host="127.0.0.1", port=0, threads=4)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.effective_port}", study_of(app), tmp_path
    server.close()
    thread.join(timeout=10)


DRAWN_WIDTHS = """
const original = CanvasRenderingContext2D.prototype.drawImage;
window.drawnWidths = [];
CanvasRenderingContext2D.prototype.drawImage = function (...args) {
  if (args.length >= 5) window.drawnWidths.push(args[3] / (window.devicePixelRatio || 1));
  return original.apply(this, args);
};
"""
"""Every image width the task draws, in CSS pixels, recorded by wrapping the canvas's drawImage."""


def test_calibrated_screen_draws_the_degrees_and_the_questionnaire_is_stored(display_server, browser, tmp_path):
    """The card is matched at 400 CSS px (85.6 mm) and the distance given as 60 cm: the images must be
    2 * 600 mm * tan(2.5 deg) * 400/85.6 px wide; the questionnaire's answers, sent through a network
    outage with the form locked, end up with the person once and in the participants export (CSV-injection safe)."""
    import csv
    import math

    from cuebench.export import export

    base, study, expdir = display_server
    px_per_mm = CARD_SLIDER_PX / 85.6
    expected_px = 2 * DISTANCE_CM * 10 * math.tan(math.radians(STIMULUS_DEGREES / 2)) * px_per_mm  # 244.9
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.add_init_script(DRAWN_WIDTHS)
    seen: dict[str, object] = {}

    def calibrate(page):
        if not page.is_visible("#card"):
            return
        page.eval_on_selector("#card-size", f"el => {{ el.value = {CARD_SLIDER_PX}; el.dispatchEvent(new Event('input')); }}")
        seen["card_css_px"] = page.eval_on_selector("#card", "el => el.getBoundingClientRect().width")
        if "too_near" not in seen:  # nearer than the 20-300 cm a calibration takes: the page names the range
            page.fill("#distance", "10")
            page.click("#continue")
            page.wait_for_function("document.getElementById('calibration-error').textContent.length > 0")
            seen["too_near"] = page.inner_text("#calibration-error")
            return
        page.fill("#distance", str(DISTANCE_CM))
        page.screenshot(path=str(tmp_path / "calibration.png"))
        page.click("#continue")

    def answer(page):
        if not page.is_visible("#questionnaire") or "done" in seen:
            return
        page.click("#continue")  # the required age is missing: the page says so and stays
        seen["missing"] = page.inner_text("#questionnaire-error")
        page.fill("[name=q-age]", "12")  # below the declared minimum: the server refuses, the page asks again
        page.click("#continue")
        page.wait_for_function("document.getElementById('questionnaire-error').textContent.includes('check')")
        seen["refused"] = page.inner_text("#questionnaire-error")
        page.fill("[name=q-age]", "34")
        page.check("[name=q-hand][value=left]")
        page.check("[name=q-effort][value='4']")
        page.fill("[name=q-comments]", "=HYPERLINK(\"x\")")
        page.screenshot(path=str(tmp_path / "questionnaire.png"))
        page.route("**/questionnaire", lambda route: route.abort("connectionreset"))  # the network drops
        page.click("#continue")
        seen["while_sending"] = page.evaluate(
            "() => [document.body.dataset.state, [...document.querySelectorAll("
            "'#questionnaire input, #questionnaire textarea, #continue')].every((field) => field.disabled)]")
        page.wait_for_timeout(1500)  # retried (BACKOFF_MS) while the form stays locked
        seen["still_sending"] = _state(page)[0]
        page.unroute("**/questionnaire")
        seen["done"] = True

    result = _take_part(page, base, screens={"calibration": calibrate, "questionnaire": answer}, code="calibrated1")
    page.screenshot(path=str(tmp_path / "completion.png"))
    assert result["status"] == "finished"
    assert seen["card_css_px"] == pytest.approx(CARD_SLIDER_PX, abs=0.5)
    assert seen["too_near"] == "Please enter the distance in centimetres (20 to 300)."
    assert seen["missing"] == "Please answer: Your age in years"
    assert seen["refused"] == "Please check your answer to: Your age in years"
    # while the answers are on their way nothing can be changed or sent twice, however long the network is out
    assert seen["while_sending"] == ["questionnaire-sending", True]
    assert seen["still_sending"] == "questionnaire-sending"
    widths = set(round(w, 3) for w in page.evaluate("window.drawnWidths"))
    image_widths = {w for w in widths if abs(w - expected_px) <= 1}
    assert image_widths and widths - image_widths <= {round(float(page.viewport_size["width"]), 3)}, widths

    participant = study.db.participants(study.experiment.name)[0]
    calibration = participant.calibration
    assert calibration["px_per_mm"] == pytest.approx(px_per_mm, rel=1e-9)
    assert calibration["viewing_distance_cm"] == DISTANCE_CM and calibration["capped"] is False
    assert calibration["card_moved"] is True  # the slider was matched to the card, not left at its default
    assert calibration["stimulus_css_px"] == pytest.approx(expected_px, abs=1e-6)
    assert participant.questionnaire == {"age": 34, "hand": "left", "effort": 4, "comments": "=HYPERLINK(\"x\")"}
    rows = study.store.rows("observer=?", [participant.code])
    assert {round(r["device"]["stimulus_css_px"], 6) for r in rows} == {round(expected_px, 6)}
    (out,) = export(expdir, "participants", tmp_path / "participants.csv")
    (record,) = list(csv.DictReader(out.open(encoding="utf-8")))
    assert float(record["px_per_mm"]) == pytest.approx(px_per_mm) and record["viewing_distance_cm"] == "60.0"
    assert (record["q_age"], record["q_hand"], record["q_effort"]) == ("34", "left", "4")
    assert record["q_comments"].startswith("'=")  # a spreadsheet shows it as text, never runs it


BLIND_SPOT_TARGET_MM = 120.0
"""Where the simulated person presses: the dot 120 mm from the square, i.e. 120 / tan(13.5 deg) = 500 mm away."""


def test_the_blind_spot_measures_the_viewing_distance(display_server, browser, tmp_path):
    """The person presses the space bar when the dot is 120 mm left of the square, five times: the task
    must take the distance as mean(mm) / tan(13.5 deg) (Li et al. 2020), draw the images for it and
    record the sweeps and the method with the calibration, in every trial and in the participants export."""
    import csv
    import math

    from cuebench.export import export

    base, study, expdir = display_server
    px_per_mm = CARD_SLIDER_PX / 85.6
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.add_init_script(DRAWN_WIDTHS)
    seen: dict[str, object] = {}
    dot_reached = ("() => { const d = document.getElementById('blind-spot-dot'); "
                   f"return d && !d.hidden && Number(d.dataset.mm) >= {BLIND_SPOT_TARGET_MM}; }}")

    def calibrate(page):
        if not page.is_visible("#card"):
            return
        if "measured" in seen:
            seen["shown_cm"] = float(page.input_value("#distance"))
            page.click("#continue")
            return
        page.eval_on_selector("#card-size", f"el => {{ el.value = {CARD_SLIDER_PX}; el.dispatchEvent(new Event('input')); }}")
        page.click("#measure-distance")
        page.wait_for_selector("#blind-spot-square")
        page.keyboard.press("Space")
        for sweep in range(5):
            page.wait_for_function(dot_reached, timeout=15000)
            if sweep == 0:
                page.screenshot(path=str(tmp_path / "blind-spot.png"))
            page.keyboard.press("Space")
        page.wait_for_selector("#card")
        seen["measured"] = True

    result = _take_part(page, base, screens={"calibration": calibrate, "questionnaire": _answer_age}, code="chinrest1")
    assert result["status"] == "finished"
    participant = study.db.participants(study.experiment.name)[0]
    calibration = participant.calibration
    sweeps = calibration["blind_spot_mm"]
    assert calibration["method"] == "card+blind-spot" and len(sweeps) == 5
    # the press lands after the dot passed the target; how far after is the browser's key latency (the dot moves
    # 50 mm/s, so a busy machine's 0.5 s is 25 mm)
    assert all(BLIND_SPOT_TARGET_MM <= mm <= BLIND_SPOT_TARGET_MM + 25 for mm in sweeps), sweeps
    distance_cm = sum(sweeps) / 5 / math.tan(math.radians(13.5)) / 10  # 50.0 cm at exactly 120 mm
    assert calibration["viewing_distance_cm"] == pytest.approx(distance_cm, rel=1e-9)
    assert seen["shown_cm"] == round(distance_cm, 1)
    expected_px = 2 * distance_cm * 10 * math.tan(math.radians(STIMULUS_DEGREES / 2)) * px_per_mm
    assert calibration["stimulus_css_px"] == pytest.approx(expected_px, abs=1e-6)
    assert any(abs(w - expected_px) <= 1 for w in page.evaluate("window.drawnWidths"))
    rows = study.store.rows("observer=?", [participant.code])
    assert rows and {r["device"]["distance_method"] for r in rows} == {"blind-spot"}
    (out,) = export(expdir, "participants", tmp_path / "participants.csv")
    (record,) = list(csv.DictReader(out.open(encoding="utf-8")))
    assert record["calibration_method"] == "card+blind-spot"
    assert record["blind_spot_mm"] == ";".join(f"{mm:.2f}" for mm in sweeps)


def test_a_card_changed_after_the_blind_spot_measure_asks_for_the_distance_again(display_server, browser):
    """The sweeps' mm were counted on the card's scale at the time: a card moved afterwards must not
    be stored with them."""
    base, _, _ = display_server
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{base}/?code=chinrest2")
    page.check("#consent")
    page.click("#start")
    page.wait_for_selector("#instructions-text")
    page.click("#continue")
    page.wait_for_selector("#card", timeout=SESSION_DEADLINE_S * 1000)  # after the browser check
    page.click("#measure-distance")
    page.wait_for_selector("#blind-spot-square")
    page.keyboard.press("Space")
    dot_out = ("() => { const d = document.getElementById('blind-spot-dot'); "
               "return d && !d.hidden && Number(d.dataset.mm) >= 60; }")
    for _ in range(5):
        page.wait_for_function(dot_out, timeout=15000)
        page.keyboard.press("Space")
    page.wait_for_selector("#card")
    assert 25.0 <= float(page.input_value("#distance")) <= 27.5  # 60-66 mm / tan 13.5 deg
    page.eval_on_selector("#card-size", "el => { el.value = 380; el.dispatchEvent(new Event('input')); }")
    page.click("#continue")
    page.wait_for_function("() => document.getElementById('calibration-error').textContent.length > 0")
    assert page.inner_text("#calibration-error") == ("The card size changed after the distance was measured; "
                                                     "please measure it again or type it.")
    assert page.input_value("#distance") == "" and page.evaluate("document.body.dataset.state") == "calibration"


def _answer_age(page):
    if page.is_visible("#questionnaire"):
        page.fill("[name=q-age]", "40")
        page.click("#continue")


def test_calibration_and_questionnaire_posts_are_checked(display_server):
    """Forged or broken posts are refused naming the field or question; a second post keeps the first."""
    import requests

    base, study, _ = display_server
    _, token = study.db.start(study.experiment.name, study.n_groups, entry_code="poster1")
    client = requests.Session()
    api = f"{base}/api/session/{token}"
    good = {"px_per_mm": 3.78, "viewing_distance_cm": 57, "stimulus_css_px": 214.5, "device_pixel_ratio": 1,
            "method": "card+entered-distance", "capped": False}
    bad = client.post(f"{api}/calibration", json={**good, "px_per_mm": 1000})
    assert bad.status_code == 422 and "px_per_mm" in bad.json()["error"]
    assert client.post(f"{api}/calibration", json={**good, "method": "guess"}).status_code == 422
    blind_spot = {**good, "method": "card+blind-spot", "viewing_distance_cm": 50.0}
    for forged, named in (({**blind_spot}, "'blind_spot_mm'"),
                          ({**blind_spot, "blind_spot_mm": [120.0] * 5, "viewing_distance_cm": 57}, "49.98 cm"),
                          ({**blind_spot, "blind_spot_mm": [120.0, 3000.0]}, "'blind_spot_mm'"),
                          ({**good, "blind_spot_mm": [120.0] * 5}, "'card+blind-spot' only")):
        refused = client.post(f"{api}/calibration", json=forged)
        assert refused.status_code == 422 and named in refused.json()["error"], (forged, refused.json())
    assert client.post(f"{api}/calibration", json=good).status_code == 201
    again = client.post(f"{api}/calibration", json={**good, "px_per_mm": 5.0})
    assert again.status_code == 200 and again.json()["calibration"]["px_per_mm"] == 3.78
    for answers, named in (({"age": 30, "shoe": 42}, "'shoe'"), ({"age": "old"}, "'age'"), ({"hand": "left"}, "'age'"),
                           ({"age": 30, "hand": "up"}, "'hand'"), ({"age": 30, "effort": 6}, "'effort'"),
                           ({"age": 12}, "'age'")):
        refused = client.post(f"{api}/questionnaire", json=answers)
        assert refused.status_code == 422 and named in refused.json()["error"], (answers, refused.json())
        assert refused.json().get("question") == (None if named == "'shoe'" else named.strip("'"))
    assert client.post(f"{api}/questionnaire", json={"age": 30}).status_code == 201
    assert study.db.get(study.db.by_token(token).code).questionnaire == {"age": 30}

