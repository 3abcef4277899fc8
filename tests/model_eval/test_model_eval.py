"""Batched evaluation into the response store: every trial answered, resumable after SIGKILL, summaries."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from model_eval.decisions import DecisionError
from model_eval.evaluate import evaluate_experiment, format_summary
from model_eval.models import ModelError
from model_eval.preprocess import PreprocessError
from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore
from cuebench.trials import NOT_CLEAR, Experiment, LabelSet, Trial
from stimuli.sources import DEFAULT_LABEL_INDICES

LITE0 = "tf_efficientnet_lite0"
OBSERVER = "tf_efficientnet_lite0:pypi"
ODDITY = [("chelsea", "chelsea", "coffee"), ("rocket", "camera", "rocket"),
          ("flower", "flower", "china"), ("astronaut", "motorcycle", "motorcycle")]
"""Triplets (the middle or last copy is mirrored); the different photo is the odd one."""


def build_experiment(root, photos) -> ExperimentDir:
    """A small mixed experiment from the real photos: originals and mirrored copies (classify),
    a catch trial, and oddity triplets of two views of one photo plus another photo."""
    expdir = ExperimentDir(root)
    labels = LabelSet("default", tuple(DEFAULT_LABEL_INDICES), imagenet_indices=DEFAULT_LABEL_INDICES)
    categories = {"chelsea": "cat", "coffee": "coffee", "rocket": "rocket", "motorcycle": "motorcycle",
                  "astronaut": "astronaut", "camera": "camera", "china": "temple", "flower": "flower"}
    stimuli, trials, ids = {}, [], {}
    for name, pixels in photos.items():
        for condition, image in (("original", pixels), ("mirrored", np.ascontiguousarray(pixels[:, ::-1]))):
            stim = expdir.write_stimulus(image, {"source_image": name, "transform": condition, "params": {}})
            stimuli[stim.id] = stim
            ids[name, condition] = stim.id
            trials.append(Trial(trial_id=f"{name}-{condition}", trial_type="classify", role="test",
                                stimuli=(stim.id,), choices=tuple(labels.displayed()), correct=categories[name],
                                condition=condition, source_image=name, category=categories[name]))
    trials.append(Trial(trial_id="catch-coffee", trial_type="classify", role="catch", stimuli=(ids["coffee", "original"],),
                        choices=tuple(labels.displayed()), correct="coffee", condition="catch", category="coffee"))
    for k, triplet in enumerate(ODDITY):
        odd = next(i for i, name in enumerate(triplet) if triplet.count(name) == 1)
        seen = set()
        views = []
        for name in triplet:
            views.append(ids[name, "mirrored" if name in seen else "original"])
            seen.add(name)
        trials.append(Trial(trial_id=f"oddity-{k}", trial_type="oddity", role="test", stimuli=tuple(views),
                            choices=("1", "2", "3"), correct=str(odd + 1), condition="oddity"))
    expdir.save(Experiment(name="model-test", design="test", label_set=labels, stimuli=stimuli, trials=trials))
    return expdir


@pytest.fixture(scope="module")
def template(photos, tmp_path_factory):
    return build_experiment(tmp_path_factory.mktemp("template") / "exp", photos)


@pytest.fixture
def expdir(template, tmp_path):
    shutil.copytree(template.root, tmp_path / "exp")
    return ExperimentDir(tmp_path / "exp")


@pytest.fixture(scope="module")
def reference(template, tmp_path_factory):
    """One uninterrupted run: trial_id -> stored row."""
    root = tmp_path_factory.mktemp("reference") / "exp"
    shutil.copytree(template.root, root)
    summary = evaluate_experiment(root, [LITE0], batch_size=5, device="cpu", progress=False, workers=1)
    with ResponseStore(ExperimentDir(root).responses_file) as store:
        return summary, {r["trial_id"]: r for r in store.rows()}


def stored_count(path) -> int:
    try:
        with sqlite3.connect(path, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    except sqlite3.OperationalError:  # the table is not created yet
        return 0


@pytest.mark.slow
def test_every_trial_answered_once_with_its_role_and_rule(template, reference):
    summary, rows = reference
    experiment = template.load()
    assert len(rows) == len(experiment.trials)
    for index, trial in enumerate(experiment.trials):
        row = rows[trial.trial_id]
        assert (row["observer"], row["observer_kind"], row["session"]) == (OBSERVER, "model", "1")
        assert row["trial_index"] == index and row["role"] == trial.role
        assert row["decision_rule"] == ("oddity" if trial.trial_type == "oddity" else "16class-mean")
        assert row["device"]["mapping"] == "label_set:default" and row["device"]["policy"] == "as-is"
        if trial.trial_type == "classify":
            assert set(row["model_outputs"]) == set(DEFAULT_LABEL_INDICES)
            assert row["response"] == max(row["model_outputs"], key=row["model_outputs"].get)
        else:
            assert set(row["model_outputs"]) == {"1", "2", "3"}
    assert rows["chelsea-original"]["response"] == "cat" and rows["coffee-original"]["response"] == "coffee"
    assert rows["catch-coffee"]["correct"] == 1
    # a mirrored photo is still the same photo: Lite0's features find the different one
    assert [rows[f"oddity-{k}"]["correct"] for k in range(len(ODDITY))] == [1] * len(ODDITY)
    conditions = {(r["condition"], r["n"]) for r in summary.accuracy}
    assert conditions == {("mirrored", 8), ("original", 8), ("oddity", 4)}  # the catch trial is not scored
    assert summary.other_roles == [{"model": OBSERVER, "role": "catch", "n": 1, "correct": 1}]
    text = format_summary(summary)
    assert "original" in text and OBSERVER in text and "catch trials 1/1" in text


@pytest.mark.slow
def test_resumes_after_sigkill_without_duplicates(expdir, reference):
    _, want = reference
    total = len(want)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "cuebench", "eval", "--model", LITE0, "--experiment", str(expdir.root),
           "--batch-size", "1", "--workers", "0", "--device", "cpu", "--quiet"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while stored_count(expdir.responses_file) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    partial = stored_count(expdir.responses_file)
    assert 3 <= partial < total, "the run was not interrupted part-way"
    summary = evaluate_experiment(expdir.root, [LITE0], batch_size=4, device="cpu", progress=False, workers=0)
    assert summary.runs[0].skipped == partial and summary.runs[0].answered_now == total - partial
    with ResponseStore(expdir.responses_file) as store:
        rows = store.rows()
    assert len(rows) == total == len({r["trial_id"] for r in rows})
    for row in rows:
        assert row["response"] == want[row["trial_id"]]["response"]
        ours, theirs = row["model_outputs"], want[row["trial_id"]]["model_outputs"]
        assert ours.keys() == theirs.keys()
        assert np.allclose([ours[k] for k in ours], [theirs[k] for k in ours], rtol=1e-3, atol=1e-6)


@pytest.mark.slow
def test_rules_and_policy_are_recorded(expdir):
    summary = evaluate_experiment(expdir.root, [LITE0], rule="16class-burgert", policy="resize-crop",
                                  device="cpu", progress=False, workers=0)
    with ResponseStore(expdir.responses_file) as store:
        rows = {r["trial_id"]: r for r in store.rows()}
    chelsea = rows["chelsea-original"]
    assert chelsea["decision_rule"] == "16class-burgert" and chelsea["device"]["policy"] == "resize-crop"
    # Burgert's rule: sums, and "not clear" unless the largest sum exceeds 0.5
    best = max(chelsea["model_outputs"], key=chelsea["model_outputs"].get)
    assert chelsea["response"] == (best if chelsea["model_outputs"][best] > 0.5 else NOT_CLEAR)
    assert sum(chelsea["model_outputs"].values()) <= 1.0 + 1e-4
    assert rows["oddity-0"]["decision_rule"] == "oddity"
    assert summary.runs[0].answered_now == len(rows)
    with pytest.raises(ModelError, match="already answered trials of model-test with rule 16class-burgert"):
        evaluate_experiment(expdir.root, [LITE0], device="cpu", progress=False, workers=0)


def test_bad_requests_are_refused_before_any_work(expdir, photos):
    with pytest.raises(DecisionError, match="cannot answer classification trials"):
        evaluate_experiment(expdir.root, [LITE0], rule="oddity", device="cpu", progress=False)
    experiment = expdir.load()
    odd = expdir.write_stimulus(photos["coffee"][:200, :180].copy(), {"source_image": "coffee", "transform": "crop"})
    experiment.stimuli[odd.id] = odd
    expdir.save(experiment)
    with pytest.raises(PreprocessError, match="several sizes: 224x224 .*180x200 .*--policy resize-crop"):
        evaluate_experiment(expdir.root, [LITE0], device="cpu", progress=False)
    assert not expdir.responses_file.exists() or stored_count(expdir.responses_file) == 0



@pytest.mark.slow
def test_zoo_from_a_models_file_decodes_once_and_resumes_after_sigkill(expdir, reference, tmp_path, monkeypatch):
    from model_eval import stimulus_cache
    from model_eval.models import read_spec_file

    _, want = reference
    total = len(want)
    zoo = tmp_path / "zoo.txt"
    zoo.write_text("# the EfficientNet-Lite zoo\ntf_efficientnet_lite0\n\ntf_efficientnet_lite1:pypi  # 240 px\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "cuebench", "eval", "--models", str(zoo), "--experiment", str(expdir.root),
           "--batch-size", "1", "--device", "cpu", "--quiet"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while stored_count(expdir.responses_file) < total + 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    partial = stored_count(expdir.responses_file) - total
    assert 3 <= partial < total, "the zoo run was not interrupted in its second model"
    decoded = []
    monkeypatch.setattr(stimulus_cache, "decode_image", lambda path: decoded.append(path))
    summary = evaluate_experiment(expdir.root, read_spec_file(zoo), batch_size=4, device="cpu", progress=False)
    assert decoded == []  # the killed run's cache serves the second run
    lite0, lite1 = summary.runs
    assert (lite0.observer, lite0.skipped, lite0.answered_now) == (OBSERVER, total, 0)
    assert (lite1.observer, lite1.skipped, lite1.answered_now) == ("tf_efficientnet_lite1:pypi", partial,
                                                                   total - partial)
    with ResponseStore(expdir.responses_file) as store:
        rows = store.rows()
    assert len(rows) == 2 * total == len({(r["observer"], r["trial_id"]) for r in rows})
    assert all(r["response"] == want[r["trial_id"]]["response"] for r in rows if r["observer"] == OBSERVER)
    assert "tf_efficientnet_lite1:pypi: answered" in format_summary(summary)


@pytest.mark.slow
def test_cached_batches_on_the_device_agree_with_the_pillow_path(expdir, reference):
    """Decisions and probabilities from the decoded cache and batch preprocessing equal those from
    Pillow decoding and timm's per-image transform, image by image, for both policies."""
    import torch

    from model_eval.decisions import decide_classify, label_mapping
    from model_eval.models import load_model
    from model_eval.preprocess import preprocess_paths

    evaluate_experiment(expdir.root, [LITE0], policy="resize-crop", batch_size=8, device="cpu", progress=False)
    with ResponseStore(expdir.responses_file) as store:
        stored = {"as-is": reference[1], "resize-crop": {r["trial_id"]: r for r in store.rows()}}
    experiment = expdir.load()
    mapping = label_mapping(experiment.label_set)
    lite0 = load_model(LITE0)
    classify = [t for t in experiment.trials if t.trial_type == "classify"]
    paths = [expdir.stimulus_path(experiment.stimuli[t.stimuli[0]]) for t in classify]
    for policy, tolerance in (("as-is", 1e-5), ("resize-crop", 2e-3)):
        with torch.inference_mode():
            probs = lite0.model(preprocess_paths(paths, lite0.data_config, policy)).softmax(-1).numpy()
        for trial, p in zip(classify, probs):
            old = decide_classify(p, trial.choices, mapping, "16class-mean")
            row = stored[policy][trial.trial_id]
            assert row["response"] == old.response
            assert np.allclose([row["model_outputs"][k] for k in old.outputs], list(old.outputs.values()),
                               rtol=1e-4, atol=tolerance)


@pytest.fixture
def label_prompted():
    """A CLIP-like adapter registered as a package would: its probabilities are over the experiment's own labels
    (set in ``prepare``), each image's brightness picking one of them."""
    import torch

    from model_eval.observers import ADAPTERS, Observer

    class LabelPrompted(Observer):
        data_config = {"input_size": (3, 224, 224), "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}

        @classmethod
        def claims(cls, name, weights):
            return name == "label-prompted"

        @classmethod
        def from_spec(cls, name, weights, device):
            observer = cls()
            observer.observer_id, observer.provenance, observer.device = f"{name}:none", {"model": name}, device
            return observer

        def prepare(self, experiment):
            self.classes = tuple(label for label in experiment.label_set.labels if label != NOT_CLEAR)

        def probabilities(self, images):
            pick = ((images.mean(dim=(1, 2, 3)) + 2) * 1000).long() % len(self.classes)
            return torch.nn.functional.one_hot(pick, len(self.classes)).float()

    with ADAPTERS.temporarily("label-prompted", LabelPrompted):
        yield LabelPrompted


def test_experiments_share_batches_only_where_the_outputs_do_not_depend_on_the_experiment(
        template, label_prompted, tmp_path):
    """An observer that adapts to each experiment's labels (``prepare``) answers two experiments with other label
    sets in one call exactly as in one call each: one stream per experiment, each with its own classes."""
    from model_eval.evaluate import evaluate_experiments
    from model_eval.observers import Observer

    assert label_prompted.from_spec("label-prompted", "", "cpu").experiment_independent is False
    assert Observer().experiment_independent is True
    experiment = template.load()
    classify = [t for t in experiment.trials if t.trial_type == "classify"]  # the toy gives no features
    fewer = LabelSet("three", ("cat", "coffee", "rocket"))
    copies = {"full": experiment.model_copy(update={"trials": classify}),
              "three": experiment.model_copy(update={"label_set": fewer, "trials": [
                  t.model_copy(update={"choices": tuple(fewer.displayed())}) for t in classify
                  if t.correct in fewer.labels]})}
    for name, copy in copies.items():
        for run in ("together", "alone"):
            shutil.copytree(template.root, tmp_path / run / name)
            ExperimentDir(tmp_path / run / name).save(copy)
    together = evaluate_experiments([(tmp_path / "together" / name, None) for name in copies], ["label-prompted"],
                                    device="cpu", progress=False)
    alone = [evaluate_experiment(tmp_path / "alone" / name, ["label-prompted"], device="cpu", progress=False)
             for name in copies]
    assert [s.accuracy for s in together] == [s.accuracy for s in alone]
    for name, labels in (("full", set(DEFAULT_LABEL_INDICES)), ("three", {"cat", "coffee", "rocket"})):
        rows = {}
        for run in ("together", "alone"):
            with ResponseStore(tmp_path / run / name / "responses.sqlite") as store:
                rows[run] = {r["trial_id"]: (r["response"], r["model_outputs"]) for r in store.rows()}
        assert rows["together"] == rows["alone"] and len(rows["alone"]) == len(copies[name].trials)
        assert {response for response, _ in rows["alone"].values()} <= labels
        assert all(set(outputs) == labels for _, outputs in rows["alone"].values())


def test_out_of_memory_names_a_batch_size_to_try(expdir, monkeypatch):
    import torch

    from model_eval.observers.timm_models import TimmObserver

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(TimmObserver, "forward", out_of_memory)
    with pytest.raises(ModelError, match="ran out of memory evaluating tf_efficientnet_lite0:pypi at --batch-size "
                                         "48; try --batch-size 24"):
        evaluate_experiment(expdir.root, [LITE0], batch_size=48, device="cpu", progress=False)
    assert stored_count(expdir.responses_file) == 0


def test_models_file_errors_name_the_file(expdir, tmp_path, capsys):
    from cuebench_app.cli import main

    missing = tmp_path / "missing.txt"
    assert main(["eval", "--models", str(missing), "--experiment", str(expdir.root)]) == 2
    assert f"cannot read the model list {missing}" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing yet\n\n")
    assert main(["eval", "--models", str(empty), "--experiment", str(expdir.root)]) == 2
    assert f"the model list {empty} names no model" in capsys.readouterr().err
