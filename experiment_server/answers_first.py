"""The request queue of both servers, with the answers of running sessions first.

waitress, and gunicorn's threaded worker, hand complete requests to their threads in arrival
order. When many participants arrive together (a study opened on Prolific), hundreds of consent
pages, starts and plans queue up, and a participant already in the study who answers a trial
then waits behind all of them: half a second and more on a 2-core machine, while each of those
requests takes a millisecond or two. A newcomer's page that comes a little later is nothing a person notices;
a trial answer held up stalls the task. So POSTs into a running session (``/api/session/...``:
trial answers, events, the completion) go before the others, but never more than
``ANSWERS_IN_A_ROW`` of them while other requests wait, so that a stream of answers (or of
requests merely looking like them: anyone can send one) cannot keep newcomers out. waitress
gets this queue in place of its own (``serve_answers_first``); cuebench's gunicorn worker keeps
its waiting requests in one (``workers.BufferingThreadWorker``).

Once running, an answer still shares the process with the requests around it, and Python runs
one thread at a time: with eight consent pages, starts and plans running side by side, a thread
that let go of the interpreter for a database call or a write waits to get it back behind all of
them, a write transaction held that way holds up every answer behind it, and answers took up to
0.1-0.5 s. So the other requests run ``OTHERS_AT_ONCE`` at a time (``others_in_turn``, in both
servers); the threads holding the rest sleep until it is their turn, and answers never wait there.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable

ANSWERS_IN_A_ROW = 8
"""Answers served one after another at most before a waiting request of the other kind gets its turn."""
SESSION_API = "/api/session/"
ANSWER_HEAD = f"POST {SESSION_API}".encode()


OTHERS_AT_ONCE = 2
"""Requests other than answers running at the same time in one server process: two, so that one can
wait for the disk or the database while the other computes."""


def is_answer(channel) -> bool:
    """Whether the request a waitress channel queues next is a POST into a running session."""
    requests = getattr(channel, "requests", None)
    request = requests[0] if requests else None
    return request is not None and request.command == "POST" and (request.path or "").startswith(SESSION_API)


def head_is_answer(received: bytes | bytearray) -> bool:
    """The same for a request's raw bytes, as gunicorn's worker holds them before parsing."""
    return bytes(received[:len(ANSWER_HEAD)]) == ANSWER_HEAD


def environ_is_answer(environ: dict) -> bool:
    """The same for a request as the app sees it (its WSGI environ)."""
    return environ.get("REQUEST_METHOD") == "POST" and environ.get("PATH_INFO", "").startswith(SESSION_API)


def others_in_turn(app, at_once: int = OTHERS_AT_ONCE):
    """WSGI middleware: requests other than answers run ``at_once`` at a time (module docstring); answers
    go straight through. The turn ends when the app returns its response, before the body is sent."""
    turns = threading.BoundedSemaphore(at_once)

    def in_turn(environ, start_response):
        if environ_is_answer(environ):
            return app(environ, start_response)
        with turns:
            return app(environ, start_response)

    return in_turn


class AnswersFirst:
    """The ``deque`` interface waitress's ``ThreadedTaskDispatcher`` uses for its queue (``append``,
    ``popleft``, ``len``), with two lanes; ``answer(item)`` tells an item's lane. Not thread-safe: waitress
    uses it under its dispatcher's lock, the gunicorn worker from its event loop alone."""

    def __init__(self, answer: Callable[[object], bool] = is_answer):
        self.answer = answer
        self.answers: deque = deque()
        self.others: deque = deque()
        self.in_a_row = 0

    def append(self, item) -> None:
        (self.answers if self.answer(item) else self.others).append(item)

    def popleft(self):
        if self.answers and (self.in_a_row < ANSWERS_IN_A_ROW or not self.others):
            self.in_a_row += 1
            return self.answers.popleft()
        self.in_a_row = 0
        return self.others.popleft()

    def __len__(self) -> int:
        return len(self.answers) + len(self.others)


def serve_answers_first(server) -> None:
    """Give a waitress server (``waitress.create_server``) this queue, before it has queued anything."""
    dispatcher = server.task_dispatcher
    with dispatcher.lock:
        if dispatcher.queue:
            raise RuntimeError("the server has queued requests already")
        dispatcher.queue = AnswersFirst()
