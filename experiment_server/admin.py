"""The admin area: login, progress per group, participants, exclusions, exports.

Closed (503) until ``cuebench serve admin-password EXPDIR`` stores a password hash (in the
secrets file); there is no default password. Login state lives in Flask's signed session
cookie (HttpOnly, SameSite=Strict, Secure except over plain HTTP to loopback, see
``cookie_policy``) with the admin generation of the database at login: logging out or
changing the password bumps it, which ends every admin session, in every process,
including cookies copied before. Every POST carries a
per-session CSRF token. Failed logins are counted per client address in the same
transaction that records them, so concurrent guesses cannot overrun the limit. Exports
are the ``cuebench.export.EXPORT_FORMATS`` entries, the same files as ``cuebench export``.
"""

from __future__ import annotations

import hmac
import io
import secrets
import tempfile
import time
import zipfile
from collections import Counter
from functools import wraps
from pathlib import Path

from flask import (Blueprint, abort, current_app, jsonify, redirect, render_template, request, send_file, session,
                   url_for)
from werkzeug.security import check_password_hash, generate_password_hash

from cuebench.errors import CuebenchError
from cuebench.exclusions import ExclusionError
from cuebench.responses import TABLE as RESPONSES

from .study import Study, study_of
from .db import ADMIN_GENERATION
from .exports import EXPIRED, participant_record, status_now
from .quality import page_quality
from .study_rules import RULES_FILE, load_record
from .validation import Rejected

bp = Blueprint("admin", __name__)
PASSWORD_KEY = "admin_password"
MIN_PASSWORD_LENGTH = 10
ADMIN_SESSION_S = 8 * 3600
"""An admin login lasts this long from the login, however active (the cookie's own expiry is renewed
on every request)."""
LOGIN_AT = "login_at"
MAX_FAILED_LOGINS = 5
FAILED_LOGIN_WINDOW_S = 15 * 60


class AdminPasswordError(CuebenchError):
    """The admin password given is unusable (too short)."""


def set_admin_password(study: Study, password: str) -> None:
    """Store the admin password as a salted scrypt hash (werkzeug) and end every admin session."""
    if len(password.strip()) < MIN_PASSWORD_LENGTH:
        raise AdminPasswordError(f"the admin password must have at least {MIN_PASSWORD_LENGTH} characters "
                                 "besides leading and trailing spaces")
    study.secrets.set(PASSWORD_KEY, generate_password_hash(password))
    study.db.bump_admin_generation()


def _study() -> Study:
    return study_of(current_app)


def csrf_token() -> str:
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(24)
    return session["csrf"]


@bp.app_context_processor
def inject_csrf():
    return {"csrf_token": csrf_token}


@bp.before_request
def guard():
    """Closed without a password; every POST must carry the session's CSRF token."""
    if not _study().secrets.get(PASSWORD_KEY):
        return render_template("message.html", title="Admin closed",
                               message="No admin password is set. Run: cuebench serve admin-password EXPDIR"), 503
    if request.method == "POST":
        sent = request.form.get("csrf_token", "")
        if not sent or "csrf" not in session or not hmac.compare_digest(sent, session["csrf"]):
            abort(400, description="CSRF token missing or wrong; reload the page and try again")


def login_required(view):
    @wraps(view)
    def wrapped(*args, **kwargs):
        if session.get(ADMIN_GENERATION) != _study().db.admin_generation() or \
                not time.time() - session.get(LOGIN_AT, 0) < ADMIN_SESSION_S:
            return redirect(url_for("admin.login", next=request.path))
        return view(*args, **kwargs)

    return wrapped


def _after_login() -> str:
    """Where a login goes on to: ``next`` when it is a path of the admin area, else the dashboard."""
    target = request.args.get("next", "")
    if any(ord(c) < 32 or c == "\\" for c in target):
        raise Rejected(400, "the login link's 'next' holds a control character or a backslash")
    return target if target.startswith("/admin") and not target.startswith("//") else url_for("admin.dashboard")


@bp.route("/login", methods=["GET", "POST"])
def login():
    error = None
    if request.method == "POST":
        study = _study()
        target = _after_login()
        attempt = study.db.take_slot("login", request.remote_addr or "", MAX_FAILED_LOGINS, FAILED_LOGIN_WINDOW_S)
        if attempt is None:
            abort(429, description="too many failed logins from your address; try again in 15 minutes")
        if check_password_hash(study.secrets.get(PASSWORD_KEY), request.form.get("password", "")):
            study.db.release_slot(attempt)
            session.clear()
            session.permanent = True
            session[ADMIN_GENERATION] = study.db.admin_generation()
            session[LOGIN_AT] = time.time()
            return redirect(target)
        error = "Wrong password."
    return render_template("admin_login.html", error=error), 401 if error else 200


@bp.post("/logout")
@login_required
def logout():
    """End this session and every other admin session (a cookie copied before still fails)."""
    _study().db.bump_admin_generation()
    session.clear()
    return redirect(url_for("admin.login"))


NOT_BEGUN = "not_begun"
PROGRESS_COLUMNS = (NOT_BEGUN, "in_progress", EXPIRED, "finished", "screened_out", "failed_attention", "excluded",
                    "pilot")
"""The admin page's count columns per group: each person in one, so ``finished`` counts only people who
finished and count (no pilot, no one excluded), and ``not_begun`` the live sessions holding a place
without a stored answer yet (``--hold-minutes``), apart from those running."""


def progress_column(p, now: float) -> str:
    """Which of :data:`PROGRESS_COLUMNS` counts a participant."""
    if p.pilot:
        return "pilot"
    if p.status in ("screened_out", "failed_attention"):
        return p.status
    if p.exclusion is not None:
        return "excluded"
    status = status_now(p, now)
    return NOT_BEGUN if status == "in_progress" and p.runner != "lab" and p.first_answer_at is None else status


def progress(study: Study, people: list | None = None, fill: list[int] | None = None) -> list[dict]:
    """Per group: ``people`` (``ServerDB.standings``; default: everyone) by :data:`PROGRESS_COLUMNS`, live
    reservations, trials stored, and the ``fill`` (default: ``ServerDB.fill``)."""
    people = study.db.standings(study.experiment.name) if people is None else people
    fill = study.db.fill(study.experiment.name, study.n_groups) if fill is None else fill
    now = study.db.clock()
    counts = Counter((p.group, progress_column(p, now)) for p in people)
    live = Counter(p.group for p in people if p.status == "in_progress" and (p.reserved_until or 0) > now
                   and not p.pilot and p.exclusion is None)
    stored = dict(study.store.conn.execute(
        f'SELECT "group", COUNT(*) FROM {RESPONSES} WHERE experiment=? AND observer_kind=\'human\' GROUP BY "group"',
        [study.experiment.name]).fetchall())
    return [{"group": g, "fill": fill[g], "reserved": live[g], "trials": stored.get(g, 0),
             **{s: counts[(g, s)] for s in PROGRESS_COLUMNS}} for g in range(study.n_groups)]


PAGE_SIZE = 50
"""Participants per page of the admin list and the quality panel: a study of 20,000 sessions stays one fast page."""


def _page(total: int) -> tuple[int, int]:
    """(the page asked for by ``?page=``, clamped to those there are; the number of pages)."""
    pages = max(1, -(-total // PAGE_SIZE))
    try:
        page = int(request.args.get("page", "1"))
    except ValueError:
        raise Rejected(400, f"?page={request.args.get('page')!r} is not a page number") from None
    return min(max(page, 1), pages), pages


def recruitment(study: Study) -> tuple[dict, list[int]]:
    """The recruitment target's state (``study_rules``) from the place counts (``ServerDB.places``): sessions
    that count now (finished or live, neither pilot nor excluded), finished alone, whether new people are
    refused for now (``full``) or for good (``closed``); and the groups' fill it was counted from."""
    rules = current_app.config["CUEBENCH_RULES"]
    held, live = study.db.places(study.n_groups)
    fill = [h + n for h, n in zip(held, live)]
    return {"rules": rules, "counting": sum(fill), "finished": sum(held),
            "full": rules.capped and rules.full(fill), "closed": rules.capped and rules.full(held)}, fill


def stored_rules(study: Study) -> dict:
    """Where the rules come from (``study_rules.RULES_FILE``), their recorded changes, newest first, and whether
    the file now says other than this server runs by (changed with ``--update-rules`` since it started)."""
    record = load_record(study.expdir.root)
    return {"file": RULES_FILE, "history": list(reversed(record.history)) if record else [],
            "stale": record is not None and record.rules != current_app.config["CUEBENCH_RULES"]}


def _requested_page():
    """The study, every session's standing, and the participants and quality rows of the page the request
    asks for (``?page=``): what the dashboard and its polled quality panel both show."""
    study = _study()
    standings = study.db.standings(study.experiment.name)
    page, pages = _page(len(standings))
    people = study.db.participants(study.experiment.name, (page - 1) * PAGE_SIZE, PAGE_SIZE)
    return study, standings, page, pages, people, page_quality(study.store.conn, study.experiment.name, people)


@bp.get("/")
@login_required
def dashboard():
    study, standings, page, pages, people, quality = _requested_page()
    state, fill = recruitment(study)
    study.questionnaire()  # a broken live edit shows here even before a participant reaches it
    adaptive = sum(plan.trials for plan in study.experiment.adaptive)  # QUEST+ answers, at most
    return render_template("admin.html", experiment=study.experiment, groups=progress(study, standings, fill),
                           people=people, page=page, pages=pages, total=len(standings), faults=study.faults(),
                           records={p.code: participant_record(p, study.db.clock()) for p in people},
                           answered={code: q["trials"] for code, q in quality.items()},
                           lengths={p.code: len(study.sequence(p)) + adaptive for p in people},
                           recruitment=state, stored_rules=stored_rules(study),
                           statuses=PROGRESS_COLUMNS, exports=EXPORT_FILES, free_disk_mb=study.free_disk_mb(),
                           min_free_disk_mb=current_app.config["CUEBENCH_MIN_FREE_DISK_MB"])


@bp.get("/quality.json")
@login_required
def quality():
    """The live data-quality panel of one page of participants (``quality``), which the admin page polls."""
    study, standings, page, pages, people, rows = _requested_page()
    now = study.db.clock()
    return jsonify(page=page, pages=pages, total=len(standings),
                   flagged=sum(p.review_reason is not None or p.exclusion is not None for p in standings),
                   people=[{**rows[p.code], "group": p.group, "status": status_now(p, now)} for p in people])


@bp.post("/exclude")
@login_required
def exclude():
    return _set_excluded(True)


@bp.post("/include")
@login_required
def include():
    """Take an exclusion back (it stays in the exclusion log's history)."""
    return _set_excluded(False)


def _set_excluded(excluded: bool):
    code, reason = request.form.get("code", ""), request.form.get("reason", "").strip()
    if not reason:
        abort(400, description=f"{'an exclusion' if excluded else 'taking an exclusion back'} needs a reason")
    try:
        found = _study().db.set_excluded(code, excluded, reason, by="admin")
    except ExclusionError as err:
        abort(409, description=str(err))
    if not found:
        abort(404, description=f"no participant {code!r}")
    return redirect(url_for("admin.dashboard"))


EXPORT_FILES = {"responses.csv": ("csv", "text/csv"), "responses.parquet": ("parquet", "application/octet-stream"),
                "model-vs-human.zip": ("mvh", "application/zip"), "psychopy.csv": ("psychopy", "text/csv"),
                "participants.csv": ("participants", "text/csv"), "prolific.csv": ("prolific", "text/csv"),
                "questionnaire.csv": ("questionnaire", "text/csv")}
"""Download name -> (``cuebench.export.EXPORT_FORMATS`` name, MIME type): the admin page and
``cuebench export`` write the same files."""


@bp.get("/export/<name>")
@login_required
def export_file(name: str):
    from cuebench.export import export

    if name not in EXPORT_FILES:
        abort(404, description=f"no export {name!r}")
    fmt, mimetype = EXPORT_FILES[name]
    study = _study()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / name
        written = export(study.expdir.root, fmt, out, study.database)
        buf = io.BytesIO()
        if fmt == "mvh":
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
                for file in sorted(written):
                    archive.write(file, file.relative_to(out).as_posix())
        else:
            buf.write(out.read_bytes())
        buf.seek(0)
    return send_file(buf, mimetype=mimetype, as_attachment=True, download_name=f"{study.experiment.name}-{name}")
