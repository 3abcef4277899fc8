"""When the lab shows what: every frame flipped through the pacer (the simulated participant watches
each), text screens until a key, the Escape pause, and a trial's phases counted in frames with the
measured intervals of its timed phases."""

from __future__ import annotations

from cuebench.runner_contract import TrialPlan
from cuebench.trials import Trial

from ..timing import TIMED_PHASES, FrameCount, dropped_frames, phase_frames
from .responses import Outcome, response_mode
from .simulate import Screen

CONTINUE_KEY = "space"


class Restart(Exception):
    """Escape was pressed during a trial and the session goes on: show the trial again."""


class Quit(Exception):
    """Quitting was confirmed on the pause screen."""


class Pacing:
    """Frames and screens over time during one run."""

    def _frame(self, screen: Screen, draw) -> float:
        """Draw and flip one frame; lets the simulated participant see the screen."""
        draw()
        now = self.pacer.flip()
        if screen.onset is None:
            screen.onset = now
        if self.sim is not None:
            self.sim.observe(screen, now)
        return now

    def _continue_screen(self, message: str) -> None:
        """Text until space (or a click, with the mouse); Escape pauses (``Quit`` if confirmed)."""
        prompt = self.say(f"lab_continue_{self.options.input_mode}")
        self.logging.exp("screen: " + " ".join(f"{message}\n\n{prompt}".split()))  # what the participant read
        while True:
            self.text.text = f"{message}\n\n{prompt}"
            self.input.clear()
            self.input.start()
            screen = Screen("continue")
            presses: list = []
            while not presses:
                self._frame(screen, self.text.draw)
                presses = self.input.poll((CONTINUE_KEY,), clicks=True)
            if all(p.key != "escape" for p in presses):
                return
            self._pause()

    def _pause(self) -> None:
        """Escape: Y confirms quitting (raises ``Quit``), N goes on."""
        self.logging.exp("paused (Escape)")
        self.text.text = self.say("lab_paused")
        self.input.clear()
        screen = Screen("pause")
        while True:
            self._frame(screen, self.text.draw)
            keys = {p.key for p in self.input.poll(("y", "n"), clicks=False)}
            if "y" in keys:
                self.logging.exp("session ended by the experimenter")
                raise Quit
            if "n" in keys:
                self.logging.exp("session continues")
                return

    def _show_for(self, message: str, seconds: float) -> None:
        self.logging.exp("screen: " + " ".join(message.split()))
        self.text.text = message
        screen = Screen("trial")
        for _ in range(max(1, round(seconds * self.hz))):
            self._frame(screen, self.text.draw)

    def _blank(self, count: FrameCount) -> None:
        screen = Screen("trial")
        for _ in range(count.frames):
            self._frame(screen, lambda: None)

    def _log_rounding(self, trials: list[Trial]) -> None:
        for timing in dict.fromkeys(t.timing for t in trials):
            frames = phase_frames(timing, self.hz)
            described = "; ".join(f"{name} {count.describe()}" for name, count in frames.items() if count.frames)
            self.log_info(f"timing at {self.hz:.2f} Hz: {described}")

    def _present(self, plan: TrialPlan, trial: Trial) -> tuple["Outcome", int]:
        """Show a trial by its plan until it is answered; an Escape pause shows it again from the start."""
        outcome, restarts = None, 0
        while outcome is None:
            try:
                outcome = self._trial(plan, trial)
            except Restart:
                restarts += 1
                self.logging.exp(f"trial {plan.index} ({trial.trial_id}) restarts after a pause")
        return outcome, restarts

    def _trial(self, plan: TrialPlan, trial: Trial) -> Outcome:
        """Fixation, stimulus, mask (frame-counted, intervals recorded), then the response
        phase; ITI. Escape before an answer pauses, then ``Restart`` or ``Quit``."""
        if plan.instruction:
            self._continue_screen(plan.instruction)
        mode = response_mode(trial)
        stims = self._load(trial)
        frames = phase_frames(plan.timing, self.hz)
        draws = {"fixation": self.fixation.draw, "stimulus": lambda: [s.draw() for s in stims], "mask": self.mask.draw}
        keys = mode.keys(self, trial)
        from_onset = plan.timing.response_from_onset
        answer: tuple[str, float] | None = None
        onsets: dict[str, float] = {}
        screen = Screen("trial", trial)
        self.input.clear()
        first_interval = len(self.win.frameIntervals)
        self.win.recordFrameIntervals = True
        for phase in TIMED_PHASES:
            for n in range(frames[phase].frames):
                now = self._frame(screen, draws[phase])
                if n == 0:
                    onsets[phase] = now
                    if phase == "stimulus" and from_onset:
                        self.input.start()
                answer = self._read(trial, keys, from_onset and "stimulus" in onsets, answer)
        def response_draw() -> None:
            mode.draw_response(self, trial)

        response_screen = Screen("response", trial, answer_input=lambda answer: mode.answer_input(self, trial, answer))
        onsets["response"] = self._frame(response_screen, response_draw)
        self.win.recordFrameIntervals = False
        intervals = self.win.frameIntervals[first_interval:]
        if not from_onset:
            self.input.start()
        window = frames["response_window"].frames or None
        shown = (sum(frames[p].frames for p in ("stimulus", "mask")) if from_onset else 0) + 1
        while answer is None and (window is None or shown < window):
            answer = self._read(trial, keys, True, answer)
            if answer is None:
                self._frame(response_screen, response_draw)
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
        """The first valid answer among this frame's presses; Escape before an answer pauses."""
        mode = response_mode(trial)
        for press in self.input.poll(keys if accepting else (), clicks=accepting and mode.clicks):
            if press.key == "escape":
                if answer is None:
                    self._pause()
                    raise Restart
                continue
            if answer is not None:
                continue
            if press.pos is not None:
                cell = self.grid.cell_at(*press.pos)
                label = cell.label if cell is not None and cell.label in trial.choices else None
            else:
                label = mode.answer_for_key(self, trial, press.key)
            if label is not None:
                answer = (label, press.rt)
        return answer
