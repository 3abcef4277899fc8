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

The answer lane is for sessions, not for whoever writes their URLs: a POST takes it only for a
session token the app has answered successfully in this process (``AnswerBudget``), and at most
as many times as a session has answers to send (the study's trials and a few reports). A token
nobody started, or one whose posts go on beyond that (12 clients posting large bodies in a loop
took the first steps of newcomers from 910 to 22 per 30 s), waits in the other lane.

Once running, an answer still shares the process with the requests around it, and Python runs
one thread at a time: with eight consent pages, starts and plans running side by side, a thread
that let go of the interpreter for a database call or a write waits to get it back behind all of
them, a write transaction held that way holds up every answer behind it, and answers took up to
0.1-0.5 s. So the other requests run ``OTHERS_AT_ONCE`` at a time (``lanes``, in both
servers); the threads holding the rest sleep until it is their turn, and answers never wait there.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import Callable

ANSWERS_IN_A_ROW = 8
"""Answers served one after another at most before a waiting request of the other kind gets its turn."""
SESSION_API = "/api/session/"
ANSWER_HEAD = f"POST {SESSION_API}".encode()


OTHERS_AT_ONCE = 2
"""Requests other than answers running at the same time in one server process: two, so that one can
wait for the disk or the database while the other computes."""


EXTRA_POSTS = 16
"""Answer-lane posts of a session beyond its trials: the browser check, calibration, questionnaire,
completion, a failed image, and answers sent again after a lost connection."""
KNOWN_SESSIONS = 100_000
"""Session tokens one process remembers at most (the least recently vouched for are forgotten)."""


def session_token(path: str) -> str | None:
    """The token of a ``/api/session/<token>/...`` path, or None."""
    if not path.startswith(SESSION_API):
        return None
    return path[len(SESSION_API):].split("/", 1)[0] or None


class AnswerBudget:
    """The answer-lane posts each session token may still make in this process: ``posts_per_session``
    from the moment the app first answers a request of the session successfully (``vouch``), none
    for a token it has not. Thread-safe: the app's threads vouch, the event loop takes."""

    def __init__(self, posts_per_session: int):
        self.posts_per_session = posts_per_session
        self._left: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def vouch(self, token: str) -> None:
        with self._lock:
            if token not in self._left:
                self._left[token] = self.posts_per_session
                if len(self._left) > KNOWN_SESSIONS:
                    self._left.popitem(last=False)

    def take(self, token: str | None) -> bool:
        """Whether a post of ``token`` goes in the answer lane; it uses one of the token's posts if so."""
        with self._lock:
            left = self._left.get(token, 0) if token else 0
            if left > 0:
                self._left[token] = left - 1
            return left > 0

    def holds(self, token: str | None) -> bool:
        """Whether ``token`` has answer-lane posts left (without using one)."""
        return bool(token) and self._left.get(token, 0) > 0


def is_answer(channel, budget: AnswerBudget) -> bool:
    """Whether the request a waitress channel queues next is a POST into a running session with posts left."""
    requests = getattr(channel, "requests", None)
    request = requests[0] if requests else None
    return request is not None and request.command == "POST" and budget.take(session_token(request.path or ""))


def head_is_answer(received: bytes | bytearray, budget: AnswerBudget) -> bool:
    """The same for a request's raw bytes, as gunicorn's worker holds them before parsing."""
    if bytes(received[:len(ANSWER_HEAD)]) != ANSWER_HEAD:
        return False
    path = bytes(received[5:received.find(b" ", 5, 4096)]).decode("latin-1")
    return budget.take(session_token(path))


def lanes(app, budget: AnswerBudget, at_once: int = OTHERS_AT_ONCE):
    """WSGI middleware: requests other than answers run ``at_once`` at a time (module docstring); answers
    of sessions with posts left go straight through. The turn ends when the app returns its response,
    before the body is sent. A session's request answered successfully vouches for its token."""
    turns = threading.BoundedSemaphore(at_once)

    def in_turn(environ, start_response):
        token = session_token(environ.get("PATH_INFO", ""))

        def vouching(status, headers, exc_info=None):
            if token and status[:1] in "23":
                budget.vouch(token)
            return start_response(status, headers, exc_info)

        if environ.get("REQUEST_METHOD") == "POST" and budget.holds(token):
            return app(environ, vouching)
        with turns:
            return app(environ, vouching)

    return in_turn


class AnswersFirst:
    """The ``deque`` interface waitress's ``ThreadedTaskDispatcher`` uses for its queue (``append``,
    ``popleft``, ``len``), with two lanes; ``answer(item)`` tells an item's lane. Not thread-safe: waitress
    uses it under its dispatcher's lock, the gunicorn worker from its event loop alone."""

    def __init__(self, answer: Callable[[object], bool]):
        self.answer = answer
        self.answers: deque = deque()
        self.others: deque = deque()
        self.in_a_row = 0

    def append(self, item) -> None:
        (self.answers if self.answer(item) else self.others).append(item)

    def popleft(self, others: bool = True):
        """The next item; with ``others`` False only an answer, or None if none waits."""
        if self.answers and (self.in_a_row < ANSWERS_IN_A_ROW or not self.others or not others):
            self.in_a_row += 1
            return self.answers.popleft()
        if not others:
            return None
        self.in_a_row = 0
        return self.others.popleft()

    def __len__(self) -> int:
        return len(self.answers) + len(self.others)


def serve_answers_first(server, budget: AnswerBudget) -> None:
    """Give a waitress server this queue, before it has queued anything; ``budget``: the app's."""
    dispatcher = server.task_dispatcher
    with dispatcher.lock:
        if dispatcher.queue:
            raise RuntimeError("the server has queued requests already")
        dispatcher.queue = AnswersFirst(lambda channel: is_answer(channel, budget))
