"""The lab window, its refresh rate, and flips paced to that rate.

PsychoPy's ``getActualFrameRate`` is run three times; ``timing.settle_refresh_rate``
decides whether the result can be trusted or a declared ``--refresh-hz`` is needed. When
flips are not tied to the display (vsync off, or a virtual X server such as Xvfb), they
return far faster than the declared rate; the runner then paces them with PsychoPy's
clock so frame counts still mean durations, and records ``frame_pacing: "software"``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..timing import settle_refresh_rate

MEASUREMENTS = 3
FREE_RUN_FLIPS = 30
PACING_MARGIN = 1.2
"""Flips more than 1.2x faster than the refresh rate are not synchronised to the display."""


@dataclass(frozen=True)
class Refresh:
    hz: float
    source: str  # "measured" or "declared"
    measurements: tuple[float | None, ...]
    free_running_hz: float
    pacing: str  # "vsync" or "software"


def open_window(fullscreen: bool, screen: int, size: tuple[int, int]):
    """A grey PsychoPy window in pixel units, vsync on, without PsychoPy's own timing dialog."""
    from psychopy import visual

    return visual.Window(size=size, fullscr=fullscreen, screen=screen, units="pix", color=(0, 0, 0),
                         colorSpace="rgb", allowGUI=not fullscreen, winType="pyglet", waitBlanking=True,
                         checkTiming=False)


def measure_refresh(win, declared_hz: float | None, simulated: bool, message: str) -> Refresh:
    """Measure the refresh rate (``message`` on the screen meanwhile), settle on the rate to use, and decide on
    pacing."""
    from psychopy import core

    measurements = tuple(
        _as_float(win.getActualFrameRate(nIdentical=20, nMaxFrames=120, nWarmUpFrames=10, threshold=1,
                                         infoMsg=message))
        for _ in range(MEASUREMENTS))
    hz, source = settle_refresh_rate(measurements, declared_hz, simulated)
    stamps = []
    for _ in range(FREE_RUN_FLIPS):
        win.flip()
        stamps.append(core.getTime())
    free_hz = 1.0 / statistics.median(b - a for a, b in zip(stamps, stamps[1:]))
    pacing = "software" if free_hz > PACING_MARGIN * hz else "vsync"
    return Refresh(hz, source, measurements, free_hz, pacing)


def _as_float(value) -> float | None:
    return None if value is None else float(value)


class FramePacer:
    """``flip()`` that returns the flip time and, with software pacing, keeps flips on a
    schedule of one refresh period of the settled rate (restarted after a missed frame)."""

    def __init__(self, win, refresh: Refresh):
        self.win = win
        self.period = 1.0 / refresh.hz
        self.software = refresh.pacing == "software"
        self.deadline: float | None = None

    def flip(self) -> float:
        from psychopy import core

        if self.software and self.deadline is not None:
            remaining = self.deadline - core.getTime()
            if remaining > 0:
                core.wait(remaining, hogCPUperiod=min(remaining, 0.004))
        self.win.flip()
        now = core.getTime()
        on_schedule = self.deadline is not None and now - self.deadline < self.period
        self.deadline = self.deadline + self.period if on_schedule else now + self.period
        return now
