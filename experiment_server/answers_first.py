"""waitress's request queue with the answers of running sessions first.

waitress hands complete requests to its threads in arrival order. When many participants
arrive together (a study opened on Prolific), hundreds of consent pages, starts and plans
queue up, and a participant already in the study who answers a trial then waits behind all
of them: half a second and more on a 2-core machine, while each of those requests takes a
millisecond or two. A newcomer's page that comes a little later is nothing a person notices;
a trial answer held up stalls the task. So POSTs into a running session (``/api/session/...``:
trial answers, events, the completion) go before the others, but never more than
``ANSWERS_IN_A_ROW`` of them while other requests wait, so that a stream of answers (or of
requests merely looking like them: anyone can send one) cannot keep newcomers out.
"""

from __future__ import annotations

from collections import deque

ANSWERS_IN_A_ROW = 8
"""Answers served one after another at most before a waiting request of the other kind gets its turn."""
SESSION_API = "/api/session/"


def is_answer(channel) -> bool:
    """Whether the request a waitress channel queues next is a POST into a running session."""
    requests = getattr(channel, "requests", None)
    request = requests[0] if requests else None
    return request is not None and request.command == "POST" and (request.path or "").startswith(SESSION_API)


class AnswersFirst:
    """The ``deque`` interface waitress's ``ThreadedTaskDispatcher`` uses for its queue (``append``,
    ``popleft``, ``len``), with two lanes; it is used under the dispatcher's lock."""

    def __init__(self):
        self.answers: deque = deque()
        self.others: deque = deque()
        self.in_a_row = 0

    def append(self, channel) -> None:
        (self.answers if is_answer(channel) else self.others).append(channel)

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
