"""Adaptive (QUEST+) blocks end to end: experiment.json, the build option, and every runner storing each answer
once with its level and the posterior estimate after it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuebench.adaptive import plan_for_grid, session_name
from cuebench_app.cli import main as cuebench
from cuebench.counterbalance import latin_square_plan
from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore
from cuebench.trials import NOT_CLEAR, Experiment, LabelSet, Schedule, SchemaError, Timing, Trial
from stimuli.suppression import suppress

REPO = Path(__file__).resolve().parents[2]
SHORT = Timing(fixation=100, stimulus=100, mask=100, iti=100)
IMAGES = {"astronaut": "astronaut", "camera": "camera", "coffee": "coffee", "chelsea": "cat"}
GRIDS = (2, 4, 8, 16)
TRIALS = 5


def build(root: Path, photos: dict) -> Experiment:
    """Two original trials in the fixed sequence and a patch-shuffle grid of four levels x four images measured
    by a QUEST+ block of five trials."""
    expdir = ExperimentDir(root)
    labels = tuple(sorted(set(IMAGES.values())))
    stimuli, trials = {}, []
    for name, category in IMAGES.items():
        settings = [("original", None, {})] + [("patch_shuffle", lv, {"grid": g}) for lv, g in enumerate(GRIDS)]
        for condition, level, params in settings:
            pixels = photos[name] if condition == "original" else suppress(photos[name], condition, params, 7)
            stim = expdir.write_stimulus(pixels, {"source_image": name, "transform": condition, "params": params,
                                                  "seed": 7})
            stimuli[stim.id] = stim
            if condition == "original" and name not in ("astronaut", "coffee"):
                continue
            trials.append(Trial(f"{name}--{condition}" + ("" if level is None else f"--{level}"), "classify", "test",
                                (stim.id,), labels, category, condition=condition, params=params, level=level,
                                source_image=name, category=category, timing=SHORT))
    plan = plan_for_grid("patch_shuffle", range(len(GRIDS)), GRIDS, "grid", 1 / len(labels), TRIALS)
    experiment = Experiment(name="adaptive-test", design="suppression", label_set=LabelSet("photos", labels),
                            stimuli=stimuli, trials=trials, schedule=Schedule(break_every=None),
                            assignment=latin_square_plan([t for t in trials if t.condition == "original"]),
                            adaptive=(plan,))
    expdir.save(experiment)
    return experiment


@pytest.fixture()
def experiment_dir(tmp_path, photos) -> Path:
    build(tmp_path / "exp", photos)
    return tmp_path / "exp"


def check_adaptive_rows(expdir: Path, observer: str) -> list[dict]:
    """Exactly the block's trials, once each, in order, each with the level it showed and QUEST+'s estimate under
    the lapse prior of the observer's kind."""
    experiment = ExperimentDir(expdir).load()
    with ResponseStore(expdir / "responses.sqlite") as store:
        rows = store.rows("observer = ? AND session = ?", [observer, session_name("patch_shuffle")])
    assert [r["trial_index"] for r in rows] == list(range(TRIALS))
    for r in rows:
        trial = experiment.trial(r["trial_id"])
        assert r["condition"] == "patch_shuffle" and r["level"] == trial.level and r["params"] == trial.params
        assert r["correct"] == int(r["response"] == trial.correct)
        assert r["adaptive"]["trials"] == r["trial_index"] + 1
        assert r["adaptive"]["ci_low"] <= r["adaptive"]["quest_threshold"] <= r["adaptive"]["ci_high"]
        # models keep the flat lapse prior, people (and pilots) get theirs near 0
        assert r["adaptive"]["lapse_prior"] == ("flat" if r["observer_kind"] == "model" else "Beta(1, 20)")
    return rows


def test_experiment_json_keeps_the_plan_and_names_a_condition_without_its_grid(experiment_dir):
    experiment = ExperimentDir(experiment_dir).load()
    assert experiment.adaptive_plan("patch_shuffle").trials == TRIALS
    assert experiment.adaptive_trials("patch_shuffle")[3] == [f"{n}--patch_shuffle--3" for n in IMAGES]
    data = json.loads((experiment_dir / "experiment.json").read_text())
    data["adaptive"][0]["condition"] = "grayscale"
    with pytest.raises(SchemaError, match="adaptive\\[0\\].levels.*condition 'grayscale' has no test trial at level"):
        Experiment.from_dict(data)
    data["adaptive"][0].update(condition="patch_shuffle", prior_mean=40.0, prior_sd=2.0)
    with pytest.raises(SchemaError, match="condition 'patch_shuffle': prior_mean 40 lies outside the grid"):
        Experiment.from_dict(data)


def test_build_option_refuses_bad_blocks_before_making_anything(tmp_path, capsys):
    for spec, message in (("channel_shuffle:40", "condition 'channel_shuffle': levels need an ordered grid"),
                          ("patch_shuffle:40:30:2", "condition 'patch_shuffle': prior_mean 30 lies outside the grid"),
                          ("blur:40", "condition 'blur' is not among the conditions built")):
        out = tmp_path / spec.replace(":", "_")
        assert cuebench(["stimuli", "build", "--design", "suppression", "--conditions",
                         "patch_shuffle,channel_shuffle", "--adaptive", spec, "--out", str(out)]) == 2
        assert message in capsys.readouterr().err
        assert not out.exists()


@pytest.mark.slow
def test_build_and_models_answer_the_block_one_trial_at_a_time(tmp_path):
    from model_eval.evaluate import evaluate_experiment

    out = tmp_path / "exp"
    assert cuebench(["stimuli", "build", "--design", "suppression", "--conditions", "patch_shuffle,grayscale",
                     "--adaptive", f"patch_shuffle:{TRIALS}", "--out", str(out), "--workers", "2"]) == 0
    experiment = ExperimentDir(out).load()
    plan = experiment.adaptive_plan("patch_shuffle")
    assert (plan.axis, plan.values[:2], plan.levels[-1], plan.guess_rate) == ("grid", (2.0, 3.0), 14, 1 / 8)
    assert not any(a.startswith("patch_shuffle") for a in experiment.assignment.arms)
    summary = evaluate_experiment(out, ["tf_efficientnet_lite0"], progress=False)
    fixed = [t for t in experiment.trials if t.condition != "patch_shuffle"]
    assert summary.runs[0].answered_now == len(fixed) + TRIALS
    check_adaptive_rows(out, "tf_efficientnet_lite0:pypi")
    again = evaluate_experiment(out, ["tf_efficientnet_lite0"], progress=False)
    assert again.runs[0].answered_now == 0


@pytest.fixture
def hesitant():
    """A plug-in observer registered by name whose outputs do not depend on the experiment (no ``prepare``), so
    experiments share its stream: over the block's four labels, 0.4 on one picked by the image's brightness and 0.2
    on each other."""
    import torch

    from model_eval.observers import OBSERVERS, Observer

    class Hesitant(Observer):
        data_config = {"input_size": (3, 224, 224), "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}
        classes = tuple(sorted(set(IMAGES.values())))

        def __init__(self, weights=None, device="cpu"):
            self.observer_id, self.provenance, self.device = "hesitant:none", {"model": "hesitant"}, device

        def probabilities(self, images):
            pick = ((images.mean(dim=(1, 2, 3)) + 2) * 1000).long() % len(self.classes)
            return 0.2 + 0.2 * torch.nn.functional.one_hot(pick, len(self.classes)).float()

    with OBSERVERS.temporarily("hesitant", Hesitant):
        yield Hesitant


def test_experiments_sharing_a_stream_answer_each_trial_by_their_own_rule(tmp_path, photos, hesitant):
    """Two copies of one experiment answered in one stream of batches, one by Burgert's rule and one by the
    default mean: every stored answer, of the fixed sequence and of the adaptive block, carries its own
    experiment's rule and is decided by it from the same outputs. With 0.4 at most, Burgert's rule (commit only
    above 0.5) answers "not clear" and the mean its largest label."""
    from model_eval.evaluate import evaluate_experiments

    assert hesitant().experiment_independent
    build(tmp_path / "burgert", photos)
    shutil.copytree(tmp_path / "burgert", tmp_path / "mean")
    summaries = evaluate_experiments([(tmp_path / "burgert", "16class-burgert"), (tmp_path / "mean", None)],
                                     ["hesitant"], device="cpu", progress=False)
    rows = {}
    for name, summary in zip(("burgert", "mean"), summaries):
        experiment = ExperimentDir(tmp_path / name).load()
        fixed = [t for t in experiment.trials if t.condition != "patch_shuffle"]
        assert summary.runs[0].answered_now == len(fixed) + TRIALS
        check_adaptive_rows(tmp_path / name, "hesitant:none")
        with ResponseStore(tmp_path / name / "responses.sqlite") as store:
            rows[name] = {(r["session"], r["trial_index"]): r for r in store.rows()}
    for row in rows["burgert"].values():
        assert row["decision_rule"] == "16class-burgert" and row["response"] == NOT_CLEAR
        assert sorted(row["model_outputs"].values()) == pytest.approx([0.2, 0.2, 0.2, 0.4])
    for row in rows["mean"].values():
        assert row["decision_rule"] == "16class-mean"
        assert row["model_outputs"][row["response"]] == pytest.approx(0.4)
    fixed = [key for key in rows["mean"] if key[0] != session_name("patch_shuffle")]
    assert fixed and all(rows["mean"][key]["model_outputs"] == rows["burgert"][key]["model_outputs"] for key in fixed)


@pytest.mark.slow
def test_psychopy_runner_runs_the_block_after_the_fixed_sequence(experiment_dir):
    from conftest import unavailable
    import importlib.util
    import shutil

    if shutil.which("xvfb-run") is None or importlib.util.find_spec("psychopy") is None:
        unavailable("needs xvfb-run (Debian's xvfb) and PsychoPy (the lab extra; see docs/lab.md)")
    command = ["xvfb-run", "-a", sys.executable, "-m", "cuebench", "lab", "run", str(experiment_dir),
               "--participant", "P01", "--window-size", "1024", "768", "--simulate", "--refresh-hz", "60"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    total = 2 + TRIALS  # the summary counts the adaptive trials, with their maximum
    assert f"{total} of {total} trials answered ({total} in this run; {TRIALS} of at most {TRIALS} in the adaptive " \
           "QUEST+ part), complete" in done.stdout
    rows = check_adaptive_rows(experiment_dir, "P01")
    assert all(r["frames"]["stimulus"] == 6 and r["observer_kind"] == "pilot" for r in rows)
    with ResponseStore(experiment_dir / "responses.sqlite") as store:
        assert len(store.rows("observer = 'P01' AND session = '1'")) == 2  # the fixed sequence: two originals
    again = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and len(check_adaptive_rows(experiment_dir, "P01")) == TRIALS


@pytest.mark.slow
def test_web_task_runs_the_block_after_the_fixed_sequence(experiment_dir, browser):
    import threading
    import time

    from waitress.server import create_server

    from experiment_server.app import create_app
    from experiment_server.study import study_of

    app = create_app(experiment_dir)
    instructions = (experiment_dir / "texts" / "instructions.md").read_text()
    assert f"**{2 + TRIALS} trials**" in instructions  # the QUEST+ block's trials are counted (texts.study_facts)
    server = create_server(app, host="127.0.0.1", port=0, threads=4)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"http://127.0.0.1:{server.effective_port}/?code=adaptive1")
        page.check("#consent")
        page.click("#start")
        answered, previous, deadline, counters, bars = 0, "", time.monotonic() + 180, set(), []
        while time.monotonic() < deadline:
            state = page.evaluate("() => document.body?.dataset.state || ''")  # no body while a page loads
            if state == "done":
                break
            if page.is_visible("#continue"):
                page.click("#continue")
            elif state == "response-grid" and previous != "response-grid":  # one click per response screen
                counters.add(page.text_content("#progress"))
                bars.append(page.evaluate("() => document.querySelector('#progress-bar > div').style.width"))
                if answered == 1 + TRIALS // 2:
                    page.screenshot(path=str(experiment_dir.parent / "adaptive-trial-with-progress-bar.png"))
                page.click("#grid button[data-label='cat']")
                answered += 1
            previous = state
            time.sleep(0.02)
        assert state == "done", f"the session did not finish (last state {state})"
        participant = study_of(app).db.participants("adaptive-test")[0]
        rows = check_adaptive_rows(experiment_dir, participant.code)
        assert all(r["response"] == "cat" and r["rt_ms"] > 0 and r["frames"]["stimulus"] > 0 for r in rows)
        assert participant.status == "finished" and answered == 2 + TRIALS
        assert counters == {f"trial {k} of {2 + TRIALS}" for k in range(1, 3 + TRIALS)}  # the QUEST+ block counted
        assert bars == [f"{round(100 * k / (2 + TRIALS))}%" for k in range(1, 3 + TRIALS)]  # the bar beside it
    finally:
        server.close()
        thread.join(timeout=10)


def test_an_adaptive_answer_renews_the_reservation(experiment_dir):
    """Each stored answer of an adaptive block extends the participant's group reservation, as a
    trial of the fixed sequence does; otherwise it lapses in the middle of a long block and the
    group is given to someone else."""
    from experiment_server.app import create_app
    from experiment_server.simulate import NONCE
    from experiment_server.study import study_of

    now = [1000.0]
    app = create_app(experiment_dir, clock=lambda: now[0], reservation_seconds=60)
    client = app.test_client()
    nonce = NONCE.search(client.get("/?code=renew1").get_data(as_text=True)).group(1)
    token = client.post("/start", data={"consent": "yes", "code": "renew1", "start_nonce": nonce}
                        ).headers["Location"].rsplit("/", 1)[1]
    now[0] += 50
    trial = client.get(f"/api/session/{token}/adaptive").get_json()["trial"]
    reply = client.post(trial["post"], json={"trial_key": trial["trial_key"], "response": trial["choices"][0],
                                             "rt_ms": 500.0, "refresh_hz": 60.0})
    assert reply.status_code == 201, reply.get_json()
    assert study_of(app).db.by_token(token).reserved_until == 1050.0 + 60
