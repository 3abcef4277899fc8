"""Several server processes under gunicorn (Linux), for studies one process cannot keep up with.

Each worker process builds its own app (its own database connections; nothing is shared
across a fork) and handles requests with a pool of threads. Correctness needs nothing
from one process's memory: participants, reservations, rate limits and the admin
generation are in the database, the admin session and its CSRF token in the cookie signed
with the key of the secrets file (re-read when it changes), and participant sequences are
recomputed from (group, code, session).

Slow clients: gunicorn's threaded worker gives a connection to a thread as soon as it has
sent a byte, and the thread then waits, without a time limit, for the rest of the request,
so a few connections per thread that send half a request head and fall silent stop a
process (gunicorn's docs ask for a buffering proxy in front). ``BufferingThreadWorker``
reads each request whole in the worker's event loop first, as waitress does (and nginx in
front of it), and only a complete request reaches a thread, within the bounds of
``request_bounds``: a request refused by its head (a chunked body, ``Expect: 100-continue``, a
body over the route's limit; gunicorn would hand the first two to a thread that waits for the
body at the client's pace: 40 connections sending a byte every 5 s stopped two processes for a
minute) is answered from the event loop without reading its body; a request not whole within
``REQUEST_DEADLINE_S`` of its first byte, or a connection silent for ``IDLE_TIMEOUT_S``, is
closed; one address holds at most ``CONNECTIONS_PER_ADDRESS`` connections; and a thread's reads
and writes on a socket time out after ``SOCKET_TIMEOUT_S``. A whole request waits for a free
thread in the worker's event loop too, answers of running sessions first (``answers_first``),
instead of in the thread pool's first-come queue.
"""

from __future__ import annotations

import errno
import logging
import re
import socket
import time
from collections import deque
from functools import partial
from selectors import EVENT_READ
from typing import Callable

from flask import Flask
from gunicorn.app.base import BaseApplication
from gunicorn.workers.gthread import TConn, ThreadWorker

from .answers_first import OTHERS_AT_ONCE, AnswersFirst, head_is_answer
from .request_bounds import (CONNECTIONS_PER_ADDRESS, REQUEST_DEADLINE_S, ConnectionsPerAddress, head_refusal,
                             refusal_response)

REQUEST_TIMEOUT_S = 60
"""A worker silent for this long is restarted by the gunicorn master."""
SOCKET_TIMEOUT_S = 10
"""The longest one read or write of a request thread may wait on its client (an answer the client
does not take): then the connection is dropped and the thread is free."""
HEAD_LIMIT = 64 * 1024
"""A head this long without its end goes to a thread anyway, whose parser refuses it (the
``limit_request_*`` settings below) without waiting for more."""
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d{1,12})[ \t]*\r\n", re.IGNORECASE)


def request_state(received: bytes) -> tuple[int, str] | bool:
    """What the event loop does with the bytes ``received`` of a request so far: hand the request
    to a thread (True: it is whole, or its head is too long or malformed for gunicorn's parser to
    refuse), wait for more (False), or refuse it from its head (``request_bounds.head_refusal``:
    status and reason)."""
    end = received.find(b"\r\n\r\n")
    if end < 0:
        return len(received) > HEAD_LIMIT
    head = bytes(received[:end + 2])
    refused = head_refusal(head)
    if refused:
        return refused
    length = _CONTENT_LENGTH.search(head)
    return len(received) >= end + 4 + (int(length.group(1)) if length else 0)


class _CountedConn(TConn):
    """A connection that leaves its address's count (``ConnectionsPerAddress``) when it is closed."""

    def __init__(self, cfg, sock, client, server, per_address: ConnectionsPerAddress):
        super().__init__(cfg, sock, client, server)
        self.per_address: ConnectionsPerAddress | None = per_address

    def close(self, graceful: bool = False) -> None:
        if self.per_address is not None:
            self.per_address.closed(_address(self.client))
            self.per_address = None
        super().close(graceful)


def _address(client) -> str:
    return client[0] if isinstance(client, tuple) else str(client)


class _TimedSocket(socket.socket):
    """A client socket whose blocking mode has a time limit: gunicorn switches a socket to
    blocking for its threads, which then wait at most ``SOCKET_TIMEOUT_S`` per read or write."""

    def setblocking(self, flag: bool) -> None:
        self.settimeout(SOCKET_TIMEOUT_S if flag else 0.0)

    @classmethod
    def adopt(cls, sock: socket.socket) -> "_TimedSocket":
        return cls(sock.family, sock.type, sock.proto, fileno=sock.detach())


def _not_a_timeout(record: logging.LogRecord) -> bool:
    """Leave out gunicorn's traceback for a client that stalled past ``SOCKET_TIMEOUT_S``: expected, not a fault."""
    return not (record.exc_info and isinstance(record.exc_info[1], TimeoutError))


class BufferingThreadWorker(ThreadWorker):
    """gunicorn's ``gthread`` worker, except that a connection waits in the event loop, costing
    no thread, until it has sent a whole request (``request_state``), both when it is new
    and between the requests of a kept-alive connection; see the module docstring."""

    connections_per_address = CONNECTIONS_PER_ADDRESS
    """Set by ``run_gunicorn`` (0, no limit, behind trusted proxies)."""

    def init_process(self) -> None:
        if self.cfg.is_ssl:
            raise RuntimeError("BufferingThreadWorker reads plain HTTP; terminate TLS in the reverse proxy")
        self.log.error_log.addFilter(_not_a_timeout)
        self.waiting = AnswersFirst(lambda conn: conn.answer)
        self.free_threads = self.cfg.threads
        self.others_running = 0
        """Requests other than answers in threads: at most ``OTHERS_AT_ONCE``, the number that may run at once
        (``answers_first.lanes``), so that none waits in a thread an answer could use."""
        self.per_address = ConnectionsPerAddress(self.connections_per_address)
        self.receiving_conns: deque = deque()
        """Connections in the middle of a request, by their deadline (``pending_conns``: silent ones)."""
        super().init_process()

    def enqueue_req(self, conn: TConn) -> None:
        """A whole request waits here for a free thread, answers first; called from the event loop only."""
        self.waiting.append(conn)
        self._hand_to_threads()

    def finish_request(self, conn: TConn, fs) -> None:
        """A thread is free again (the event loop runs this when a request is done)."""
        self.free_threads += 1
        self.others_running -= not conn.answer
        super().finish_request(conn, fs)
        self._hand_to_threads()

    def _hand_to_threads(self) -> None:
        while self.free_threads and self.waiting:
            conn = self.waiting.popleft(others=self.others_running < OTHERS_AT_ONCE)
            if conn is None:
                return
            self.free_threads -= 1
            self.others_running += not conn.answer
            super().enqueue_req(conn)

    def accept(self, listener) -> None:
        try:
            client, address = listener.accept()
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        if not self.per_address.admit(_address(address)):
            client.close()
            return
        self.nr_conns += 1
        self._await_request(_CountedConn(self.cfg, _TimedSocket.adopt(client), address, listener.getsockname(),
                                         self.per_address))

    def on_client_socket_readable(self, conn: TConn, client) -> None:
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        self._await_request(conn)

    def _await_request(self, conn: TConn) -> None:
        """Watch ``conn`` until it has sent a whole request: silent for ``IDLE_TIMEOUT_S`` (gunicorn's
        ``keepalive``) at most, then within ``REQUEST_DEADLINE_S`` of its first byte (``murder_pending``
        closes it after either)."""
        conn.sock.setblocking(False)
        conn.received = bytearray()
        conn.answer = False
        conn.timeout = time.monotonic() + self.cfg.keepalive
        conn.waits_in = self.pending_conns
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, EVENT_READ, partial(self._on_request_bytes, conn))

    def murder_pending(self) -> None:
        """Close the connections silent too long and those whose request is past its deadline."""
        super().murder_pending()
        now = time.monotonic()
        while self.receiving_conns and self.receiving_conns[0].timeout <= now:
            self._drop(self.receiving_conns[0])

    def _drop(self, conn: TConn, answer: bytes = b"") -> None:
        """Stop watching ``conn`` and close it, after sending ``answer`` (a whole short response) if any."""
        self.poller.unregister(conn.sock)
        conn.waits_in.remove(conn)
        if answer:
            try:
                conn.sock.send(answer)
            except OSError:
                pass
        self.nr_conns -= 1
        conn.close()

    def _on_request_bytes(self, conn: TConn, client) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away
            self._drop(conn)
            return
        if not conn.received:  # a request's first bytes: its deadline starts
            conn.waits_in.remove(conn)
            conn.timeout = time.monotonic() + REQUEST_DEADLINE_S
            conn.waits_in = self.receiving_conns
            self.receiving_conns.append(conn)
        conn.received += data
        state = request_state(conn.received)
        if state is False:
            return
        if state is not True:
            self._drop(conn, refusal_response(*state))
            return
        self.poller.unregister(client)
        conn.waits_in.remove(conn)
        conn.answer = head_is_answer(conn.received, self.wsgi.extensions["cuebench_answers"])
        conn.init()  # the parser over the socket (plain HTTP/1: neither TLS nor h2c is configured)
        conn.parser.unreader.unread(bytes(conn.received))
        conn.data_ready = True
        conn.received = bytearray()
        self.enqueue_req(conn)


class _CuebenchGunicorn(BaseApplication):
    def __init__(self, make_app: Callable[[], Flask], options: dict):
        self.make_app = make_app
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return self.make_app()


def run_gunicorn(make_app: Callable[[], Flask], host: str, port: int, workers: int, threads: int, idle_timeout_s: int,
                 connection_limit: int, trusted_proxies: int) -> None:
    """Run ``workers`` processes of ``threads`` threads each, every one calling ``make_app`` after the fork
    (blocking); a connection silent for ``idle_timeout_s`` is closed, and each process holds at most
    ``connection_limit`` (``app.IDLE_TIMEOUT_S``, ``app.CONNECTION_LIMIT``), and ``CONNECTIONS_PER_ADDRESS``
    of one address unless behind ``trusted_proxies`` (``request_bounds``)."""
    BufferingThreadWorker.connections_per_address = 0 if trusted_proxies else CONNECTIONS_PER_ADDRESS
    _CuebenchGunicorn(make_app, {
        "bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "workers": workers,
        "worker_class": BufferingThreadWorker,
        "threads": threads,
        "timeout": REQUEST_TIMEOUT_S,
        "keepalive": idle_timeout_s,  # gunicorn's default, 2 s, is shorter than a trial
        "worker_connections": connection_limit,
        "preload_app": False,
        "proc_name": "cuebench-serve",
        "loglevel": "warning",
        # headers bounded before anything is read; the body by its route's limit (request_bounds),
        # refused from the Content-Length header in the event loop
        "limit_request_line": 4094,
        "limit_request_fields": 50,
        "limit_request_field_size": 8190,
    }).run()
