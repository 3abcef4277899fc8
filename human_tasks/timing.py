"""Milliseconds to whole display frames, dropped frames, and a trustworthy refresh rate.

A monitor can only show an image for a whole number of refresh periods, so a planned
duration in ms becomes a frame count. The rule, shared by the lab runner and the web
task: round to the nearest whole frame (halves round up), and give every non-zero phase
at least one frame. The rounding error (achieved minus planned ms) is reported so a
session log says exactly what was shown: 200 ms at 144 Hz is 29 frames = 201.4 ms.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

from cuebench.errors import CuebenchError

DROPPED_FRAME_FACTOR = 1.2
"""A frame interval longer than 1.2 refresh periods means at least one frame was missed."""

MIN_PLAUSIBLE_HZ = 23.0
MAX_PLAUSIBLE_HZ = 600.0
"""Measured rates outside this range come from a window whose flips are not tied to a
display (vsync off, a virtual X server); such a measurement cannot time anything."""

REFRESH_AGREEMENT = 0.01
"""Repeated refresh measurements must agree within 1 % of their median to count as stable."""


class RefreshRateError(CuebenchError):
    """The refresh rate could not be measured stably and none was declared."""


@dataclass(frozen=True)
class FrameCount:
    """A phase converted to frames: how many, how long they last, and the rounding error."""

    planned_ms: float
    frames: int
    achieved_ms: float
    error_ms: float

    def describe(self) -> str:
        return f"{self.planned_ms:g} ms -> {self.frames} frames = {self.achieved_ms:.1f} ms ({self.error_ms:+.1f} ms)"


def ms_to_frames(ms: float | None, refresh_hz: float) -> FrameCount:
    """Nearest whole number of frames (halves up), at least 1 for a non-zero phase.

    ``None`` or 0 ms is a skipped phase: 0 frames, no error.
    """
    if refresh_hz is None or not refresh_hz > 0:
        raise ValueError(f"refresh rate must be > 0 Hz, got {refresh_hz!r}")
    planned = float(ms or 0)
    if planned < 0:
        raise ValueError(f"a duration must be >= 0 ms, got {ms!r}")
    frames = 0 if planned == 0 else max(1, math.floor(planned * refresh_hz / 1000.0 + 0.5))
    achieved = frames * 1000.0 / refresh_hz
    return FrameCount(planned_ms=planned, frames=frames, achieved_ms=achieved, error_ms=achieved - planned)


TIMED_PHASES = ("fixation", "stimulus", "mask")
"""The phases whose frames are counted and checked for drops."""


def phase_frames(timing, refresh_hz: float) -> dict[str, FrameCount]:
    """Frame counts of a trial's timed phases, its response window and inter-trial interval."""
    out = {name: ms_to_frames(getattr(timing, name), refresh_hz) for name in TIMED_PHASES}
    out["response_window"] = ms_to_frames(timing.response_window, refresh_hz)
    out["iti"] = ms_to_frames(timing.iti, refresh_hz)
    return out


def dropped_frames(intervals_s: Iterable[float], refresh_hz: float, factor: float = DROPPED_FRAME_FACTOR) -> int:
    """Number of frame intervals (seconds) longer than ``factor`` refresh periods."""
    limit = factor / refresh_hz
    return sum(1 for dt in intervals_s if dt > limit)


def stable_refresh_rate(measurements: Sequence[float | None]) -> float:
    """The median of repeated refresh measurements, if every one succeeded, they agree
    within ``REFRESH_AGREEMENT`` and the rate is one a display can have; otherwise
    ``RefreshRateError`` saying why."""
    if not measurements or any(m is None for m in measurements):
        raise RefreshRateError(
            f"the refresh rate could not be measured (measurements: {list(measurements)}); "
            "pass --refresh-hz with the display's rate to run anyway")
    median = statistics.median(measurements)
    spread = max(measurements) - min(measurements)
    if spread > REFRESH_AGREEMENT * median:
        raise RefreshRateError(
            f"the refresh rate is unstable ({', '.join(f'{m:.1f}' for m in measurements)} Hz); "
            "close other programs or pass --refresh-hz with the display's rate")
    if not MIN_PLAUSIBLE_HZ <= median <= MAX_PLAUSIBLE_HZ:
        raise RefreshRateError(
            f"the measured refresh rate {median:.1f} Hz is not a display's (flips are not synchronised "
            "to the screen: vsync off or a virtual display); pass --refresh-hz with the display's rate")
    return float(median)


DECLARED_AGREEMENT = 0.05
"""A declared rate must be within 5 % of a stable measurement, if there is one."""


def settle_refresh_rate(measurements: Sequence[float | None], declared_hz: float | None,
                        simulated: bool = False) -> tuple[float, str]:
    """The rate to count frames at and where it came from (``"measured"``/``"declared"``).

    Without a declared rate the measurement must be stable (``stable_refresh_rate``). A
    declared rate is used when the measurement fails, and refused when the display
    measures stably at a clearly different rate: frames would be counted wrongly. A simulated
    run (nobody watches; a virtual display's free-running flips can measure "stably" at
    hundreds of Hz) takes the declared rate as given."""
    if declared_hz is None:
        return stable_refresh_rate(measurements), "measured"
    if not MIN_PLAUSIBLE_HZ <= declared_hz <= MAX_PLAUSIBLE_HZ:
        raise RefreshRateError(f"--refresh-hz {declared_hz:g} is not a display's refresh rate "
                               f"({MIN_PLAUSIBLE_HZ:g}..{MAX_PLAUSIBLE_HZ:g} Hz)")
    try:
        measured = stable_refresh_rate(measurements)
    except RefreshRateError:
        return float(declared_hz), "declared"
    if simulated:
        return float(declared_hz), "declared"
    if abs(measured - declared_hz) > DECLARED_AGREEMENT * declared_hz:
        raise RefreshRateError(f"the display measures stably at {measured:.1f} Hz but --refresh-hz {declared_hz:g} "
                               "was given; fix the display mode or the option")
    return float(declared_hz), "declared"
