"""When the lab shows what: every frame flipped through the pacer (the simulated participant watches
each), text screens until a key, the Escape pause, and a trial's phases counted in frames with the
measured intervals of its timed phases. What is drawn is the ``Display``'s, the answers the
``ResponseReader``'s."""

from __future__ import annotations

from typing import Callable

from cuebench.runner_contract import TrialPlan
from cuebench.trials import Trial

from ..timing import TIMED_PHASES, FrameCount, dropped_frames, phase_frames
from .log import SessionLog
from .presentation import Display
from .responses import Escape, Outcome, ResponseReader, response_mode
from .simulate import Screen, SimulatedParticipant

CONTINUE_KEY = "space"


class Restart(Exception):
    """Escape was pressed during a trial and the session goes on: show the trial again."""


class Quit(Exception):
    """Quitting was confirmed on the pause screen."""


class Pacing:
    """Frames and screens over time during one run, on the display, read by the reader; ``sim``, a scripted
    participant, watches every frame."""

    def __init__(self, display: Display, reader: ResponseReader, log: SessionLog, say: Callable[..., str],
                 sim: SimulatedParticipant | None = None):
        self.display, self.reader, self.log, self.say, self.sim = display, reader, log, say, sim
        self.input = reader.input
        self.hz = display.hz

    def frame(self, screen: Screen, draw) -> float:
        """Draw and flip one frame; lets the simulated participant see the screen."""
        draw()
        now = self.display.flip()
        if screen.onset is None:
            screen.onset = now
        if self.sim is not None:
            self.sim.observe(screen, now)
        return now

    def continue_screen(self, message: str) -> None:
        """Text until space (or a click, with the mouse); Escape pauses (``Quit`` if confirmed)."""
        prompt = self.say(f"lab_continue_{self.display.station.input_mode}")
        self.log.exp("screen: " + " ".join(f"{message}\n\n{prompt}".split()))  # what the participant read
        while True:
            self.display.set_text(f"{message}\n\n{prompt}")
            self.input.clear()
            self.input.start()
            screen = Screen("continue")
            presses: list = []
            while not presses:
                self.frame(screen, self.display.draw_text)
                presses = self.input.poll((CONTINUE_KEY,), clicks=True)
            if all(p.key != "escape" for p in presses):
                return
            self.pause()

    def pause(self) -> None:
        """Escape: Y confirms quitting (raises ``Quit``), N goes on."""
        self.log.exp("paused (Escape)")
        self.display.set_text(self.say("lab_paused"))
        self.input.clear()
        screen = Screen("pause")
        while True:
            self.frame(screen, self.display.draw_text)
            keys = {p.key for p in self.input.poll(("y", "n"), clicks=False)}
            if "y" in keys:
                self.log.exp("session ended by the experimenter")
                raise Quit
            if "n" in keys:
                self.log.exp("session continues")
                return

    def show_for(self, message: str, seconds: float) -> None:
        self.log.exp("screen: " + " ".join(message.split()))
        self.display.set_text(message)
        screen = Screen("trial")
        for _ in range(max(1, round(seconds * self.hz))):
            self.frame(screen, self.display.draw_text)

    def _blank(self, count: FrameCount) -> None:
        screen = Screen("trial")
        for _ in range(count.frames):
            self.frame(screen, lambda: None)

    def log_rounding(self, trials: list[Trial]) -> None:
        """How the trials' phases round to whole frames at this refresh rate, said once per timing."""
        for timing in dict.fromkeys(t.timing for t in trials):
            frames = phase_frames(timing, self.hz)
            described = "; ".join(f"{name} {count.describe()}" for name, count in frames.items() if count.frames)
            self.log.info(f"timing at {self.hz:.2f} Hz: {described}")

    def present(self, plan: TrialPlan, trial: Trial) -> tuple[Outcome, int]:
        """Show a trial by its plan until it is answered; an Escape pause shows it again from the start. The
        outcome and how often the trial restarted."""
        outcome, restarts = None, 0
        while outcome is None:
            try:
                outcome = self._trial(plan, trial)
            except Restart:
                restarts += 1
                self.log.exp(f"trial {plan.index} ({trial.trial_id}) restarts after a pause")
        return outcome, restarts

    def _trial(self, plan: TrialPlan, trial: Trial) -> Outcome:
        """Fixation, stimulus, mask (frame-counted, intervals recorded), then the response
        phase; ITI. Escape before an answer pauses, then ``Restart`` or ``Quit``."""
        if plan.instruction:
            self.continue_screen(plan.instruction)
        mode = response_mode(trial)
        stims = self.display.load(trial)
        frames = phase_frames(plan.timing, self.hz)
        draws = {"fixation": self.display.draw_fixation, "stimulus": lambda: [s.draw() for s in stims],
                 "mask": self.display.draw_mask}
        keys = self.reader.keys(trial)
        from_onset = plan.timing.response_from_onset
        answer: tuple[str, float] | None = None
        onsets: dict[str, float] = {}
        screen = Screen("trial", trial)
        self.input.clear()
        first_interval = self.display.record_intervals()
        for phase in TIMED_PHASES:
            for n in range(frames[phase].frames):
                now = self.frame(screen, draws[phase])
                if n == 0:
                    onsets[phase] = now
                    if phase == "stimulus" and from_onset:
                        self.input.start()
                answer = self._read(trial, keys, from_onset and "stimulus" in onsets, answer)

        def response_draw() -> None:
            mode.draw_response(self.display, trial)

        response_screen = Screen("response", trial,
                                 answer_input=lambda answer: self.reader.answer_input(trial, answer))
        onsets["response"] = self.frame(response_screen, response_draw)
        intervals = self.display.recorded_intervals(first_interval)
        if not from_onset:
            self.input.start()
        window = frames["response_window"].frames or None
        shown = (sum(frames[p].frames for p in ("stimulus", "mask")) if from_onset else 0) + 1
        while answer is None and (window is None or shown < window):
            answer = self._read(trial, keys, True, answer)
            if answer is None:
                self.frame(response_screen, response_draw)
                shown += 1
        if answer is None and window is not None:
            answer = self._read(trial, keys, True, answer)
        self._blank(frames["iti"])
        present = [p for p in TIMED_PHASES if p in onsets]
        ends = [onsets[p] for p in present[1:]] + [onsets["response"]]
        measured = {p: round(1000 * (end - onsets[p]), 3) for p, end in zip(present, ends)}
        return Outcome(response=answer[0] if answer else None, rt_ms=round(1000 * answer[1], 3) if answer else None,
                       measured=measured, frames={p: frames[p].frames for p in present},
                       dropped=dropped_frames(intervals, self.hz))

    def _read(self, trial: Trial, keys: tuple[str, ...], accepting: bool, answer):
        """The reader's answer among this frame's presses; Escape before an answer pauses, then ``Restart``."""
        try:
            return self.reader.read(trial, keys, accepting, answer)
        except Escape:
            self.pause()
            raise Restart from None
