"""Places a study gives out, and what the server itself checks before it rewards a session.

Against a real ``cuebench serve`` (waitress on SQLite, ``--workers 2`` on PostgreSQL: the places are
counted in the database, across processes): one address starting made-up Prolific sessions holds at most
``--unanswered-per-address`` places, and only for ``--hold-minutes`` until a first answer, so real
participants still get in; pilots hold none; the admin page shows the sessions not begun apart; the
browser and touch rules are checked against the user agent at the start and on every answer; refused
starts cost the address nothing. In-process (``create_app`` with an injected clock) where time must pass:
a session returning after its reservation lapsed (the target is never overshot), a bot that waits out the
session and posts every answer at once, required questions, one completion code per Prolific ID. And what
the consent page and a start cost: no statement of theirs scans a table that grows with the study, on
SQLite and PostgreSQL, and their number of statements does not grow with it (the timing is
``benchmarks/bench_study_size.py``).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import time
from urllib.parse import urlencode

import pytest

from experiment_server.app import create_app
from experiment_server.cli import print_codes
from experiment_server.simulate import NONCE, ServerProcess, fill_consent, free_port, measured_display, trial_answer
from experiment_server.study import study_of
from experiment_server.study_rules import StudyRules
from stimuli.web_sample import build_sample_experiment
from cuebench import exclusions
from cuebench.responses import trial_row
from cuebench.storage import Database
from experiment_server.db import ServerDB
from support import ADMIN_PASSWORD, Clock
from test_security import Browser, fresh_postgres_database

FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
CHROME = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36"
IPHONE = ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
          "FxiOS/127.0 Mobile/15E148 Safari/605.1.15")
"""Firefox on an iPhone: the allowed browser family, on a phone."""
TARGET = 5
HOLD_S = 6
START_LIMIT = 12


class Client(Browser):
    """A participant's browser with its own address (``test_security.Browser``) and a user agent (Firefox)."""

    def __init__(self, port: int, address: str, agent: str = FIREFOX):
        super().__init__(port, address)
        self.agent = agent

    def request(self, method: str, path: str, body: bytes | str | None = None, content_type: str | None = None,
                headers: dict | None = None) -> tuple[int, dict, bytes]:
        return super().request(method, path, body, content_type, {"User-Agent": self.agent, **(headers or {})})

    def get(self, path: str) -> tuple[int, bytes]:
        status, _, data = self.request("GET", path)
        return status, data

    def start_token(self, **entry) -> str:
        status, token = self.start(**entry)
        assert status == 303, (status, token[:300])
        return token

    def post(self, path: str, payload: dict, agent: str | None = None) -> tuple[int, dict]:
        status, _, body = self.request("POST", path, json.dumps(payload), "application/json",
                                       {"User-Agent": agent} if agent else None)
        return status, json.loads(body or b"{}")

    def take_part(self, token: str) -> dict:
        """Every trial, then the completion; the outcome."""
        _, body = self.get(f"/api/session/{token}")
        for trial in json.loads(body)["trials"]:
            status, _ = self.post(f"/api/session/{token}/trial/{trial['index']}", trial_answer(trial))
            assert status == 201, status
        status, outcome = self.post(f"/api/session/{token}/complete", {})
        assert status == 200, outcome
        return outcome


def prolific(name: str) -> dict:
    return {"PROLIFIC_PID": f"{name:x>24}", "STUDY_ID": "study1", "SESSION_ID": f"s-{name}"}


class Served:
    def __init__(self, expdir, server: ServerProcess, database: str | None):
        self.expdir, self.server, self.database = expdir, server, database
        self._addresses = iter(range(1, 250))

    def client(self, agent: str = FIREFOX) -> Client:
        return Client(self.server.port, f"198.51.100.{next(self._addresses)}", agent)


@pytest.fixture(scope="module", params=[
    pytest.param(("waitress", "sqlite"), id="waitress-sqlite", marks=pytest.mark.slow),
    pytest.param(("workers2", "postgresql"), id="workers2-postgresql", marks=pytest.mark.slow)])
def served(request, tmp_path_factory):
    """``cuebench serve --target-n 5 --hold-minutes 0.05 --browsers firefox`` behind one trusted proxy, with
    the default cap of never-answered sessions per address, and an admin password."""
    from experiment_server.admin import set_admin_password
    from experiment_server.study import open_study
    kind, backend = request.param
    expdir = tmp_path_factory.mktemp(f"places-{kind}") / "exp"
    build_sample_experiment(expdir)
    fill_consent(expdir)
    database = fresh_postgres_database(request.getfixturevalue("postgres_server")) if backend == "postgresql" else None
    set_admin_password(open_study(expdir, database=database), ADMIN_PASSWORD)
    server = ServerProcess(expdir, free_port(), workers=2 if kind == "workers2" else 1, threads=4,
                           start_limit=START_LIMIT, unanswered_per_address=3,
                           log_file=expdir.parent / "server.log",
                           extra_args=("--trusted-proxies", "1", "--target-n", str(TARGET), "--hold-minutes",
                                       str(HOLD_S / 60), "--browsers", "firefox",
                                       *(("--database", database) if database else ())))
    server.start()
    yield Served(expdir, server, database)
    server.stop()


def admin_groups(served: Served) -> dict[str, int]:
    """The admin page's progress table, summed over the groups: column -> count."""
    admin = served.client()
    assert admin.login(ADMIN_PASSWORD) == 302
    _, page = admin.get("/admin/")
    table = page.decode().split('<table id="groups">', 1)[1].split("</table>", 1)[0]
    header, *rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    names = [html.unescape(c) for c in re.findall(r"<th>(.*?)</th>", header)]
    sums = dict.fromkeys(names, 0)
    for row in rows:
        for name, cell in zip(names, re.findall(r"<td>(.*?)</td>", row)):
            sums[name] += int(cell)
    return sums


def _pilot_code(served: Served) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_codes(served.expdir, 1, pilot=True, database=served.database)
    return out.getvalue()


def test_the_browser_and_touch_rules_are_checked_against_the_user_agent(served):
    """``--browsers firefox`` without ``--allow-touch``: a Chrome user agent and Firefox on an iPhone are
    refused at the start (403, the participant's words) and nothing is started; a session started in
    Firefox that posts an answer as Chrome gets 403 and nothing is stored."""
    for agent, words in ((CHROME, "Please open your study link in Firefox"), (IPHONE, "not run on phones")):
        status, page = served.client(agent).start(code=f"ua{len(words)}")
        assert status == 403 and words in page
    person = served.client()
    token = person.start_token(code="firefox-user")
    _, body = person.get(f"/api/session/{token}")
    trial = json.loads(body)["trials"][0]
    status, refused = person.post(f"/api/session/{token}/trial/{trial['index']}", trial_answer(trial), agent=CHROME)
    assert status == 403 and "browser not allowed (Chrome)" in refused["error"]
    _, body = person.get(f"/api/session/{token}")
    assert json.loads(body)["answered"] == []
    screen_out(person, token)


def screen_out(person: Client, token: str) -> None:
    """End a session by a failed browser check, so that it holds no place for the tests after it."""
    status, outcome = person.post(f"/api/session/{token}/screen", {"reason": "window too small",
                                                                   **measured_display(width=640, height=480)})
    assert status == 200 and outcome["status"] == "screened_out"


def test_a_refused_start_costs_the_address_nothing(served):
    """Starts refused before their nonce and consent are checked (another site's form with no browser
    cookie, a wrong nonce, consent not ticked) do not count against the address's --start-limit: after
    more of them than the limit, the address still starts a session."""
    person = served.client()
    _, page = person.get("/?code=refused")
    nonce = NONCE.search(page.decode()).group(1)
    form = "application/x-www-form-urlencoded"
    statuses = [served.client().request("POST", "/start", urlencode({"consent": "yes", "start_nonce": nonce}),
                                        form)[0] for _ in range(4)]  # another site's form: no cookie
    statuses += [person.request("POST", "/start", urlencode({"consent": "yes", "start_nonce": "x" * 32}), form)[0]
                 for _ in range(4)]
    statuses += [person.request("POST", "/start", urlencode({"start_nonce": nonce}), form)[0]
                 for _ in range(START_LIMIT)]
    assert statuses == [400] * (8 + START_LIMIT)
    status, token = person.start(code="refused")
    assert status == 303
    screen_out(person, token)


def test_one_address_cannot_hold_the_places_and_real_participants_get_in(served):
    """The capture attack: one address starts made-up Prolific sessions as fast as it can. It holds three
    places (the cap of sessions not begun), the rest are refused; real participants take the other places;
    the attacker's holds lapse within --hold-minutes and real participants take those too, until the
    target: then latecomers see the closed page. A pilot gets in throughout and holds no place; the admin
    page shows the sessions not begun apart from those running, and no pilot among the live reservations.
    (Last of the served tests: it closes the study; the others screen out the sessions they start.)"""
    code = re.search(r"pilot-\S+", _pilot_code(served)).group(0)
    pilot = served.client()
    pilot_token = pilot.start_token(code=code)
    attacker = served.client()
    tried = [attacker.start(**prolific(f"fake{k}"))[0] for k in range(START_LIMIT)]
    held_from = time.monotonic()
    assert tried.count(303) == 3 and tried.count(429) == START_LIMIT - 3
    people = [served.client() for _ in range(TARGET)]
    tokens = [p.start_token(**prolific(f"real{k}")) for k, p in enumerate(people[:2])]
    status, page = people[2].start(**prolific("real2"))
    assert status == 200 and "full for now" in page  # 3 held by the attacker, 2 by real participants
    groups = admin_groups(served)
    assert (groups["not begun"], groups["live reservations"], groups["pilot"]) == (5, 5, 1)
    assert [p.take_part(t)["status"] for p, t in zip(people, tokens)] == ["finished"] * 2
    time.sleep(max(0.0, HOLD_S + 0.5 - (time.monotonic() - held_from)))  # the attacker's holds lapse: nobody began
    assert [p.take_part(p.start_token(**prolific(f"real{k}")))["status"]
            for k, p in enumerate(people[2:], start=2)] == ["finished"] * 3
    latecomer = served.client().get(f"/?{urlencode(prolific('late'))}")[1].decode()
    assert 'id="closed"' in latecomer and 'name="start_nonce"' not in latecomer
    assert pilot.take_part(pilot_token)["status"] == "finished"  # a pilot still goes on and finishes
    groups = admin_groups(served)
    assert (groups["finished"], groups["pilot"], groups["not begun"], groups["expired"]) == (TARGET, 1, 0, 3)


# ------------------------------------------------------------------ in-process, where time must pass


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("places-template")
    build_sample_experiment(root)
    return root


@pytest.fixture()
def make_app(template, tmp_path):
    """An app on a fresh copy of the sample experiment (60 s reservations, 10 s holds, injected clock)."""

    def make(rules: StudyRules = StudyRules(), database: str | None = None):
        root = tmp_path / "exp"
        if not root.exists():
            shutil.copytree(template, root)
        clock = Clock()
        rules = StudyRules(**{**rules.__dict__, "hold_min": 10 / 60, "unanswered_per_address": 100})
        return create_app(root, clock=clock, reservation_seconds=60, rules=rules, database=database), clock

    return make


def begin(client, **entry) -> str:
    """Consent and start; the token."""
    page = client.get("/?" + urlencode(entry)).get_data(as_text=True)
    reply = client.post("/start", data={"consent": "yes", "start_nonce": NONCE.search(page).group(1), **entry})
    assert reply.status_code == 303, reply.get_data(as_text=True)[:300]
    return reply.headers["Location"].rsplit("/", 1)[1]


def answer_all(client, clock: Clock, token: str, gap_s: float = 2.0) -> list[int]:
    """Post every trial ``gap_s`` apart on the server's clock; the statuses."""
    statuses = []
    for trial in client.get(f"/api/session/{token}").get_json()["trials"]:
        clock.now += gap_s
        statuses.append(client.post(f"/api/session/{token}/trial/{trial['index']}", json=trial_answer(trial)).status_code)
    return statuses


def complete(client, token: str):
    return client.post(f"/api/session/{token}/complete", json={})


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_sessions_back_after_their_place_lapsed_never_overshoot_the_target(make_app, backend, request):
    """Target 2. Four people start in turn, each after the one before lapsed (a, b abandon after one answer;
    c, d take their places). a and b come back while c and d hold the places: their next answer is refused
    with the "full" page, and so is their completion; c and d finish. Exactly two finished, never more.
    Once a place frees (c gives up), a returning session takes it and may finish."""
    database = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    app, clock = make_app(StudyRules(target_n=2), database)
    clients = {who: app.test_client() for who in "abcde"}
    tokens, trials = {}, {}
    for who in "abcd":
        tokens[who] = begin(clients[who], code=f"lapse-{who}")
        trials[who] = clients[who].get(f"/api/session/{tokens[who]}").get_json()["trials"]
        assert clients[who].post(f"/api/session/{tokens[who]}/trial/0", json=trial_answer(trials[who][0])).status_code \
            == 201
        if who in "ab":
            clock.now += 61  # abandoned: the reservation lapses
    for who in "ab":
        refused = clients[who].post(f"/api/session/{tokens[who]}/trial/1", json=trial_answer(trials[who][1]))
        assert refused.status_code == 409 and "every place" in refused.get_json()["error"]
        assert "every place has been taken" in refused.get_json()["outcome"]["message"]
        assert complete(clients[who], tokens[who]).status_code in (409,)
    assert all(s in (200, 201) for who in "cd" for s in answer_all(clients[who], clock, tokens[who], 1))
    assert [complete(clients[who], tokens[who]).get_json()["status"] for who in "cd"] == ["finished"] * 2
    study = study_of(app)
    finished = [p for p in study.db.participants(study.experiment.name) if p.status == "finished"]
    assert len(finished) == 2 and study.closed(app.config["CUEBENCH_RULES"])
    # an excluded finisher frees a place: a returning session takes it and finishes
    study.db.set_excluded(finished[0].code, True, "saw the stimuli before", "admin")
    assert all(s in (200, 201) for s in answer_all(clients["a"], clock, tokens["a"], 1))
    assert complete(clients["a"], tokens["a"]).get_json()["status"] == "finished"
    refused = clients["b"].post(f"/api/session/{tokens['b']}/trial/1", json=trial_answer(trials["b"][1]))
    assert refused.status_code == 409
    counting = [p for p in study.db.participants(study.experiment.name) if p.status == "finished" and not p.excluded]
    assert len(counting) == 2


def test_a_never_answered_session_holds_its_place_only_briefly(make_app):
    """Target 1: a session that never answers holds the only place for its 10 s hold, not the 60 s reservation;
    one that answered holds it for the reservation."""
    app, clock = make_app(StudyRules(target_n=1))
    idle, person, later = app.test_client(), app.test_client(), app.test_client()
    begin(idle, code="idle")
    assert "full for now" in later.post("/start", data={"consent": "yes", "start_nonce": NONCE.search(
        later.get("/?code=later").get_data(as_text=True)).group(1), "code": "later"}).get_data(as_text=True)
    clock.now += 11
    token = begin(person, code="person")
    trial = person.get(f"/api/session/{token}").get_json()["trials"][0]
    assert person.post(f"/api/session/{token}/trial/0", json=trial_answer(trial)).status_code == 201
    clock.now += 50  # beyond any hold, within the reservation
    page = later.post("/start", data={"consent": "yes", "start_nonce": NONCE.search(
        later.get("/?code=later").get_data(as_text=True)).group(1), "code": "later"}).get_data(as_text=True)
    assert "full for now" in page


def test_a_bot_that_waits_out_the_session_and_posts_at_once_is_flagged(make_app):
    """A script waits longer than the whole session takes and then posts every answer in the same instant of
    the server's clock: the total time passes, the spacing of the stored answers does not; the session gets its
    code, and the Prolific list says "review". A person answering 2 s apart is approved."""
    from experiment_server.exports import prolific_action

    app, clock = make_app()
    bot, person = app.test_client(), app.test_client()
    bot_token = begin(bot, **prolific("bot"))
    clock.now += 600  # longer than the 7 trials take (8.2 s)
    assert set(answer_all(bot, clock, bot_token, gap_s=0)) == {201}
    assert complete(bot, bot_token).get_json()["status"] == "finished"
    person_token = begin(person, **prolific("person"))
    assert set(answer_all(person, clock, person_token, gap_s=2)) == {201}
    assert complete(person, person_token).get_json()["status"] == "finished"
    db = study_of(app).db
    flagged, approved = db.by_token(bot_token), db.by_token(person_token)
    assert "100% of answers reached the server sooner after the one before" in flagged.review_reason
    assert "less than its" not in flagged.review_reason  # the total alone would have passed it
    assert prolific_action(flagged, clock.now)[0] == "review" and prolific_action(approved, clock.now) == \
        ("approve", "finished")


@pytest.mark.validates("bunched-answer share of a session (review flag)", definition="share of answers after the first "
                       "stored (server clock) sooner after the previous answer than their trial's fixation + image + "
                       "mask + reported RT; review when > 0.25", source="cuebench rule (docs/web.md, Scripted "
                       "sessions)", reference="hand count over made-up stamps", tolerance="exact")
def test_bunched_answers_are_counted_from_the_server_stamps():
    """Hand count: trials needing 1.0 s each (rt 500 ms after 500 ms shown); stamps 0, 2, 2.5, 2.6, 5 s:
    gaps 2 (ok), 0.5 (short), 0.1 (short), 2.4 (ok): 2 of 4 short."""
    from types import SimpleNamespace

    from experiment_server.plausibility import MAX_BUNCHED_SHARE, bunched_share, server_time

    timing = SimpleNamespace(fixation=300, stimulus=200, mask=None, response_from_onset=False, response_window=None)
    experiment = SimpleNamespace(trial=lambda _: SimpleNamespace(timing=timing))
    rows = [{"trial_id": "t", "rt_ms": 500.0, "created_at": server_time(1000.0 + t)} for t in (0, 2, 2.5, 2.6, 5)]
    assert bunched_share(experiment, rows) == 0.5 > MAX_BUNCHED_SHARE
    assert bunched_share(experiment, rows[:2]) == 0.0 and bunched_share(experiment, rows[:1]) == 0.0


QUESTIONS = [{"id": "age", "kind": "number", "prompt": "Age", "required": True, "min": 18, "max": 99},
             {"id": "notes", "kind": "text", "prompt": "Anything else?"}]


def test_required_questions_come_before_the_completion_code(make_app):
    app, clock = make_app()
    (study_of(app).expdir.root / "texts" / "questionnaire.json").write_text(json.dumps({"questions": QUESTIONS}))
    client = app.test_client()
    token = begin(client, code="asked")
    answer_all(client, clock, token)
    early = complete(client, token)
    assert early.status_code == 409 and early.get_json()["questionnaire"] is True and "code" not in early.get_json()
    assert client.post(f"/api/session/{token}/questionnaire", json={"age": 30}).status_code == 201
    done = complete(client, token).get_json()
    assert done["status"] == "finished" and done["code"] == study_of(app).completion_code("finished")


@pytest.mark.parametrize("repeat", [False, True])
def test_one_completion_code_per_prolific_id(make_app, repeat):
    """A Prolific ID whose session ended at the time limit comes back with a new SESSION_ID: it may take
    part (a start is never refused for the ID its link names), but gets no completion code, unless the
    researcher allows repeats (--allow-repeat-completions)."""
    app, clock = make_app(StudyRules(time_limit_min=1, repeat_completions=repeat))
    first, second = app.test_client(), app.test_client()
    entry = prolific("again")
    token = begin(first, **entry)
    clock.now += 61
    assert first.get(f"/api/session/{token}").get_json()["status"] == "expired"
    token = begin(second, **{**entry, "SESSION_ID": "s-again-2"})
    answer_all(second, clock, token, gap_s=1)
    reply = complete(second, token)
    if repeat:
        assert reply.status_code == 200 and reply.get_json()["code"]
        return
    assert reply.status_code == 409 and reply.get_json()["outcome"]["code"] is None
    assert "already received a completion code" in reply.get_json()["outcome"]["message"]
    assert study_of(app).db.by_token(token).status == "in_progress"


# ------------------------------------------------------------------ costs independent of the study's size

GROWING_TABLES = ("participants", "responses", "exclusions", "rate_limit_events", "questionnaire_answers")


def statements_of(app, requests) -> list[tuple[str, list]]:
    """Every statement the server's connections run while ``requests()`` runs (``Database.execute``)."""
    seen: list[tuple[str, list]] = []
    original = Database.execute

    def execute(self, sql, params=()):
        seen.append((sql, list(params)))
        return original(self, sql, params)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Database, "execute", execute)
        requests()
    return seen


def full_scans(db: Database, statements) -> list[str]:
    """The statements whose plan reads the whole of a table that grows with the study: SQLite's ``SCAN`` of it
    (of the table or of an index, where a ``SEARCH`` reads only the rows its index condition names). On
    PostgreSQL, with sequential scans priced out so that an index is taken wherever one serves, a sequential
    scan of it: no index serves the statement. (Its planner may read a whole index for a condition on a later
    column and still call it an index condition, so the exact test is SQLite's, on the same indexes.)"""
    found = []
    if db.dialect == "postgresql":
        db.execute("SET enable_seqscan = off")
    for sql, params in statements:
        if not sql.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE")):
            continue
        if db.dialect == "sqlite":
            plan = " | ".join(row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall())
            whole = [t for t in re.findall(r"\bSCAN (\w+)", plan) if t in GROWING_TABLES]
        else:
            plan = db.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()[0]
            whole = [node["Relation Name"] for node in _plan_nodes(plan[0]["Plan"])
                     if node.get("Relation Name") in GROWING_TABLES and node["Node Type"] == "Seq Scan"]
        if whole:
            found.append(f"{sql} -> {plan}")
    if db.dialect == "postgresql":
        db.execute("RESET enable_seqscan")
    return found


def _plan_nodes(node: dict):
    """A PostgreSQL plan's nodes (``EXPLAIN (FORMAT JSON)``), depth first."""
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


def test_the_plan_check_finds_a_whole_table_read(make_app, request):
    """The check above is not blind: a count by status alone reads all of participants on SQLite (an index
    whose first column is another), and a count by a column no index has on PostgreSQL."""
    app, _ = make_app()
    assert full_scans(study_of(app).db.db, [("SELECT COUNT(*) FROM participants WHERE status=?", ["x"])])
    app, _ = make_app(database=request.getfixturevalue("postgres_url"))
    assert full_scans(study_of(app).db.db, [("SELECT COUNT(*) FROM participants WHERE screen_reason=?", ["x"])])


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_consent_page_and_a_start_do_not_grow_with_the_study(make_app, backend, request):
    """Under a recruitment target, the consent page, a start, an answer and a completion run no statement
    that reads a whole table growing with the study (the query plans, on SQLite and PostgreSQL), and the
    consent page and a start run as many statements with 300 sessions (finished, excluded, abandoned) as
    with 3."""
    database = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    app, clock = make_app(StudyRules(target_n=10_000), database)
    study = study_of(app)

    def consent_and_start(code: str):
        def run():
            assert app.test_client().get("/").status_code == 200
            client = app.test_client()
            token = begin(client, code=code)
            trial = client.get(f"/api/session/{token}").get_json()["trials"][0]
            client.post(f"/api/session/{token}/trial/0", json=trial_answer(trial))
        return run

    def grow(n: int):
        """``n`` sessions straight into the table: a third finished (with an answer), one in ten excluded,
        the rest abandoned; then opened again, as by the next ``serve``, which counts the places."""
        experiment = study.experiment
        people = [(f"G{n}-{k}", experiment.name, f"token-{n}-{k}", k % study.n_groups,
                   "finished" if k % 3 == 0 else "in_progress", "1", clock.now, clock.now - 1, f"resume-{n}-{k}")
                  for k in range(n)]
        with study.db.db.write_transaction() as conn:
            conn.executemany("INSERT INTO participants(code, experiment, token_hash, grp, status, session, "
                             "created_at, reserved_until, resume_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", people)
        trial = experiment.trials[0]
        study.store.write_many([trial_row(experiment, trial, observer=code, observer_kind="human", session="1",
                                          trial_index=0, response=trial.choices[0], group=group)
                                for code, _, _, group, status, *_ in people if status == "finished"])
        for code, *_ in people[::10]:
            exclusions.record(study.db.db, experiment.name, code, True, "made up", "admin")
        ServerDB(study.location, experiment.name).close()
        clock.now += 120  # the sessions of the requests before have lapsed

    grow(3)
    consent_and_start("warm-small")()  # the first request of a connection asks the catalogue once
    small = statements_of(app, consent_and_start("small"))
    grow(300)
    consent_and_start("warm-large")()
    large = statements_of(app, consent_and_start("large"))
    assert [sql for sql, _ in large] == [sql for sql, _ in small]
    client = app.test_client()
    token = begin(client, code="finisher")
    answer_all(client, clock, token, 2)
    whole = statements_of(app, lambda: complete(client, token))
    assert full_scans(study.db.db, large + whole) == []


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_place_counts_agree_with_counting_every_session(make_app, backend, request):
    """The counts kept as things happen equal a count over every session (``ServerDB._slot_holders``, the way
    the places were counted before), after each of a seeded run of starts, completions, lab sessions, pilots
    and exclusions and their undoing, by the server and by another writer (``cuebench exclude`` writes the
    log directly)."""
    import random

    from experiment_server.assignment import finished_fill

    database = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    app, _ = make_app(database=database)
    study = study_of(app)
    db, name, groups = study.db, study.experiment.name, study.n_groups
    trial = study.experiment.trials[0]  # a lab run from before registration, counted by its answers
    study.store.write(trial_row(study.experiment, trial, observer="OLDLAB", observer_kind="human", session="1",
                                trial_index=0, response=trial.choices[0], group=1))
    ServerDB(study.location, name).close()  # the next opening of the folder counts it
    db.record_lab_session(name, "OLDLAB", "2", 0, False, False)  # its next session registers it, in group 0
    assert db.held_places(groups) == finished_fill(groups, db._slot_holders(db.db, name)) == [1, 0]
    rng = random.Random(7)
    people, excluded, done = ["OLDLAB"], set(), []
    for step in range(40):
        action = rng.choice(["start", "finish", "finish", "lab", "exclude", "include"])
        if action == "start" or not people:
            people.append(db.start(name, groups, entry_code=f"c{step}", pilot=rng.random() < 0.2)[0].code)
        elif action == "finish":
            db.set_status(rng.choice(people), "finished", n_groups=groups)
        elif action == "lab":
            people.append(db.record_lab_session(name, f"LAB{step}", "1", rng.randrange(groups), rng.random() < 0.2,
                                                rng.random() < 0.5).code)
        elif action == "exclude" and set(people) - excluded:
            code = rng.choice(sorted(set(people) - excluded))
            if rng.random() < 0.5:
                db.set_excluded(code, True, "test", "admin")
            else:
                exclusions.record(study.store.conn, name, code, True, "test", "cli (tester)")
            excluded.add(code)
        elif action == "include" and excluded:
            code = rng.choice(sorted(excluded))
            exclusions.record(study.store.conn, name, code, False, "wrong person", "cli (tester)")
            excluded.discard(code)
        else:
            action = "nothing to do"
        assert db.held_places(groups) == finished_fill(groups, db._slot_holders(db.db, name)), (step, action)
        done.append(action)
    assert sum(db.held_places(groups)) > 0 and {"finish", "lab", "exclude", "include"} <= set(done)
