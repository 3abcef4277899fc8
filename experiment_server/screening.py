"""The browser check judged again on the server, from what the browser measured.

The web task measures the display (refresh rate over 150 animation frames, window and
screen size, pointer) before the instructions and screens out a device that fails. The
screened-out completion code is handed out only when the server, from those measurements,
finds the same failure; a request that merely says "screen me out" (a script after the
code, or a forged reason) gets none. The rules mirror the task's ``CHECK`` (``static/task/check.js``)
and the device rules of ``device.js``, with the study's own (``serve --refresh-hz``, ``--min-window``,
``--browsers``, ``--allow-touch``: ``study_rules.DeviceRules``), which the browser applies too;
``tests/human_tasks/test_web.py`` compares both verdicts in a real browser.
"""

from __future__ import annotations

import math
import re
from typing import Any

from human_tasks.web.constants import BROWSER_FAMILIES, BROWSER_NAMES, MAX_OUTLIER_SHARE

from .study_rules import DeviceRules
from .validation import Rejected

SIZE_FIELDS = ("width", "height", "screen_width", "screen_height")
PHONE_OR_TABLET = re.compile(r"Mobi|iPhone|iPad|iPod|Android|Tablet|Silk/|Kindle")
"""What the user agents of phones and tablets say (every mobile browser's carries "Mobi", Android tablets'
"Android", iOS's its device). An iPad asking for the desktop site says "Macintosh": the browser check's
pointer measurement still finds it."""


def browser_of(user_agent: str) -> str:
    """The browser family a user agent names, as device.js tells them apart ("other" for the rest)."""
    return next((family for family, pattern in BROWSER_FAMILIES if re.search(pattern, user_agent)), "other")


def _measure(record: Any, field: str, names: tuple[str, ...], kind: type) -> dict:
    if not isinstance(record, dict):
        raise Rejected(422, f"field {field!r} (the browser check's measurement) is missing")
    values = {name: record.get(name) for name in names}
    for name, value in values.items():
        if isinstance(value, bool) != (kind is bool) or not isinstance(value, (bool, int, float)) or \
                (kind is not bool and not (math.isfinite(value) and 0 <= value <= 1e6)):
            raise Rejected(422, f"field {field}.{name} must be a {'boolean' if kind is bool else 'number'}, "
                                f"got {value!r}")
    return values


def check_failure(payload: dict, rules: DeviceRules = DeviceRules(), user_agent: str = "") -> str | None:
    """Why the measured device fails the browser check under the study's ``rules`` (the task's words), or
    None when it passes; ``user_agent``: the request's, for ``--browsers``. 422 when the measurements are
    missing or malformed: without them the check did not run."""
    refresh = payload.get("refresh")
    size = _measure(payload.get("size"), "size", SIZE_FIELDS, float)
    pointer = _measure(payload.get("pointer"), "pointer", ("fine", "touch"), bool)
    if refresh is None:
        return "the browser drew no animation frames (hidden window?)"
    refresh = _measure(refresh, "refresh", ("hz", "outlier_share"), float)
    if not rules.min_hz <= refresh["hz"] <= rules.max_hz:
        return f"refresh rate {refresh['hz']:.1f} Hz"
    if refresh["outlier_share"] > MAX_OUTLIER_SHARE:
        return f"unstable frame timing ({100 * refresh['outlier_share']:.0f}% irregular frames)"
    if not rules.allow_touch and pointer["touch"] and not pointer["fine"]:
        return "phone or tablet (touch screen, no mouse)"
    browser = browser_of(user_agent)
    if rules.browsers and browser not in rules.browsers:
        return f"browser not allowed ({BROWSER_NAMES.get(browser, browser)})"
    if size["width"] < rules.min_width or size["height"] < rules.min_height:  # the window, as device.js judges it
        return f"window too small ({size['width']:g}x{size['height']:g})"
    return None


def agent_refusal(rules: DeviceRules, user_agent: str) -> tuple[str, str, dict] | None:
    """What a request's user agent shows against the study's browser and touch rules, as (the verdict, the
    participant's words' key, their values), or None. The consent page and the task check these in the
    browser; the server checks them again at the start and on every answer, since a script posting answers
    never runs those checks (``--browsers``, ``--allow-touch``)."""
    if not rules.allow_touch and PHONE_OR_TABLET.search(user_agent):
        return "phone or tablet (user agent)", "device_touch", {}
    browser = browser_of(user_agent)
    if rules.browsers and browser not in rules.browsers:
        return (f"browser not allowed ({BROWSER_NAMES.get(browser, browser)})",
                "device_browser_many" if len(rules.browsers) > 1 else "device_browser_one",
                {"allowed": [BROWSER_NAMES[b] for b in rules.browsers]})
    return None
