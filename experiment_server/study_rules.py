"""What ``cuebench serve`` is told about a study's running: recruitment targets, the session time limit,
the early end on a failed attention check, and the device rules checked before consent.

Gorilla and JATOS let a researcher close a study at N people, limit a session's time and refuse phones;
these are the same, given on the command line (``cuebench serve --target-n 40 --time-limit 45 ...``)
and shown on the admin page. Every server process gets the same rules from the command (nothing is
kept in one process's memory that another would need), and what they decide is stored: the
``expired`` and ``failed_attention`` statuses, the latecomer refused before a session exists.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from cuebench.errors import CuebenchError

BROWSERS = ("chrome", "edge", "firefox", "safari", "opera")
"""Browser families ``--browsers`` may name (``device.js`` tells them apart from the user agent)."""
DEFAULT_MIN_WINDOW = (800, 600)
DEFAULT_REFRESH_HZ = (48.0, 500.0)
"""A display below 48 Hz cannot show a 200 ms image to the frame; above 500 Hz the measure is not a refresh."""
START_LIMIT = 60
"""Session starts per client address per ``START_WINDOW_S`` (a class behind one router fits;
a script filling the admin page with anonymous sessions does not)."""
START_WINDOW_S = 600
MIN_FREE_DISK_MB = 1024
"""New sessions are refused while the disk of responses.sqlite has less free space than this (MB),
so that the sessions running can still store every answer (``--min-free-disk``)."""


class RulesError(CuebenchError):
    """An option of the study rules is unusable; the message names it and the value."""


@dataclass(frozen=True)
class DeviceRules:
    """What a participant's computer must meet, checked on the consent page before anyone consents
    (``human_tasks/web/static/device.js``, which reads them as JSON) and again on the task page."""
    min_width: int = DEFAULT_MIN_WINDOW[0]
    min_height: int = DEFAULT_MIN_WINDOW[1]
    min_hz: float = DEFAULT_REFRESH_HZ[0]
    max_hz: float = DEFAULT_REFRESH_HZ[1]
    browsers: tuple[str, ...] = ()
    """Allowed browser families (empty: any)."""
    allow_touch: bool = False
    """Whether phones and tablets (touch screen, no mouse) may take part."""

    def for_page(self) -> dict:
        """The rules as ``device.js`` reads them (camelCase, lists)."""
        return {"minWidth": self.min_width, "minHeight": self.min_height, "minHz": self.min_hz,
                "maxHz": self.max_hz, "browsers": list(self.browsers), "allowTouch": self.allow_touch}


@dataclass(frozen=True)
class StudyRules:
    """Recruitment targets, session time limit and early end; ``None`` switches a rule off."""
    target_n: int | None = None
    """Sessions that count (finished, neither pilot nor excluded) over the whole study, live reservations included."""
    target_per_group: int | None = None
    """The same per Latin-square group: the study closes when every group has its number."""
    time_limit_min: float | None = None
    """Minutes from the start after which a web session ends as ``expired``."""
    end_on_failed_attention: bool = False
    """Whether a wrong answer to an attention trial ends the session at once (``failed_attention``)."""
    device: DeviceRules = DeviceRules()
    prolific_study_id: str | None = None
    """The Prolific study this server collects for: a Prolific link naming another ``STUDY_ID`` is refused
    (a participant of another study, or a link copied into the wrong study, never takes a place here)."""
    pilot_only: bool = False
    """Whether only the pilot codes of ``serve codes --pilot`` may start (``serve --pilot-only``): the research
    team tries a study whose texts are still drafts."""

    def __post_init__(self):
        if self.prolific_study_id is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.prolific_study_id):
            raise RulesError(f"--prolific-study-id {self.prolific_study_id!r}: expected the study's ID as Prolific "
                             "shows it (letters and digits)")
        for name in ("target_n", "target_per_group"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise RulesError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if self.time_limit_min is not None and not self.time_limit_min > 0:
            raise RulesError(f"--time-limit must be more than 0 minutes, got {self.time_limit_min:g}")

    @property
    def capped(self) -> bool:
        return self.target_n is not None or self.target_per_group is not None

    def full(self, fill: list[int]) -> bool:
        """Whether a study whose groups hold ``fill`` (``assignment.group_fill``: finished plus live
        reservations, pilots and excluded people not counted) takes nobody more: the total target
        reached, or every group at its target (a new person would join the least filled group)."""
        return (self.target_n is not None and sum(fill) >= self.target_n) or (
            self.target_per_group is not None and min(fill) >= self.target_per_group)

    def describe(self) -> str:
        """The rules in one line, for the server's start message."""
        parts = [f"target {self.target_n}" if self.target_n else "", f"{self.target_per_group} per group"
                 if self.target_per_group else "", f"time limit {self.time_limit_min:g} min" if self.time_limit_min
                 else "", "a failed attention check ends the session" if self.end_on_failed_attention else "",
                 f"Prolific study {self.prolific_study_id} only" if self.prolific_study_id else "",
                 "pilot entry codes only" if self.pilot_only else ""]
        d = self.device
        parts.append(f"devices: window >= {d.min_width}x{d.min_height}, {d.min_hz:g}-{d.max_hz:g} Hz, browsers "
                     f"{','.join(d.browsers) or 'any'}, touch {'allowed' if d.allow_touch else 'refused'}")
        return "; ".join(p for p in parts if p)


SLOW_FACTOR = 1.5
"""The limit suggested beside the expected length: room for a participant half again as slow as the estimate."""


def check_time_limit(rules: StudyRules, experiment) -> None:
    """Refuse a session time limit shorter than the study takes (``cuebench.texts.study_facts``: the trials'
    timing and count with an answer allowance, the setup and the breaks), which would end every session early;
    the message gives the expected length and what it is made of."""
    if rules.time_limit_min is None:
        return
    from cuebench.texts import BREAK_MINUTES, SETUP_MINUTES, study_facts

    facts = study_facts(experiment)
    if rules.time_limit_min < facts["minutes"]:
        breaks = f", {facts['breaks']} break(s) of {BREAK_MINUTES:g} min" if facts["breaks"] else ""
        raise RulesError(
            f"--time-limit {rules.time_limit_min:g} is shorter than the study takes: about {facts['minutes']} "
            f"minutes expected ({facts['trials']} trials taking {facts['trial_seconds'] / 60:.1f} min with time to "
            f"answer, {SETUP_MINUTES} min of instructions and setup{breaks}); give at least {facts['minutes']}, "
            f"better {math.ceil(SLOW_FACTOR * facts['minutes'])} for slower participants")


def window_size(text: str) -> tuple[int, int]:
    """``--min-window 1024x768`` -> (1024, 768)."""
    m = re.fullmatch(r"\s*(\d+)\s*[x\u00d7X]\s*(\d+)\s*", text)
    if not m:
        raise RulesError(f"--min-window {text!r}: expected WIDTHxHEIGHT in CSS pixels, e.g. 1024x768")
    return int(m.group(1)), int(m.group(2))


def refresh_range(text: str) -> tuple[float, float]:
    """``--refresh-hz 59-61`` -> (59.0, 61.0)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*-\s*(\d+(?:\.\d+)?)\s*", text)
    if not m or float(m.group(1)) > float(m.group(2)) or float(m.group(1)) <= 0:
        raise RulesError(f"--refresh-hz {text!r}: expected MIN-MAX in Hz with 0 < MIN <= MAX, e.g. 59-61")
    return float(m.group(1)), float(m.group(2))


def browser_list(text: str) -> tuple[str, ...]:
    """``--browsers chrome,firefox`` -> ("chrome", "firefox"), each one of :data:`BROWSERS`."""
    names = tuple(dict.fromkeys(n.strip().lower() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in BROWSERS]
    if unknown or not names:
        raise RulesError(f"--browsers {text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'empty'}; "
                         f"choose from {', '.join(BROWSERS)}")
    return names
