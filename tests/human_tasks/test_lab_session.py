"""Lab sessions end to end: PsychoPy under Xvfb, a simulated participant, a real SQLite store.

The experiment is built here with the core schema from real photos: classification and
oddity trials in two conditions (a Latin square over two groups), one practice, one
attention and one catch trial, short timings.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import unavailable
from human_tasks.lab.session import LabError, LabOptions, default_group, resolve_group, run_lab_session
from cuebench.counterbalance import latin_square_plan, participant_sequence
from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore, trial_row
from cuebench.trials import Experiment, LabelSet, Schedule, Timing, Trial
from cuebench.words import say, words
from experiment_server.db import ServerDB
from experiment_server.study_rules import settle_rules

REPO = Path(__file__).resolve().parents[2]
CLASSIFY = Timing(fixation=100, stimulus=100, mask=100, iti=100)
ODDITY = Timing(fixation=100, stimulus=300, mask=None, response_window=3000, iti=100, response_from_onset=True)
WINDOW = ["--window-size", "1024", "768"]
GERMAN_NAMES = {"astronaut": "Astronaut", "camera": "Kamera", "cat": "Katze", "coffee": "Kaffee", "flower": "Blume",
                "motorcycle": "Motorrad", "rocket": "Rakete", "temple": "Tempel"}
"""What a German study's buttons show for the photos' labels (a researcher's --label-names)."""

@pytest.fixture()
def display():
    """xvfb-run and PsychoPy, which the README's test command installs."""
    if shutil.which("xvfb-run") is None or importlib.util.find_spec("psychopy") is None:
        unavailable("needs xvfb-run (Debian's xvfb) and PsychoPy (the lab extra; see docs/lab.md)")


def _gray(pixels: np.ndarray) -> np.ndarray:
    g = (pixels @ np.array([0.299, 0.587, 0.114])).round().astype(np.uint8)
    return np.stack([g] * 3, axis=-1)


def build_experiment(root: Path, photos: dict, language: str = "en") -> Experiment:
    expdir = ExperimentDir(root)
    categories = {"astronaut": "astronaut", "camera": "camera", "coffee": "coffee", "rocket": "rocket",
                  "motorcycle": "motorcycle", "flower": "flower", "chelsea": "cat", "china": "temple"}
    labels = tuple(sorted(set(categories.values())))
    stimuli, trials = {}, []

    def store(name, transform, pixels):
        stim = expdir.write_stimulus(pixels, {"source_image": name, "transform": transform, "params": {}, "seed": 0})
        stimuli[stim.id] = stim
        return stim.id

    for name in ("astronaut", "camera", "coffee", "rocket"):
        for cond, pixels in (("original", photos[name]), ("grayscale", _gray(photos[name]))):
            trials.append(Trial(f"{name}-{cond}", "classify", "test", (store(name, cond, pixels),), labels,
                                categories[name], condition=cond, source_image=name, category=categories[name],
                                timing=CLASSIFY))
    for name, other in (("motorcycle", "flower"), ("flower", "motorcycle")):
        for cond, look in (("original", lambda p: p), ("grayscale", _gray)):
            ids = (store(name, cond, look(photos[name])), store(other, cond, look(photos[other])),
                   store(name, f"{cond}-mirror", np.ascontiguousarray(look(photos[name])[:, ::-1])))
            trials.append(Trial(f"{name}-odd-{cond}", "oddity", "test", ids, ("1", "2", "3"), "2", condition=cond,
                                source_image=name, category=categories[name], timing=ODDITY))
    cat = store("chelsea", "original", photos["chelsea"])
    trials.append(Trial("practice-cat", "classify", "practice", (cat,), labels, "cat", source_image="chelsea",
                        category="cat", timing=CLASSIFY))
    trials.append(Trial("attention-cat", "classify", "attention", (cat,), labels, "rocket", source_image="chelsea",
                        category="cat", timing=CLASSIFY, instruction='The next image shows a cat; click "rocket".'
                        if language == "en" else say("attention_classify", language, shown="Katze", answer="Rakete")))
    temple = photos["china"]
    catch = (store("china", "original", temple), store("china", "mirror", np.ascontiguousarray(temple[:, ::-1])),
             store("china", "halves_swapped", np.concatenate([temple[112:], temple[:112]])))
    trials.append(Trial("catch-temple", "oddity", "catch", catch, ("1", "2", "3"), "3", source_image="china",
                        category="temple", timing=ODDITY))
    shown = GERMAN_NAMES if language == "de" else {}
    experiment = Experiment(name="labtest", design="test", label_set=LabelSet("photos", labels, shown=shown),
                            stimuli=stimuli,
                            trials=trials, schedule=Schedule(break_every=4, catch_every=4, attention_every=5),
                            assignment=latin_square_plan(trials), language=language)
    expdir.save(experiment)
    return experiment


@pytest.fixture
def experiment_dir(tmp_path, photos) -> Path:
    build_experiment(tmp_path / "exp", photos)
    return tmp_path / "exp"


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def lab_command(expdir: Path, participant: str, *extra: str) -> list[str]:
    return ["xvfb-run", "-a", sys.executable, "-m", "cuebench", "lab", "run", str(expdir), "--participant",
            participant, *WINDOW, *extra]


def run_lab(expdir: Path, participant: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(lab_command(expdir, participant, *extra), cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=300)


def stored_count(expdir: Path) -> int:
    """Rows committed so far, read without touching the writer's schema."""
    try:
        with sqlite3.connect(f"file:{expdir / 'responses.sqlite'}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def check_complete_session(expdir: Path, participant: str) -> list[dict]:
    """Exactly one row per scheduled trial, in the participant's order, with frame timing."""
    experiment = ExperimentDir(expdir).load()
    with ResponseStore(expdir / "responses.sqlite") as store:
        rows = store.rows("observer=?", [participant])
    group = rows[0]["group"]
    sequence = participant_sequence(experiment, group, participant, "1")
    assert sorted(r["trial_index"] for r in rows) == [s.index for s in sequence]
    assert {r["trial_index"]: r["trial_id"] for r in rows} == {s.index: s.trial_id for s in sequence}
    assert {r["role"] for r in rows} == {"practice", "test", "attention", "catch"}
    assert {r["trial_type"] for r in rows} == {"classify", "oddity"}
    for r in rows:
        trial = experiment.trial(r["trial_id"])
        planned = {p: getattr(trial.timing, p) for p in ("fixation", "stimulus", "mask") if getattr(trial.timing, p)}
        assert set(r["timing_measured"]) == set(planned) == set(r["frames"])
        for phase, ms in planned.items():
            assert r["frames"][phase] == round(ms * 60 / 1000)
            # software-paced flips never run early by more than the one frame a late schedule catches up
            assert r["timing_measured"][phase] >= ms - 1000 / 60 - 1
        assert isinstance(r["dropped_frames"], int) and r["dropped_frames"] >= 0
        assert r["refresh_hz"] == 60.0 and r["observer_kind"] == "pilot" and r["group"] == group
        assert r["response"] in trial.choices and r["rt_ms"] > 0 and r["timed_out"] == 0
        assert r["device"]["simulated"] is True and r["device"]["frame_pacing"] == "software"
        if r["role"] in ("attention", "catch"):
            assert r["correct"] == 1 and r["response"] == trial.correct
    return rows


def test_default_group_is_a_stable_hash_and_a_resumed_session_keeps_its_group(tmp_path, photos):
    experiment = build_experiment(tmp_path / "exp", photos)
    assert default_group("P01", 2) == default_group("P01", 2)
    assert {default_group(f"P{i:02d}", 2) for i in range(20)} == {0, 1}
    assert resolve_group(experiment, "P01", [], None) == default_group("P01", 2)
    assert resolve_group(experiment, "P01", [], 1) == 1
    with pytest.raises(LabError, match="groups 0..1"):
        resolve_group(experiment, "P01", [], 5)
    stored = [trial_row(experiment, experiment.trials[0], observer="P01", observer_kind="human", session="1",
                        trial_index=0, response="cat", group=0)]
    assert resolve_group(experiment, "P01", stored, None) == 0
    with pytest.raises(LabError, match="was run in group 0"):
        resolve_group(experiment, "P01", stored, 1)


def test_a_session_whose_trials_changed_or_whose_stimuli_are_missing_is_refused(experiment_dir):
    experiment = ExperimentDir(experiment_dir).load()
    with ResponseStore(experiment_dir / "responses.sqlite") as store:
        first = participant_sequence(experiment, 0, "P05", "1")[0]
        wrong = next(t for t in experiment.trials if t.trial_id != first.trial_id)
        store.write(trial_row(experiment, wrong, observer="P05", observer_kind="human", session="1",
                              trial_index=0, response="cat", group=0))
    with pytest.raises(LabError, match="experiment.json changed"):
        run_lab_session(LabOptions(expdir=experiment_dir, participant="P05"))
    missing = ExperimentDir(experiment_dir).stimulus_path(experiment.stimuli[experiment.trial("catch-temple").stimuli[2]])
    missing.unlink()
    with pytest.raises(LabError, match=f"stimulus file .*{missing.name}.* is missing"):
        run_lab_session(LabOptions(expdir=experiment_dir, participant="P06"))


def test_bad_participant_id_and_input_mode_are_refused_before_any_window(experiment_dir):
    with pytest.raises(LabError, match="participant id"):
        run_lab_session(LabOptions(expdir=experiment_dir, participant="../P01"))
    with pytest.raises(LabError, match="--input"):
        run_lab_session(LabOptions(expdir=experiment_dir, participant="P01", input_mode="joystick"))


def test_a_new_lab_session_of_a_study_at_its_stored_target_is_refused_before_any_window(experiment_dir):
    """The study's rules (``serve --target-n 1``, stored in EXPDIR/rules.json) hold in the lab too: once one
    session finished, ``cuebench lab run`` of a new participant says so instead of starting."""
    settle_rules(experiment_dir, {"target_n": 1})
    db = ServerDB(experiment_dir / "responses.sqlite", ExperimentDir(experiment_dir).load().name)
    try:
        db.record_lab_session(db.experiment, "L01", "1", 0, False, True)
    finally:
        db.close()
    refused = subprocess.run([sys.executable, "-m", "cuebench", "lab", "run", "exp", "--participant", "L02"],
                             cwd=experiment_dir.parent, env=_env(), capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "reached its recruitment target (--target-n 1 in " in refused.stderr, \
        refused.stderr
    assert "rules.json" in refused.stderr and stored_count(experiment_dir) == 0


@pytest.mark.slow
@pytest.mark.usefixtures("display")
def test_simulated_participant_completes_a_session_with_mouse_clicks(experiment_dir):
    done = run_lab(experiment_dir, "P01", "--simulate", "--refresh-hz", "60")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = check_complete_session(experiment_dir, "P01")
    assert all(r["device"]["input"] == "mouse" for r in rows)
    assert "% of trials with no dropped frame" in done.stdout
    assert "stimulus 100 ms -> 6 frames = 100.0 ms (+0.0 ms)" in done.stdout
    csv_path = experiment_dir / "data" / "P01_labtest_session1.csv"
    table = pd.read_csv(csv_path)
    assert len(table) == len(rows) and list(table["trials.thisN"]) == sorted(r["trial_index"] for r in rows)
    by_index = {r["trial_index"]: r for r in rows}
    assert table["key_resp.rt"].tolist() == pytest.approx([by_index[i]["rt_ms"] / 1000 for i in table["trials.thisN"]])
    assert set(table["frameRate"]) == {60.0} and set(table["participant"]) == {"P01"}
    log = (experiment_dir / "data" / "P01_labtest_session1.log").read_text()
    assert "refresh 60.00 Hz (declared" in log and "committed trial 8" in log
    practice = by_index[0]
    assert practice["role"] == "practice"
    expected = "Correct" if practice["response"] == "cat" else "Not quite: the answer was \u201ccat\u201d"
    assert f"practice feedback for trial 0: {expected}" in log
    again = run_lab_session(LabOptions(expdir=experiment_dir, participant="P01"), out=lambda line: None)
    assert (again.answered, again.answered_this_run) == (len(rows), 0)  # complete: nothing shown again
    registered = ServerDB(experiment_dir / "responses.sqlite", "labtest").get("P01")  # the server's participant
    assert (registered.runner, registered.status, registered.observer_kind, registered.group) == \
        ("lab", "finished", "pilot", rows[0]["group"])



@pytest.mark.slow
@pytest.mark.usefixtures("display")
def test_a_german_study_runs_in_german_in_the_lab(tmp_path, photos):
    """``language: de``: every screen the simulated participant is shown (instructions from texts/de/, how to
    answer, the pause key, practice feedback, practice over, breaks, the completion) is German, and none holds a
    sentence of the English catalogue; the response grid names the labels in German, in German order, and the
    answers are stored as the labels."""
    expdir = tmp_path / "exp"
    build_experiment(expdir, photos, language="de")
    done = run_lab(expdir, "D01", "--simulate", "--refresh-hz", "60")
    assert done.returncode == 0, done.stderr[-3000:]
    check_complete_session(expdir, "D01")
    log = (expdir / "data" / "D01_labtest_session1.log").read_text(encoding="utf-8")
    screens = [line.split("screen: ", 1)[1] for line in log.splitlines() if "screen: " in line]
    shown = " ".join(screens)
    assert screens[0].startswith("Anleitung Jeder Durchgang beginnt mit einem kleinen Kreuz")
    for german in ("Klicken Sie auf die Bezeichnung Ihrer Antwort.", "Mit Escape pausieren Sie.",
                   "Klicken oder die Leertaste drücken, um weiterzumachen.", "Die Übung ist vorbei.",
                   "Zeit für eine Pause.", "Vielen Dank!"):
        assert german in shown
    assert re.search(r"\b(Richtig|Nicht ganz: Die Antwort war „Katze“)", shown)
    grid = next(line for line in log.splitlines() if "response grid: " in line).split("response grid: ", 1)[1]
    # the German names in German dictionary order ("Kaffee" before "Kamera", unlike coffee and camera)
    assert grid == "Astronaut | Blume | Kaffee | Kamera | Katze | Motorrad | Rakete | Tempel | nicht erkennbar"
    with ResponseStore(expdir / "responses.sqlite") as store:
        answers = {r["response"] for r in store.rows("observer=?", ["D01"]) if r["trial_type"] == "classify"}
    assert answers and answers <= {*GERMAN_NAMES, "not clear", ""}  # stored: the labels, never the names
    english = [piece.strip() for text in words("en").values() for piece in re.split(r"\{\w+\}", text)
               if len(piece.split()) >= 3]
    assert [piece for piece in english if piece in shown] == []

@pytest.mark.slow
@pytest.mark.usefixtures("display")
def test_sigkill_mid_session_then_rerun_resumes_and_stores_each_trial_once(experiment_dir):
    """The session's process alone is killed: xvfb-run, its parent, then stops its X server and removes its
    folder as after any command (killed with them, it would leave both)."""
    import psutil

    proc = subprocess.Popen(lab_command(experiment_dir, "P02", "--simulate", "--refresh-hz", "60"), cwd=REPO,
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while stored_count(experiment_dir) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the session ended before it could be killed"
        session, = [child for child in psutil.Process(proc.pid).children() if "lab" in child.cmdline()]
        session.kill()
        assert proc.wait(timeout=60) == 128 + signal.SIGKILL  # xvfb-run passes on its command's status
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    before = stored_count(experiment_dir)
    assert 3 <= before < 9
    resumed = run_lab(experiment_dir, "P02", "--simulate", "--refresh-hz", "60")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = check_complete_session(experiment_dir, "P02")
    assert f"9 of 9 trials answered ({9 - before} in this run), complete" in resumed.stdout
    log = (experiment_dir / "data" / "P02_labtest_session1.log").read_text()
    assert f"The session continues at trial {before + 1} of 9" in log
    assert len(pd.read_csv(experiment_dir / "data" / "P02_labtest_session1.csv")) == len(rows)


@pytest.mark.slow
@pytest.mark.usefixtures("display")
def test_keyboard_escape_pause_continue_then_confirm_quit_then_resume(experiment_dir):
    script = ("from human_tasks.lab.session import LabOptions, run_lab_session\n"
              "from human_tasks.lab.simulate import Script\n"
              f"s = run_lab_session(LabOptions(expdir={str(experiment_dir)!r}, participant='K01', input_mode='keyboard',"
              " refresh_hz=60, window_size=(1024, 768), simulation=Script(pause_after=1, quit_after=3)))\n"
              "print('QUIT', s.quit_early, s.answered)\n")
    quit_run = subprocess.run(["xvfb-run", "-a", sys.executable, "-c", script], cwd=REPO, env=_env(),
                              capture_output=True, text=True, timeout=300)
    assert quit_run.returncode == 0, quit_run.stderr[-3000:]
    assert "QUIT True 3" in quit_run.stdout and "stopped early" in quit_run.stdout
    log = (experiment_dir / "data" / "K01_labtest_session1.log").read_text()
    assert log.count("paused (Escape)") == 2
    assert log.index("session continues") < log.index("session ended by the experimenter")
    assert "restarts after a pause" in log
    resumed = run_lab(experiment_dir, "K01", "--simulate", "--refresh-hz", "60", "--input", "keyboard")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = check_complete_session(experiment_dir, "K01")
    assert all(r["device"]["input"] == "keyboard" for r in rows)
    assert [r["trial_index"] for r in rows if r["events"]] == [1]  # the trial interrupted by the pause
    assert "(6 in this run)" in resumed.stdout


def test_the_lab_has_one_row_per_response_a_trial_type_card_can_name():
    from cuebench.trial_types import RESPONSES, cards
    from human_tasks.lab.responses import RESPONSE_MODES

    assert set(RESPONSE_MODES) == set(RESPONSES) >= {c.response for c in cards().values() if c.for_people}


def relabel(expdir: Path, keep) -> None:
    """The experiment with nine more labels (17: more than the 16 keyed places) and only the trials ``keep`` takes."""
    folder = ExperimentDir(expdir)
    old = folder.load()
    trials = [t for t in old.trials if keep(t)]
    labels = old.label_set.labels + tuple(f"thing{k}" for k in range(9))
    folder.save(Experiment(name=old.name, design=old.design, label_set=LabelSet("many", labels), stimuli=old.stimuli,
                           trials=trials, schedule=Schedule(break_every=4), assignment=latin_square_plan(trials)))


def test_keyboard_input_is_refused_before_any_window_when_classification_labels_lack_keys(experiment_dir):
    relabel(experiment_dir, keep=lambda t: True)
    from human_tasks.layout import LayoutError

    with pytest.raises(LayoutError, match="label set 'many' has more labels than the 16 keyed places; use --input mouse"):
        run_lab_session(LabOptions(expdir=experiment_dir, participant="K02", input_mode="keyboard"))


@pytest.mark.slow
@pytest.mark.usefixtures("display")
def test_oddity_trials_are_answered_by_keyboard_whatever_the_label_count(experiment_dir):
    """Only trial types answered with one key per label need every label keyed (their row of the table says so)."""
    relabel(experiment_dir, keep=lambda t: t.trial_type == "oddity")
    done = run_lab(experiment_dir, "K03", "--simulate", "--refresh-hz", "60", "--input", "keyboard")
    assert done.returncode == 0, done.stderr[-3000:]
    with ResponseStore(experiment_dir / "responses.sqlite") as store:
        rows = store.rows("observer=?", ["K03"])
    sequence = participant_sequence(ExperimentDir(experiment_dir).load(), rows[0]["group"], "K03", "1")
    assert sorted(r["trial_id"] for r in rows) == sorted(s.trial_id for s in sequence)
    assert {r["trial_type"] for r in rows} == {"oddity"}
    assert all(r["response"] in ("1", "2", "3") and r["device"]["input"] == "keyboard" for r in rows)


@pytest.mark.slow
@pytest.mark.usefixtures("display")
def test_unmeasurable_refresh_rate_is_refused_without_refresh_hz(experiment_dir):
    refused = run_lab(experiment_dir, "P03", "--simulate")
    assert refused.returncode == 2
    assert "pass --refresh-hz" in refused.stderr and "cuebench lab: error:" in refused.stderr
    assert stored_count(experiment_dir) == 0


@pytest.mark.slow
def test_stimulus_size_in_degrees_sets_the_image_width(tmp_path):
    """4 degrees at 57 cm is 2 * 57 * tan(2 deg) = 3.98097 cm (recorded to 0.1 mm); on a 53 cm wide screen of 1024 px
    that is 3.98097 * 1024 / 53 = 76.9 -> 77 px (a window spanning the screen). Checked on what the build records
    and what the runner sizes images from, without a display: Xvfb's refresh rate is not a real one, and a run there
    is refused or not depending on how stably it happens to measure."""
    from human_tasks.lab.presentation import stimulus_width_px

    expdir = tmp_path / "sized"
    built = subprocess.run([sys.executable, "-m", "cuebench", "stimuli", "build", "--design", "suppression",
                            "--conditions", "channel_shuffle", "--out", str(expdir), "--workers", "1",
                            "--stimulus-degrees", "4", "--viewing-distance", "57", "--screen-width", "53"],
                           cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    display = Experiment.load(expdir / "experiment.json").provenance["display"]
    assert display["stimulus_width_cm"] == pytest.approx(3.98097, abs=1e-4)
    assert stimulus_width_px(display, 1024) == 77


LAB_QUESTIONNAIRE = {"questions": [
    {"id": "age", "kind": "number", "prompt": "Your age in years", "required": True, "min": 18, "max": 60},
    {"id": "hand", "kind": "choice", "prompt": "Which hand do you write with?", "options": ["left", "right", "both"],
     "required": True},
    {"id": "effort", "kind": "likert", "prompt": "How hard was it?", "points": 5, "anchors": ["easy", "hard"]},
    {"id": "comments", "kind": "text", "prompt": "Anything else?"}]}
"""The typed age comes first: its digits must not answer the choice items after it."""


@pytest.mark.slow
@pytest.mark.usefixtures("display")
@pytest.mark.parametrize("input_mode", ["mouse", "keyboard"])
def test_the_lab_asks_the_studys_questionnaire_once_and_stores_it_with_the_person(experiment_dir, input_mode):
    """The simulated person clicks (or keys) an option of each choice item and types the others into
    PsychoPy's text box: first an age of 61, which the screen refuses, then 39 (half-way through 18-60),
    the comment "no comments". The answers land in the table the web task uses, once: the next run does
    not ask again."""
    import json

    from cuebench.export import export
    from cuebench.questionnaire import stored_answers
    from cuebench.storage import open_database

    (experiment_dir / "texts").mkdir(exist_ok=True)
    (experiment_dir / "texts" / "questionnaire.json").write_text(json.dumps(LAB_QUESTIONNAIRE))
    done = run_lab(experiment_dir, "Q01", "--simulate", "--refresh-hz", "60", "--input", input_mode)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "questionnaire: answered" in done.stdout
    db = open_database(experiment_dir / "responses.sqlite")
    try:
        record = stored_answers(db, "labtest")["Q01"]
    finally:
        db.close()
    answers = record["answers"]
    assert record["runner"] == "lab"
    assert answers["hand"] in ("left", "right", "both") and answers["effort"] in range(1, 6)
    assert (answers["age"], answers["comments"]) == (39, "no comments")
    log = (experiment_dir / "data" / "Q01_labtest_session1.log").read_text()
    assert "questionnaire: answer to 'age' must lie in [18.0, 60.0], got 61; asked again" in log
    given = "click" if input_mode == "mouse" else "key [1-5]"
    for item in ("hand", "effort"):  # as the simulated person gave them, not by a digit left from typing the age
        assert re.search(rf"questionnaire: '{item}' answered .* \({given}\)", log), log[-2000:]
    assert "questionnaire: 'age' answered 39 (typed)" in log
    assert "questionnaire answered: 4 of 4 items" in log
    again = run_lab_session(LabOptions(expdir=experiment_dir, participant="Q01"), out=lambda line: None)
    assert again.answered_this_run == 0 and again.questionnaire_answered is True
    (out,) = export(experiment_dir, "questionnaire", experiment_dir / "questionnaire.csv")
    table = pd.read_csv(out)
    assert table[["observer", "runner", "q_hand", "q_age", "q_comments"]].values.tolist() == \
        [["Q01", "lab", answers["hand"], 39, "no comments"]]


@pytest.mark.usefixtures("display")
def test_a_questionnaire_the_keyboard_cannot_answer_is_refused_before_any_window(experiment_dir):
    import json

    wide = {"questions": [{"id": "calm", "kind": "likert", "prompt": "How calm are you?", "points": 11}]}
    (experiment_dir / "texts").mkdir(exist_ok=True)
    (experiment_dir / "texts" / "questionnaire.json").write_text(json.dumps(wide))
    with pytest.raises(LabError, match="question 'calm' offers 11 options, more than the keyboard's 9 number keys; "
                                       "run the session with --input mouse"):
        run_lab_session(LabOptions(expdir=experiment_dir, participant="Q02", input_mode="keyboard"))
