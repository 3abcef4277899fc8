"""Answers from the participant's mouse or keyboard, through PsychoPy's event module.

Both devices are read once per frame. Response times come from the events' own time
stamps relative to the response clock, which the runner starts right after the flip
that shows the response screen (or the stimulus, for trials timed from onset).
Escape is watched on every frame of every screen and pauses the session.
"""

from __future__ import annotations

from dataclasses import dataclass

ESCAPE = "escape"


@dataclass(frozen=True)
class Press:
    """A key (``key`` set) or a left click (``pos`` set, pixels from the centre); ``rt`` in s."""

    rt: float
    key: str | None = None
    pos: tuple[float, float] | None = None


class ResponseInput:
    def __init__(self, win, mode: str):
        from psychopy import core, event

        self.mode = mode
        self.clock = core.Clock()
        self.mouse = event.Mouse(win=win, visible=mode == "mouse")
        self._event = event
        self._click_offset = 0.0  # response-clock time of the last click-clock reset

    def clear(self) -> None:
        """Forget keys and clicks given before now (e.g. during the previous trial)."""
        self._event.clearEvents()
        self.mouse.clickReset()

    def start(self) -> None:
        """Start timing responses from now (call right after the onset flip); keys pressed
        before the response screen was up are not answers to it."""
        self._event.clearEvents("keyboard")
        self.clock.reset()
        self.mouse.clickReset()
        self._click_offset = 0.0

    def poll(self, keys: tuple[str, ...], clicks: bool) -> list[Press]:
        """Presses since the last poll among ``keys`` (and Escape), and a left click if
        ``clicks`` and the mouse is the input device."""
        found = [Press(rt=t, key=k) for k, t in self._event.getKeys(keyList=[*keys, ESCAPE], timeStamped=self.clock)]
        if clicks and self.mode == "mouse":
            _, times = self.mouse.getPressed(getTime=True)
            if times[0] > 0:
                x, y = self.mouse.getPos()
                found.append(Press(rt=self._click_offset + float(times[0]), pos=(float(x), float(y))))
                self._click_offset = self.clock.getTime()
                self.mouse.clickReset()
        return found
