"""A new trial type is one card: the toy same/different task of docs/extending.md, added as a
third-party plug-in does it (one module and its entry point, nothing else), runs through the web task (a real server and
chromium), the lab runner (PsychoPy under Xvfb, a simulated participant), a model (the card's own
choice rule on a plug-in observer's features) and the report (accuracy from the card's scoring)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from conftest import unavailable
from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore
from cuebench.trials import AssignmentPlan, Experiment, LabelSet, Schedule
from experiment_server.simulate import ServerProcess, free_port
from support import plugin_package
from support import observer_example

EXTENDING = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def trial_type_example() -> str:
    """The one-module trial type of docs/extending.md ("A trial type"), so the docs run as written."""
    text = EXTENDING.read_text(encoding="utf-8").split("<!-- trial-type-example -->", 1)[1]
    return text.split("```python\n", 1)[1].split("```", 1)[0]


PHOTOS = ("astronaut", "camera", "coffee", "rocket")
SESSION_DEADLINE_S = 120


@pytest.fixture(scope="module")
def toy_package(tmp_path_factory):
    """The trial type (one module, one entry point) and an observer to answer it, installed by being on PYTHONPATH."""
    return plugin_package(tmp_path_factory.mktemp("toy"), "toysamedifferent",
                          {"cuebench.trial_types": {"same-different": "same_different:SameDifferent"},
                           "cuebench.observers": {"toy-first": "toy_observer:FirstLabel"}},
                          {"same_different.py": trial_type_example(), "toy_observer.py": observer_example()})


@pytest.fixture()
def installed(toy_package, monkeypatch):
    """Every ``cuebench`` process the test starts finds the toy package."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(toy_package), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def cuebench(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuebench", *args], capture_output=True, text=True, timeout=timeout)


def build(root, photos) -> None:
    """Four "same" trials (a photo and its copy) and four "different" ones (two photos), everybody sees all.
    Written as experiment.json so the test process itself never needs the toy card."""
    expdir = ExperimentDir(root)
    stimuli, trials = {}, []

    def store(name, copy):
        stim = expdir.write_stimulus(photos[name][::4, ::4].copy(), {"source_image": name, "transform": copy,
                                                                    "params": {}, "seed": 0})
        stimuli[stim.id] = stim
        return stim.id

    for k, name in enumerate(PHOTOS):
        other = PHOTOS[(k + 1) % len(PHOTOS)]
        trials.append({"trial_id": f"{name}-same", "stimuli": [store(name, "original"), store(name, "copy")],
                       "correct": "same"})
        trials.append({"trial_id": f"{name}-{other}", "stimuli": [store(name, "original"), store(other, "original")],
                       "correct": "different"})
    trials = [{**t, "trial_type": "same-different", "role": "test", "choices": ["same", "different"],
               "source_image": t["trial_id"].split("-")[0]} for t in trials]
    experiment = Experiment(name="toy", design="same-different", label_set=LabelSet("pictures", ("x",)),
                            stimuli=stimuli, trials=[], schedule=Schedule(break_every=None))
    everyone = AssignmentPlan(arms=("all",), images=(), groups=(tuple(t["trial_id"] for t in trials),))
    data = {**experiment.to_dict(), "trials": trials, "assignment": everyone.to_dict()}
    (root / "experiment.json").write_text(json.dumps(data, indent=1))


def take_part(page, base: str) -> int:
    """Consent, instructions, fullscreen, then S for every trial; the number of trials answered."""
    page.goto(f"{base}/?code=toyweb1")
    page.check("#consent")
    page.click("#start")
    answered: set[int] = set()
    deadline = time.monotonic() + SESSION_DEADLINE_S
    while time.monotonic() < deadline:
        state, index = page.evaluate("() => [document.body?.dataset.state || '', document.body?.dataset.trialIndex]")
        if state in ("instructions", "fullscreen") and page.is_visible("#continue"):
            page.click("#continue")
        elif state == "response-keys" and index not in answered:
            page.keyboard.press("s")
            answered.add(index)
        elif state == "done":
            return len(answered)
        time.sleep(0.02)
    raise AssertionError(f"the web session did not finish within {SESSION_DEADLINE_S} s")


def stored(root) -> pd.DataFrame:
    with ResponseStore(ExperimentDir(root).responses_file) as store:
        return pd.DataFrame(store.rows())


@pytest.mark.slow
@pytest.mark.usefixtures("installed")
def test_a_trial_type_added_in_one_module_runs_on_the_web_in_the_lab_through_a_model_and_into_the_report(
        tmp_path, photos, browser):
    if shutil.which("xvfb-run") is None or importlib.util.find_spec("psychopy") is None:
        unavailable("needs xvfb-run (Debian's xvfb) and PsychoPy (the lab extra; see docs/lab.md)")
    root = tmp_path / "toy"
    root.mkdir()
    build(root, photos)
    (root / "texts").mkdir()  # the researcher's own consent (the toy card loads only in the server)
    (root / "texts" / "consent.md").write_text("# A toy study\n\nQuestions: the test suite.\n")
    server = ServerProcess(root, free_port(), log_file=tmp_path / "server.log")
    server.start()
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        assert take_part(page, f"http://127.0.0.1:{server.port}") == 8
    finally:
        server.stop()
    instructions = (root / "texts" / "instructions.md").read_text()
    assert "press **S** if they are the same picture" in instructions  # the card's sentence in the default texts

    lab = subprocess.run(["xvfb-run", "-a", sys.executable, "-m", "cuebench", "lab", "run", str(root), "--participant",
                          "L01", "--window-size", "1024", "768", "--simulate", "--refresh-hz", "60"],
                         capture_output=True, text=True, timeout=300)
    assert lab.returncode == 0, lab.stderr[-3000:]

    model = cuebench("eval", "--model", "toy-first", "--experiment", str(root), "--quiet")
    assert model.returncode == 0, model.stderr[-3000:]

    rows = stored(root)
    experiment = {t["trial_id"]: t for t in json.loads((root / "experiment.json").read_text())["trials"]}
    by_kind = dict(tuple(rows.groupby("observer_kind")))
    assert set(by_kind) == {"human", "pilot", "model"} and all(len(r) == 8 for r in by_kind.values())
    assert set(rows["trial_type"]) == {"same-different"}
    assert set(by_kind["human"]["response"]) == {"same"}  # the web participant pressed S every time
    assert set(by_kind["pilot"]["response"]) <= {"same", "different"}
    assert by_kind["pilot"]["device"].map(lambda d: d["input"]).eq("mouse").all()  # answered by key all the same
    for _, row in by_kind["model"].iterrows():
        files = [np.asarray(Image.open(root / "stimuli" / f"{sid}.png")) for sid in experiment[row["trial_id"]]["stimuli"]]
        assert row["response"] == ("same" if np.array_equal(*files) else "different")  # equal pixels, equal features
        assert row["decision_rule"] == "same-if-equal-features"
    for _, row in rows.iterrows():  # scored by the card: right when the answer is the trial's correct one
        assert row["correct"] == int(row["response"] == experiment[row["trial_id"]]["correct"])

    out = tmp_path / "report"
    report = cuebench("report", str(root), "--out", str(out), "--n-boot", "100", "--reference", "none",
                      "--include-pilots")
    assert report.returncode == 0, report.stderr[-3000:]
    accuracy = pd.read_csv(out / "tables" / "accuracy.csv").set_index("observer")["accuracy"]
    by_hand = {observer: sum(r["response"] == experiment[r["trial_id"]]["correct"] for _, r in answers.iterrows()) / 8
               for observer, answers in rows.groupby("observer")}
    assert accuracy.to_dict() == pytest.approx(by_hand)
    web, = by_kind["human"]["observer"].unique()
    assert by_hand[web] == 0.5 and by_hand["toy-first:none"] == 1.0  # S is right on half the trials; the rule on all


def test_a_trial_names_a_type_with_a_card_and_follows_its_rules():
    """The schema reads the cards: an unknown type is named with the known ones, a type's choices and default
    timing are its card's."""
    from cuebench.errors import SchemaError
    from cuebench.trial_types import TRIAL_TYPES
    from cuebench.trials import Timing, Trial

    with pytest.raises(SchemaError, match=r"field 'trial_type': 'odd' is not a trial type \(known: .*oddity"):
        Trial("t", "odd", "test", ("a", "b", "c"), ("1", "2", "3"), "1")
    with pytest.raises(SchemaError, match="the choices of a trial of type oddity are the positions 1..3"):
        Trial("t", "oddity", "test", ("a", "b", "c"), ("1", "2"), "1")
    # Wen et al. 2024, App. A.4: 300 ms delay, the triplet for 800 ms, answered within 2000 ms of its onset
    assert Trial("t", "oddity", "test", ("a", "b", "c"), ("1", "2", "3"), "1").timing == Timing(
        fixation=300, stimulus=800, mask=None, response_window=2000, iti=500, response_from_onset=True)
    assert {"classify", "oddity", "segment"} <= set(TRIAL_TYPES.names())


@pytest.mark.usefixtures("installed")
def test_the_docs_card_is_reported_against_its_own_chance_of_one_half(tmp_path, photos):
    """The same/different card has two answers, so the report's C is 2 (chance 1/2), read from the card, whatever the
    label set says (the toy's has one label); `cuebench eval` and `cuebench report` run as a user runs them."""
    root = tmp_path / "toy"
    root.mkdir()
    build(root, photos)
    model = cuebench("eval", "--model", "toy-first", "--experiment", str(root), "--quiet")
    assert model.returncode == 0, model.stderr[-3000:]
    out = tmp_path / "report"
    report = cuebench("report", str(root), "--out", str(out), "--n-boot", "20", "--reference", "none")
    assert report.returncode == 0, report.stderr[-3000:]
    summary = json.loads((out / "results.json").read_text())["summary"]
    assert (summary["n_choices"], summary["n_choices_from"]) == (2, "card same-different")
    assert ("C = 2 answer choices (chance 1/C; C from the same-different trial type's card)"
            in summary["accuracy"]["method"]["sentence"])
