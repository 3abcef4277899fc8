"""The admin page's live data-quality panel: per person, how the session is going while the study runs.

Per person of one page of the participant list (never the whole study: 20,000 sessions must stay one
fast request): catch and attention trials right of those answered, the median response time of the test
trials, dropped frames, fullscreen exits, the screen calibration's outcome, and the flags that ask for a
look (a failed check, a review reason from ``plausibility``, an exclusion, a card slider never moved).
Read from the stored answers, so every server process shows the same; the page polls it as JSON.
"""

from __future__ import annotations

from statistics import median

from cuebench.responses import TABLE as RESPONSES

from .db import Participant

DROPPED_SHARE_FLAG = 0.1
"""Flag a person when more than this share of their trials dropped a frame (timing not as planned)."""
FULLSCREEN_EXIT = '"fullscreen_exit"'
"""How the web task's event log names leaving fullscreen (``task.js``), counted in the stored JSON text."""


def _right_of(rows: list[tuple], role: str) -> tuple[int, int]:
    """(right, answered) of the rows of ``role``."""
    answered = [correct for r, correct, *_ in rows if r == role]
    return sum(c == 1 for c in answered), len(answered)


def calibration_outcome(calibration: dict | None) -> str:
    """The screen calibration in a few words: not made, the card not moved (pixels per mm not measured), or
    the pixels per mm and how the viewing distance was given."""
    if not calibration:
        return "none"
    if calibration.get("card_moved") is False:
        return "card not moved: not measured"
    distance = "blind spot" if calibration.get("method") == "card+blind-spot" else "distance entered"
    capped = ", size capped to the window" if calibration.get("capped") else ""
    return f"{calibration.get('px_per_mm', 0):.2f} px/mm, {distance}{capped}"


def person_quality(p: Participant, rows: list[tuple]) -> dict:
    """One person's row of the panel from their stored answers ``(role, correct, rt_ms, dropped_frames, events)``."""
    catch, attention = _right_of(rows, "catch"), _right_of(rows, "attention")
    rts = [rt for role, _, rt, *_ in rows if role == "test" and rt is not None]
    dropping = sum(1 for *_, dropped, _ in rows if dropped)
    exits = sum((events or "").count(FULLSCREEN_EXIT) for *_, events in rows)
    flags = []
    if attention[1] > attention[0]:
        flags.append(f"attention {attention[1] - attention[0]} wrong")
    if catch[1] > catch[0]:
        flags.append(f"catch {catch[1] - catch[0]} wrong")
    if rows and dropping / len(rows) > DROPPED_SHARE_FLAG:
        flags.append(f"dropped frames in {dropping} of {len(rows)} trials")
    if exits:
        flags.append(f"left fullscreen {exits} time{'s' if exits > 1 else ''}")
    if (p.calibration or {}).get("card_moved") is False:
        flags.append("card not moved")
    if p.review_reason:
        flags.append(f"review: {p.review_reason}")
    if p.exclusion is not None:
        flags.append(f"excluded: {p.exclusion.label}")
    return {"code": p.code, "trials": len(rows), "catch": list(catch), "attention": list(attention),
            "median_rt_ms": round(median(rts)) if rts else None, "dropped_frames": sum(d or 0 for *_, d, _ in rows),
            "trials_dropping": dropping, "fullscreen_exits": exits, "calibration": calibration_outcome(p.calibration),
            "flags": flags}


def page_quality(conn, experiment: str, people: list[Participant]) -> dict[str, dict]:
    """Code -> :func:`person_quality` for one page of people: one query over their answers only."""
    rows: dict[str, list[tuple]] = {p.code: [] for p in people}
    if people:
        marks = ",".join("?" for _ in people)
        for observer, *row in conn.execute(
                f'SELECT observer, role, correct, rt_ms, dropped_frames, events FROM "{RESPONSES}" '
                f"WHERE experiment=? AND observer IN ({marks})", [experiment, *rows]).fetchall():
            rows[observer].append(tuple(row))
    return {p.code: person_quality(p, rows[p.code]) for p in people}
