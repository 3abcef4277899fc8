"""One participant's lab session: the trial sequence on screen, each answer committed at once.

The sequence is ``cuebench.counterbalance.participant_sequence`` (the web task uses the same), so
a participant gets the same trials in the same order in the lab or online. Every answer
is written to the experiment's ``responses.sqlite`` (``cuebench.responses.ResponseStore``,
synchronous commits) before the next trial starts: a crash or power cut loses at most
the trial on screen, and running the same command again resumes at the first unanswered
trial. Phases are counted in frames (``human_tasks.timing``); the flips of the timed
phases are recorded and their measured durations and dropped frames go into each row.

Group rule: ``--group G`` if given; otherwise the group already stored for this
participant and session (a resumed run keeps its group); otherwise the least filled group
by the web server's fill counts (``LabOptions.choose_group``, which ``cuebench lab run``
wires to the server's assignment, so lab and web sessions fill one Latin square);
without it ``default_group(participant, n_groups)``, a hash of the participant id. The
group is stored in every row, and ``LabOptions.record_session`` registers the session as
one of the server's participants (listed on the admin page, excludable there and with
``cuebench exclude``).
"""

from __future__ import annotations

import hashlib
import platform
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cuebench.counterbalance import ScheduledTrial, adaptive_blocks, participant_seed, participant_sequence
from cuebench import texts
from cuebench.errors import CuebenchError
from cuebench.exclusions import note_attention_answer
from cuebench.expdir import ExperimentDir
from cuebench.questionnaire import Questionnaire, QuestionnaireError, load_questionnaire, store_answers, stored_answers
from cuebench.responses import ResponseStore, score, trial_row
from cuebench.segmentation import refuse_for_people
from cuebench.trials import Experiment, Trial
from cuebench.images import decode_image

from ..layout import ODDITY_KEYS, LayoutError, ResponseGrid, oddity_positions, response_grid
from ..masks import pink_noise_mask, trial_mask_seed
from ..psychopy_csv import write_psychopy_csv
from ..timing import TIMED_PHASES, FrameCount, dropped_frames, phase_frames
from .questionnaire import LabQuestionnaire, check_answerable
from .simulate import Screen, Script

INPUT_MODES = ("mouse", "keyboard")
DATA_DIR = "data"
PARTICIPANT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
END_SCREEN_S = 1.5
CONTINUE_KEY = "space"


class LabError(CuebenchError):
    """The lab session cannot start as asked (bad participant id, group, input mode, missing file)."""


@dataclass(frozen=True)
class LabOptions:
    expdir: Path
    participant: str
    session: str = "1"
    group: int | None = None
    fullscreen: bool = False
    screen: int = 0
    input_mode: str = "mouse"
    refresh_hz: float | None = None
    simulation: Script | None = None  # a scripted participant instead of a person
    window_size: tuple[int, int] = (1280, 800)
    database: str | None = None  # a postgresql:// URL instead of the experiment's responses.sqlite
    choose_group: Callable[[], int] | None = None  # a new session's group; None: default_group
    record_session: Callable[[int, bool], None] | None = None
    """Called with (group, finished) when the session starts and when it ends: ``cuebench lab run``
    registers the session among the server's participants (admin page, exclusions, fill counts)."""
    allow_text_mismatch: bool = False
    """Run although the texts contradict the experiment (``cuebench.texts.check_texts``)."""


@dataclass
class SessionSummary:
    participant: str
    session: str
    group: int
    total: int
    answered: int
    answered_this_run: int
    no_drop_trials: int
    timed_trials: int
    quit_early: bool
    csv_path: Path
    refresh: dict = field(default_factory=dict)
    questionnaire_answered: bool | None = None
    """Whether the study's questionnaire is answered; None when the study has none."""
    adaptive_answered: int = 0
    adaptive_max: int = 0
    """Answers given in the adaptive (QUEST+) blocks after the fixed sequence, and the most they ask for."""
    adaptive_finished: bool = True

    @property
    def complete(self) -> bool:
        """Every trial of the fixed sequence answered and every adaptive block finished (one may stop early)."""
        return self.answered == self.total and self.adaptive_finished

    @property
    def no_drop_share(self) -> float | None:
        return self.no_drop_trials / self.timed_trials if self.timed_trials else None

    def lines(self) -> list[str]:
        share = self.no_drop_share
        drops = (f"{100 * share:.1f} % of trials with no dropped frame ({self.no_drop_trials} of {self.timed_trials})"
                 if share is not None else "no timed trials yet")
        state = ("complete" if self.complete else
                 "stopped early; run the same command again to resume" if self.quit_early else "incomplete")
        refresh = (f"; refresh {self.refresh['hz']:.2f} Hz ({self.refresh['source']}, {self.refresh['pacing']} pacing)"
                   if self.refresh else "")
        adaptive = (f"; {self.adaptive_answered} of at most {self.adaptive_max} in the adaptive QUEST+ part"
                    if self.adaptive_max else "")
        questionnaire = [] if self.questionnaire_answered is None else \
            [f"questionnaire: {'answered' if self.questionnaire_answered else 'not answered yet'}"]
        return [f"participant {self.participant}, session {self.session}, group {self.group}: "
                f"{self.answered + self.adaptive_answered} of {self.total + self.adaptive_max} trials answered "
                f"({self.answered_this_run} in this run{adaptive}), {state}",
                *questionnaire, f"frame timing: {drops}{refresh}", f"PsychoPy-style data: {self.csv_path}"]


def default_group(participant: str, n_groups: int) -> int:
    """A stable group for a participant id: SHA-256 of the id modulo the number of groups."""
    return int.from_bytes(hashlib.sha256(participant.encode("utf-8")).digest()[:8], "big") % n_groups


def resolve_group(experiment: Experiment, participant: str, stored_rows: list[dict], requested: int | None,
                  choose: Callable[[], int] | None = None) -> int:
    """The session's group by the module docstring's rule, given the rows already stored for it."""
    n_groups = len(experiment.assignment.groups) if experiment.assignment else 0
    if n_groups == 0:
        raise LabError(f"experiment {experiment.name!r} has no assignment plan; rebuild it with a design")
    if requested is not None and not 0 <= requested < n_groups:
        raise LabError(f"--group {requested} does not exist; this experiment has groups 0..{n_groups - 1}")
    stored = sorted({r["group"] for r in stored_rows if r.get("group") is not None})
    if stored:
        if requested is not None and requested != stored[0]:
            raise LabError(f"participant {participant} was run in group {stored[0]} in this session; "
                           f"--group {requested} would mix two groups in one session")
        return stored[0]
    if requested is not None:
        return requested
    return choose() if choose is not None else default_group(participant, n_groups)


def check_resumable(sequence: list[ScheduledTrial], stored_rows: list[dict]) -> None:
    """Stored answers must be to the trials the sequence puts at their indices; otherwise
    experiment.json (or the group) changed since the session started."""
    planned = {s.index: s.trial_id for s in sequence}
    for row in stored_rows:
        if planned.get(row["trial_index"]) != row["trial_id"]:
            raise LabError(f"trial {row['trial_index']} of participant {row['observer']} session {row['session']} was "
                           f"answered as {row['trial_id']!r}, but the experiment now puts "
                           f"{planned.get(row['trial_index'])!r} there; experiment.json changed since the session "
                           "started: use a new --session label")


def session_paths(root: Path, experiment: str, participant: str, session: str) -> tuple[Path, Path]:
    """PsychoPy's ``data/<participant>_<expName>_...`` naming, one CSV and log per session."""
    stem = f"{participant}_{experiment}_session{session}"
    return root / DATA_DIR / f"{stem}.csv", root / DATA_DIR / f"{stem}.log"


def _check_options(options: LabOptions) -> None:
    if not PARTICIPANT_ID.match(options.participant):
        raise LabError(f"participant id {options.participant!r} must be 1-64 letters, digits, '_', '.' or '-'")
    if not PARTICIPANT_ID.match(str(options.session)):
        raise LabError(f"session {options.session!r} must be letters, digits, '_', '.' or '-'")
    if options.input_mode not in INPUT_MODES:
        raise LabError(f"--input must be one of {INPUT_MODES}, got {options.input_mode!r}")


def _check_stimuli(expdir: ExperimentDir, experiment: Experiment, trials: list[Trial]) -> None:
    for trial in trials:
        for sid in trial.stimuli:
            path = expdir.stimulus_path(experiment.stimuli[sid])
            if not path.is_file():
                raise LabError(f"stimulus file {path} of trial {trial.trial_id!r} is missing")


def _lab_questionnaire(expdir: ExperimentDir, input_mode: str) -> Questionnaire | None:
    try:
        questionnaire = load_questionnaire(expdir)
        if questionnaire is not None:
            check_answerable(questionnaire, input_mode)
        return questionnaire
    except QuestionnaireError as err:
        raise LabError(str(err)) from None


def run_lab_session(options: LabOptions, out=print) -> SessionSummary:
    """Run (or resume) one participant's session; returns what was answered."""
    _check_options(options)
    expdir = ExperimentDir(options.expdir)
    experiment = expdir.load()
    refuse_for_people(experiment, "cuebench lab run")
    texts.write_default_texts(expdir, experiment)  # a folder built before the texts existed gets them here
    if not options.allow_text_mismatch:
        try:
            texts.check_texts(expdir, experiment)
        except texts.TextsContradictError as err:
            raise LabError(str(err)) from None
    questionnaire = _lab_questionnaire(expdir, options.input_mode)
    session = str(options.session)
    store = ResponseStore(options.database or expdir.responses_file)
    try:
        stored_rows = store.rows("experiment=? AND observer=? AND session=?",
                                 [experiment.name, options.participant, session])
        group = resolve_group(experiment, options.participant, stored_rows, options.group, options.choose_group)
        sequence = participant_sequence(experiment, group, options.participant, session)
        check_resumable(sequence, stored_rows)
        if options.record_session is not None:
            options.record_session(group, False)
        answered = store.answered_indices(experiment.name, options.participant, session)
        remaining = [s for s in sequence if s.index not in answered]
        trials = [experiment.trial(s.trial_id) for s in remaining]
        grid = response_grid(experiment.label_set)
        modes = [response_mode(t) for t in trials]  # an unknown trial type stops before the window opens
        if options.input_mode == "keyboard" and not grid.has_all_keys and any(m.key_per_label for m in modes):
            raise LayoutError(f"label set {experiment.label_set.name!r} has more labels than the 16 keyed places; "
                              "use --input mouse")
        _check_stimuli(expdir, experiment, trials)
        csv_path, log_path = session_paths(expdir.root, experiment.name, options.participant, session)
        blocks = adaptive_blocks(experiment, store, options.participant)
        adaptive_before = sum(b.index for b in blocks)
        blocks = [b for b in blocks if not b.finished]
        _check_stimuli(expdir, experiment, [experiment.trial(tid) for b in blocks
                                            for tids in b.trials_by_level.values() for tid in tids])
        quit_early, refresh = False, {}
        asked = questionnaire is not None and options.participant not in stored_answers(store.conn, experiment.name)
        if remaining or blocks or asked:
            runner = _Runner(options, expdir, experiment, store, group, grid, log_path, out)
            try:
                quit_early = runner.run(sequence, remaining, answered, blocks, questionnaire if asked else None)
            finally:
                refresh = runner.refresh_record
                runner.close()
        rows = store.rows("experiment=? AND observer=? AND session=?", [experiment.name, options.participant, session])
        adaptive = adaptive_blocks(experiment, store, options.participant)
        adaptive_answered = sum(b.index for b in adaptive)
        write_psychopy_csv(rows, csv_path)
        timed = [r for r in rows if r.get("dropped_frames") is not None]
        summary = SessionSummary(
            participant=options.participant, session=session, group=group, total=len(sequence), answered=len(rows),
            answered_this_run=len(rows) - len(answered) + adaptive_answered - adaptive_before,
            no_drop_trials=sum(r["dropped_frames"] == 0 for r in timed),
            timed_trials=len(timed), quit_early=quit_early, csv_path=csv_path, refresh=refresh,
            questionnaire_answered=None if questionnaire is None else
            options.participant in stored_answers(store.conn, experiment.name),
            adaptive_answered=adaptive_answered, adaptive_max=sum(b.plan.trials for b in adaptive),
            adaptive_finished=all(b.finished for b in adaptive))
    finally:
        store.close()
    if options.record_session is not None and summary.complete:
        options.record_session(group, True)
    for line in summary.lines():
        out(line)
    return summary


@dataclass
class _Outcome:
    response: str | None
    rt_ms: float | None
    measured: dict
    frames: dict
    dropped: int


def stimulus_width_px(display: dict | None, screen_px: int) -> int | None:
    """The stimulus width in pixels that gives the degrees of visual angle the experiment was built for
    (``--stimulus-degrees``, ``--viewing-distance``, ``--screen-width``), on a window spanning the screen;
    None when it was built without them (the image's own pixels)."""
    if not display:
        return None
    return max(1, round(display["stimulus_width_cm"] * screen_px / display["screen_width_cm"]))


FEEDBACK_SECONDS = 1.0
"""How long a practice trial's feedback stays up (the web task shows it as long)."""


def practice_feedback(trial: Trial, response: str | None) -> str:
    """What a practice trial says after the answer (the web task uses the same words)."""
    return "Correct" if response == trial.correct else f"Not quite: the answer was \u201c{trial.correct}\u201d"


@dataclass(frozen=True)
class ResponseMode:
    """How the lab explains, shows and reads one trial type: a row of the dispatch table ``RESPONSE_MODES``,
    so a new trial type is one more row, not a branch in every phase. The callables that need the window
    take the running ``_Runner`` first."""

    keys: Callable[["_Runner", Trial], tuple[str, ...]]
    """The keys that answer the trial."""
    positions: Callable[["_Runner", Trial], list[float]]
    """Horizontal centre of each of the trial's images."""
    draw_response: Callable[["_Runner"], None]
    """The response screen."""
    clicks: bool
    """Whether a mouse click on the response grid answers."""
    answer_for_key: Callable[["_Runner", Trial, str], str | None]
    """The answer a key press gives (None: not an answer to this trial)."""
    answer_input: Callable[["_Runner", Trial, str], tuple[str, tuple[float, float] | None]]
    """The key, and the place to click (None where clicks do not answer), that give an answer: what a
    simulated participant presses."""
    key_per_label: bool
    """Whether the keyboard answers with one key per label (then every label needs a keyed place)."""
    how_to_answer: Callable[[str], str]
    """The lab's words on how to answer with an input mode (``mouse``/``keyboard``), after the study's
    instructions; "" where the response screen says it."""


def response_mode(trial: Trial) -> ResponseMode:
    """The row of ``RESPONSE_MODES`` for the trial's type; a type the lab cannot show is named."""
    try:
        return RESPONSE_MODES[trial.trial_type]
    except KeyError:
        raise LabError(f"trial {trial.trial_id!r} has trial type {trial.trial_type!r}, which the lab runner "
                       f"cannot show (it shows {', '.join(RESPONSE_MODES)})") from None


class _Restart(Exception):
    """Escape was pressed during a trial and the session goes on: show the trial again."""


class _Quit(Exception):
    """Quitting was confirmed on the pause screen."""


class _Runner:
    """The window, its stimuli and the per-frame loop of one run (PsychoPy lives here)."""

    def __init__(self, options: LabOptions, expdir: ExperimentDir, experiment: Experiment, store: ResponseStore,
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
            self.refresh = measure_refresh(self.win, options.refresh_hz, options.simulation is not None)
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
        self.oddity_prompt = visual.TextStim(self.win,
                                             text="Which image is different from the other two? Press 1, 2 or 3.",
                                             height=26, wrapWidth=1000, color=(1, 1, 1))
        self.fixation = visual.TextStim(self.win, text="+", height=48, color=(1, 1, 1))
        self.images = [visual.ImageStim(self.win, image=None) for _ in ODDITY_KEYS]
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
        self.log_info(f"refresh {self.hz:.2f} Hz ({self.refresh.source}; measurements {self.refresh.measurements}; "
                      f"free-running flips {self.refresh.free_running_hz:.1f} Hz; pacing {self.refresh.pacing})")

    def _cell_text(self, cell) -> str:
        if self.options.input_mode != "keyboard":
            return cell.label
        return f"{cell.label}  [{cell.key}]"

    def log_info(self, message: str) -> None:
        self.logging.exp(message)
        self.out(message)

    def close(self) -> None:
        self.win.close()
        self.logging.flush()
        self.logging.root.removeTarget(self.log)

    # --- the session ---------------------------------------------------------------------------

    def run(self, sequence: list[ScheduledTrial], remaining: list[ScheduledTrial], answered: set[int],
            blocks: list = (), questionnaire: Questionnaire | None = None) -> bool:
        """Show the remaining trials, the unfinished adaptive blocks, then the questionnaire (when it is
        still unanswered); returns True when the session was quit before the end."""
        try:
            if remaining:
                self._run(sequence, remaining, answered)
            for block in blocks:
                self._adaptive(block)
            if questionnaire is not None:
                self._questionnaire(questionnaire)
        except _Quit:
            return True
        self._show_for(texts.plain(self.expdir, "completion"), END_SCREEN_S)
        return False

    def _run(self, sequence: list[ScheduledTrial], remaining: list[ScheduledTrial], answered: set[int]) -> None:
        from tqdm import tqdm

        trials = [self.experiment.trial(s.trial_id) for s in remaining]
        self._log_rounding(trials)
        types = {t.trial_type for t in trials}
        practice_done = not any(s.block == 0 and s.index not in answered for s in sequence)
        has_practice = any(s.block == 0 for s in sequence)
        opening = texts.plain(self.expdir, "instructions") + "\n\n" + self._how_to_answer(types)
        if answered:
            opening = (f"Welcome back. The session continues at trial {remaining[0].index + 1} of {len(sequence)}."
                       "\n\n" + opening)
        self._continue_screen(opening)
        progress = tqdm(remaining, desc=f"{self.options.participant} session {self.session}", unit="trial",
                        file=sys.stderr)
        for scheduled in progress:
            trial = self.experiment.trial(scheduled.trial_id)
            if scheduled.block > 0 and has_practice and not practice_done:
                practice_done = True
                self._continue_screen("The practice is over. The experiment starts now.")
            if scheduled.break_before:
                self._continue_screen("Time for a break. Rest your eyes as long as you like.")
            outcome, restarts = self._present(scheduled.index, trial)
            self._commit(trial, outcome, restarts, session=self.session, trial_index=scheduled.index)
            if trial.role == "practice":
                feedback = practice_feedback(trial, outcome.response)
                self.logging.exp(f"practice feedback for trial {scheduled.index}: {feedback}")
                self._show_for(feedback, FEEDBACK_SECONDS)
        progress.close()

    def _adaptive(self, block) -> None:
        """One QUEST+ block (``cuebench.adaptive``): each level chosen from this participant's answers so far,
        each answer stored in the block's session with the posterior estimate after it."""
        from tqdm import tqdm

        trials = [self.experiment.trial(t) for ids in block.trials_by_level.values() for t in ids]
        facts = {"classify": texts.typical_timing([t.timing for t in trials]), "oddity": None,
                 "not_clear": self.experiment.label_set.not_clear}
        self._continue_screen("The next part adapts to your answers: the images get easier or harder. "
                              + " ".join(texts.task_sentences(facts)) + "\n\n"
                              + self._how_to_answer({"classify"}))
        progress = tqdm(total=block.plan.trials, initial=block.index, desc=f"{self.options.participant} "
                        f"{block.session}", unit="trial", file=sys.stderr)
        while not block.finished:
            level, trial_id = block.next_trial()
            trial = self.experiment.trial(trial_id)
            outcome, restarts = self._present(block.index, trial)
            fields = block.record(level, trial_id, bool(score(trial, outcome.response)))
            self._commit(trial, outcome, restarts, **fields)
            progress.update(1)
        progress.close()

    def _questionnaire(self, questionnaire: Questionnaire) -> None:
        """The study's questions (``human_tasks.lab.questionnaire``), stored once with the participant."""
        self._continue_screen("A few questions to finish.")
        answers = LabQuestionnaire(self.win, self.input, self._frame, self._pause,
                                   self.logging.exp).ask_all(questionnaire)
        store_answers(self.store.conn, self.experiment.name, self.options.participant, answers, runner="lab")
        self.logging.exp(f"questionnaire answered: {len(answers)} of {len(questionnaire.questions)} items")

    def _present(self, index: int, trial: Trial) -> tuple["_Outcome", int]:
        """Show a trial until it is answered; an Escape pause shows it again from the start."""
        outcome, restarts = None, 0
        while outcome is None:
            try:
                outcome = self._trial(trial)
            except _Restart:
                restarts += 1
                self.logging.exp(f"trial {index} ({trial.trial_id}) restarts after a pause")
        return outcome, restarts

    def _how_to_answer(self, types: set[str]) -> str:
        """What the lab adds to the study's own instructions: this station's input and the pause key."""
        return "".join(mode.how_to_answer(self.options.input_mode) for kind, mode in RESPONSE_MODES.items()
                       if kind in types) + "Press Escape to pause."

    def _log_rounding(self, trials: list[Trial]) -> None:
        for timing in dict.fromkeys(t.timing for t in trials):
            frames = phase_frames(timing, self.hz)
            described = "; ".join(f"{name} {count.describe()}" for name, count in frames.items() if count.frames)
            self.log_info(f"timing at {self.hz:.2f} Hz: {described}")

    def _commit(self, trial: Trial, outcome: _Outcome, restarts: int, session: str, trial_index: int,
                **fields) -> None:
        events = [{"event": "escape_pause", "then": "trial shown again"}] * restarts
        observer_kind = "pilot" if self.options.simulation is not None else "human"
        row = trial_row(self.experiment, trial, observer=self.options.participant, observer_kind=observer_kind,
                        session=session, trial_index=trial_index, response=outcome.response,
                        rt_ms=outcome.rt_ms, timed_out=int(outcome.response is None),
                        timing_measured=outcome.measured, frames=outcome.frames, dropped_frames=outcome.dropped,
                        refresh_hz=self.hz, device=self.device, group=self.group, events=events or None, **fields)
        self.store.write(row)
        if note_attention_answer(self.store.conn, row) is not None:
            self.logging.exp(f"attention check {trial.trial_id} failed: {self.options.participant} is excluded")
        self.logging.exp(f"committed trial {trial_index} of session {session} ({trial.trial_id}): response "
                         f"{outcome.response!r}, rt {outcome.rt_ms} ms, dropped {outcome.dropped}")

    # --- screens -------------------------------------------------------------------------------

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
        """Text until space (or a click, with the mouse); Escape pauses (``_Quit`` if confirmed)."""
        prompt = "Click or press space to continue." if self.options.input_mode == "mouse" else "Press space to continue."
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
        """Escape: Y confirms quitting (raises ``_Quit``), N goes on."""
        self.logging.exp("paused (Escape)")
        self.text.text = ("Paused.\n\nPress Y to end the session. Everything answered so far is saved; "
                          "run the same command again to resume.\n\nPress N to continue.")
        self.input.clear()
        screen = Screen("pause")
        while True:
            self._frame(screen, self.text.draw)
            keys = {p.key for p in self.input.poll(("y", "n"), clicks=False)}
            if "y" in keys:
                self.logging.exp("session ended by the experimenter")
                raise _Quit
            if "n" in keys:
                self.logging.exp("session continues")
                return

    def _show_for(self, message: str, seconds: float) -> None:
        self.text.text = message
        screen = Screen("trial")
        for _ in range(max(1, round(seconds * self.hz))):
            self._frame(screen, self.text.draw)

    # --- one trial -----------------------------------------------------------------------------

    def _load(self, trial: Trial) -> list:
        from PIL import Image

        stims = []
        for stim_id, stim, x in zip(trial.stimuli, self.images, response_mode(trial).positions(self, trial)):
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

    def _oddity_positions(self, trial: Trial) -> list[float]:
        width = self.stimulus_px or self.experiment.stimuli[trial.stimuli[0]].width or 224
        return oddity_positions(len(trial.stimuli), width)

    def _grid_answer(self, trial: Trial, key: str) -> str | None:
        label = self.grid.label_for_key(key)
        return label if label in trial.choices else None

    def _trial(self, trial: Trial) -> _Outcome:
        """Fixation, stimulus, mask (frame-counted, intervals recorded), then the response
        phase; ITI. Escape before an answer pauses, then ``_Restart`` or ``_Quit``."""
        if trial.instruction:
            self._continue_screen(trial.instruction)
        mode = response_mode(trial)
        stims = self._load(trial)
        frames = phase_frames(trial.timing, self.hz)
        draws = {"fixation": self.fixation.draw, "stimulus": lambda: [s.draw() for s in stims], "mask": self.mask.draw}
        keys = mode.keys(self, trial)
        from_onset = trial.timing.response_from_onset
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
            mode.draw_response(self)

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
        return _Outcome(response=answer[0] if answer else None, rt_ms=round(1000 * answer[1], 3) if answer else None,
                        measured=measured, frames={p: frames[p].frames for p in present},
                        dropped=dropped_frames(intervals, self.hz))

    def _read(self, trial: Trial, keys: tuple[str, ...], accepting: bool, answer):
        """The first valid answer among this frame's presses; Escape before an answer pauses."""
        mode = response_mode(trial)
        for press in self.input.poll(keys if accepting else (), clicks=accepting and mode.clicks):
            if press.key == "escape":
                if answer is None:
                    self._pause()
                    raise _Restart
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

    def _draw_grid(self) -> None:
        for rect, label in self.cells:
            rect.draw()
            label.draw()

    def _draw_oddity_prompt(self) -> None:
        self.oddity_prompt.draw()

    def _blank(self, count: FrameCount) -> None:
        screen = Screen("trial")
        for _ in range(count.frames):
            self._frame(screen, lambda: None)


def _grid_input(runner: _Runner, trial: Trial, answer: str) -> tuple[str, tuple[float, float]]:
    cell = runner.grid.cell(answer)
    return cell.key, (cell.x, cell.y)


RESPONSE_MODES: dict[str, ResponseMode] = {
    "classify": ResponseMode(
        keys=lambda runner, trial: tuple(runner.grid.keys), positions=lambda runner, trial: [0.0],
        draw_response=_Runner._draw_grid, clicks=True, answer_for_key=_Runner._grid_answer, answer_input=_grid_input,
        key_per_label=True,
        how_to_answer=lambda input_mode: ("Click the label of your answer. " if input_mode == "mouse" else
                                          "Press the key shown next to the label of your answer. ")),
    "oddity": ResponseMode(
        keys=lambda runner, trial: ODDITY_KEYS[:len(trial.stimuli)], positions=_Runner._oddity_positions,
        draw_response=_Runner._draw_oddity_prompt, clicks=False, answer_for_key=lambda runner, trial, key: key,
        answer_input=lambda runner, trial, answer: (answer, None), key_per_label=False,
        how_to_answer=lambda input_mode: ""),
}
"""The lab's dispatch table: how it explains, shows and reads each trial type."""
