"""What the lab shows: the window, its refresh rate and frame pacer, the images of a trial (one in
the middle or a row, as the trial's card says), the noise mask, the label grid and a response prompt
(PsychoPy lives here, imported when a window opens)."""

from __future__ import annotations

import platform
from pathlib import Path

from cuebench.counterbalance import participant_seed
from cuebench.errors import CuebenchError
from cuebench.expdir import ExperimentDir
from cuebench.images import decode_image
from cuebench.responses import ResponseStore
from cuebench.trials import Experiment, Trial
from cuebench.words import say

from ..layout import ResponseGrid, row_positions
from ..masks import pink_noise_mask, trial_mask_seed
from .errors import LabError


def stimulus_width_px(display: dict | None, screen_px: int) -> int | None:
    """The stimulus width in pixels that gives the degrees of visual angle the experiment was built for
    (``--stimulus-degrees``, ``--viewing-distance``, ``--screen-width``), on a window spanning the screen;
    None when it was built without them (the image's own pixels)."""
    if not display:
        return None
    return max(1, round(display["stimulus_width_cm"] * screen_px / display["screen_width_cm"]))


class Presentation:
    """The window and what is drawn on it during one run."""

    def say(self, key: str, **values) -> str:
        """A screen's words in the study's language (``cuebench.words``)."""
        return say(key, self.experiment.language, **values)

    def __init__(self, options, expdir: ExperimentDir, experiment: Experiment, store: ResponseStore,
                 group: int, grid: ResponseGrid, log_path: Path, out):
        try:
            import psychopy
            from psychopy import logging, visual
        except ImportError as err:
            raise LabError(f"PsychoPy is not installed ({err}); install the lab extra: see docs/lab.md") from None
        from .display import FramePacer, measure_refresh, open_window
        from .inputs import ResponseInput
        from .simulate import SimulatedParticipant

        self.options, self.expdir, self.experiment, self.store = options, expdir, experiment, store
        self.group, self.grid, self.out = group, grid, out
        self.session = str(options.session)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        logging.console.setLevel(logging.WARNING)
        self.log = logging.LogFile(str(log_path), level=logging.EXP, filemode="a")
        self.logging = logging
        self.refresh_record: dict = {}
        self.win = open_window(options.fullscreen, options.screen, options.window_size)
        try:
            self.refresh = measure_refresh(self.win, options.refresh_hz, options.simulation is not None,
                                           self.say("lab_measuring_refresh"))
        except CuebenchError:
            self.close()
            raise
        self.hz = self.refresh.hz
        self.refresh_record = {"hz": self.hz, "source": self.refresh.source, "pacing": self.refresh.pacing,
                               "measurements": list(self.refresh.measurements),
                               "free_running_hz": round(self.refresh.free_running_hz, 2)}
        self.pacer = FramePacer(self.win, self.refresh)
        self.input = ResponseInput(self.win, options.input_mode)
        self.sim = (SimulatedParticipant(self.win, self.input.mouse, options.input_mode,
                                         seed=participant_seed(experiment.name, options.participant, self.session),
                                         script=options.simulation)
                    if options.simulation is not None else None)
        self.device = {
            "runner": "psychopy", "psychopy": psychopy.__version__, "platform": platform.platform(),
            "python": platform.python_version(), "screen": options.screen, "fullscreen": options.fullscreen,
            "window_size": [int(v) for v in self.win.size], "input": options.input_mode,
            "refresh_source": self.refresh.source, "refresh_measurements": list(self.refresh.measurements),
            "frame_pacing": self.refresh.pacing, "simulated": options.simulation is not None,
        }
        self.text = visual.TextStim(self.win, text="", height=26, wrapWidth=1000, color=(1, 1, 1))
        self.prompt = visual.TextStim(self.win, text="", height=26, wrapWidth=1000, color=(1, 1, 1))
        self.fixation = visual.TextStim(self.win, text="+", height=48, color=(1, 1, 1))
        self.images = [visual.ImageStim(self.win, image=None)
                       for _ in range(max(len(t.stimuli) for t in experiment.trials))]
        self.stimulus_px = stimulus_width_px(experiment.provenance.get("display"), int(self.win.size[0]))
        if self.stimulus_px:
            display = experiment.provenance["display"]
            self.device.update(stimulus_degrees=display["stimulus_degrees"],
                               viewing_distance_cm=display["viewing_distance_cm"],
                               screen_width_cm=display["screen_width_cm"], stimulus_px=self.stimulus_px)
            self.log_info(f"stimulus {display['stimulus_degrees']:g} deg at {display['viewing_distance_cm']:g} cm = "
                          f"{display['stimulus_width_cm']:g} cm = {self.stimulus_px} px on a "
                          f"{display['screen_width_cm']:g} cm, {int(self.win.size[0])} px wide screen")
        self.mask = visual.ImageStim(self.win, image=None)
        self.cells = [(visual.Rect(self.win, width=c.width, height=c.height, pos=(c.x, c.y),
                                   fillColor=(-0.6, -0.6, -0.6), lineColor=(0.6, 0.6, 0.6)),
                       visual.TextStim(self.win, text=self._cell_text(c), pos=(c.x, c.y), height=22, color=(1, 1, 1)))
                      for c in grid.cells]
        self.logging.exp("response grid: " + " | ".join(label.text for _, label in self.cells))  # what answers read
        self.log_info(f"refresh {self.hz:.2f} Hz ({self.refresh.source}; measurements {self.refresh.measurements}; "
                      f"free-running flips {self.refresh.free_running_hz:.1f} Hz; pacing {self.refresh.pacing})")

    def _cell_text(self, cell) -> str:
        """The cell's answer as the participant reads it, in the study's language (the label's name, "not
        clear"; the stored answer stays the label), with its key where answers are typed."""
        name = self.say("answer_not_clear") if cell.col is None else cell.name
        return name if self.options.input_mode != "keyboard" else f"{name}  [{cell.key}]"

    def log_info(self, message: str) -> None:
        self.logging.exp(message)
        self.out(message)

    def close(self) -> None:
        self.win.close()
        self.logging.flush()
        self.logging.root.removeTarget(self.log)

    def _load(self, trial: Trial) -> list:
        from PIL import Image

        stims = []
        for stim_id, stim, x in zip(trial.stimuli, self.images, self._positions(trial)):
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
            self.mask.image = Image.fromarray(noise).convert("RGB")
            self.mask.size = (noise.shape[1], noise.shape[0])
            self.mask.draw()
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
        for rect, label in self.cells:
            rect.draw()
            label.draw()

    def draw_prompt(self, text: str | None) -> None:
        """The response screen's words (a trial type's ``prompt``)."""
        self.prompt.text = text or ""
        self.prompt.draw()
