"""The browser check judged again on the server, from what the browser measured.

The web task measures the display (refresh rate over 150 animation frames, window and
screen size, pointer) before the instructions and screens out a device that fails. The
screened-out completion code is handed out only when the server, from those measurements,
finds the same failure; a request that merely says "screen me out" (a script after the
code, or a forged reason) gets none. The rules mirror the task's ``CHECK`` (``static/task/check.js``)
and the device rules of ``device.js``; ``tests/test_web.py`` compares both verdicts in
a real browser.
"""

from __future__ import annotations

import math
from typing import Any

from .validation import Rejected

REFRESH_HZ = (48.0, 500.0)
"""check.js ``CHECK.minHz``/``maxHz``."""
MAX_OUTLIER_SHARE = 0.2
"""check.js ``CHECK.maxOutlierShare``."""
MIN_SIZE = (800, 600)
"""device.js ``RULES.minWidth``/``minHeight`` (CSS pixels of the window or the screen)."""
SIZE_FIELDS = ("width", "height", "screen_width", "screen_height")


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


def check_failure(payload: dict) -> str | None:
    """Why the measured device fails the browser check (the task's words), or None when it passes.
    422 when the measurements are missing or malformed: without them the check did not run."""
    refresh = payload.get("refresh")
    size = _measure(payload.get("size"), "size", SIZE_FIELDS, float)
    pointer = _measure(payload.get("pointer"), "pointer", ("fine", "touch"), bool)
    if refresh is None:
        return "the browser drew no animation frames (hidden window?)"
    refresh = _measure(refresh, "refresh", ("hz", "outlier_share"), float)
    if not REFRESH_HZ[0] <= refresh["hz"] <= REFRESH_HZ[1]:
        return f"refresh rate {refresh['hz']:.1f} Hz"
    if refresh["outlier_share"] > MAX_OUTLIER_SHARE:
        return f"unstable frame timing ({100 * refresh['outlier_share']:.0f}% irregular frames)"
    if pointer["touch"] and not pointer["fine"]:
        return "phone or tablet (touch screen, no mouse)"
    if max(size["width"], size["screen_width"]) < MIN_SIZE[0] or max(size["height"], size["screen_height"]) < MIN_SIZE[1]:
        return f"screen too small ({size['screen_width']:g}x{size['screen_height']:g})"
    return None
