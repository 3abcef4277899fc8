"""The server's own export formats: participants (statuses, times, exclusions) and the Prolific review list.

Both are ``cuebench.export.EXPORT_FORMATS`` entries (entry points of ``cuebench.export_formats``), so ``cuebench export --format
participants|prolific`` and the admin page write the same files. Times are UTC ISO-8601;
the exclusion columns come from the one exclusion log (``cuebench.exclusions``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from cuebench.csvsafe import csv_text
from cuebench.export import ExportError
from cuebench.expdir import ExperimentDir, atomic_write
from cuebench.questionnaire import ANSWER_COLUMN_PREFIX, load_questionnaire

from .db import EXPIRED, Participant, ServerDB

PARTICIPANT_COLUMNS = ("code", "group", "status", "observer_kind", "runner", "prolific_pid", "study_id",
                       "prolific_session", "entry_code", "started_at", "finished_at", "duration_s", "screen_reason",
                       "excluded", "exclusion_reason", "excluded_by", "excluded_at", "px_per_mm", "viewing_distance_cm",
                       "stimulus_css_px", "calibration_method", "calibration_capped", "card_moved", "blind_spot_mm")
CALIBRATION_COLUMNS = {"px_per_mm": "px_per_mm", "viewing_distance_cm": "viewing_distance_cm",
                       "stimulus_css_px": "stimulus_css_px", "calibration_method": "method",
                       "calibration_capped": "capped", "card_moved": "card_moved"}
"""participants.csv column -> field of the web task's screen calibration (``card_moved``: whether the person
moved the card slider at all; False means the pixels per mm are the default, not measured; empty when a
session from before this was recorded)."""
PROLIFIC_COLUMNS = ("participant_id", "action", "reason")


def status_now(p: Participant, now: float) -> str:
    """The participant's status as the admin page and the exports show it: ``expired`` for a web session
    whose reservation lapsed without a final status, else the stored status."""
    lapsed = p.reserved_until is None or p.reserved_until <= now
    return EXPIRED if p.status == "in_progress" and p.runner != "lab" and lapsed else p.status


def iso_time(stamp: float | None) -> str:
    """A stored Unix time as UTC ISO-8601 with seconds (empty when not set)."""
    return "" if stamp is None else datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="seconds")


def duration_s(participant: Participant) -> float | None:
    """Seconds from the start to the final status; None while the session runs."""
    if participant.finished_at is None:
        return None
    return round(participant.finished_at - participant.created_at, 1)


def participant_record(p: Participant, now: float) -> dict:
    """One participants.csv row: what the admin page shows, to join with responses on ``observer`` = ``code``."""
    exclusion = p.exclusion
    return {"code": p.code, "group": p.group, "status": status_now(p, now), "observer_kind": p.observer_kind, "runner": p.runner,
            "prolific_pid": p.prolific_pid, "study_id": p.study_id, "prolific_session": p.prolific_session,
            "entry_code": p.entry_code, "started_at": iso_time(p.created_at), "finished_at": iso_time(p.finished_at),
            "duration_s": duration_s(p), "screen_reason": p.screen_reason, "excluded": p.excluded,
            "exclusion_reason": exclusion.reason if exclusion else None,
            "excluded_by": exclusion.by if exclusion else None, "excluded_at": exclusion.at if exclusion else None,
            **{column: (p.calibration or {}).get(field) for column, field in CALIBRATION_COLUMNS.items()},
            "blind_spot_mm": ";".join(f"{mm:.2f}" for mm in (p.calibration or {}).get("blind_spot_mm", [])) or None,
            **{ANSWER_COLUMN_PREFIX + k: v for k, v in (p.questionnaire or {}).items()}}


def prolific_action(p: Participant, now: float) -> tuple[str, str]:
    """What to do with a Prolific submission, and why: approve who finished and counts; ask the
    screened out to return the study; leave failed attention checks (Prolific allows a rejection
    only under its own attention-check rules), admin exclusions, abandoned (expired) sessions,
    sessions finished faster than their trials can be shown or answered faster than a person can
    (``plausibility``) and sessions sharing a Prolific ID (``db.shared_id_note``) for a person to
    review (and sessions ended at the time limit); wait for running sessions."""
    if p.status == EXPIRED:
        return "review", "session ended at the time limit (--time-limit)"
    if status_now(p, now) == EXPIRED:
        return "review", "session abandoned: no answer within the reservation" + (
            f"; {p.exclusion.label}" if p.exclusion else "")
    if p.status == "in_progress":
        return ("review", f"session still running; {p.review_reason}") if p.review_reason else \
            ("wait", "session still running")
    if p.status == "failed_attention":
        return "review", (f"{p.exclusion.label if p.exclusion else 'failed the attention check'}: reject only as "
                          "Prolific's attention-check policy allows")
    if p.status == "screened_out":
        return "return", f"screened out: {p.screen_reason or 'browser check'}"
    if p.review_reason:
        return "review", p.review_reason
    if p.exclusion is not None:
        return "review", p.exclusion.label
    return "approve", "finished"


def _participants(expdir: ExperimentDir, database: str | None) -> tuple[list[Participant], float]:
    """The participants and the server clock's time now (for :func:`status_now`)."""
    if database is None and not expdir.responses_file.exists():
        raise ExportError(f"{expdir.root} has no participants yet ({expdir.responses_file.name} is missing)")
    experiment = expdir.load().name
    db = ServerDB(database or expdir.responses_file, experiment)
    try:
        return db.participants(experiment), db.clock()
    finally:
        db.close()


def _write_csv(out: Path, columns: tuple[str, ...], records: list[dict]) -> Path:
    atomic_write(out, csv_text(columns, records).encode("utf-8"))
    return out


def export_participants(expdir: ExperimentDir, out: Path, database: str | None = None) -> Path:
    """Participants, web and lab (``runner``): group, status, ISO start/end times, duration, exclusion
    (who, why, when), screen calibration and questionnaire answers (``q_<id>``)."""
    questionnaire = load_questionnaire(expdir)
    questions = tuple(ANSWER_COLUMN_PREFIX + i for i in questionnaire.ids) if questionnaire else ()
    people, now = _participants(expdir, database)
    return _write_csv(Path(out), PARTICIPANT_COLUMNS + questions, [participant_record(p, now) for p in people])


def export_prolific(expdir: ExperimentDir, out: Path, database: str | None = None) -> Path:
    """Prolific review list: each Prolific ID with approve/reject/return/review/wait and the reason."""
    people, now = _participants(expdir, database)
    records = [dict(zip(PROLIFIC_COLUMNS, (p.prolific_pid, *prolific_action(p, now))))
               for p in people if p.prolific_pid and not p.pilot]
    return _write_csv(Path(out), PROLIFIC_COLUMNS, records)
