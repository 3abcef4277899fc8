"""Whether a finished web session was taken at a pace a person's screen allows.

The browser reports each trial's response time, and a script can post any it likes: every
answer, with believable RTs, in a fraction of a second. What it cannot fake is the server's
own clock. A person's session lasts at least what the task had to show before each answer
(fixation, and the image and mask unless the answer may come at image onset) plus the RT
the browser reported from that moment, or the whole response window when the trial timed
out. A session that finished sooner did not show its trials: it is marked for review (the
admin page says why; the Prolific export says "review" instead of "approve"), not excluded,
so the researcher decides.

A person's answers also cannot come faster than a physiological floor: an answer within
about 100 ms of the response screen was made before the screen could be seen and acted on,
an anticipation (Whelan 2008, "Effective analysis of reaction time data", The Psychological
Record 58:475-482, recommends treating RTs under 100 ms as anticipations; Luce 1986,
"Response Times", Oxford University Press, on the lower bound of simple visual RTs). A
person anticipates now and then; a session with more than ``MAX_FAST_SHARE`` of its answers
under ``RT_FLOOR_MS`` is marked for review as well.

A script can also wait out the whole session and then post every answer at once: the total passes,
the spacing does not. The server stamps each answer as it stores it (``created_at``), and a person's
answers reach it one trial apart; a session with more than ``MAX_BUNCHED_SHARE`` of its answers
stored sooner after the previous one than their trial takes is marked for review too.
"""

from __future__ import annotations

from datetime import datetime, timezone

from cuebench.trials import Experiment


def shortest_answer_s(experiment: Experiment, row: dict) -> float:
    """The least time, in seconds, a person needs for the answer of ``row``: what the trial shows before the
    answer may come, and the response time reported from then (the response window for a timeout)."""
    timing = experiment.trial(row["trial_id"]).timing
    shown = (timing.fixation or 0) + (0 if timing.response_from_onset else timing.stimulus + (timing.mask or 0))
    answered_after = row["rt_ms"] if row["rt_ms"] is not None else (timing.response_window or 0)
    return (shown + answered_after) / 1000


def shortest_session_s(experiment: Experiment, rows: list[dict]) -> float:
    """The least time, in seconds, in which a person could have given the answers of ``rows``."""
    return sum(shortest_answer_s(experiment, row) for row in rows)


def server_time(stamp: float) -> str:
    """The server clock's time as the response rows' ``created_at`` (UTC ISO-8601, milliseconds): the web
    server stamps each answer as it receives it, with its own clock."""
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="milliseconds")


MAX_BUNCHED_SHARE = 0.25
"""The share of a session's answers that may reach the server sooner after the one before than their trial
takes. A person's answers arrive one trial apart; a lost connection sends a few at once when it is back,
and a script that waited out the session's whole length and then posted everything sends them all."""


def bunched_share(experiment: Experiment, rows: list[dict]) -> float:
    """The share of answers after the first that the server stored (its own ``created_at`` clock, not the
    browser's) sooner after the answer stored before them than their trial takes to show and answer."""
    stamped = sorted(((datetime.fromisoformat(row["created_at"]).timestamp(), row) for row in rows
                      if row.get("created_at")), key=lambda pair: pair[0])
    gaps = [(later - earlier, row) for (earlier, _), (later, row) in zip(stamped, stamped[1:])]
    return sum(gap < shortest_answer_s(experiment, row) for gap, row in gaps) / len(gaps) if gaps else 0.0


RT_FLOOR_MS = 100.0
"""Faster than this after the response screen appears, an answer is an anticipation (Whelan 2008)."""
MAX_FAST_SHARE = 0.1
"""The share of a session's answers that may be anticipations before it is marked for review."""


def fast_share(rows: list[dict]) -> float:
    """The share of answered rows (an RT recorded) with an RT under ``RT_FLOOR_MS``."""
    rts = [row["rt_ms"] for row in rows if row["rt_ms"] is not None]
    return sum(rt < RT_FLOOR_MS for rt in rts) / len(rts) if rts else 0.0


def review_reason(experiment: Experiment, rows: list[dict], took_s: float) -> str | None:
    """Why a session that lasted ``took_s`` seconds for these answers needs a look, or None."""
    reasons = []
    shortest = shortest_session_s(experiment, rows)
    if took_s < shortest:
        reasons.append(f"finished in {took_s:.1f} s, less than its {len(rows)} trials take to show and answer "
                       f"({shortest:.1f} s): answers sent by a script?")
    bunched = bunched_share(experiment, rows)
    if bunched > MAX_BUNCHED_SHARE:
        reasons.append(f"{100 * bunched:.0f}% of answers reached the server sooner after the one before than "
                       "their trial takes: sent together by a script?")
    share = fast_share(rows)
    if share > MAX_FAST_SHARE:
        reasons.append(f"{100 * share:.0f}% of answers faster than {RT_FLOOR_MS:.0f} ms, quicker than a person can "
                       "see and respond")
    return "; ".join(reasons) or None
