"""The queue that serves answers of running sessions before newcomers' pages (``answers_first``), and the
budget that keeps the answer lane for sessions the app has served."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from experiment_server.answers_first import (ANSWERS_IN_A_ROW, OTHERS_AT_ONCE, AnswerBudget, AnswersFirst,
                                             head_is_answer, is_answer, lanes)


def channel(command: str, path: str) -> SimpleNamespace:
    """What the queue reads of a waitress channel: its next request's method and path."""
    return SimpleNamespace(requests=[SimpleNamespace(command=command, path=path)])


def vouched(*tokens: str, posts: int = 100) -> AnswerBudget:
    budget = AnswerBudget(posts)
    for token in tokens:
        budget.vouch(token)
    return budget


def waitress_queue(budget: AnswerBudget) -> AnswersFirst:
    return AnswersFirst(lambda queued: is_answer(queued, budget))


def test_answers_go_before_queued_pages_but_never_keep_them_out():
    queue = waitress_queue(vouched(*(f"tok{n}" for n in range(ANSWERS_IN_A_ROW + 2))))
    pages = [channel("GET", f"/?code=p{n}") for n in range(3)] + [channel("GET", "/api/session/tok")]  # plan: a GET
    answers = [channel("POST", f"/api/session/tok{n}/trial/1") for n in range(ANSWERS_IN_A_ROW + 2)]
    for queued in (pages[0], pages[1], *answers, pages[2], pages[3]):
        queue.append(queued)
    assert len(queue) == len(pages) + len(answers)
    served = [queue.popleft() for _ in range(len(queue))]
    assert served[:ANSWERS_IN_A_ROW] == answers[:ANSWERS_IN_A_ROW]  # ahead of the pages that came first
    assert served[ANSWERS_IN_A_ROW] is pages[0]  # then a waiting page gets its turn
    assert served[ANSWERS_IN_A_ROW + 1:ANSWERS_IN_A_ROW + 3] == answers[ANSWERS_IN_A_ROW:]
    assert served[ANSWERS_IN_A_ROW + 3:] == [pages[1], pages[2], pages[3]]  # in arrival order
    assert not queue


def test_a_request_waitress_could_not_parse_waits_in_the_ordinary_lane():
    queue = waitress_queue(vouched("t"))
    broken = SimpleNamespace(requests=[SimpleNamespace(command=None, path=None)])
    answer = channel("POST", "/api/session/t/complete")
    queue.append(broken)
    queue.append(answer)
    assert [queue.popleft(), queue.popleft()] == [answer, broken]


def test_gunicorns_worker_tells_an_answer_from_the_raw_request():
    budget = vouched("tok")
    assert head_is_answer(b"POST /api/session/tok/trial/3 HTTP/1.1\r\nHost: x\r\n\r\n{}", budget)
    assert not head_is_answer(bytearray(b"GET /api/session/tok HTTP/1.1\r\n\r\n"), budget)  # the plan
    assert not head_is_answer(b"POST /start HTTP/1.1\r\n\r\n", budget) and not head_is_answer(b"POS", budget)
    assert not head_is_answer(b"POST /api/session/made-up/trial/3 HTTP/1.1\r\n\r\n{}", budget)


def test_other_requests_take_turns_while_answers_go_straight_through():
    """Five consent pages at once: ``OTHERS_AT_ONCE`` run, the rest wait; an answer sent meanwhile runs
    at once; then every page gets its turn."""
    release = threading.Event()
    inside, most, lock = [0], [0], threading.Lock()

    def app(environ, start_response):
        if environ["REQUEST_METHOD"] == "GET":
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            release.wait(10)
            with lock:
                inside[0] -= 1
        return [environ["PATH_INFO"].encode()]

    wsgi = lanes(app, vouched("tok"))
    results = []
    pages = [threading.Thread(target=lambda n=n: results.append(wsgi({"REQUEST_METHOD": "GET", "PATH_INFO": f"/{n}"},
                                                                       None))) for n in range(5)]
    for page in pages:
        page.start()
    deadline = time.monotonic() + 10
    while inside[0] < OTHERS_AT_ONCE and time.monotonic() < deadline:
        time.sleep(0.005)
    answer = wsgi({"REQUEST_METHOD": "POST", "PATH_INFO": "/api/session/tok/trial/3"}, None)
    assert answer == [b"/api/session/tok/trial/3"] and inside[0] == OTHERS_AT_ONCE and not results
    release.set()
    for page in pages:
        page.join(10)
    assert sorted(results) == [[f"/{n}".encode()] for n in range(5)] and most[0] == OTHERS_AT_ONCE
