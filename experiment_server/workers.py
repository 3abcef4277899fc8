"""Several server processes under gunicorn (Linux), for studies one process cannot keep up with.

Each worker process builds its own app (its own database connections; nothing is shared
across a fork) and handles requests with a pool of threads. Correctness needs nothing
from one process's memory: participants, reservations, rate limits and the admin
generation are in the database, the admin session and its CSRF token in the cookie signed
with the key of the secrets file (re-read when it changes), and participant sequences are
recomputed from (group, code, session).
"""

from __future__ import annotations

from typing import Callable

from flask import Flask
from gunicorn.app.base import BaseApplication

REQUEST_TIMEOUT_S = 60
"""A worker silent for this long is restarted by the gunicorn master."""



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
                 connection_limit: int) -> None:
    """Run ``workers`` processes of ``threads`` threads each, every one calling ``make_app`` after the fork
    (blocking); a connection silent for ``idle_timeout_s`` is closed, and each process holds at most
    ``connection_limit`` (``app.IDLE_TIMEOUT_S``, ``app.CONNECTION_LIMIT``)."""
    _CuebenchGunicorn(make_app, {
        "bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "workers": workers,
        "worker_class": "gthread",
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
