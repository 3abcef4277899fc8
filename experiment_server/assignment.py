"""Which Latin-square group a new participant joins.

Burgert et al. 2025 rotate conditions over groups so every image x condition cell is
seen by the same number of people. Online, people abandon sessions, so a group slot is
*held* for a few minutes when a session starts (``HOLD_SECONDS``: a start costs a client
nothing, so places must not stay with sessions that never begin) and *reserved* by every
stored trial; a reservation that lapses frees the slot for the next arrival. A group's fill is
its finished participants plus its live reservations; the next participant joins the
least filled group (lowest index on ties), which keeps finished counts balanced.
"""

from __future__ import annotations

from typing import Iterable

RESERVATION_SECONDS = 30 * 60
"""A session that stores no trial for this long gives its group slot back."""
HOLD_SECONDS = 5 * 60
"""How long a new session holds its slot before its first stored answer (``serve --hold-minutes``): time to
read the instructions, pass the browser check and calibrate the screen."""

FILLING_STATUSES = ("finished",)
"""Statuses that keep a slot for good; failed-attention and screened-out sessions are refilled."""


def group_fill(n_groups: int, participants: Iterable[tuple[int, str, float | None]], now: float) -> list[int]:
    """Per group: finished participants plus in-progress ones whose reservation is still live.

    ``participants`` yields ``(group, status, reserved_until)``.
    """
    fill = [0] * n_groups
    for group, status, reserved_until in participants:
        live = status == "in_progress" and reserved_until is not None and reserved_until > now
        if status in FILLING_STATUSES or live:
            fill[group] += 1
    return fill


def least_filled(fill: list[int]) -> int:
    """The group with the fewest filled slots; the lowest index wins a tie."""
    return min(range(len(fill)), key=lambda g: (fill[g], g))


def finished_fill(n_groups: int, participants: Iterable[tuple[int, str, float | None]]) -> list[int]:
    """Per group: the slots held for good (:data:`FILLING_STATUSES`), live reservations left out: whether a
    recruitment target is reached for good, not only until a reservation lapses."""
    return group_fill(n_groups, [p for p in participants if p[1] in FILLING_STATUSES], 0.0)
