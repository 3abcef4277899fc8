"""The Flask app factory and the production server entry point.

``create_app(expdir)`` wires one experiment directory to the participant and admin
blueprints; templates and static files come from ``human_tasks/web`` (the web task is
part of the human tasks, the server only hosts it). ``serve`` runs the app under
waitress, a pure-Python WSGI server that also runs on lab Windows PCs.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Callable

from flask import Flask, jsonify, render_template, request

from human_tasks.web import STATIC_DIR, TEMPLATES_DIR

from . import admin, participant
from .assignment import RESERVATION_SECONDS
from .study import open_study
from .validation import Rejected

MAX_REQUEST_BYTES = 256 * 1024


def create_app(expdir: str | Path, *, clock: Callable[[], float] = time.time,
               reservation_seconds: float = RESERVATION_SECONDS, secure_cookies: bool = True) -> Flask:
    """The app for one experiment directory. ``clock`` and ``reservation_seconds`` exist so
    tests can let reservations lapse without waiting; ``secure_cookies=False`` only for
    plain-HTTP lab networks (browsers drop Secure cookies there except on localhost)."""
    study = open_study(expdir, clock, reservation_seconds)
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
