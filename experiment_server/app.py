"""The Flask app factory and the production server entry point.

``create_app(expdir)`` wires one experiment directory to the participant and admin
blueprints; templates and static files come from ``human_tasks/web`` (the web task is
part of the human tasks, the server only hosts it). ``serve`` runs the app under
waitress, a pure-Python WSGI server that also runs on lab Windows PCs, or with
``workers > 1`` as several gunicorn processes (Linux).
"""

from __future__ import annotations

import errno
import gc
import logging
import socket
import sqlite3
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Callable

from flask import Flask, jsonify, render_template, request
from flask.sessions import SecureCookieSessionInterface
from itsdangerous import URLSafeTimedSerializer
from werkzeug.exceptions import HTTPException
from werkzeug.middleware.proxy_fix import ProxyFix

try:
    import psycopg
except ImportError:  # PostgreSQL support is an extra
    psycopg = None

from cuebench.storage import StorageError
from cuebench.texts import TextsUnfilledError, check_filled
from cuebench.words import LANGUAGE, say, words
from human_tasks.web import STATIC_DIR, TEMPLATES_DIR

from . import adaptive, admin, participant
from .answers_first import EXTRA_POSTS, AnswerBudget, lanes
from .assignment import RESERVATION_SECONDS
from .cookie_policy import INSECURE_COOKIES, secure_cookie
from .request_bounds import LARGEST_BODY_BYTES, body_limit
from .study import ServerSetupError, Study, open_study, study_of
from .study_rules import MIN_FREE_DISK_MB, StudyRules, load_rules
from .validation import Rejected

MAX_REQUEST_BYTES = LARGEST_BODY_BYTES
"""The largest request body of any route (``request_bounds.body_limit``); both servers refuse a longer
one before reading it."""
IDLE_TIMEOUT_S = 30
"""How long a connection that sends nothing stays open: longer than a trial, so a participant keeps
one connection from answer to answer, short enough that idle or half-open connections a client
leaves behind are closed (waitress's default is 120 s, gunicorn's 2 s)."""
CONNECTION_LIMIT = 1000
"""Open connections per server process at most; over it waitress stops accepting, so it must lie
far beyond a study's participants (one keep-alive connection each) and the idle connections one
client can hold open for ``IDLE_TIMEOUT_S``. The reverse proxy in front (docs/web.md) bounds what
one address may hold."""
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
                           "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
"""Only the server's own files: a participant's text that slipped into a page cannot run as script."""
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (StorageError, sqlite3.OperationalError, *(
    (psycopg.OperationalError,) if psycopg else ()))
"""Errors of a database out of reach (cannot be opened, connection cut, locked beyond the busy timeout)."""
RETRY_AFTER_S = 2
FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_FORWARDED_PROTO")
"""What a reverse proxy adds to a request (WSGI names)."""
log = logging.getLogger("cuebench.serve")


def waitress_proxy_settings(trusted_proxies: int) -> dict:
    """waitress's proxy handling from ``--trusted-proxies``. waitress removes forwarding headers
    before the app sees them unless it trusts the peer, so without these settings every client
    behind a proxy had the proxy's address. Trusted: the peer's headers give the client's
    address and scheme, counting ``trusted_proxies`` hops from the right (the app's
    ``ProxyFix`` then finds the same address in what waitress keeps). Untrusted: the headers
    are passed on, so that the app can warn about them (``_warn_untrusted_forwarding``); it
    never reads them."""
    if not trusted_proxies:
        return {"clear_untrusted_proxy_headers": False}
    return {"trusted_proxy": "*", "trusted_proxy_count": trusted_proxies,
            "trusted_proxy_headers": {"x-forwarded-for", "x-forwarded-proto"}}


def _warn_untrusted_forwarding(app: Callable) -> Callable:
    """WSGI middleware: log once (per process) when a request comes with forwarding headers that
    the server is not told to trust: a reverse proxy in front without ``--trusted-proxies``, so
    the start and login limits count every participant behind it as one address."""
    warned = threading.Event()

    def middleware(environ, start_response):
        if not warned.is_set() and any(header in environ for header in FORWARDING_HEADERS):
            warned.set()
            log.warning("requests arrive with forwarding headers (X-Forwarded-For) from %s, which this server does "
                        "not trust: every client behind that proxy shares its address for the start and login "
                        "limits. Behind a reverse proxy, start the server with --trusted-proxies N (the number of "
                        "proxies in front that set X-Forwarded-For).", environ.get("REMOTE_ADDR", "an unknown peer"))
        return app(environ, start_response)

    return middleware


class _RotatingKeySessions(SecureCookieSessionInterface):
    """Flask's signed cookie, signed with the secrets file's current key (read on every
    request), so ``cuebench serve rotate-secret`` ends every session at once, in every process."""

    def get_signing_serializer(self, app: Flask) -> URLSafeTimedSerializer:
        return URLSafeTimedSerializer(study_of(app).cookie_key, salt=self.salt, serializer=self.serializer,
                                      signer_kwargs={"key_derivation": self.key_derivation,
                                                     "digest_method": self.digest_method})

    def get_cookie_secure(self, app: Flask) -> bool:
        """``Secure`` by the request it answers (``cookie_policy``), not once per app."""
        return secure_cookie()


def create_app(expdir: str | Path, *, clock: Callable[[], float] = time.time,
               reservation_seconds: float = RESERVATION_SECONDS, insecure_cookies: bool = False,
               database: str | None = None, secrets_path: str | Path | None = None, trusted_proxies: int = 0,
               min_free_disk_mb: int = MIN_FREE_DISK_MB, rules: StudyRules | None = None) -> Flask:
    """The app for one experiment directory. ``clock`` and ``reservation_seconds`` exist so
    tests can let reservations lapse without waiting; cookies are ``Secure`` by
    ``cookie_policy``'s rule, never with ``insecure_cookies`` (a plain-HTTP lab network);
    ``database``: a ``postgresql://`` URL instead of the folder's responses.sqlite;
    ``secrets_path``: the secrets file (``server_secrets``); ``trusted_proxies``: how many
    reverse proxies in front set ``X-Forwarded-For`` (0: the connection's address is the
    client's; a forwarded header is then ignored, since anyone can send one); ``min_free_disk_mb``: new
    sessions are refused while the database's disk has less free (``Study.low_on_disk``); ``rules``: recruitment
    targets, session time limit, early end, device rules, start limit and places (``study_rules``), by default the
    folder's ``rules.json``, read by every process that serves it."""
    rules = load_rules(expdir) if rules is None else rules
    study = open_study(expdir, clock, reservation_seconds, database, secrets_path, rules.hold_min * 60)
    app = Flask(__name__, template_folder=str(TEMPLATES_DIR), static_folder=str(STATIC_DIR))
    app.session_interface = _RotatingKeySessions()
    budget = AnswerBudget(len(study.experiment.trials) + sum(block.trials for block in study.experiment.adaptive)
                          + EXTRA_POSTS)
    app.wsgi_app = lanes(app.wsgi_app, budget)
    if trusted_proxies:
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=trusted_proxies, x_proto=trusted_proxies)
    else:
        app.wsgi_app = _warn_untrusted_forwarding(app.wsgi_app)
    app.config.update(
        **{INSECURE_COOKIES: insecure_cookies},
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        PERMANENT_SESSION_LIFETIME=timedelta(hours=8),
        MAX_CONTENT_LENGTH=MAX_REQUEST_BYTES,
    )
    app.extensions["cuebench"] = study
    app.extensions["cuebench_answers"] = budget
    app.config["CUEBENCH_MIN_FREE_DISK_MB"] = min_free_disk_mb
    app.config["CUEBENCH_RULES"] = rules
    app.register_blueprint(participant.bp)

    @app.context_processor
    def page_language():
        """Every participant's page's ``lang`` and words (``say``) in the study's language; the admin pages, for
        the researcher, stay English. ``time_limit``: the session time limit as the consent page states it."""
        language = LANGUAGE if request.path.startswith("/admin") else study.experiment.language
        catalogue = words(language)
        limit = rules.time_limit_min
        return {"language": language, "say": lambda key, **values: say(key, language, **values),
                "device_words": {key: text for key, text in catalogue.items() if key.startswith("device_")},
                "time_limit": f"{limit:g}".replace(".", catalogue["decimal_point"]) if limit else None}

    app.register_blueprint(adaptive.bp)
    app.register_blueprint(admin.bp, url_prefix="/admin")

    @app.before_request
    def bounded_body():
        """413 from the Content-Length header, before any of the body is parsed, at the route's limit
        (both servers refuse it before reading it; this holds for any other WSGI server too)."""
        limit = body_limit(request.path)
        if (request.content_length or 0) > limit:
            raise Rejected(413, f"the request body is larger than the {limit} bytes this address takes")

    def say_on_page(key: str) -> str:
        return page_language()["say"](key)

    @app.errorhandler(Rejected)
    def rejected(err: Rejected):
        if request.path.startswith("/api/"):
            return jsonify(error=str(err), **getattr(err, "details", {})), err.status
        return render_template("message.html", title=say_on_page("refused_title"), message=str(err)), err.status

    @app.errorhandler(Exception)
    def failed(err: Exception):
        """One log line per failure, naming the route but not the URL (it holds the participant's token).
        The database out of reach is a 503 with ``Retry-After``: the web task retries, and the
        server opens new connections when the database is back."""
        if isinstance(err, HTTPException):
            return err
        where = request.url_rule.rule if request.url_rule else "(no route)"
        log.error("%s %s failed: %s: %s", request.method, where, type(err).__name__, str(err).splitlines()[0]
                  if str(err) else "")
        unavailable = isinstance(err, DATABASE_UNAVAILABLE)
        status, retry = (503, {"Retry-After": str(RETRY_AFTER_S)}) if unavailable else (500, {})
        if request.path.startswith("/api/"):
            return jsonify(error="the server failed; try again"), status, retry
        return render_template("message.html", title=say_on_page("server_error_title"),
                               message=say_on_page("server_error")), status, retry

    @app.after_request
    def headers(response):
        if request.path.startswith(("/api/", "/task/", "/admin")):
            response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["Referrer-Policy"] = "no-referrer"
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
          threads: int = 8, insecure_cookies: bool = False, workers: int = 1, database: str | None = None,
          secrets_path: str | Path | None = None, trusted_proxies: int = 0,
          min_free_disk_mb: int = MIN_FREE_DISK_MB) -> None:
    """Serve the experiment until interrupted (blocking): waitress in this process, or
    ``workers`` gunicorn processes (Linux) sharing the experiment's database; each reads the study's
    rules from the folder (``study_rules.RULES_FILE``)."""
    if workers < 1:
        raise ServerSetupError(f"--workers must be at least 1, got {workers}")
    if workers > 1 and sys.platform == "win32":
        raise ServerSetupError("--workers > 1 needs gunicorn, which does not run on Windows; use --threads")
    if trusted_proxies < 0:
        raise ServerSetupError(f"--trusted-proxies must be 0 or more, got {trusted_proxies}")
    check_port_free(host, port)
    # checks; creates tables and secrets once, before any worker
    study = open_study(expdir, database=database, secrets_path=secrets_path)
    if not load_rules(study.expdir.root).pilot_only:
        refuse_unfilled_texts(study)
    if open_message:
        base = f"http://{host}:{port}"
        print(f"Serving experiment {study.experiment.name!r} ({study.n_groups} groups) from {study.expdir.root} "
              f"({workers} process{'es' if workers > 1 else ''} x {threads} threads)")
        print(f"  participants: {base}/   (Prolific: {base}/?PROLIFIC_PID={{{{%PROLIFIC_PID%}}}}"
              "&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}})")
        admin_state = "open" if study.secrets.get("admin_password") else \
            "closed until `cuebench serve admin-password EXPDIR`"
        print(f"  admin:        {base}/admin/   ({admin_state})")
        print(f"  secrets:      {study.secrets.path}")
        print(f"  rules:        {load_rules(study.expdir.root).describe()}")
        print("Press Ctrl+C to stop; every stored trial is committed.", flush=True)
    study.close()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    def make_app() -> Flask:
        app = create_app(expdir, insecure_cookies=insecure_cookies, database=database, secrets_path=secrets_path,
                         trusted_proxies=trusted_proxies, min_free_disk_mb=min_free_disk_mb)
        leave_out_of_garbage_collection()
        return app

    if workers > 1:
        from .workers import run_gunicorn

        allow_open_files(CONNECTION_LIMIT + 100)
        run_gunicorn(make_app, host, port, workers, threads, IDLE_TIMEOUT_S, CONNECTION_LIMIT, trusted_proxies)
        return
    from .waitress_server import run_waitress

    allow_open_files(CONNECTION_LIMIT + 100)
    app = make_app()
    # poll, not select: select cannot watch a socket numbered beyond 1023
    run_waitress(app, app.extensions["cuebench_answers"], trusted_proxies, host=host, port=port, threads=threads,
                 ident="cuebench", connection_limit=CONNECTION_LIMIT, channel_timeout=IDLE_TIMEOUT_S,
                 asyncore_use_poll=True, max_request_body_size=MAX_REQUEST_BYTES + 1,
                 **waitress_proxy_settings(trusted_proxies))


def refuse_unfilled_texts(study: Study) -> None:
    """No participant reads a text whose ``[[...]]`` placeholders (the default consent's researcher, purpose,
    approval, risks, retention) are not filled in: refused in one line naming them (``cuebench.texts.check_filled``),
    unless only pilots are served (``--pilot-only``)."""
    try:
        check_filled(study.expdir, study.experiment)
    except TextsUnfilledError:
        study.close()
        raise


def leave_out_of_garbage_collection() -> None:
    """Exempt what the server holds from its start on (modules, the study, templates: some 100,000 objects)
    from Python's full garbage collections. Each such collection stops every thread of the process while
    it looks at all of them, about 50 ms here, once or twice in a 200-participant run, and each time
    every answer in flight waited: a dozen trials 50 ms late set the later-trial p99."""
    gc.collect()
    gc.freeze()


def allow_open_files(needed: int) -> None:
    """Raise this process's limit of open files (a connection is one) towards ``needed``, as far as
    the hard limit allows: Linux's usual soft limit, 1024, is below ``CONNECTION_LIMIT``."""
    try:
        import resource
    except ImportError:  # Windows: no such limit
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed if hard == resource.RLIM_INFINITY else min(needed, hard),
                                                    hard))
