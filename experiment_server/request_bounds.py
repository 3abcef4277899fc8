"""What both servers allow one request and one client address, in time and in size.

A server on the open internet meets clients that send slowly on purpose: a request head one
byte every few seconds, a body that never ends, hundreds of connections from one address. Each
costs the server a connection slot, and a thread where one waits for the rest. So both servers
(waitress in ``waitress_server``, gunicorn in ``workers``) read a request whole in their event
loop, costing no thread, and bound it:

- **Time.** A request must arrive whole, head and body, within ``REQUEST_DEADLINE_S`` of its
  first byte, however it trickles (waitress's own timeout restarts at every byte), and a
  connection that sends nothing is closed after ``app.IDLE_TIMEOUT_S``.
- **Size.** Each route takes a body of at most its ``body_limit`` (a trial's answer ~48 KiB,
  the reports of a session a few KiB), refused with 413 from the Content-Length header before
  any of the body is read. A body of unknown length (``Transfer-Encoding: chunked``) is refused
  with 411 and one the client sends only after a "100 Continue" (``Expect``) with 417, both
  before it is read: browsers send neither here, and either would otherwise be read on the
  client's schedule.
- **Connections.** One address holds at most ``CONNECTIONS_PER_ADDRESS`` open connections; a
  connection beyond them is closed at once. Behind a reverse proxy (``--trusted-proxies``) every
  connection comes from the proxy, whose own limit per address (nginx ``limit_conn``) does this
  instead.
"""

from __future__ import annotations

import re
import threading
from collections import Counter

REQUEST_DEADLINE_S = 10
"""Seconds from a request's first byte to its last, at most: a trial's answer (48 KiB at most)
needs 5 KB/s, which any connection a browser can show a study on has."""
CONNECTIONS_PER_ADDRESS = 256
"""Open connections of one client address at most (each server process): a browser keeps one to a
few, and a lab or a class behind one router stays far below; one address takes a quarter of a
process's ``app.CONNECTION_LIMIT`` at most."""

TRIAL_BODY_BYTES = 48 * 1024
"""A trial's answer: ``validation`` stores at most 32 KiB of ``device`` and ``events``, with
room for the JSON around them."""
QUESTIONNAIRE_BODY_BYTES = 32 * 1024
"""The questionnaire's answers: several free-text answers of ``questionnaire.MAX_TEXT_ANSWER``
characters, in any script."""
SMALL_BODY_BYTES = 8 * 1024
"""Anything else: the browser check, a failed image, the calibration, the completion, the
consent and admin forms."""
LARGEST_BODY_BYTES = max(TRIAL_BODY_BYTES, QUESTIONNAIRE_BODY_BYTES, SMALL_BODY_BYTES)
_ROUTE_LIMITS = ((re.compile(r"/api/session/[^/]+/(adaptive/\d+/)?trial/\d+"), TRIAL_BODY_BYTES),
                 (re.compile(r"/api/session/[^/]+/questionnaire"), QUESTIONNAIRE_BODY_BYTES))

_HEADER = re.compile(rb"\r\n(content-length|transfer-encoding|expect):[ \t]*([^\r\n]*)", re.IGNORECASE)


def body_limit(path: str) -> int:
    """The longest body the route at ``path`` takes (its query left off)."""
    return next((limit for route, limit in _ROUTE_LIMITS if route.fullmatch(path)), SMALL_BODY_BYTES)


def refusal(path: str, headers: dict[str, str]) -> tuple[int, str] | None:
    """The status and reason to refuse a request with, from its head alone (``headers`` by lower-case
    name), or None: a body of unknown length (411), one sent only after "100 Continue" (417), one
    longer than the route takes (413)."""
    if "transfer-encoding" in headers:
        return 411, "Length Required"
    if headers.get("expect", "").strip().lower() == "100-continue":
        return 417, "Expectation Failed"
    length = headers.get("content-length", "0").strip()
    if length.isdigit() and int(length) > body_limit(path.split("?", 1)[0]):
        return 413, "Content Too Large"
    return None


def head_refusal(head: bytes) -> tuple[int, str] | None:
    """``refusal`` for a raw request head (its bytes up to the blank line), as an event loop holds it."""
    path = head.split(b" ", 2)[1].decode("latin-1") if head.count(b" ") >= 2 else "/"
    headers = {name.lower().decode(): value.decode("latin-1") for name, value in _HEADER.findall(head)}
    return refusal(path, headers)


def refusal_response(status: int, reason: str) -> bytes:
    """The whole HTTP response an event loop sends for a ``refusal`` before it closes the connection."""
    body = f"{status} {reason}: request bodies here are sent whole with a Content-Length, within the route's limit\n"
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n{body}").encode()


class ConnectionsPerAddress:
    """Open connections by client address, in one server process; ``limit`` 0: no limit."""

    def __init__(self, limit: int):
        self.limit = limit
        self.open: Counter[str] = Counter()
        self._lock = threading.Lock()  # a thread may close a connection the event loop opened

    def admit(self, address: str) -> bool:
        """Count a new connection from ``address``, or refuse it (False) when the address holds its limit."""
        with self._lock:
            if self.limit and self.open[address] >= self.limit:
                return False
            self.open[address] += 1
            return True

    def closed(self, address: str) -> None:
        with self._lock:
            self.open[address] -= 1
            if self.open[address] <= 0:
                del self.open[address]
