"""The participant side: entry link, consent, the task page and its JSON API.

Flow: ``/`` (Prolific's ``PROLIFIC_PID``/``STUDY_ID``/``SESSION_ID`` or an entry ``code``)
shows the consent page and gives the browser a random id in a cookie; ``POST /start``
assigns a group and redirects to ``/task/<token>``, whose script runs instructions, the
browser check, a screen calibration where the experiment sets the stimulus size in degrees,
practice, the blocks and the study's questionnaire, if it has one. The token in the task URL is the participant's
only credential (stored hashed). An entry code is not one: starting again with it resumes
the session only in the browser that started it (the token is derived from the code *and*
the browser's id; in another browser it starts a new session, marked for review), and the
start form's nonce is bound to that browser too, so another site cannot start a session in a
participant's browser (CSRF). Starts are rate-limited per client address (counted once the nonce and
consent passed), and an address may hold only a few live sessions that have not answered yet.
The plan the browser receives has image URLs, choices, timing and opaque trial keys, never
correct answers (but a practice trial's, its feedback), trial ids, conditions or the assignment plan; each trial is
posted on its own and checked before it is stored.
"""

from __future__ import annotations

import io
import logging
import mimetypes
import re
import secrets
from functools import lru_cache

from flask import (Blueprint, abort, current_app, jsonify, make_response, redirect, render_template, request,
                   send_file, url_for)
from PIL import Image

from human_tasks.masks import pink_noise_mask, trial_mask_seed
from cuebench.words import browser_words
from cuebench.exclusions import ATTENTION_CHECK, note_attention_answer
from cuebench.expdir import OutsideExperimentError
from cuebench.images import stripped_file
from cuebench.questionnaire import QuestionnaireError, store_answers
from cuebench.responses import ResponseConflict, trial_row
from cuebench.runner_contract import TrialPlan

from .cookie_policy import secure_cookie
from .study import PROLIFIC_COMPLETE_URL, Study, study_of
from .db import (EXPIRED, OUTCOMES, Participant, PlaceLost, SessionWithdrawn, StudyFull, TooManyWaiting,
                 hash_token, prolific_identity)
from .study_rules import START_WINDOW_S, StudyRules
from .plausibility import review_reason, server_time
from .screening import agent_refusal, check_failure
from .validation import (BLIND_SPOT_DEGREES, Rejected, check_calibration, check_trial_post, parse_json_body,
                         required_text)

bp = Blueprint("participant", __name__)
log = logging.getLogger("cuebench.serve")
ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ENTRY_PARAMS = ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID", "code")
"""What an entry link may carry. A pilot session (stored as ``observer_kind = "pilot"``) comes only
from an entry code the researcher made with ``cuebench serve codes --pilot`` (stored in the
database): nothing a participant can add to their own link makes one."""
SCREEN_REASON_MAX = 500
START_NONCE = "start_nonce"
BROWSER_COOKIE = "cuebench_browser"
BROWSER_COOKIE_DAYS = 30
BROWSER_ID = re.compile(r"^[A-Za-z0-9_-]{32}$")


def _study() -> Study:
    return study_of(current_app)


def _entry_values(source) -> dict[str, str | None]:
    """The entry parameters, each checked to be a plain id (they end up in the database and in links)."""
    values = {}
    for name in ENTRY_PARAMS:
        value = (source.get(name) or "").strip()
        if value and not ID_PATTERN.match(value):
            raise Rejected(400, _study().say("bad_link_parameter", name=name, value=repr(value), max=64))
        values[name] = value or None
    return values


def _rules() -> StudyRules:
    return current_app.config["CUEBENCH_RULES"]


def _participant(token: str) -> Participant:
    """The session of a token; one past ``--time-limit`` ends here, as ``expired``, at its next request."""
    study = _study()
    participant = study.db.by_token(token)
    if participant is None:
        study.db.refuse_withdrawn(token)
        raise Rejected(403, study.say("unknown_session"))
    limit = _rules().time_limit_min
    if limit is not None and participant.status == "in_progress" and participant.runner == "web" and \
            study.db.clock() - participant.created_at > limit * 60:
        log.warning("participant %s: session ended at the time limit of %g minutes", participant.code, limit)
        participant = study.db.set_status(participant.code, EXPIRED)
    return participant


ENDED_TEXTS = {EXPIRED: "time_up", "failed_attention": "ended_early"}
"""A status that ends a session before its last trial -> the text (``texts/NAME.md``) its page shows."""


def _outcome(study: Study, participant: Participant) -> dict:
    """What the completion page shows: the code for the participant's final status (none for a session that
    ran past the time limit), Prolific's redirect, and the researcher's text for a session that ended early."""
    status = participant.status
    code = study.completion_code(status) if status != EXPIRED else None
    redirect_url = PROLIFIC_COMPLETE_URL.format(code=code) if participant.is_prolific and code else None
    early = status == EXPIRED or (status == "failed_attention" and _rules().end_on_failed_attention)
    return {"status": status, "code": code, "redirect": redirect_url,
            **({"reason": participant.screen_reason} if status == "screened_out" else {}),
            **({"message": study.text(ENDED_TEXTS[status])} if early else {})}


def _browser_id() -> str | None:
    value = request.cookies.get(BROWSER_COOKIE, "")
    return value if BROWSER_ID.match(value) else None


def _closed_page():
    """The latecomers' page (``texts/closed.md``): the study has reached its recruitment target."""
    return render_template("message.html", title=_study().say("closed_title"), html=_study().text("closed"),
                           page_id="closed"), 200


def _is_pilot(study: Study, values: dict[str, str | None]) -> bool:
    """An entry code of ``cuebench serve codes --pilot``."""
    return study.db.is_pilot_code(study.experiment.name, values["code"])


def _returning(study: Study, values: dict[str, str | None], browser: str | None) -> bool:
    """Whether the entry link leads back to a session that exists (it resumes, whatever the target)."""
    if values["PROLIFIC_PID"] and values["SESSION_ID"]:
        identity = prolific_identity(values["PROLIFIC_PID"], values["SESSION_ID"])
    elif values["code"] and browser:
        identity = f"code:{values['code']}:browser:{browser}"
    else:
        return False
    return study.db.started(study.experiment.name, hash_token(identity))


def _refuse_another_prolific_study(values: dict[str, str | None]) -> None:
    """A Prolific link naming a study other than the one the server collects for (``--prolific-study-id``)."""
    expected = _rules().prolific_study_id
    if expected and values["PROLIFIC_PID"] and values["STUDY_ID"] != expected:
        raise Rejected(403, _study().say("prolific_other_study"))


@bp.errorhandler(SessionWithdrawn)
def withdrawn(_err: SessionWithdrawn):
    """A request of a withdrawn person's session, whenever it is found out (its token, its start, its
    answer's transaction): 410 in the study's language, answered as every refusal is (``app``)."""
    return current_app.handle_user_exception(Rejected(410, _study().say("session_withdrawn")))


def _refuse_all_but_pilots(study: Study, values: dict[str, str | None]) -> None:
    """``serve --pilot-only``: a link without a pilot code is told the study is not open yet."""
    if _rules().pilot_only and not _is_pilot(study, values):
        raise Rejected(403, study.say("pilots_only"))


@bp.get("/")
def entry():
    values = _entry_values(request.args)
    _refuse_another_prolific_study(values)
    study = _study()
    _refuse_all_but_pilots(study, values)
    if _rules().capped and not _is_pilot(study, values) and study.closed(_rules()) and \
            not _returning(study, values, _browser_id()):
        return _closed_page()
    browser = _browser_id() or secrets.token_urlsafe(24)
    response = make_response(render_template("consent.html", entry=values,
                                             consent=_study().text("consent"),
                                             device_rules=_rules().device.for_page(),
                                             nonce=_study().start_nonce(browser)))
    response.set_cookie(BROWSER_COOKIE, browser, max_age=BROWSER_COOKIE_DAYS * 24 * 3600, httponly=True,
                        samesite="Lax", secure=secure_cookie())
    return response


def _start_identity(values: dict[str, str | None], browser: str) -> str:
    """What a start request stands for, so that repeating it (a double click, a retry after a
    reply lost to a crash, the link opened again) lands in the same session instead of
    "already taken part": the Prolific ID with Prolific's per-attempt SESSION_ID (a second
    factor only the participant's link carries), else the entry code together with this
    browser's id, else the form's one-time nonce. The session token is derived from it with
    the server's key; the session is found again by it (``db.ServerDB.start``). Another
    identity under the same Prolific ID or code starts a session of its own, marked for review
    (``db`` module docstring): a start is never refused for what a link names."""
    if values["PROLIFIC_PID"] and values["SESSION_ID"]:
        return prolific_identity(values["PROLIFIC_PID"], values["SESSION_ID"])
    if values["PROLIFIC_PID"] is None and values["code"]:
        return f"code:{values['code']}:browser:{browser}"
    return f"nonce:{request.form[START_NONCE]}"


def _refuse_foreign_start(study: Study) -> str:
    """The browser's id, when the form's nonce was made for this browser; else refuse (another
    site's form, an old page, cookies off)."""
    browser, nonce = _browser_id(), request.form.get(START_NONCE, "")
    if browser is None or not study.nonce_matches(nonce, browser):
        raise Rejected(400, study.say("foreign_start"))
    return browser


def _refuse_when_disk_low(study: Study) -> None:
    """503 for a new session while the database's disk is nearly full (logged once per process; the
    admin page says so too), before the answers of those already taking part cannot be stored."""
    free_mb = study.free_disk_mb()
    if free_mb is not None and free_mb < current_app.config["CUEBENCH_MIN_FREE_DISK_MB"]:
        if study.first_report("low disk"):
            log.error("only %d MB free on the disk of %s: new participants are refused until there is %d MB",
                      free_mb, study.expdir.responses_file, current_app.config["CUEBENCH_MIN_FREE_DISK_MB"])
        raise Rejected(503, study.say("no_new_participants"))


def _agent_refused(study: Study) -> tuple[str, str] | None:
    """(the verdict, the participant's words) when the request's user agent breaks the study's browser or
    touch rules (``screening.agent_refusal``), else None."""
    refusal = agent_refusal(_rules().device, request.headers.get("User-Agent", ""))
    if refusal is None:
        return None
    verdict, key, values = refusal
    if "allowed" in values:
        values = {**values, "allowed": study.say("device_or").join(values["allowed"])}
    return verdict, study.say(key, **values)


@bp.post("/start")
def start():
    """Start (or resume) a session. The start allowance of the client's address is spent only by a start
    that passed the form's nonce and consent checks: another site's form or a replayed page costs nobody
    their starts."""
    study = _study()
    _refuse_when_disk_low(study)
    values = _entry_values(request.form)
    browser = _refuse_foreign_start(study)
    if request.form.get("consent") != "yes":
        return render_template("consent.html", entry=values,
                               consent=study.text("consent"),
                               device_rules=_rules().device.for_page(),
                               nonce=request.form[START_NONCE],
                               error=study.say("consent_missing")), 400
    if values["PROLIFIC_PID"] and not values["SESSION_ID"]:
        raise Rejected(400, study.say("prolific_no_session"))
    _refuse_another_prolific_study(values)
    _refuse_all_but_pilots(study, values)
    pilot = _is_pilot(study, values)
    refused = None if pilot else _agent_refused(study)
    if refused is not None:
        return render_template("message.html", title=study.say("device_unfit_title"), message=refused[1]), 403
    if study.db.take_slot("start", request.remote_addr or "", _rules().start_limit, START_WINDOW_S) is None:
        return render_template("message.html", title=study.say("too_many_starts_title"),
                               message=study.say("too_many_starts")), 429
    identity = _start_identity(values, browser)
    try:
        _, token = study.db.start(study.experiment.name, study.n_groups, prolific_pid=values["PROLIFIC_PID"],
                                  study_id=values["STUDY_ID"], prolific_session=values["SESSION_ID"],
                                  entry_code=values["code"], identity=identity, token=study.start_token(identity),
                                  pilot=pilot, full=_rules().full if _rules().capped else None,
                                  address=request.remote_addr or "", unanswered_cap=_rules().unanswered_per_address)
    except StudyFull as err:
        if err.for_good:
            return _closed_page()
        return render_template("message.html", title=study.say("full_for_now_title"),
                               message=study.say("full_for_now")), 200
    except TooManyWaiting:
        return render_template("message.html", title=study.say("too_many_waiting_title"),
                               message=study.say("too_many_waiting")), 429
    return redirect(url_for("participant.task", token=token), code=303)


@bp.get("/task/<token>")
def task(token: str):
    _participant(token)
    return render_template("task.html", token=token, device_rules=_rules().device.for_page())


@bp.get("/stimuli/<path:filename>")
def stimulus(filename: str):
    """A stimulus file with its metadata stripped (folders built before provenance left the PNGs
    still carry it), never a file a symlink leads to outside the experiment. A stimulus of the
    experiment that cannot be read (deleted after the server started) is logged once per file."""
    study = _study()
    try:
        path = study.expdir.stimulus_file(filename)
        data = stripped_file(path)
        if filename in study.shown_together:
            data, path = _uniform_png(data), path.with_suffix(".png")
    except (OutsideExperimentError, OSError, ValueError) as err:  # ValueError: a NUL in the name
        if filename in study.stimulus_names and study.first_report(filename):
            log.error("stimulus %s cannot be served (%s): answered 404; participants who need it cannot go on",
                      f"stimuli/{filename}", type(err).__name__)
        abort(404)
    response = send_file(io.BytesIO(data), mimetype=mimetypes.guess_type(path.name)[0] or "application/octet-stream",
                         max_age=7 * 24 * 3600)
    response.headers["Cache-Control"] = "public, max-age=604800, immutable"
    return response


@lru_cache(maxsize=256)
def _uniform_png(data: bytes) -> bytes:
    """An image as uncompressed RGB PNG, whose size depends on its dimensions only. The images of
    one trial differ in how well they compress (an original photo against texture syntheses of
    it), so their file sizes told the odd one out in 72 % of DiST's triplets; the same bytes per
    pixel tell nothing. Made once per process for the images asked for most."""
    buf = io.BytesIO()
    Image.open(io.BytesIO(data)).convert("RGB").save(buf, format="PNG", compress_level=0)
    return buf.getvalue()


@bp.post("/api/session/<token>/image-failed")
def image_failed(token: str):
    """The web task gave up loading an image (``task/images.js``'s bounded retries) and told the participant:
    logged once per image, with what the server knows of it."""
    study = _study()
    participant = _participant(token)
    _in_progress(participant)
    payload = parse_json_body(request.get_data())
    url = required_text(payload, "url", "the image that could not be loaded")
    status = payload.get("status")
    name = url.split("/stimuli/", 1)[1] if "/stimuli/" in url else None
    known = name in study.stimulus_names
    logged = study.first_report(f"browser:{name if known else 'mask'}")
    if logged:
        present = known and study.expdir.stimulus_file(name).is_file()
        what = f"stimuli/{name}" if known else "a trial's noise mask"
        log.error("participant %s could not load %s (last HTTP status %s); the file %s", participant.code, what,
                  status if isinstance(status, int) else "none: network error",
                  "is present (a network problem on their side?)" if present else "is missing" if known
                  else "is made per request")
    return jsonify(logged=logged), 202


def trial_plan(study: Study, token: str, scheduled, adaptive_api: str | None = None) -> TrialPlan:
    """The plan the browser shows ``scheduled`` by; a trial of an adaptive block (``adaptive_api``: the block's
    path) has its mask there and posts its answer there at once."""
    experiment = study.experiment
    trial = experiment.trial(scheduled.trial_id)
    masked = trial.card.masked and trial.timing.mask
    if adaptive_api is None:
        mask = url_for("participant.mask", token=token, index=scheduled.index) if masked else None
        post = None
    else:
        mask = f"{adaptive_api}/mask/{scheduled.index}.png" if masked else None
        post = f"{adaptive_api}/trial/{scheduled.index}"
    images = [url_for("participant.stimulus", filename=experiment.stimuli[s].path.split("/", 1)[1])
              for s in trial.stimuli]
    return TrialPlan.build(experiment, trial, scheduled.index, scheduled.block, scheduled.break_before,
                           trial_key=study.trial_key(trial.trial_id), images=images, mask=mask,
                           grid=study.grid.places(experiment, trial), post=post)


@bp.get("/api/session/<token>")
def plan(token: str):
    study = _study()
    participant = _participant(token)
    answered = study.store.answered_indices(study.experiment.name, participant.code, participant.session)
    body = {
        "participant": participant.code,
        "status": participant.status,
        "trials": [trial_plan(study, token, s).message() for s in study.sequence(participant)],
        "adaptive_trials": [block.trials for block in study.experiment.adaptive],
        "answered": sorted(answered),
        "texts": study.texts(),
        "words": browser_words(study.experiment.language),
        "display": study.display and {**{k: study.display[k] for k in ("stimulus_degrees", "viewing_distance_cm")},
                                      "blind_spot_degrees": BLIND_SPOT_DEGREES},
        "calibration": participant.calibration,
        "questionnaire": _open_questionnaire(study, participant),
        "ends_on_failed_attention": _rules().end_on_failed_attention,
    }
    if participant.status != "in_progress":
        body["outcome"] = _outcome(study, participant)
    return jsonify(body)


def _open_questionnaire(study: Study, participant: Participant) -> list[dict] | None:
    """The questions still to ask this participant (none once answered, or when the study has none)."""
    questionnaire = study.questionnaire()
    if questionnaire is None or participant.questionnaire is not None:
        return None
    return [q.model_dump(exclude_none=True) for q in questionnaire.questions]


@bp.post("/api/session/<token>/calibration")
def post_calibration(token: str):
    """The web task's screen calibration, stored once per participant (a reload keeps the first)."""
    study = _study()
    participant = _participant(token)
    _in_progress(participant)
    if study.display is None:
        raise Rejected(409, "this experiment sets no stimulus size in degrees, so there is nothing to calibrate")
    record = check_calibration(parse_json_body(request.get_data()))
    stored = study.db.set_calibration(participant.code, record)
    return jsonify(stored=stored, calibration=study.db.get(participant.code).calibration), 201 if stored else 200


@bp.post("/api/session/<token>/questionnaire")
def post_questionnaire(token: str):
    """The answers to the study's questionnaire, checked against its declaration, stored once."""
    study = _study()
    participant = _participant(token)
    _in_progress(participant)
    questionnaire = study.questionnaire()
    if questionnaire is None:
        raise Rejected(409, "this study has no questionnaire")
    try:
        answers = questionnaire.check_answers(parse_json_body(request.get_data()))
    except QuestionnaireError as err:
        refused = Rejected(422, str(err))
        refused.details = {"question": err.question} if err.question else {}
        raise refused from None
    with study.db.while_present(participant.code) as conn:
        stored = store_answers(conn, study.experiment.name, participant.code, answers, runner="web")
    return jsonify(stored=stored), 201 if stored else 200


@bp.get("/api/session/<token>/mask/<int:index>.png")
def mask(token: str, index: int):
    """The trial's 1/f noise mask, made here from its seed so it is fresh per trial yet reproducible."""
    study = _study()
    return mask_png(study, _scheduled_trial(study, _participant(token), index))


def mask_png(study: Study, trial):
    """The PNG response of a trial's mask (the fixed sequence's and the adaptive blocks' trials alike)."""
    stim = study.experiment.stimuli[trial.stimuli[0]]
    seed = trial_mask_seed(trial.mask_seed, study.experiment.name, trial.trial_id)
    return send_file(io.BytesIO(_mask_bytes(stim.width or 224, seed)), mimetype="image/png")


@lru_cache(maxsize=1024)
def _mask_bytes(size: int, seed: int) -> bytes:
    """A mask's PNG, made once per process: about 35 ms of CPU each, asked for by every participant."""
    buf = io.BytesIO()
    Image.fromarray(pink_noise_mask(size, seed)).save(buf, format="PNG")
    return buf.getvalue()


def _scheduled_trial(study: Study, participant: Participant, index: int):
    sequence = study.sequence(participant)
    if not 0 <= index < len(sequence):
        raise Rejected(404, f"trial index {index} is not in this participant's sequence (0..{len(sequence) - 1})")
    return study.experiment.trial(sequence[index].trial_id)


class SessionEnded(Rejected):
    """A request of a session that has ended: 409, with the outcome the web task then shows."""

    def __init__(self, participant: Participant):
        super().__init__(409, f"this session has ended ({participant.status}); nothing more is stored")
        self.details = {"outcome": _outcome(_study(), participant)}


def _in_progress(participant: Participant) -> None:
    if participant.status != "in_progress":
        raise SessionEnded(participant)


def _refuse_unfit_agent(study: Study, participant: Participant) -> None:
    """403 for an answer from a user agent the study's browser and touch rules refuse (a pilot is exempt)."""
    refused = None if participant.pilot else _agent_refused(study)
    if refused is not None:
        raise Rejected(403, f"{refused[1]} ({refused[0]}; nothing was stored)")


def _place_lost(study: Study) -> Rejected:
    """409 with the outcome the web task shows: the session's place lapsed and the study filled up since."""
    lost = Rejected(409, "this session's place lapsed and every place of the study is taken; nothing more is stored")
    lost.details = {"outcome": {"status": EXPIRED, "code": None, "redirect": None, "message":
                                f"<h1>{study.say('closed_title')}</h1><p>{study.say('place_lost')}</p>"}}
    return lost


def _keep_place(study: Study, participant: Participant) -> None:
    """A session whose reservation lapsed goes on only while the study has a place for it (``docs/web.md``,
    "Recruitment targets"): it takes the place again, or is told the study is full."""
    try:
        study.db.keep_place(participant, study.n_groups, _rules().full if _rules().capped else None)
    except PlaceLost:
        raise _place_lost(study) from None


@bp.post("/api/session/<token>/trial/<int:index>")
def post_trial(token: str, index: int):
    study = _study()
    participant = _participant(token)
    _in_progress(participant)
    _refuse_unfit_agent(study, participant)
    _keep_place(study, participant)
    trial = _scheduled_trial(study, participant, index)
    measured = check_trial_post(study.experiment, trial, study.trial_key(trial.trial_id),
                                parse_json_body(request.get_data()))
    if "card_moved" in (participant.calibration or {}):  # the server's record: the methods say "not measured"
        measured["device"] = {**measured["device"], "card_moved": participant.calibration["card_moved"]}
    row = trial_row(study.experiment, trial, observer=participant.code, observer_kind=participant.observer_kind,
                    session=participant.session, trial_index=index, response=measured.pop("response"),
                    group=participant.group, created_at=server_time(study.db.clock()), **measured)
    try:
        result = study.answers.write(row, participant.code)
    except ResponseConflict as err:
        raise Rejected(409, str(err)) from None
    if result.stored and row["role"] == "attention":
        with study.db.while_present(participant.code) as conn:
            note_attention_answer(conn, row)
    if result.stored and row["role"] == "attention" and row["correct"] == 0 and _rules().end_on_failed_attention:
        ended = study.db.set_status(participant.code, "failed_attention")
        return jsonify(index=index, stored=True, outcome=_outcome(study, ended)), 201
    return jsonify(index=index, stored=result.stored), 201 if result.stored else 200


@bp.post("/api/session/<token>/screen")
def screen_out(token: str):
    """The browser check failed: end the session with the screened-out code and free the group slot,
    once the server has found the failure in the check's measurements (``screening``): the
    exclusion records the server's verdict, the status the reason the browser showed. Sent again
    (a reply lost on the way), it answers the same outcome without reading the body."""
    study = _study()
    participant = _participant(token)
    if participant.status != "screened_out":
        _in_progress(participant)
        payload = parse_json_body(request.get_data())
        reason = required_text(payload, "reason", "why the browser check failed")
        verdict = check_failure(payload, _rules().device, request.headers.get("User-Agent", ""))
        if verdict is None:
            raise Rejected(422, "the browser check's measurements meet the study's rules, so this session is not "
                                "screened out; reload the page to go on")
        participant = study.db.set_status(participant.code, "screened_out", reason[:SCREEN_REASON_MAX])
        study.db.set_excluded(participant.code, True, f"browser check: {verdict}", "browser check")
    return jsonify(_outcome(study, participant))


def _review_if_implausible(study: Study, participant: Participant) -> None:
    rows = study.store.rows("experiment=? AND observer=? AND session=?",
                            [study.experiment.name, participant.code, participant.session])
    reason = review_reason(study.experiment, rows, participant.finished_at - participant.created_at)
    if reason:
        log.warning("participant %s: %s", participant.code, reason)
        study.db.set_review(participant.code, reason)


def _questions_unanswered(study: Study, participant: Participant) -> bool:
    """Whether the study's questionnaire has a required question and this session stored no answers yet."""
    questionnaire = study.questionnaire()
    return questionnaire is not None and participant.questionnaire is None and \
        any(q.required for q in questionnaire.questions)


def _completed_before(study: Study, participant: Participant) -> bool:
    """Whether another session of this Prolific ID ended with a completion code, or at the time limit
    (``--allow-repeat-completions`` lifts it): Prolific pays one submission per person and study, and a new
    SESSION_ID must not get round the time limit."""
    return participant.is_prolific and not _rules().repeat_completions and study.db.ended_sessions(
        participant.prolific_pid, participant.code, (*OUTCOMES, EXPIRED)) > 0


@bp.post("/api/session/<token>/complete")
def complete(token: str):
    """Hand out the completion code, only once every trial of the sequence and the required questions are
    stored, the session holds a place (``_keep_place``), and its Prolific ID had no code before."""
    study = _study()
    participant = _participant(token)
    if participant.status == "in_progress":
        missing = study.missing_indices(participant)
        if missing:
            return jsonify(error=f"{len(missing)} trials are not stored yet", missing=missing), 409
        if _questions_unanswered(study, participant):
            return jsonify(error="the questionnaire's required questions are not answered yet",
                           questionnaire=True), 409
        if _completed_before(study, participant):
            log.warning("participant %s: refused a second completion code for Prolific ID %s", participant.code,
                        participant.prolific_pid)
            return jsonify(error="this Prolific ID received a completion code for this study before",
                           outcome={"status": participant.status, "code": None, "redirect": None,
                                    "message": f"<p>{study.say('already_completed')}</p>"}), 409
        attention = study.store.rows("experiment=? AND observer=? AND session=? AND role='attention'",
                                     [study.experiment.name, participant.code, participant.session])
        failed = sum(r["correct"] == 0 for r in attention)
        try:
            participant = study.db.set_status(participant.code, "failed_attention" if failed else "finished",
                                              n_groups=study.n_groups,
                                              full=_rules().full if _rules().capped else None)
        except PlaceLost:
            raise _place_lost(study) from None
        if failed and participant.exclusion is None:  # excluded when the check was answered, before this release
            study.db.set_excluded(participant.code, True, f"{failed} of {len(attention)} attention trials wrong",
                                  ATTENTION_CHECK)
        elif not failed:
            _review_if_implausible(study, participant)
    return jsonify(_outcome(study, participant))
