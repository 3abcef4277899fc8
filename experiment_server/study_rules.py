"""A study's serving rules: recruitment targets, the session time limit, the early end on a failed attention
check, the device rules checked before consent, the Prolific study and the start limit.

Gorilla and JATOS let a researcher close a study at N people, limit a session's time and refuse phones;
these are the same. They are part of the study, not of one server run: the first ``cuebench serve
--target-n 40 ...`` writes them to ``EXPDIR/rules.json`` (``RULES_FILE``, validated like experiment.json),
and every later ``serve`` (every process of ``--workers N``, every host with a copy of the folder) and
``cuebench lab run`` read that file, so a study restarted without its flags stays capped. A flag that
would change a stored rule is refused unless ``--update-rules`` is given; each change is appended to the
file's history with its time. What the rules decide is stored too: the ``expired`` and
``failed_attention`` statuses, the latecomer refused before a session exists.

Adding a rule is one field of ``StudyRules`` (or ``DeviceRules``), with its default, its option in
``FLAGS`` and the option itself in ``experiment_server.cli``; files written before it keep loading with
the default.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from cuebench.errors import CuebenchError, SchemaError
from cuebench.expdir import atomic_write
from cuebench.storage import utc_now
from cuebench.trials import Model
from human_tasks.web.constants import BROWSER_NAMES, DEFAULT_MIN_WINDOW, DEFAULT_REFRESH_HZ

from .assignment import HOLD_SECONDS

RULES_FILE = "rules.json"
BROWSERS = tuple(BROWSER_NAMES)
"""Browser families ``--browsers`` may name (``device.js`` tells them apart from the user agent)."""
START_LIMIT = 60
"""Session starts per client address per ``START_WINDOW_S`` (a class behind one router fits;
a script filling the admin page with anonymous sessions does not)."""
START_WINDOW_S = 600
UNANSWERED_PER_ADDRESS = 3
"""Live sessions without an answer yet per client address: a person opening their link twice, a few
people behind one router starting together, not a script holding a study's places (``--unanswered-per-address``)."""
MIN_FREE_DISK_MB = 1024
"""New sessions are refused while the disk of responses.sqlite has less free space than this (MB),
so that the sessions running can still store every answer (``--min-free-disk``)."""

Positive = Annotated[int, Field(ge=1)]
Browser = Literal[BROWSERS]


class RulesError(CuebenchError):
    """An option of the study rules is unusable, or would change a stored rule; the message names it and the value."""


class DeviceRules(Model):
    """What a participant's computer must meet, checked on the consent page before anyone consents
    (``human_tasks/web/static/device.js``, which reads them as JSON) and again on the task page."""
    min_width: Positive = DEFAULT_MIN_WINDOW[0]
    """The smallest browser window (CSS px), ``--min-window``."""
    min_height: Positive = DEFAULT_MIN_WINDOW[1]
    min_hz: Annotated[float, Field(gt=0)] = DEFAULT_REFRESH_HZ[0]
    """The display refresh rates allowed, ``--refresh-hz MIN-MAX``."""
    max_hz: Annotated[float, Field(gt=0)] = DEFAULT_REFRESH_HZ[1]
    browsers: tuple[Browser, ...] = ()
    """Allowed browser families (empty: any), ``--browsers``."""
    allow_touch: bool = False
    """Whether phones and tablets (touch screen, no mouse) may take part, ``--allow-touch``."""

    @model_validator(mode="after")
    def _ordered(self):
        if self.min_hz > self.max_hz:
            raise SchemaError("min_hz", f"must be at most max_hz ({self.max_hz:g}), got {self.min_hz:g}")
        return self

    def for_page(self) -> dict:
        """The rules as ``device.js`` reads them (camelCase, lists)."""
        return {"minWidth": self.min_width, "minHeight": self.min_height, "minHz": self.min_hz,
                "maxHz": self.max_hz, "browsers": list(self.browsers), "allowTouch": self.allow_touch}


class StudyRules(Model):
    """Recruitment targets, session time limit, early end, device rules and limits; ``None`` switches a rule off."""
    target_n: Positive | None = None
    """Sessions that count (finished, neither pilot nor excluded) over the whole study, live reservations included."""
    target_per_group: Positive | None = None
    """The same per Latin-square group: the study closes when every group has its number."""
    time_limit_min: Annotated[float, Field(gt=0)] | None = None
    """Minutes from the start after which a web session ends as ``expired``."""
    end_on_failed_attention: bool = False
    """Whether a wrong answer to an attention trial ends the session at once (``failed_attention``)."""
    device: DeviceRules = DeviceRules()
    prolific_study_id: str | None = None
    """The Prolific study this server collects for: a Prolific link naming another ``STUDY_ID`` is refused
    (a participant of another study, or a link copied into the wrong study, never takes a place here)."""
    start_limit: Positive = START_LIMIT
    """Session starts per client address per ``START_WINDOW_S``."""
    hold_min: Annotated[float, Field(gt=0)] = HOLD_SECONDS / 60
    """Minutes a new session holds its place before its first stored answer (then the reservation renews)."""
    unanswered_per_address: Positive = UNANSWERED_PER_ADDRESS
    """Live sessions without a stored answer that one client address may hold at once."""
    repeat_completions: bool = False
    """Whether a Prolific ID may get a completion code from more than one session of the study."""
    pilot_only: bool = False
    """Whether only the pilot codes of ``serve codes --pilot`` may start (``serve --pilot-only``): the research
    team tries a study whose texts are still drafts."""

    @field_validator("prolific_study_id")
    @classmethod
    def _prolific_id(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", value):
            raise ValueError("expected the study's ID as Prolific shows it (letters and digits)")
        return value

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
                 f"{self.start_limit} starts per address per {START_WINDOW_S // 60} min",
                 f"places held {self.hold_min:g} min until a first answer, {self.unanswered_per_address} such "
                 "sessions per address", "repeat completion codes per Prolific ID" if self.repeat_completions else
                 "one completion code per Prolific ID",
                 "pilot entry codes only" if self.pilot_only else ""]
        d = self.device
        parts.append(f"devices: window >= {d.min_width}x{d.min_height}, {d.min_hz:g}-{d.max_hz:g} Hz, browsers "
                     f"{','.join(d.browsers) or 'any'}, touch {'allowed' if d.allow_touch else 'refused'}")
        return "; ".join(p for p in parts if p)

    def flat(self) -> dict[str, Any]:
        """Every rule by its dotted name (``device.min_width``), JSON values."""
        return dict(_flatten(self.to_dict()))

    def changed(self, given: dict[str, Any]) -> "StudyRules":
        """These rules with the ``given`` ones (dotted names, as ``flat``) in place; errors name the rule's flag."""
        data = self.to_dict()
        for name, value in given.items():
            *outer, last = name.split(".")
            place = data
            for part in outer:
                place = place[part]
            place[last] = list(value) if isinstance(value, tuple) else value
        try:
            return StudyRules.model_validate(data)
        except ValidationError as err:
            problem = SchemaError.from_validation(err)
            flag = FLAGS.get(problem.field_path, problem.field_path)
            raise RulesError(f"{flag} {given.get(problem.field_path, '')!r}: {problem.problem}".replace(" '':", ":")) \
                from None


FLAGS = {"target_n": "--target-n", "target_per_group": "--target-per-group", "time_limit_min": "--time-limit",
         "end_on_failed_attention": "--end-on-failed-attention", "prolific_study_id": "--prolific-study-id",
         "start_limit": "--start-limit", "hold_min": "--hold-minutes",
         "unanswered_per_address": "--unanswered-per-address", "repeat_completions": "--allow-repeat-completions",
         "pilot_only": "--pilot-only",
         "device.min_width": "--min-window", "device.min_height": "--min-window",
         "device.min_hz": "--refresh-hz", "device.max_hz": "--refresh-hz", "device.browsers": "--browsers",
         "device.allow_touch": "--allow-touch"}
"""Each rule's option of ``cuebench serve`` (an option that sets two rules names both, in its value's order):
what ``serve`` reads the rules from, and what messages name."""


def _flatten(data: dict, prefix: str = ""):
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


class RuleChange(Model):
    """One change of the stored rules: when, and each rule's value before and after (dotted names)."""
    at: str
    """UTC, ISO-8601."""
    changed: dict[str, tuple[Any, Any]]


class RulesRecord(Model):
    """The file ``EXPDIR/rules.json``: the rules in force and how they came to be."""
    rules: StudyRules = StudyRules()
    history: tuple[RuleChange, ...] = ()


def rules_file(expdir: str | Path) -> Path:
    return Path(expdir) / RULES_FILE


def load_record(expdir: str | Path) -> RulesRecord | None:
    """The folder's stored rules, or None where none were ever given; a malformed file is refused naming the field."""
    path = rules_file(expdir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise SchemaError("(json)", f"not valid JSON at line {err.lineno} column {err.colno}: {err.msg}", path) \
            from None
    return RulesRecord.from_dict(data, source=path)


def load_rules(expdir: str | Path) -> StudyRules:
    """The rules a server or lab run of the folder goes by: the stored ones, else the defaults."""
    record = load_record(expdir)
    return record.rules if record is not None else StudyRules()


def settle_rules(expdir: str | Path, given: dict[str, Any], update: bool = False) -> StudyRules:
    """The folder's rules after ``given`` (dotted names, from the command line): written to ``rules.json``
    the first time one differs from the default; afterwards a given value that differs from the stored one is refused
    (naming the rule, its stored value and ``--update-rules``) unless ``update``, which applies it and
    records the change with its time. Values equal to the stored ones change nothing."""
    record = load_record(expdir)
    current = record.rules if record is not None else StudyRules()
    wanted = current.changed(given)
    before, after = current.flat(), wanted.flat()
    changed = {name: (before[name], after[name]) for name in after if before[name] != after[name]}
    if record is not None and changed and not update:
        raise RulesError("; ".join(
            f"{FLAGS.get(name, name)} would change the stored rule {name} from {json.dumps(old)} to {json.dumps(new)}"
            for name, (old, new) in changed.items())
            + f" ({rules_file(expdir)}); add --update-rules to change it (the change is recorded with its time)")
    if changed:
        history = (record.history if record is not None else ()) + (RuleChange(at=utc_now(), changed=changed),)
        atomic_write(rules_file(expdir), (json.dumps(RulesRecord(rules=wanted, history=history).to_dict(), indent=2,
                                                     ensure_ascii=False) + "\n").encode("utf-8"))
    return wanted


OFF = "none"
"""What a rule option takes to switch its rule off (``--target-n none``)."""


def optional(convert):
    """An option's type: ``convert(text)``, or None for :data:`OFF`."""
    def parse(text: str):
        return None if text.strip().lower() == OFF else convert(text)

    parse.__name__ = convert.__name__  # argparse names it in "invalid int value"
    return parse


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
    """``--browsers chrome,firefox`` -> ("chrome", "firefox"), each one of :data:`BROWSERS`; ``any``: ()."""
    if text.strip().lower() == "any":
        return ()
    names = tuple(dict.fromkeys(n.strip().lower() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in BROWSERS]
    if unknown or not names:
        raise RulesError(f"--browsers {text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'empty'}; "
                         f"choose from {', '.join(BROWSERS)}")
    return names
