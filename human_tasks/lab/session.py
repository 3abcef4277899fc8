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
import re
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from cuebench import texts
from cuebench.counterbalance import ScheduledTrial, adaptive_blocks, participant_seed, participant_sequence
from cuebench.errors import CuebenchError
from cuebench.expdir import ExperimentDir
from cuebench.questionnaire import Questionnaire, QuestionnaireError, load_questionnaire, stored_answers
from cuebench.responses import ResponseStore, score
from cuebench.runner_contract import TrialPlan
from cuebench.segmentation import refuse_for_people
from cuebench.trial_types import card
from cuebench.trials import Experiment, Trial
from cuebench.words import say

from ..layout import LayoutError, ResponseGrid, response_grid
from ..masks import trial_mask_seed
from ..psychopy_csv import write_psychopy_csv
from .errors import LabError
from .inputs import ResponseInput
from .log import SessionLog
from .pacing import Pacing, Quit
from .presentation import Display, Station
from .questionnaire import LabQuestionnaire, check_answerable
from .responses import FEEDBACK_SECONDS, AnswerWriter, ResponseReader, practice_feedback, response_mode
from .simulate import Script, SimulatedParticipant

INPUT_MODES = ("mouse", "keyboard")
DATA_DIR = "data"
PARTICIPANT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
END_SCREEN_S = 1.5


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

    @property
    def observer_kind(self) -> str:
        """What the rows say answered: ``pilot`` for a scripted participant, else ``human``."""
        return "pilot" if self.simulation is not None else "human"


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


def lab_plan(expdir: ExperimentDir, experiment: Experiment, grid: ResponseGrid, trial: Trial, index: int,
             block: int, break_before: bool = False) -> TrialPlan:
    """The plan the lab shows a trial by, as the web task's (``cuebench.runner_contract``): its images are the
    stimulus files, its mask the pink noise of its seed, its key the trial id (the lab hides nothing from itself)."""
    images = [str(expdir.stimulus_path(experiment.stimuli[s])) for s in trial.stimuli]
    mask = f"pink-noise:{trial_mask_seed(trial.mask_seed, experiment.name, trial.trial_id)}" \
        if trial.timing.mask else None
    return TrialPlan.build(experiment, trial, index, block, break_before, trial_key=trial.trial_id, images=images,
                           mask=mask, grid=grid.places(experiment, trial))


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
        blocks = adaptive_blocks(experiment, store, options.participant, options.observer_kind)
        adaptive_before = sum(b.index for b in blocks)
        blocks = [b for b in blocks if not b.finished]
        _check_stimuli(expdir, experiment, [experiment.trial(tid) for b in blocks
                                            for tids in b.trials_by_level.values() for tid in tids])
        quit_early, refresh = False, {}
        asked = questionnaire is not None and options.participant not in stored_answers(store.conn, experiment.name)
        if remaining or blocks or asked:
            runner = _open_run(options, expdir, experiment, store, group, grid, log_path, out)
            try:
                quit_early = runner.run(sequence, remaining, answered, blocks, questionnaire if asked else None)
            finally:
                refresh = runner.refresh_record
                runner.close()
        rows = store.rows("experiment=? AND observer=? AND session=?", [experiment.name, options.participant, session])
        adaptive = adaptive_blocks(experiment, store, options.participant, options.observer_kind)
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


def _open_run(options: LabOptions, expdir: ExperimentDir, experiment: Experiment, store: ResponseStore, group: int,
              grid: ResponseGrid, log_path: Path, out) -> _Runner:
    """The parts of one run, made in order: the log, the window (its refresh rate measured), the input, a
    scripted participant if one answers, then the pacing and the writer that use them."""
    log = SessionLog(log_path, out)
    said = partial(say, language=experiment.language)
    station = Station(fullscreen=options.fullscreen, screen=options.screen, size=options.window_size,
                      refresh_hz=options.refresh_hz, input_mode=options.input_mode,
                      simulated=options.simulation is not None)
    try:
        display = Display(experiment, expdir, grid, station, log, said)
    except CuebenchError:
        log.close()
        raise
    reader = ResponseReader(ResponseInput(display.win, options.input_mode), grid)
    session = str(options.session)
    sim = (SimulatedParticipant(display.win, reader.input.mouse, options.input_mode,
                                seed=participant_seed(experiment.name, options.participant, session),
                                script=options.simulation)
           if options.simulation is not None else None)
    writer = AnswerWriter(store, experiment, options.participant, options.observer_kind, group, display.hz,
                          display.device, log)
    return _Runner(experiment, expdir, options.participant, session, options.input_mode, log, display,
                   Pacing(display, reader, log, said, sim), writer, said)


class _Runner:
    """One run: what the lab shows (``display``), when (``pacing``, which reads the answers) and how it stores
    them (``writer``), in the session's order: instructions, trials, breaks, adaptive blocks, questionnaire."""

    def __init__(self, experiment: Experiment, expdir: ExperimentDir, participant: str, session: str,
                 input_mode: str, log: SessionLog, display: Display, pacing: Pacing, writer: AnswerWriter,
                 say: Callable[..., str]):
        self.experiment, self.expdir, self.participant, self.session, self.input_mode = \
            experiment, expdir, participant, session, input_mode
        self.log, self.display, self.pacing, self.writer, self.say = log, display, pacing, writer, say

    @property
    def refresh_record(self) -> dict:
        return self.display.refresh_record

    def close(self) -> None:
        self.display.close()
        self.log.close()

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
        except Quit:
            return True
        self.pacing.show_for(texts.plain(self.expdir, "completion", self.experiment.language), END_SCREEN_S)
        return False

    def _run(self, sequence: list[ScheduledTrial], remaining: list[ScheduledTrial], answered: set[int]) -> None:
        from tqdm import tqdm

        trials = [self.experiment.trial(s.trial_id) for s in remaining]
        self.pacing.log_rounding(trials)
        types = {t.trial_type for t in trials}
        practice_done = not any(s.block == 0 and s.index not in answered for s in sequence)
        has_practice = any(s.block == 0 for s in sequence)
        opening = texts.plain(self.expdir, "instructions", self.experiment.language) + "\n\n" \
            + self._how_to_answer(types)
        if answered:
            opening = self.say("lab_welcome_back", k=remaining[0].index + 1, n=len(sequence)) + "\n\n" + opening
        self.pacing.continue_screen(opening)
        progress = tqdm(remaining, desc=f"{self.participant} session {self.session}", unit="trial",
                        file=sys.stderr)
        for scheduled in progress:
            trial = self.experiment.trial(scheduled.trial_id)
            plan = lab_plan(self.expdir, self.experiment, self.display.grid, trial, scheduled.index, scheduled.block,
                            scheduled.break_before)
            if plan.block > 0 and has_practice and not practice_done:
                practice_done = True
                self.pacing.continue_screen(self.say("lab_practice_over"))
            if plan.break_before:
                self.pacing.continue_screen(self.say("lab_break"))
            outcome, restarts = self.pacing.present(plan, trial)
            self.writer.commit(plan, trial, outcome, restarts, session=self.session, trial_index=plan.index)
            if plan.practice:
                feedback = practice_feedback(trial, outcome.response, self.experiment.language,
                                             self.experiment.label_set.name_of)
                self.log.exp(f"practice feedback for trial {plan.index}: {feedback}")
                self.pacing.show_for(feedback, FEEDBACK_SECONDS)
        progress.close()

    def _adaptive(self, block) -> None:
        """One QUEST+ block (``cuebench.adaptive``): each level chosen from this participant's answers so far,
        each answer stored in the block's session with the posterior estimate after it."""
        from tqdm import tqdm

        trials = [self.experiment.trial(t) for ids in block.trials_by_level.values() for t in ids]
        facts = {"types": texts.trial_type_timings(trials), "not_clear": self.experiment.label_set.not_clear}
        sentences = texts.task_sentences(facts, self.experiment.language)
        self.pacing.continue_screen(self.say("lab_adaptive") + " " + " ".join(sentences) + "\n\n"
                                    + self._how_to_answer({t.trial_type for t in trials}))
        progress = tqdm(total=block.plan.trials, initial=block.index, desc=f"{self.participant} "
                        f"{block.session}", unit="trial", file=sys.stderr)
        while not block.finished:
            level, trial_id = block.next_trial()
            trial = self.experiment.trial(trial_id)
            plan = lab_plan(self.expdir, self.experiment, self.display.grid, trial, block.index,
                            -1 - self.experiment.adaptive.index(block.plan))
            outcome, restarts = self.pacing.present(plan, trial)
            fields = block.record(level, trial_id, bool(score(trial, outcome.response)))
            self.writer.commit(plan, trial, outcome, restarts, **fields)
            progress.update(1)
        progress.close()

    def _questionnaire(self, questionnaire: Questionnaire) -> None:
        """The study's questions (``human_tasks.lab.questionnaire``), stored once with the participant."""
        self.pacing.continue_screen(self.say("lab_questions"))
        answers = LabQuestionnaire(self.display.win, self.pacing.input, self.pacing.frame, self.pacing.pause,
                                   self.log.exp, self.say).ask_all(questionnaire)
        self.writer.commit_questionnaire(answers)
        self.log.exp(f"questionnaire answered: {len(answers)} of {len(questionnaire.questions)} items")

    def _how_to_answer(self, types: set[str]) -> str:
        """What the lab adds to the study's own instructions: this station's input and the pause key."""
        return "".join(card(kind).say(card(kind).how_to_answer.get(self.input_mode, ""),
                                      self.experiment.language) for kind in sorted(types)) + self.say("lab_pause_key")
