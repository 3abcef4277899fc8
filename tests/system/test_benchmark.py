"""``cuebench benchmark``: scorecards that agree with the separate build/eval/analyze commands, a warm re-run
that does no model work, and the scorecard's statistics (bootstrap interval, rank, notes) against hand values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import scorecard

REPO = Path(__file__).resolve().parents[2]


def cuebench(*argv, cwd: Path, shared: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUEBENCH_SHARED": str(shared), "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-m", "cuebench", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_scorecard_reproduces_the_separate_commands_and_a_warm_rerun_does_no_model_work(tmp_path, shared):
    out = cuebench("benchmark", "tf_efficientnet_lite0", "--benchmarks", "cue-conflict,dist", "--per-class", "2",
                   "--device", "cpu", "--n-boot", "200", "--compare", cwd=tmp_path, shared=shared)
    assert "answered" in out
    card = json.loads((tmp_path / "scorecards" / "tf_efficientnet_lite0.json").read_text())
    metrics = {m["metric"]: m for m in card["metrics"]}
    versions = {b["benchmark"]: b["benchmark_version"] for b in card["benchmarks"]}
    assert {b["stimulus_hash"][:12] for b in card["benchmarks"]} == set(versions.values())
    assert all(b["weights"] and b["decision_rule"] for b in card["benchmarks"])
    assert metrics["shape_bias"]["human"] == 0.958 and metrics["dist_accuracy"]["human"] == 0.855
    assert "Geirhos et al. 2019" in metrics["shape_bias"]["references"][0]["label"]
    assert (tmp_path / "scorecards" / "compare.md").read_text().count("|") > 10

    # the same stimuli through the documented commands, one at a time
    sources = tmp_path / "benchmark-cache" / "sources"
    cuebench("stimuli", "build", "--design", "cue-conflict-import", "--images",
             f"benchmark-cache/sources/cue-conflict-{versions['cue-conflict']}", "--out", "cc", cwd=tmp_path,
             shared=shared)
    cuebench("stimuli", "build", "--design", "dist-import", "--images", f"benchmark-cache/sources/dist-{versions['dist']}",
             "--out", "dist", cwd=tmp_path, shared=shared)
    assert sources.is_dir()
    for exp in ("cc", "dist"):
        cuebench("eval", "--experiment", exp, "--model", "tf_efficientnet_lite0", "--device", "cpu", "--quiet",
                 cwd=tmp_path, shared=shared)
    cuebench("analyze", "cc", "--metric", "shape-bias", "--out", "shape_bias.csv", cwd=tmp_path, shared=shared)
    cuebench("analyze", "dist", "--metric", "oddity", "--out", "oddity.csv", cwd=tmp_path, shared=shared)
    separate_bias = pd.read_csv(tmp_path / "shape_bias.csv")["shape_bias"].iloc[0]
    oddity = pd.read_csv(tmp_path / "oddity.csv").query("role == 'test'")
    separate_dist = oddity["k"].sum() / oddity["n"].sum()
    for name, separate in (("shape_bias", separate_bias), ("dist_accuracy", separate_dist)):
        metric = metrics[name]
        assert metric["ci_low"] <= separate <= metric["ci_high"], (name, separate, metric)
        assert metric["value"] == pytest.approx(separate)

    # warm: same stimuli, every trial answered -> the model is not loaded, the numbers do not change
    again = cuebench("benchmark", "tf_efficientnet_lite0", "--benchmarks", "cue-conflict,dist", "--per-class", "2",
                     "--device", "cpu", "--n-boot", "200", cwd=tmp_path, shared=shared)
    assert "answered 0" not in again and again.count("has answered every trial (no model work)") == 2
    assert again.count("not rebuilt") == 2
    warm = json.loads((tmp_path / "scorecards" / "tf_efficientnet_lite0.json").read_text())
    assert [m["value"] for m in warm["metrics"]] == [m["value"] for m in card["metrics"]]


@pytest.mark.slow
def test_a_run_loads_each_model_once_for_all_its_benchmarks(photos, tmp_path, monkeypatch):
    """Two benchmarks answered with one ``loaded`` dict: one load, every trial of both answered, as one
    benchmark alone answers them."""
    import shutil
    from types import SimpleNamespace

    import model_eval.evaluate
    from cuebench.expdir import ExperimentDir
    from cuebench.responses import ResponseStore
    from cuebench.trials import Experiment, LabelSet, Trial
    from cuebench_app.benchmark import answer
    from stimuli.sources import DEFAULT_LABEL_INDICES

    labels = LabelSet("default", tuple(DEFAULT_LABEL_INDICES), imagenet_indices=DEFAULT_LABEL_INDICES)
    first = ExperimentDir(tmp_path / "first")
    stimuli = {name: first.write_stimulus(photos[name], {"source_image": name, "transform": "original", "params": {}})
               for name in ("chelsea", "coffee")}
    trials = [Trial(trial_id=name, trial_type="classify", role="test", stimuli=(stim.id,),
                    choices=tuple(labels.displayed()), correct=correct, condition="original", category=correct)
              for (name, stim), correct in zip(stimuli.items(), ("cat", "coffee"))]
    first.save(Experiment(name="tiny", design="test", label_set=labels,
                          stimuli={s.id: s for s in stimuli.values()}, trials=trials))
    shutil.copytree(first.root, tmp_path / "second")
    shutil.copytree(first.root, tmp_path / "alone")
    loads = []
    load_observer = model_eval.evaluate.load_observer
    monkeypatch.setattr(model_eval.evaluate, "load_observer",
                        lambda spec, device: loads.append(spec) or load_observer(spec, device))
    args = SimpleNamespace(batch_size=8, device="cpu", executor="local", executor_option=[])
    loaded = {}
    observers = [answer(tmp_path / name, ["tf_efficientnet_lite0"], args, loaded) for name in ("first", "second")]
    assert loads == ["tf_efficientnet_lite0"] and list(loaded) == ["tf_efficientnet_lite0"]
    answer(tmp_path / "alone", ["tf_efficientnet_lite0"], args)

    def stored(name):
        with ResponseStore(tmp_path / name / "responses.sqlite") as store:
            return {r["trial_id"]: (r["response"], r["model_outputs"]) for r in store.rows()}

    assert stored("first") == stored("second") == stored("alone") and len(stored("alone")) == 2
    assert observers[0] == observers[1]


def test_a_changed_stimulus_set_is_a_new_benchmark_version(tmp_path):
    from cuebench_app.benchmark import Benchmark, source_files, stimulus_hash

    for cls, n in (("cat", 2), ("dog", 1)):
        (tmp_path / cls).mkdir()
        for i in range(n):
            (tmp_path / cls / f"{cls}{i}.png").write_bytes(bytes([i, len(cls)]))
    bench = Benchmark("suppression", "x")
    files = source_files(bench, tmp_path, per_class=None)
    assert [str(f) for f in files] == ["cat/cat0.png", "cat/cat1.png", "dog/dog0.png"]
    assert [str(f) for f in source_files(bench, tmp_path, per_class=1)] == ["cat/cat0.png", "dog/dog0.png"]
    before = stimulus_hash("edges", bench, {}, tmp_path, files)
    assert stimulus_hash("edges", bench, {}, tmp_path, files) == before
    assert stimulus_hash("edges", bench, {"conditions": "blur"}, tmp_path, files) != before
    (tmp_path / "dog" / "dog0.png").write_bytes(b"changed")
    assert stimulus_hash("edges", bench, {}, tmp_path, files) != before


def test_benchmark_refuses_an_unknown_benchmark_by_name(capsys):
    from cuebench_app.cli import main

    assert main(["benchmark", "m", "--benchmarks", "cue-conflict,nope"]) == 2
    assert "unknown benchmark 'nope'; known: cue-conflict" in capsys.readouterr().err


@pytest.mark.validates("scorecard bootstrap interval of a proportion",
                       definition="percentile bootstrap over the observer's trials, resampled within condition",
                       source="Efron & Tibshirani 1993", reference="normal approximation p +- 1.96 sqrt(p(1-p)/n)",
                       tolerance="each end within 0.012 for p = 0.7, n = 400")
def test_bootstrap_interval_of_an_accuracy_matches_the_normal_approximation():
    trials = pd.DataFrame({"condition": "original", "correct": [1] * 280 + [0] * 120})
    low, high = scorecard.bootstrap(lambda t: t["correct"].mean(), trials, n_boot=2000, seed=1)
    half = 1.96 * np.sqrt(0.7 * 0.3 / 400)
    assert low == pytest.approx(0.7 - half, abs=0.012) and high == pytest.approx(0.7 + half, abs=0.012)


@pytest.mark.validates("scorecard place among published models and the too-small-to-rank note",
                       definition="rank = 1 + published models above the score; the interval's ends give the rank "
                                  "range; a range wider than 2 ranks is 'too small to rank'",
                       source="this project (issue 40)", reference="hand count over five published values",
                       tolerance="exact")
def test_rank_rank_range_and_notes_by_hand():
    models = (("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.6), ("e", 0.5))
    assert scorecard.rank(0.75, models) == 3 and scorecard.rank(0.95, models) == 1 and scorecard.rank(0.1, models) == 6
    entry = {"value": 0.75, "ci_low": 0.55, "ci_high": 0.95, "human": 0.96, "human_range": None,
             "noise_ceiling": None, "rank_range": [1, 5], "trials": 20, "published_models": 5}
    assert scorecard.notes(entry) == ["too small to rank: with 20 trials the 95 % interval spans ranks 1-5 of 6"]
    above = {**entry, "ci_low": 0.97, "value": 0.98, "ci_high": 0.99, "human_range": (0.91, 0.96), "rank_range": [1, 1]}
    assert "above the human range of the individual people (0.91-0.96)" in scorecard.notes(above)[0]


@pytest.mark.validates("scorecard S_cd on the published model set's scale",
                       definition="S_cd = (Q_S/s)/(Q_S/s + Q_T/t), s and t the mean Q_S, Q_T of Heinert et al.'s "
                                  "43 pre-trained models (Table VIII)",
                       source="Heinert et al., eqs. 3-4, Table VIII", reference="published S_cd of ConvNeXt L, 0.563",
                       tolerance="0.005 (inputs rounded to 3 decimals)")
def test_cue_decomposition_score_on_heinert_scale_gives_the_published_value():
    # ConvNeXt L's published accuracies as 1,000 trials per cue: Q_O 0.996, Q_S 0.838, Q_T 0.969
    rows = [("original", 996), ("shape_cue", 838), ("texture_cue", 969)]
    trials = pd.DataFrame([{"condition": c, "correct": int(i < k)} for c, k in rows for i in range(1000)])
    s_cd = scorecard.METRICS["cue-decomposition"][0].compute(trials)
    r_cd = scorecard.METRICS["cue-decomposition"][1].compute(trials)
    assert s_cd == pytest.approx(0.563, abs=0.005) and r_cd == pytest.approx(0.907, abs=0.001)
    # the same as the report's metric over the published model set plus this observer
    from analysis.metrics import cue_decomposition_scores
    from analysis.reference import load

    table8 = load("heinert_table8").query("arch != 'trained'")
    q = pd.DataFrame({"observer": [*table8["model"], "this"], "Q_O": [*table8["q_o"], 0.996],
                      "Q_S": [*table8["q_s"], 0.838], "Q_T": [*table8["q_t"], 0.969]})
    own = cue_decomposition_scores(q, model_set=list(table8["model"])).set_index("observer").loc["this"]
    assert s_cd == pytest.approx(own["S_cd"]) and r_cd == pytest.approx(own["R_cd"])
