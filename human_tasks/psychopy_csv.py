"""Response rows as a PsychoPy-style data file: one row per trial, Builder's column names.

Labs have scripts that read PsychoPy's ``data/*.csv`` (``participant``, ``session``,
``trials.thisN``, ``key_resp.keys``, ``key_resp.rt`` in seconds, ``frameRate``,
``date``, ``expName`` ...). The lab runner writes this file beside each session and the
web admin exports the same format, so those scripts work on both. The SQLite store stays
the record; this file is derived from it and can always be written again.

Conventions kept from PsychoPy: no answer is written as ``None`` in ``key_resp.keys``
(pandas reads it as missing) with an empty ``key_resp.rt``; ``date`` is the session's
start in PsychoPy's ``%Y-%m-%d_%Hh%M.%S.%f`` form (milliseconds). ``key_resp.keys`` holds
the answer in the trial's terms: the label chosen (by click or key) or the oddity position.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Iterable

from cuebench.csvsafe import csv_text
from cuebench.export import response_rows
from cuebench.expdir import ExperimentDir, atomic_write

from .timing import TIMED_PHASES

TRIAL_FIELDS = ("trial_id", "trial_type", "role", "condition", "level", "category", "texture_category",
                "source_image", "imagename", "correct_answer")
COLUMNS = (
    "trials.thisRepN", "trials.thisTrialN", "trials.thisN",
    *TRIAL_FIELDS,
    "key_resp.keys", "key_resp.corr", "key_resp.rt", "timed_out",
    *(f"{phase}.duration_ms" for phase in TIMED_PHASES),
    *(f"{phase}.frames" for phase in TIMED_PHASES),
    "dropped_frames", "excluded", "exclusion_reason",
    "participant", "observer_kind", "session", "group", "date", "expName", "psychopyVersion", "frameRate",
)


def psychopy_date(iso_time: str | None) -> str:
    """PsychoPy's ``data.getDateStr()`` form of an ISO time: ``2026-11-21_05h13.26.123``."""
    if not iso_time:
        return ""
    stamp = datetime.fromisoformat(iso_time)
    return stamp.strftime("%Y-%m-%d_%Hh%M.%S.") + f"{stamp.microsecond // 1000:03d}"


def _json(value) -> dict:
    if isinstance(value, str) and value:
        return json.loads(value)
    return value if isinstance(value, dict) else {}


def _blank(value):
    return "" if value is None else value


def psychopy_rows(rows: Iterable[dict]) -> list[dict]:
    """Response rows (as ``ResponseStore.rows()`` gives them) in PsychoPy's columns,
    ordered by experiment, participant, session and trial index."""
    rows = sorted(rows, key=lambda r: (r["experiment"], r["observer"], str(r["session"]), int(r["trial_index"])))
    session_start: dict[tuple, str] = {}
    for r in rows:
        key = (r["experiment"], r["observer"], str(r["session"]))
        if r.get("created_at") and (key not in session_start or r["created_at"] < session_start[key]):
            session_start[key] = r["created_at"]
    out = []
    for r in rows:
        measured, frames, device = _json(r.get("timing_measured")), _json(r.get("frames")), _json(r.get("device"))
        answered = r.get("response") not in (None, "")
        rt_ms = r.get("rt_ms")
        line = {
            "trials.thisRepN": 0,
            "trials.thisTrialN": r["trial_index"],
            "trials.thisN": r["trial_index"],
            **{name: _blank(r.get(name)) for name in TRIAL_FIELDS},
            "key_resp.keys": r["response"] if answered else "None",
            "key_resp.corr": _blank(r.get("correct")),
            "key_resp.rt": rt_ms / 1000.0 if answered and rt_ms is not None else "",
            "timed_out": _blank(r.get("timed_out")),
            **{f"{phase}.duration_ms": _blank(measured.get(phase)) for phase in TIMED_PHASES},
            **{f"{phase}.frames": _blank(frames.get(phase)) for phase in TIMED_PHASES},
            "dropped_frames": _blank(r.get("dropped_frames")),
            "excluded": _blank(r.get("excluded")),
            "exclusion_reason": _blank(r.get("exclusion_reason")),
            "participant": r["observer"],
            "observer_kind": r["observer_kind"],
            "session": r["session"],
            "group": _blank(r.get("group")),
            "date": psychopy_date(session_start.get((r["experiment"], r["observer"], str(r["session"])))),
            "expName": r["experiment"],
            "psychopyVersion": device.get("psychopy", ""),
            "frameRate": _blank(r.get("refresh_hz")),
        }
        out.append(line)
    return out


def write_psychopy_csv(rows: Iterable[dict], path: str | Path) -> Path:
    """Write the rows as a PsychoPy-style CSV (atomically: never half a file); returns the path."""
    path = Path(path)
    atomic_write(path, csv_text(COLUMNS, psychopy_rows(rows)).encode("utf-8"))
    return path


def export_psychopy(expdir: ExperimentDir, out: Path, database: str | None = None) -> Path:
    """PsychoPy-style CSV of the people's answers (Builder's column names): pilots too, told apart by
    ``observer_kind``, and the exclusions in force marked; models' answers are not a PsychoPy file."""
    return write_psychopy_csv([r for r in response_rows(expdir, database) if r["observer_kind"] != "model"], out)
