"""What the lab shows: the window, its refresh rate and frame pacer, the images of a trial (one in
the middle or a row, as the trial's card says), the noise mask, the label grid, a response prompt and
text screens (PsychoPy lives here, imported when a window opens). ``Display`` draws; when it flips is
``pacing``'s."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Callable

from cuebench.errors import CuebenchError
from cuebench.expdir import ExperimentDir
from cuebench.images import decode_image
from cuebench.trials import Experiment, Trial

from ..layout import ResponseGrid, row_positions
from ..masks import pink_noise_mask, trial_mask_seed
from .log import SessionLog


def stimulus_width_px(display: dict | None, screen_px: int) -> int | None:
    """The stimulus width in pixels that gives the degrees of visual angle the experiment was built for
    (``--stimulus-degrees``, ``--viewing-distance``, ``--screen-width``), on a window spanning the screen;
    None when it was built without them (the image's own pixels)."""
    if not display:
        return None
    return max(1, round(display["stimulus_width_cm"] * screen_px / display["screen_width_cm"]))


@dataclass(frozen=True)
class Station:
    """The lab station a session runs on: the window's screen, size and mode, a declared refresh rate (None:
    measured), the input device, and whether a scripted participant answers."""

    fullscreen: bool
    screen: int
    size: tuple[int, int]
    refresh_hz: float | None
    input_mode: str
    simulated: bool


class Display:
    """The window and what is drawn on it during one run: opened with its refresh rate measured and settled
    (``display``), then each screen drawn on request; ``flip`` shows it, on the pacer's schedule."""

    def __init__(self, experiment: Experiment, expdir: ExperimentDir, grid: ResponseGrid, station: Station,
                 log: SessionLog, say: Callable[..., str]):
        import psychopy
        from psychopy import visual

        from .display import FramePacer, measure_refresh, open_window

        self.experiment, self.expdir, self.grid, self.station, self.log, self.say = \
            experiment, expdir, grid, station, log, say
        self.win = open_window(station.fullscreen, station.screen, station.size)
        try:
            self.refresh = measure_refresh(self.win, station.refresh_hz, station.simulated,
                                           say("lab_measuring_refresh"))
        except CuebenchError:
            self.win.close()
            raise
        self.hz = self.refresh.hz
        self._pacer = FramePacer(self.win, self.refresh)
        self.device = {
            "runner": "psychopy", "psychopy": psychopy.__version__, "platform": platform.platform(),
            "python": platform.python_version(), "screen": station.screen, "fullscreen": station.fullscreen,
            "window_size": [int(v) for v in self.win.size], "input": station.input_mode,
            "refresh_source": self.refresh.source, "refresh_measurements": list(self.refresh.measurements),
            "frame_pacing": self.refresh.pacing, "simulated": station.simulated,
        }
        """What every response row records of the station (``device``)."""
        self._text = visual.TextStim(self.win, text="", height=26, wrapWidth=1000, color=(1, 1, 1))
        self._prompt = visual.TextStim(self.win, text="", height=26, wrapWidth=1000, color=(1, 1, 1))
        self._fixation = visual.TextStim(self.win, text="+", height=48, color=(1, 1, 1))
        self._images = [visual.ImageStim(self.win, image=None)
                        for _ in range(max(len(t.stimuli) for t in experiment.trials))]
        self.stimulus_px = stimulus_width_px(experiment.provenance.get("display"), int(self.win.size[0]))
        if self.stimulus_px:
            display = experiment.provenance["display"]
            self.device.update(stimulus_degrees=display["stimulus_degrees"],
                               viewing_distance_cm=display["viewing_distance_cm"],
                               screen_width_cm=display["screen_width_cm"], stimulus_px=self.stimulus_px)
            log.info(f"stimulus {display['stimulus_degrees']:g} deg at {display['viewing_distance_cm']:g} cm = "
                     f"{display['stimulus_width_cm']:g} cm = {self.stimulus_px} px on a "
                     f"{display['screen_width_cm']:g} cm, {int(self.win.size[0])} px wide screen")
        self._mask = visual.ImageStim(self.win, image=None)
        self._cells = [(visual.Rect(self.win, width=c.width, height=c.height, pos=(c.x, c.y),
                                    fillColor=(-0.6, -0.6, -0.6), lineColor=(0.6, 0.6, 0.6)),
                        visual.TextStim(self.win, text=self._cell_text(c), pos=(c.x, c.y), height=22,
                                        color=(1, 1, 1)))
                       for c in grid.cells]
        log.exp("response grid: " + " | ".join(label.text for _, label in self._cells))  # what answers read
        log.info(f"refresh {self.hz:.2f} Hz ({self.refresh.source}; measurements {self.refresh.measurements}; "
                 f"free-running flips {self.refresh.free_running_hz:.1f} Hz; pacing {self.refresh.pacing})")

    @property
    def refresh_record(self) -> dict:
        """The refresh rate as the session's summary reports it."""
        return {"hz": self.hz, "source": self.refresh.source, "pacing": self.refresh.pacing,
                "measurements": list(self.refresh.measurements),
                "free_running_hz": round(self.refresh.free_running_hz, 2)}

    def _cell_text(self, cell) -> str:
        """The cell's answer as the participant reads it, in the study's language (the label's name, "not
        clear"; the stored answer stays the label), with its key where answers are typed."""
        name = self.say("answer_not_clear") if cell.col is None else cell.name
        return name if self.station.input_mode != "keyboard" else f"{name}  [{cell.key}]"

    def flip(self) -> float:
        """Show what was drawn; the flip's time (PsychoPy clock seconds)."""
        return self._pacer.flip()

    def record_intervals(self) -> int:
        """Start recording the intervals between flips; where this recording's intervals start."""
        self.win.recordFrameIntervals = True
        return len(self.win.frameIntervals)

    def recorded_intervals(self, since: int) -> list[float]:
        """Stop recording; the intervals (s) recorded since ``record_intervals`` returned ``since``."""
        self.win.recordFrameIntervals = False
        return self.win.frameIntervals[since:]

    def set_text(self, message: str) -> None:
        self._text.text = message

    def draw_text(self) -> None:
        self._text.draw()

    def draw_fixation(self) -> None:
        self._fixation.draw()

    def draw_mask(self) -> None:
        self._mask.draw()

    def close(self) -> None:
        self.win.close()

    def load(self, trial: Trial) -> list:
        """The trial's images (and its mask) placed and uploaded, ready to draw."""
        from PIL import Image

        stims = []
        for stim_id, stim, x in zip(trial.stimuli, self._images, self._positions(trial)):
            record = self.experiment.stimuli[stim_id]
            pixels = decode_image(self.expdir.stimulus_path(record))
            stim.image = Image.fromarray(pixels)
            width = self.stimulus_px or pixels.shape[1]
            stim.size = (width, round(pixels.shape[0] * width / pixels.shape[1]))
            stim.pos = (x, 0)
            stims.append(stim)
        if trial.timing.mask:
            seed = trial_mask_seed(trial.mask_seed, self.experiment.name, trial.trial_id)
            noise = pink_noise_mask(int(max(stims[0].size)), seed)
            self._mask.image = Image.fromarray(noise).convert("RGB")
            self._mask.size = (noise.shape[1], noise.shape[0])
            self._mask.draw()
        for stim in stims:
            stim.draw()
        self.win.clearBuffer()  # drawing once uploads the textures now, not on the first timed frame
        return stims

    def _positions(self, trial: Trial) -> list[float]:
        """Horizontal centre of each of the trial's images: one in the middle, or a row (the card's ``images``)."""
        if trial.card.images == "one":
            return [0.0]
        width = self.stimulus_px or self.experiment.stimuli[trial.stimuli[0]].width or 224
        return row_positions(len(trial.stimuli), width)

    def draw_grid(self) -> None:
        for rect, label in self._cells:
            rect.draw()
            label.draw()

    def draw_prompt(self, text: str | None) -> None:
        """The response screen's words (a trial type's ``prompt``)."""
        self._prompt.text = text or ""
        self._prompt.draw()
