"""The session's log: PsychoPy's log file beside the session's CSV (what the participant read, answered and
the runner decided, at PsychoPy's EXP level) and the console, for what the experimenter should read now."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .errors import LabError


class SessionLog:
    def __init__(self, path: Path, out: Callable[[str], None]):
        try:
            import psychopy  # noqa: F401 - the lab extra as a whole, named in the error
            from psychopy import logging, visual  # noqa: F401 - the window's part, checked with the rest
        except ImportError as err:
            raise LabError(f"PsychoPy is not installed ({err}); install the lab extra: see docs/lab.md") from None
        path.parent.mkdir(parents=True, exist_ok=True)
        logging.console.setLevel(logging.WARNING)
        self._logging = logging
        self._file = logging.LogFile(str(path), level=logging.EXP, filemode="a")
        self._out = out

    def exp(self, message: str) -> None:
        """A line of the log file."""
        self._logging.exp(message)

    def info(self, message: str) -> None:
        """A line of the log file that the console shows too."""
        self.exp(message)
        self._out(message)

    def close(self) -> None:
        self._logging.flush()
        self._logging.root.removeTarget(self._file)
