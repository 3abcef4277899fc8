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
"""

from __future__ import annotations

from cuebench.trials import Experiment


def shortest_session_s(experiment: Experiment, rows: list[dict]) -> float:
    """The least time, in seconds, in which a person could have given the answers of ``rows``."""
    total_ms = 0.0
    for row in rows:
        timing = experiment.trial(row["trial_id"]).timing
        shown = (timing.fixation or 0) + (0 if timing.response_from_onset else timing.stimulus + (timing.mask or 0))
        answered_after = row["rt_ms"] if row["rt_ms"] is not None else (timing.response_window or 0)
        total_ms += shown + answered_after
    return total_ms / 1000


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
    share = fast_share(rows)
    if share > MAX_FAST_SHARE:
        reasons.append(f"{100 * share:.0f}% of answers faster than {RT_FLOOR_MS:.0f} ms, quicker than a person can "
                       "see and respond")
    return "; ".join(reasons) or None
