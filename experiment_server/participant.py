"""The participant side: entry link, consent, the task page and its JSON API.

Flow: ``/`` (Prolific's ``PROLIFIC_PID``/``STUDY_ID``/``SESSION_ID`` or an entry ``code``)
shows the consent page; ``POST /start`` assigns a group and redirects to
``/task/<token>``, whose script runs instructions, the browser check, practice and the
blocks. The token in the task URL is the participant's only credential (stored hashed).
The plan the browser receives has image URLs, choices, timing and opaque trial keys, never
correct answers, trial ids, conditions or the assignment plan; each trial is posted on its own and checked before it is stored.
"""

from __future__ import annotations

import io
import mimetypes
import re
import secrets

from flask import Blueprint, abort, current_app, jsonify, redirect, render_template, request, send_file, url_for
from PIL import Image

from human_tasks.masks import pink_noise_mask, trial_mask_seed
from cuebench.expdir import OutsideExperimentError
from cuebench.images import strip_metadata
from cuebench.responses import ResponseConflict, trial_row

from .study import PROLIFIC_COMPLETE_URL, Study, study_of
from .db import AlreadyParticipated, Participant
from .validation import Rejected, allowed_responses, check_trial_post

bp = Blueprint("participant", __name__)
ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ENTRY_PARAMS = ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID", "code")
SCREEN_REASON_MAX = 500
START_NONCE = "start_nonce"


def _study() -> Study:
    return study_of(current_app)


def _entry_values(source) -> dict[str, str | None]:
    """The entry parameters, each checked to be a plain id (they end up in the database and in links)."""
    values = {}
    for name in ENTRY_PARAMS:
        value = (source.get(name) or "").strip()
        if value and not ID_PATTERN.match(value):
            raise Rejected(400, f"URL parameter {name}={value!r} is not a valid id (letters, digits, '-' and '_', "
                                "at most 64)")
        values[name] = value or None
    return values


def _participant(token: str) -> Participant:
    participant = _study().db.by_token(token)
    if participant is None:
        raise Rejected(403, "unknown session token; use the link you were given")
    return participant


def _outcome(study: Study, participant: Participant) -> dict:
    """What the completion page shows: the code for the participant's final status, and Prolific's redirect."""
    code = study.completion_code(participant.status)
    redirect_url = PROLIFIC_COMPLETE_URL.format(code=code) if participant.is_prolific else None
    return {"status": participant.status, "code": code, "redirect": redirect_url}


@bp.get("/")
def entry():
    values = _entry_values(request.args)
    return render_template("consent.html", entry=values, experiment=_study().experiment.name,
                           nonce=secrets.token_urlsafe(16))


def _start_token(study: Study, values: dict[str, str | None]) -> str | None:
    """The session token a start request stands for, so that repeating it (a double click, a
    retry after a reply lost to a crash) lands in the same session instead of "already taken
    part": derived from what only this person's link or form carries, the Prolific ID with
    Prolific's per-attempt SESSION_ID, else the entry code, else the form's one-time nonce.
    None (a random token) when the request carries none of them."""
    nonce = request.form.get(START_NONCE, "")
    if nonce and not ID_PATTERN.match(nonce):
        raise Rejected(400, f"form field {START_NONCE}={nonce!r} is not a valid nonce")
    if values["PROLIFIC_PID"] and values["SESSION_ID"]:
        return study.start_token(f"prolific:{values['PROLIFIC_PID']}:{values['SESSION_ID']}")
    if values["PROLIFIC_PID"] is None and values["code"]:
        return study.start_token(f"code:{values['code']}")
    return study.start_token(f"nonce:{nonce}") if nonce else None


@bp.post("/start")
def start():
    study = _study()
    values = _entry_values(request.form)
    if request.form.get("consent") != "yes":
        return render_template("consent.html", entry=values, experiment=study.experiment.name,
                               nonce=request.form.get(START_NONCE) or secrets.token_urlsafe(16),
                               error="Please tick the consent box to take part."), 400
    try:
        _, token = study.db.start(study.experiment.name, study.n_groups, prolific_pid=values["PROLIFIC_PID"],
                                  study_id=values["STUDY_ID"], prolific_session=values["SESSION_ID"],
                                  entry_code=values["code"], token=_start_token(study, values))
    except AlreadyParticipated as err:
        return render_template("message.html", title="Already taken part",
                               message=f"{err}. Each person can take part once."), 409
    return redirect(url_for("participant.task", token=token), code=303)


@bp.get("/task/<token>")
def task(token: str):
    _participant(token)
    return render_template("task.html", token=token)


@bp.get("/stimuli/<path:filename>")
def stimulus(filename: str):
    """A stimulus file with its metadata stripped (folders built before provenance left the PNGs
    still carry it), never a file a symlink leads to outside the experiment."""
    try:
        path = _study().expdir.stimulus_file(filename)
        data = strip_metadata(path.read_bytes())
    except (OutsideExperimentError, OSError):
        abort(404)
    response = send_file(io.BytesIO(data), mimetype=mimetypes.guess_type(path.name)[0] or "application/octet-stream",
                         max_age=7 * 24 * 3600)
    response.headers["Cache-Control"] = "public, max-age=604800, immutable"
    return response


def _trial_plan(study: Study, token: str, scheduled) -> dict:
    experiment = study.experiment
    trial = experiment.trial(scheduled.trial_id)
    timing = trial.timing
    images = [url_for("participant.stimulus", filename=experiment.stimuli[s].path.split("/", 1)[1]) for s in trial.stimuli]
    return {
        "index": scheduled.index,
        "trial_key": study.trial_key(trial.trial_id),
        "type": trial.trial_type,
        "practice": trial.role == "practice",
        "block": scheduled.block,
        "break_before": scheduled.break_before,
        "images": images,
        "mask": url_for("participant.mask", token=token, index=scheduled.index)
        if trial.trial_type == "classify" and timing.mask else None,
        "choices": allowed_responses(experiment, trial),
        "instruction": trial.instruction,
        "timing": {"fixation": timing.fixation or 0, "stimulus": timing.stimulus, "mask": timing.mask or 0,
                   "response_window": timing.response_window, "iti": timing.iti,
                   "response_from_onset": timing.response_from_onset},
    }


@bp.get("/api/session/<token>")
def plan(token: str):
    study = _study()
    participant = _participant(token)
    answered = study.store.answered_indices(study.experiment.name, participant.code, participant.session)
    body = {
        "participant": participant.code,
        "status": participant.status,
        "trials": [_trial_plan(study, token, s) for s in study.sequence(participant)],
        "answered": sorted(answered),
    }
    if participant.status != "in_progress":
        body["outcome"] = _outcome(study, participant)
    return jsonify(body)


@bp.get("/api/session/<token>/mask/<int:index>.png")
def mask(token: str, index: int):
    """The trial's 1/f noise mask, made here from its seed so it is fresh per trial yet reproducible."""
    study = _study()
    return mask_png(study, _scheduled_trial(study, _participant(token), index))


def mask_png(study: Study, trial):
    """The PNG response of a trial's mask (the fixed sequence's and the adaptive blocks' trials alike)."""
    stim = study.experiment.stimuli[trial.stimuli[0]]
    seed = trial_mask_seed(trial.mask_seed, study.experiment.name, trial.trial_id)
    buf = io.BytesIO()
    Image.fromarray(pink_noise_mask(stim.width or 224, seed)).save(buf, format="PNG")
    buf.seek(0)
    return send_file(buf, mimetype="image/png")


def _scheduled_trial(study: Study, participant: Participant, index: int):
    sequence = study.sequence(participant)
    if not 0 <= index < len(sequence):
        raise Rejected(404, f"trial index {index} is not in this participant's sequence (0..{len(sequence) - 1})")
    return study.experiment.trial(sequence[index].trial_id)


def _in_progress(participant: Participant) -> None:
    if participant.status != "in_progress":
        raise Rejected(409, f"this session has ended ({participant.status}); nothing more is stored")


@bp.post("/api/session/<token>/trial/<int:index>")
def post_trial(token: str, index: int):
    study = _study()
    participant = _participant(token)
    _in_progress(participant)
    trial = _scheduled_trial(study, participant, index)
    measured = check_trial_post(study.experiment, trial, study.trial_key(trial.trial_id), request.get_json(silent=True))
    row = trial_row(study.experiment, trial, observer=participant.code, observer_kind="human",
                    session=participant.session, trial_index=index, response=measured.pop("response"),
                    group=participant.group, **measured)
    try:
        result = study.answers.write(row, participant.code)
    except ResponseConflict as err:
        raise Rejected(409, str(err)) from None
    return jsonify(index=index, stored=result.stored), 201 if result.stored else 200


@bp.post("/api/session/<token>/screen")
def screen_out(token: str):
    """The browser check failed: end the session with the screened-out code and free the group slot."""
    study = _study()
    participant = _participant(token)
    payload = request.get_json(silent=True)
    reason = payload.get("reason") if isinstance(payload, dict) else None
    if not isinstance(reason, str) or not reason:
        raise Rejected(400, "field 'reason' (why the browser check failed) is missing")
    if participant.status == "in_progress":
        participant = study.db.set_status(participant.code, "screened_out", reason[:SCREEN_REASON_MAX])
    return jsonify(_outcome(study, participant))


@bp.post("/api/session/<token>/complete")
def complete(token: str):
    """Hand out the completion code, only once every trial of the sequence is stored."""
    study = _study()
    participant = _participant(token)
    if participant.status == "in_progress":
        missing = study.missing_indices(participant)
        if missing:
            return jsonify(error=f"{len(missing)} trials are not stored yet", missing=missing), 409
        attention = study.store.rows("experiment=? AND observer=? AND session=? AND role='attention'",
                                     [study.experiment.name, participant.code, participant.session])
        failed = any(r["correct"] == 0 for r in attention)
        participant = study.db.set_status(participant.code, "failed_attention" if failed else "finished")
    return jsonify(_outcome(study, participant))
