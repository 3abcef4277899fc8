"""The Flask app factory and the production server entry point.

``create_app(expdir)`` wires one experiment directory to the participant and admin
blueprints; templates and static files come from ``human_tasks/web`` (the web task is
part of the human tasks, the server only hosts it). ``serve`` runs the app under
waitress, a pure-Python WSGI server that also runs on lab Windows PCs, or with
``workers > 1`` as several gunicorn processes (Linux).
"""

from __future__ import annotations

import errno
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Callable

from flask import Flask, jsonify, render_template, request

from human_tasks.web import STATIC_DIR, TEMPLATES_DIR

from . import adaptive, admin, participant
from .assignment import RESERVATION_SECONDS
from .study import ServerSetupError, open_study
from .validation import Rejected

MAX_REQUEST_BYTES = 256 * 1024


def create_app(expdir: str | Path, *, clock: Callable[[], float] = time.time,
               reservation_seconds: float = RESERVATION_SECONDS, secure_cookies: bool = True,
               database: str | None = None) -> Flask:
    """The app for one experiment directory. ``clock`` and ``reservation_seconds`` exist so
    tests can let reservations lapse without waiting; ``secure_cookies=False`` only for
    plain-HTTP lab networks (browsers drop Secure cookies there except on localhost);
    ``database``: a ``postgresql://`` URL instead of the folder's responses.sqlite."""
    study = open_study(expdir, clock, reservation_seconds, database)
    app = Flask(__name__, template_folder=str(TEMPLATES_DIR), static_folder=str(STATIC_DIR))
    app.config.update(
        SECRET_KEY=study.secret_key,
        SESSION_COOKIE_SECURE=secure_cookies,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        PERMANENT_SESSION_LIFETIME=timedelta(hours=8),
        MAX_CONTENT_LENGTH=MAX_REQUEST_BYTES,
    )
    app.extensions["cuebench"] = study
    app.register_blueprint(participant.bp)
    app.register_blueprint(adaptive.bp)
    app.register_blueprint(admin.bp, url_prefix="/admin")

    @app.errorhandler(Rejected)
    def rejected(err: Rejected):
        if request.path.startswith("/api/"):
            return jsonify(error=str(err)), err.status
        return render_template("message.html", title="Request refused", message=str(err)), err.status

    @app.after_request
    def no_cache(response):
        if request.path.startswith(("/api/", "/task/", "/admin")):
            response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        return response

    return app


def check_port_free(host: str, port: int) -> None:
    """Refuse early, before anything is started, when another program listens on the port."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        if sys.platform != "win32":  # on Windows SO_REUSEADDR would let the probe share a port in use
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            why = "it is in use (another server running?)" if err.errno == errno.EADDRINUSE else err.strerror
            raise ServerSetupError(f"cannot listen on {host}:{port}: {why}; choose another --port") from None


def serve(expdir: str | Path, host: str = "127.0.0.1", port: int = 8080, open_message: bool = True,
          threads: int = 8, secure_cookies: bool = True, workers: int = 1, database: str | None = None) -> None:
    """Serve the experiment until interrupted (blocking): waitress in this process, or
    ``workers`` gunicorn processes (Linux) sharing the experiment's database."""
    if workers < 1:
        raise ServerSetupError(f"--workers must be at least 1, got {workers}")
    if workers > 1 and sys.platform == "win32":
        raise ServerSetupError("--workers > 1 needs gunicorn, which does not run on Windows; use --threads")
    check_port_free(host, port)
    study = open_study(expdir, database=database)  # checks; creates tables and settings once, before any worker
    if open_message:
        base = f"http://{host}:{port}"
        print(f"Serving experiment {study.experiment.name!r} ({study.n_groups} groups) from {study.expdir.root} "
              f"({workers} process{'es' if workers > 1 else ''} x {threads} threads)")
        print(f"  participants: {base}/   (Prolific: {base}/?PROLIFIC_PID={{{{%PROLIFIC_PID%}}}}"
              "&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}})")
        admin_state = "open" if study.db.setting("admin_password") else "closed until `cuebench serve admin-password EXPDIR`"
        print(f"  admin:        {base}/admin/   ({admin_state})")
        print("Press Ctrl+C to stop; every stored trial is committed.", flush=True)
    study.close()
    if workers > 1:
        from .workers import run_gunicorn

        run_gunicorn(lambda: create_app(expdir, secure_cookies=secure_cookies, database=database),
                     host, port, workers, threads)
        return
    from waitress import serve as waitress_serve

    waitress_serve(create_app(expdir, secure_cookies=secure_cookies, database=database), host=host, port=port,
                   threads=threads, ident="cuebench", connection_limit=max(100, 25 * threads))
