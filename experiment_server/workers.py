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
front of it), and only a complete request reaches a thread; a connection that has not
sent one within ``IDLE_TIMEOUT_S`` is closed, and a thread's reads and writes on a socket
time out after ``SOCKET_TIMEOUT_S``. A whole request waits for a free thread in the worker's
event loop too, answers of running sessions first (``answers_first``), instead of in the thread
pool's first-come queue.
"""

from __future__ import annotations

import errno
import logging
import re
import socket
import time
from functools import partial
from selectors import EVENT_READ
from typing import Callable

from flask import Flask
from gunicorn.app.base import BaseApplication
from gunicorn.workers.gthread import TConn, ThreadWorker

from .answers_first import AnswersFirst, head_is_answer

REQUEST_TIMEOUT_S = 60
"""A worker silent for this long is restarted by the gunicorn master."""
SOCKET_TIMEOUT_S = 10
"""The longest one read or write of a request thread may wait on its client (a chunked body, an
answer the client does not take): then the connection is dropped and the thread is free."""
HEAD_LIMIT = 64 * 1024
"""A head this long without its end goes to a thread anyway, whose parser refuses it (the
``limit_request_*`` settings below) without waiting for more."""
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d{1,12})[ \t]*\r\n", re.IGNORECASE)
_BODY_READ_BY_THREAD = re.compile(rb"\r\n(transfer-encoding:|expect:[ \t]*100-continue)", re.IGNORECASE)
"""A chunked body, or one the client sends only after gunicorn's "100 Continue" (curl's large posts)."""


def request_complete(received: bytes, max_body: int) -> bool:
    """Whether ``received`` holds a whole request (head, and as much body as it announces), or as
    much as the server will wait for: a head beyond ``HEAD_LIMIT``, a chunked body (read by the
    thread, ``SOCKET_TIMEOUT_S`` per read, as is one announced with ``Expect: 100-continue``) or a
    body beyond ``max_body`` (refused from its Content-Length without being read)."""
    end = received.find(b"\r\n\r\n")
    if end < 0:
        return len(received) > HEAD_LIMIT
    head = received[:end + 2]
    length = _CONTENT_LENGTH.search(head)
    if _BODY_READ_BY_THREAD.search(head) or length is None or int(length.group(1)) > max_body:
        return True
    return len(received) >= end + 4 + int(length.group(1))


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
    no thread, until it has sent a whole request (``request_complete``), both when it is new
    and between the requests of a kept-alive connection; see the module docstring."""

    max_body = 256 * 1024
    """Set by ``run_gunicorn`` (``app.MAX_REQUEST_BYTES``)."""

    def init_process(self) -> None:
        if self.cfg.is_ssl:
            raise RuntimeError("BufferingThreadWorker reads plain HTTP; terminate TLS in the reverse proxy")
        self.log.error_log.addFilter(_not_a_timeout)
        self.waiting = AnswersFirst(lambda conn: conn.answer)
        self.free_threads = self.cfg.threads
        super().init_process()

    def enqueue_req(self, conn: TConn) -> None:
        """A whole request waits here for a free thread, answers first; called from the event loop only."""
        self.waiting.append(conn)
        self._hand_to_threads()

    def finish_request(self, conn: TConn, fs) -> None:
        """A thread is free again (the event loop runs this when a request is done)."""
        self.free_threads += 1
        super().finish_request(conn, fs)
        self._hand_to_threads()

    def _hand_to_threads(self) -> None:
        while self.free_threads and self.waiting:
            self.free_threads -= 1
            super().enqueue_req(self.waiting.popleft())

    def accept(self, listener) -> None:
        try:
            client, address = listener.accept()
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        self._await_request(TConn(self.cfg, _TimedSocket.adopt(client), address, listener.getsockname()))

    def on_client_socket_readable(self, conn: TConn, client) -> None:
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        self._await_request(conn)

    def _await_request(self, conn: TConn) -> None:
        """Watch ``conn`` until it has sent a whole request, for ``IDLE_TIMEOUT_S`` (gunicorn's
        ``keepalive``) at most: ``murder_pending`` closes it after that."""
        conn.sock.setblocking(False)
        conn.received = bytearray()
        conn.answer = False
        conn.timeout = time.monotonic() + self.cfg.keepalive
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, EVENT_READ, partial(self._on_request_bytes, conn))

    def _on_request_bytes(self, conn: TConn, client) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            conn.received += data
            if not request_complete(conn.received, self.max_body):
                return
        self.poller.unregister(client)
        self.pending_conns.remove(conn)
        if not data:  # the client went away
            self.nr_conns -= 1
            conn.close()
            return
        conn.answer = head_is_answer(conn.received)
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
                 connection_limit: int, max_body: int) -> None:
    """Run ``workers`` processes of ``threads`` threads each, every one calling ``make_app`` after the fork
    (blocking); a connection that sends no whole request for ``idle_timeout_s`` is closed, and each
    process holds at most ``connection_limit`` (``app.IDLE_TIMEOUT_S``, ``app.CONNECTION_LIMIT``)."""
    BufferingThreadWorker.max_body = max_body
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
        # headers bounded before anything is read; the body by Flask's MAX_CONTENT_LENGTH,
        # which answers 413 from the Content-Length header without reading the body
        "limit_request_line": 4094,
        "limit_request_fields": 50,
        "limit_request_field_size": 8190,
    }).run()
