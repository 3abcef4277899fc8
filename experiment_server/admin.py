"""The admin area: login, progress per group, participants, exclusions, exports.

Closed (503) until ``cuebench serve admin-password EXPDIR`` stores a password hash;
there is no default password. Login state lives in Flask's signed session cookie
(HttpOnly, SameSite=Strict, Secure by default); every POST carries a per-session CSRF
token. Exports call the project's writers (``cuebench.export`` for the common schema and
the model-vs-human raw format, ``human_tasks.psychopy_csv`` for the PsychoPy-style CSV).
"""

from __future__ import annotations

import csv
import hmac
import io
import secrets
import tempfile
import zipfile
from collections import Counter
from functools import wraps
from pathlib import Path

from flask import Blueprint, abort, current_app, redirect, render_template, request, send_file, session, url_for
from werkzeug.security import check_password_hash, generate_password_hash

from cuebench.errors import CuebenchError
from cuebench.responses import TABLE as RESPONSES

from .study import Study, study_of
from .db import STATUSES

bp = Blueprint("admin", __name__)
PASSWORD_KEY = "admin_password"
MIN_PASSWORD_LENGTH = 10
MAX_FAILED_LOGINS = 5
FAILED_LOGIN_WINDOW_S = 15 * 60


class AdminPasswordError(CuebenchError):
    """The admin password given is unusable (too short)."""


def set_admin_password(study: Study, password: str) -> None:
    """Store the admin password as a salted scrypt hash (werkzeug)."""
    if len(password.strip()) < MIN_PASSWORD_LENGTH:
        raise AdminPasswordError(f"the admin password must have at least {MIN_PASSWORD_LENGTH} characters "
                                 "besides leading and trailing spaces")
    study.db.set_setting(PASSWORD_KEY, generate_password_hash(password))


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
    if not _study().db.setting(PASSWORD_KEY):
        return render_template("message.html", title="Admin closed",
                               message="No admin password is set. Run: cuebench serve admin-password EXPDIR"), 503
    if request.method == "POST":
        sent = request.form.get("csrf_token", "")
        if not sent or "csrf" not in session or not hmac.compare_digest(sent, session["csrf"]):
            abort(400, description="CSRF token missing or wrong; reload the page and try again")


def login_required(view):
    @wraps(view)
    def wrapped(*args, **kwargs):
        if not session.get("admin"):
            return redirect(url_for("admin.login", next=request.path))
        return view(*args, **kwargs)

    return wrapped


@bp.route("/login", methods=["GET", "POST"])
def login():
    error = None
    if request.method == "POST":
        db, address = _study().db, request.remote_addr or ""
        if db.recent_login_failures(address, FAILED_LOGIN_WINDOW_S) >= MAX_FAILED_LOGINS:
            abort(429, description="too many failed logins; try again in 15 minutes")
        if check_password_hash(db.setting(PASSWORD_KEY), request.form.get("password", "")):
            session.clear()
            session.permanent = True
            session["admin"] = True
            target = request.args.get("next", "")
            return redirect(target if target.startswith("/admin") else url_for("admin.dashboard"))
        db.record_login_failure(address, FAILED_LOGIN_WINDOW_S)
        error = "Wrong password."
    return render_template("admin_login.html", error=error), 401 if error else 200


@bp.post("/logout")
def logout():
    session.clear()
    return redirect(url_for("admin.login"))


def progress(study: Study) -> list[dict]:
    """Per group: participants by status, live reservations, and trials stored."""
    people = study.db.participants(study.experiment.name)
    now = study.db.clock()
    counts = Counter((p.group, p.status) for p in people)
    live = Counter(p.group for p in people if p.status == "in_progress" and (p.reserved_until or 0) > now)
    stored = dict(study.store.conn.execute(
        f'SELECT "group", COUNT(*) FROM {RESPONSES} WHERE experiment=? AND observer_kind=\'human\' GROUP BY "group"',
        [study.experiment.name]).fetchall())
    fill = study.db.fill(study.experiment.name, study.n_groups)
    return [{"group": g, "fill": fill[g], "reserved": live[g], "trials": stored.get(g, 0),
             **{s: counts[(g, s)] for s in STATUSES}} for g in range(study.n_groups)]


@bp.get("/")
@login_required
def dashboard():
    study = _study()
    people = study.db.participants(study.experiment.name)
    answered = dict(study.store.conn.execute(
        f"SELECT observer, COUNT(*) FROM {RESPONSES} WHERE experiment=? AND observer_kind='human' GROUP BY observer",
        [study.experiment.name]).fetchall())
    return render_template("admin.html", experiment=study.experiment, groups=progress(study), people=people,
                           answered=answered, lengths={p.code: len(study.sequence(p)) for p in people},
                           statuses=STATUSES)


@bp.post("/exclude")
@login_required
def exclude():
    study = _study()
    code, reason = request.form.get("code", ""), request.form.get("reason", "").strip()
    if not reason:
        abort(400, description="an exclusion needs a reason")
    if not study.db.exclude(code, reason):
        abort(404, description=f"no participant {code!r}")
    return redirect(url_for("admin.dashboard"))


def _download(path: Path, name: str, mimetype: str):
    return send_file(io.BytesIO(path.read_bytes()), mimetype=mimetype, as_attachment=True, download_name=name)


@bp.get("/export/responses.csv")
@login_required
def export_responses():
    from cuebench.export import export_csv

    study = _study()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "responses.csv"
        export_csv(study.expdir, out, study.database)
        return _download(out, f"{study.experiment.name}-responses.csv", "text/csv")


@bp.get("/export/model-vs-human.zip")
@login_required
def export_model_vs_human():
    from cuebench.export import export_mvh

    study = _study()
    with tempfile.TemporaryDirectory() as tmp:
        export_mvh(study.expdir, Path(tmp), database=study.database)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
            for file in sorted(Path(tmp).rglob("*.csv")):
                archive.write(file, file.relative_to(tmp).as_posix())
        buf.seek(0)
    return send_file(buf, mimetype="application/zip", as_attachment=True,
                     download_name=f"{study.experiment.name}-model-vs-human.zip")


@bp.get("/export/psychopy.csv")
@login_required
def export_psychopy():
    from human_tasks.psychopy_csv import write_psychopy_csv

    study = _study()
    rows = study.store.rows("experiment=? AND observer_kind='human'", [study.experiment.name])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "psychopy.csv"
        write_psychopy_csv(rows, out)
        return _download(out, f"{study.experiment.name}-psychopy.csv", "text/csv")


PARTICIPANT_COLUMNS = ("code", "group", "status", "prolific_pid", "study_id", "prolific_session", "entry_code",
                       "created_at", "finished_at", "screen_reason", "excluded", "exclusion_reason")


@bp.get("/export/participants.csv")
@login_required
def export_participants():
    """Statuses and exclusions per participant, to join with the responses on ``observer`` = ``code``."""
    study = _study()
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(PARTICIPANT_COLUMNS)
    for p in study.db.participants(study.experiment.name):
        writer.writerow([getattr(p, c) for c in PARTICIPANT_COLUMNS])
    return send_file(io.BytesIO(text.getvalue().encode()), mimetype="text/csv", as_attachment=True,
                     download_name=f"{study.experiment.name}-participants.csv")
