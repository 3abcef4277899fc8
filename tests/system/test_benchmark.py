"""``cuebench benchmark``: scorecards that agree with the separate build/eval/analyze commands, a warm re-run
that does no model work, no rank where the run is not the references' measurement, and ``cuebench leaderboard
verify`` passing a fresh scorecard and failing an edited one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]


def cuebench(*argv, cwd: Path, shared: Path, returncode: int = 0) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUEBENCH_SHARED": str(shared), "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-m", "cuebench", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == returncode, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_scorecard_reproduces_the_separate_commands_and_a_warm_rerun_does_no_model_work(tmp_path, shared):
    out = cuebench("benchmark", "tf_efficientnet_lite0", "--benchmarks", "cue-conflict,dist", "--per-class", "2",
                   "--device", "cpu", "--compare", cwd=tmp_path, shared=shared)
    assert "answered" in out
    card = json.loads((tmp_path / "scorecards" / "tf_efficientnet_lite0.json").read_text())
    metrics = {m["metric"]: m for m in card["metrics"]}
    versions = {b["benchmark"]: b["benchmark_version"] for b in card["benchmarks"]}
    assert {b["stimulus_hash"][:12] for b in card["benchmarks"]} == set(versions.values())
    assert {b["benchmark"]: b["decision_rule"] for b in card["benchmarks"]} == {"cue-conflict": ["16class-mean"],
                                                                                "dist": ["oddity"]}
    assert all(b["weights"] for b in card["benchmarks"])
    # a --per-class subset is not the published set: no rank, no people, one sentence saying why
    assert {b["benchmark"]: b["images"] for b in card["benchmarks"]} == {"cue-conflict": 32, "dist": 2}
    for name, published in (("shape_bias", "1,280 images of Geirhos et al. 2019's cue-conflict set"),
                            ("dist_accuracy", "2,400 images of Wen et al. 2024's released DiST triplets")):
        metric = metrics[name]
        assert metric["rank"] is None and metric["human"] is None and not metric["comparable"]
        assert metric["notes"] == [metric["not_ranked_because"]] and published in metric["notes"][0]
        assert metric["notes"][0].startswith("Not ranked or compared with people: this run scored ")
        assert not any(source["ranked"] for source in metric["sources"]) and len(metric["context"]) == 1
    assert metrics["shape_bias"]["context"][0].startswith("Heinert et al. 2024, Table VIII (appendix): 43 models")
    assert metrics["dist_accuracy"]["context"] == [
        "Wen et al. 2024, Fig. 5 (values stated in Sec. 4): people 0.855, shown for context and not ranked: the paper "
        "does not say which images it measured."]
    assert "Geirhos et al. 2019" in metrics["shape_bias"]["references"][0]["label"]
    markdown = (tmp_path / "scorecards" / "tf_efficientnet_lite0.md").read_text()
    assert "not ranked" in markdown and " of 48" not in markdown
    assert card["reproduce"] == ("cuebench benchmark tf_efficientnet_lite0 --benchmarks cue-conflict,dist "
                                 "--per-class 2 --device cpu")
    assert card["package_version"] and card["commit"] and card["reproduce"] in markdown
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
                     "--device", "cpu", cwd=tmp_path, shared=shared)
    assert "answered 0" not in again and again.count("has answered every trial (no model work)") == 2
    assert again.count("not rebuilt") == 2
    warm = json.loads((tmp_path / "scorecards" / "tf_efficientnet_lite0.json").read_text())
    assert [m["value"] for m in warm["metrics"]] == [m["value"] for m in card["metrics"]]


@pytest.mark.slow
def test_a_run_loads_each_model_once_and_answers_all_its_benchmarks_in_one_stream(photos, tmp_path, monkeypatch):
    """Two benchmarks answered in one call: one load, one batch holding images of both, every trial of both
    answered as one benchmark alone answers them; a second call with the same ``loaded`` loads nothing."""
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
    for name in ("second", "alone", "third"):
        shutil.copytree(first.root, tmp_path / name)
    loads, batches = [], []
    load_observer, batches_on_device = model_eval.evaluate.load_observer, model_eval.evaluate.batches_on_device
    monkeypatch.setattr(model_eval.evaluate, "load_observer",
                        lambda spec, device: loads.append(spec) or load_observer(spec, device))
    monkeypatch.setattr(model_eval.evaluate, "batches_on_device",
                        lambda decoded, ids, device: batches.extend(ids) or batches_on_device(decoded, ids, device))
    args = SimpleNamespace(batch_size=8, device="cpu", executor="local", executor_option=[])
    loaded = {}
    observers = answer([(tmp_path / "first", None), (tmp_path / "second", "16class-mean")], ["tf_efficientnet_lite0"],
                       args, loaded)
    assert loads == ["tf_efficientnet_lite0"] and list(loaded) == ["tf_efficientnet_lite0"]
    assert [sorted({part for part, _ in ids}) for ids in batches] == [[0, 1]] and len(batches[0]) == 4
    answer([(tmp_path / "third", None)], ["tf_efficientnet_lite0"], args, loaded)
    assert loads == ["tf_efficientnet_lite0"]
    answer([(tmp_path / "alone", None)], ["tf_efficientnet_lite0"], args)

    def stored(name):
        with ResponseStore(tmp_path / name / "responses.sqlite") as store:
            return {r["trial_id"]: r for r in store.rows()}

    alone = stored("alone")
    assert len(alone) == 2
    for name in ("first", "second", "third"):
        rows = stored(name)
        assert {t: (r["response"], r["decision_rule"]) for t, r in rows.items()} == {
            t: (r["response"], r["decision_rule"]) for t, r in alone.items()}
        for trial, row in rows.items():  # a batch of 4 and one of 2 may differ in the last float bits
            assert row["model_outputs"].keys() == alone[trial]["model_outputs"].keys()
            assert np.allclose(list(row["model_outputs"].values()), list(alone[trial]["model_outputs"].values()),
                               rtol=1e-4, atol=1e-7)
    assert observers[0] == observers[1]


def test_a_changed_stimulus_set_is_a_new_benchmark_version(tmp_path):
    from analysis.benchmarks.biasbed import Edges
    from cuebench_app.benchmark import source_files, stimulus_hash

    for cls, n in (("cat", 2), ("dog", 1)):
        (tmp_path / cls).mkdir()
        for i in range(n):
            (tmp_path / cls / f"{cls}{i}.png").write_bytes(bytes([i, len(cls)]))
    bench = Edges()
    files = source_files(bench, tmp_path, per_class=None)
    assert [str(f) for f in files] == ["cat/cat0.png", "cat/cat1.png", "dog/dog0.png"]
    assert [str(f) for f in source_files(bench, tmp_path, per_class=1)] == ["cat/cat0.png", "dog/dog0.png"]
    before = stimulus_hash(bench, {}, tmp_path, files)
    assert stimulus_hash(bench, {}, tmp_path, files) == before
    assert stimulus_hash(bench, {"conditions": "blur"}, tmp_path, files) != before
    other_rule = type("OtherRule", (Edges,), {"decision_rule": "16class-sum"})()
    assert stimulus_hash(other_rule, {}, tmp_path, files) != before   # answered another way: another cache folder
    (tmp_path / "dog" / "dog0.png").write_bytes(b"changed")
    assert stimulus_hash(bench, {}, tmp_path, files) != before


def test_benchmark_refuses_an_unknown_benchmark_by_name(capsys):
    from cuebench_app.cli import main

    assert main(["benchmark", "m", "--benchmarks", "cue-conflict,nope"]) == 2
    assert "unknown benchmark 'nope'; known: cue-conflict" in capsys.readouterr().err


@pytest.mark.slow
def test_bundled_suppression_is_not_ranked_and_verify_passes_it_and_fails_an_edited_copy(tmp_path):
    """The cheap bundled benchmark, as a user runs it: scored with Burgert et al.'s rule, never ranked against
    their 800 images, and re-checked by ``leaderboard verify`` (a fresh re-run in ``verify-cache``; the edited
    copy is checked against the same re-run)."""
    cuebench("benchmark", "tf_efficientnet_lite0", "--benchmarks", "suppression", "--device", "cpu", cwd=tmp_path,
             shared=tmp_path / "no-shared-data-needed")
    card = json.loads((tmp_path / "scorecards" / "tf_efficientnet_lite0.json").read_text())
    assert card["benchmarks"][0]["decision_rule"] == ["16class-burgert"] and card["benchmarks"][0]["images"] == 8
    markdown = (tmp_path / "scorecards" / "tf_efficientnet_lite0.md").read_text()
    assert " of 13" not in markdown and "beyond" not in markdown and "exceeds" not in markdown
    sentence = ("Not ranked or compared with people: the reference measured the 800 images of Burgert et al. "
                "2025's ImageNet16 set (50 validation images per class, not distributed), and this run scored 8 "
                "images of another set.")
    assert [m["notes"] for m in card["metrics"]] == [[sentence]] * 4
    for metric in card["metrics"]:
        low, high = metric["ci_low"], metric["ci_high"]
        assert low < metric["value"] < high or metric["value"] in (low, 0.0), metric   # 8 photos: never zero width
        assert high - low > 0.3

    verified = cuebench("leaderboard", "verify", "scorecards/tf_efficientnet_lite0.json", "--cache", "verify-cache",
                        cwd=tmp_path, shared=tmp_path)
    assert "answered 40 trials, 0 stored before" in verified            # a real re-run, not the stored answers
    assert verified.count(": pass (") == 4 and "verify tf_efficientnet_lite0: passed" in verified

    # one copy, five edits a reader would be misled by, each caught on its own line
    metric, claimed, dropped = card["metrics"][0], card["metrics"][1], card["metrics"].pop(3)
    metric["value"] = round((metric["value"] + metric["ci_high"]) / 2, 3)   # still inside its own interval
    claimed.update(comparable=True, human=0.763, not_ranked_because=None, notes=[], rank=1, rank_range=[1, 1])
    card["reproduce"] = card["reproduce"].replace(" --device cpu", "")
    card["benchmarks"][0]["weights"] = "pypi:a-better-model (sha256 0)"
    (tmp_path / "edited.json").write_text(json.dumps(card))
    edited = cuebench("leaderboard", "verify", "edited.json", "--cache", "verify-cache", cwd=tmp_path,
                      shared=tmp_path, returncode=1)
    lines = [line.strip() for line in edited.splitlines()]
    assert any(line.startswith(f"suppression {metric['metric']}: published {metric['value']:.3f}") and "FAIL" in line
               for line in lines)
    assert any(line.startswith(f"suppression {claimed['metric']}: ") and line.endswith(
        "FAIL: the published comparable, human differ from the re-run's (edited?)") for line in lines)
    assert any(line.startswith(f"suppression {dropped['metric']}: published –") and line.endswith(
        "FAIL: the scorecard leaves out a metric its command scores") for line in lines)
    assert any(line.startswith("reproduce: ") and line.endswith("FAIL") for line in lines)
    assert "suppression provenance: the published weights differ from the re-run's: FAIL" in lines
    assert edited.count(": pass (") == 1 and "verify tf_efficientnet_lite0: FAILED" in edited


def test_the_commit_is_recorded_only_from_cuebench_s_own_checkout(tmp_path):
    """A cuebench installed into a virtual environment inside another project's repository must not record
    that project's HEAD as its commit; the top of a checkout records its HEAD, +dirty after an edit."""
    from cuebench_app.benchmark import checkout_commit

    def git(*argv):
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *argv],
                              capture_output=True, text=True, check=True).stdout.strip()
    git("init", "-q")
    (tmp_path / "tracked.txt").write_text("one")
    git("add", "tracked.txt")
    git("commit", "-q", "-m", "another project")
    head = git("rev-parse", "HEAD")
    inside = tmp_path / ".venv" / "lib" / "site-packages"
    inside.mkdir(parents=True)
    assert checkout_commit(inside) is None
    assert checkout_commit(tmp_path) == head
    (tmp_path / "tracked.txt").write_text("two")
    assert checkout_commit(tmp_path) == head + "+dirty"


def test_verify_fails_an_edited_rank_among_one_source_and_an_edited_split_of_the_sources():
    """The same answers must give each source's rank again, and any answers the same split of the published
    sources into ranked and context only: an edited place among Geirhos et al.'s CNNs, or Heinert et al.'s 43
    moved into the rank, fails even where the overall rank and notes are left as they were."""
    from dataclasses import replace

    from analysis import scorecard
    from analysis.benchmarks import image_list_hash
    from analysis.benchmarks.cue_conflict import CueConflict
    from cuebench_app.verify import judge

    bench = CueConflict()
    names = {f"image{i}" for i in range(1280)}   # Geirhos et al.'s source as if it had measured these names
    geirhos, heinert = bench.metrics(pd.DataFrame())[0].published()
    listed = replace(geirhos, measured_on=replace(geirhos.measured_on, image_list_hash=image_list_hash(names)))
    metric = replace(bench.metrics(pd.DataFrame())[0], published=lambda: (listed, heinert))
    entry = scorecard.entry(bench, metric, [(306.0, 1280)], names, ["16class-mean"])
    assert [s["rank"] for s in entry["sources"]] == [3, None]
    assert judge(entry, json.loads(json.dumps(entry))) == ("pass (the same answers give the same numbers)", True)

    edited = json.loads(json.dumps(entry))
    edited["sources"][0]["rank"] = 2
    assert judge(edited, entry) == ("FAIL: the same answers do not give the published place among each source's "
                                   "models (edited?)", False)
    moved = json.loads(json.dumps(entry))
    moved["sources"][1].update(ranked=True, not_ranked_because=None)
    other = scorecard.entry(bench, metric, [(310.0, 1280)], names, ["16class-mean"])   # another machine's answers
    assert judge(moved, other) == ("FAIL: the published sources ranked and shown for context differ from the "
                                   "re-run's (edited?)", False)
    assert judge(entry, other)[1]
