"""Every one-file plug-in example of docs/extending.md, installed as a package beside cuebench (its
entry points on PYTHONPATH, as pip would install them) and run through the documented commands."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO
from support import plugin_package

PAGE = REPO / "docs" / "extending.md"
EXAMPLE = re.compile(r"<!-- example: (\S+) (\S+) -->\n```(?:python|json)\n(.*?)```", re.S)
ENTRY_POINTS = {"design": ("cuebench.designs", "blur-only", "BlurOnly"),
                "report-section": ("cuebench.report_sections", "not-clear-rate", "NotClearRate"),
                "algorithm": ("cuebench.algorithms", "label-smoothing", "LabelSmoothing"),
                "benchmark": ("cuebench.benchmarks", "grayscale-reliance", "GrayscaleReliance"),
                "study-kind": ("cuebench.study_kinds", "toy-squares", "ToySquares")}
BESIDE = {"design-words"}
"""Examples that are no plug-in of their own but a file beside one (the design's catalogue fragment)."""


def examples() -> dict[str, tuple[str, str]]:
    return {kind: (filename, code) for kind, filename, code in EXAMPLE.findall(PAGE.read_text(encoding="utf-8"))}


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    """A package holding the page's example files, installed only by being on PYTHONPATH."""
    entry_points, modules = {}, {}
    for kind, (filename, code) in examples().items():
        modules[filename] = code
        if kind not in BESIDE:
            group, name, cls = ENTRY_POINTS[kind]
            entry_points.setdefault(group, {})[name] = f"{filename.removesuffix('.py')}:{cls}"
    return plugin_package(tmp_path_factory.mktemp("plugins"), "cuebench-examples", entry_points, modules)


def run(plugins, cwd, *args: str, code: str | None = None) -> subprocess.CompletedProcess:
    paths = [str(plugins), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths)), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "cuebench", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_every_example_of_the_page_is_run_here():
    assert set(examples()) == set(ENTRY_POINTS) | BESIDE


def test_the_design_example_s_words_are_its_participants_debrief(plugins, tmp_path):
    """The fragment beside ``blur_only.py`` is found through the design's entry point and merged per language: a
    blur-only study's default debrief says the page's sentence in English and in German, and no translation
    is missing."""
    page = json.loads(examples()["design-words"][1])
    check = """
import json
from cuebench.texts import default_texts
from cuebench.trials import Experiment, LabelSet
from cuebench.words import missing_translations, sources
study = Experiment(name="x", design="blur-only", label_set=LabelSet("s", ("cat",)), stimuli={}, trials=[])
print(json.dumps({"en": default_texts(study)["debrief"],
                  "de": default_texts(study.model_copy(update={"language": "de"}))["debrief"],
                  "from": sources()["debrief_blur-only"], "missing": missing_translations()}))
"""
    done = run(plugins, tmp_path, code=check)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["from"] == "blur_only.words.json" and said["missing"] == {}
    for language in ("en", "de"):
        assert page[language]["debrief_blur-only"] in said[language]


@pytest.mark.slow
def test_the_design_example_builds_from_its_entry_point_and_its_section_reports(plugins, tmp_path):
    listed = run(plugins, tmp_path, "list", "designs")
    assert re.search(r"^blur-only +Each photo unchanged and under one Gaussian blur\.$", listed.stdout, re.M), listed.stderr
    refused = run(plugins, tmp_path, "stimuli", "build", "--design", "blur-only", "--sigma-level", "9",
                  "--images", "default", "--out", "exp/blur")
    assert refused.returncode == 2 and "sigma" in refused.stderr.replace("-", "_")
    built = run(plugins, tmp_path, "stimuli", "build", "--design", "blur-only", "--sigma-level", "2",
                "--images", "default", "--out", "exp/blur")
    assert built.returncode == 0, built.stderr
    experiment = json.loads((tmp_path / "exp/blur/experiment.json").read_text())
    options = experiment["provenance"]["options"]
    assert options["design"] == "blur-only" and options["sigma_level"] == 2
    conditions = {(t["condition"], t.get("level")) for t in experiment["trials"] if t["role"] == "test"}
    assert conditions == {("original", None), ("gaussian_blur", 2)}
    from_python = run(plugins, tmp_path, code="import cuebench\nfrom blur_only import BlurOnlyOptions\n"
                      "cuebench.build('blur-only', out='exp/blur-py', images='default', "
                      "options=BlurOnlyOptions(sigma_level=2))")
    assert from_python.returncode == 0, from_python.stderr
    same = json.loads((tmp_path / "exp/blur-py/experiment.json").read_text())
    assert (same["trials"], same["stimuli"]) == (experiment["trials"], experiment["stimuli"])

    # one person answers "not clear" on the first 3 original and the first gaussian-blur trial:
    # by hand, rates 3 / n_original and 1 / n_blur
    answer = """
import sys
from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore, trial_row
folder = ExperimentDir("exp/blur")
exp = folder.load()
seen = {}
rows = []
for i, t in enumerate(t for t in exp.trials if t.role == "test"):
    seen[t.condition] = seen.get(t.condition, 0) + 1
    limit = 3 if t.condition == "original" else 1
    rows.append(trial_row(exp, t, observer="p1", observer_kind="human", session="1", trial_index=i,
                          response="not clear" if seen[t.condition] <= limit else t.correct, rt_ms=700.0))
with ResponseStore(folder.responses_file) as store:
    store.write_many(rows)
print(seen["original"], seen["gaussian_blur"])
"""
    counted = run(plugins, tmp_path, code=answer)
    assert counted.returncode == 0, counted.stderr
    n_original, n_blur = map(int, counted.stdout.split())
    analysed = run(plugins, tmp_path, "analyze", "exp/blur", "--metric", "not-clear-rate", "--out", "rate.csv")
    assert analysed.returncode == 0, analysed.stderr
    import pandas as pd

    rates = pd.read_csv(tmp_path / "rate.csv").set_index("condition")["rate"]
    assert rates["original"] == pytest.approx(3 / n_original) and rates["gaussian_blur"] == pytest.approx(1 / n_blur)
    quick_look = run(plugins, tmp_path, "analyze", "exp/blur")  # the section's summary_tables, by its declaration
    assert quick_look.returncode == 0 and "== not_clear_rate" in quick_look.stdout, quick_look.stderr
    reported = run(plugins, tmp_path, "report", "exp/blur", "--out", "report")
    assert reported.returncode == 0, reported.stderr
    html = next((tmp_path / "report").glob("*.html")).read_text()
    assert "Not-clear answers" in html and "Share of trials answered" in html


@pytest.mark.slow
def test_the_algorithm_example_trains_with_smoothed_targets(plugins, tmp_path):
    listed = run(plugins, tmp_path, "list", "algorithms")
    assert re.search(r"^label-smoothing +ERM whose targets are smoothed", listed.stdout, re.M), listed.stderr
    # the loss it reports is cross-entropy against (1 - eps) one-hot + eps / K, written out by hand
    check = """
import torch
from model_eval.training.algorithms import ALGORITHMS
from model_eval.training.jobs import build_model
torch.manual_seed(0)
model = build_model("test_resnet", num_classes=4)
x, y = torch.randn(6, 3, 32, 32), torch.tensor([0, 1, 2, 3, 0, 1])
model.train()
with torch.no_grad():
    log_p = torch.log_softmax(model(x), dim=1)
target = torch.full((6, 4), 0.1 / 4)
target[torch.arange(6), y] += 0.9
by_hand = float(-(target * log_p).sum(dim=1).mean())
algorithm = ALGORITHMS["label-smoothing"](model, lr=0.0)
target = torch.full((6, 4), 0.2 / 4)  # eps as the command line gives it: a string
target[torch.arange(6), y] += 0.8
by_hand_02 = float(-(target * log_p).sum(dim=1).mean())
print(by_hand, algorithm.update(x, y), by_hand_02, ALGORITHMS["label-smoothing"](model, lr=0.0, eps="0.2").update(x, y))
try:
    ALGORITHMS["label-smoothing"](model, eps="1.5")
except ValueError as err:
    print(err)
"""
    done = run(plugins, tmp_path, code=check)
    assert done.returncode == 0, done.stderr
    numbers, refusal = done.stdout.splitlines()
    by_hand, reported, by_hand_02, reported_02 = map(float, numbers.split())
    assert reported == pytest.approx(by_hand, rel=1e-5)
    assert reported_02 == pytest.approx(by_hand_02, rel=1e-5)
    assert refusal.startswith("label-smoothing option eps:"), refusal


@pytest.mark.slow
def test_the_benchmark_example_scores_a_model_without_ranking_it(plugins, tmp_path):
    listed = run(plugins, tmp_path, "list", "benchmarks")
    assert re.search(r"^grayscale-reliance +Relative accuracy of the bundled photos in grayscale", listed.stdout,
                     re.M), listed.stderr
    done = run(plugins, tmp_path, "benchmark", "tf_efficientnet_lite0", "--benchmarks", "grayscale-reliance",
               "--device", "cpu", "--cache", "cache", "--out", "cards")
    assert done.returncode == 0, done.stderr
    card = json.loads(next((tmp_path / "cards").glob("*.json")).read_text())
    (entry,) = [e for e in card["metrics"] if e["benchmark"] == "grayscale-reliance"]

    # by hand from the stored answers: per photo the share answered right, averaged over photos, per condition
    import sqlite3

    (database,) = (tmp_path / "cache").glob("grayscale-reliance-*/responses.sqlite")
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT condition, source_image, AVG(correct) FROM responses WHERE role = 'test' "
                          "GROUP BY condition, source_image").fetchall()
    mean = {c: sum(a for cc, _, a in rows if cc == c) / sum(1 for cc, _, _ in rows if cc == c)
            for c in ("original", "grayscale")}
    assert entry["value"] == pytest.approx(mean["grayscale"] / mean["original"])
    assert entry["ci_low"] <= entry["value"] <= entry["ci_high"]
    assert entry["not_ranked_because"] == ("Not ranked or compared with people: no published values were "
                                           "measured this way.")
    assert entry["comparable"] is False and entry.get("rank") is None
    assert "no published values were measured this way" in next((tmp_path / "cards").glob("*.md")).read_text()


@pytest.mark.slow
def test_the_study_kind_example_trains_selects_and_keeps_its_checkpoint(plugins, tmp_path):
    listed = run(plugins, tmp_path, "list", "study-kinds")
    assert re.search(r"^toy-squares +Generated squares on noise, bright or dark", listed.stdout, re.M), listed.stderr
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "toy.json").write_text('{"per_class": 6}')
    argv = ["train", "toy", "--model", "test_resnet", "--epochs", "3", "--runs", "1", "--input-size", "16",
            "--batch-size", "4", "--device", "cpu"]
    trained = run(plugins, tmp_path, *argv)
    assert trained.returncode == 0, trained.stderr
    assert trained.stdout.rstrip().endswith("toy/toy_training.csv")
    import pandas as pd

    table = pd.read_csv(tmp_path / "toy" / "toy_training.csv")
    assert len(table) == 3 * 2 and set(table["split"]) == {"val", "test"} and table["n_images"].eq(12).all()
    val = table[table["split"] == "val"].set_index("epoch")["accuracy"]
    best = int(val.idxmax())  # BiasBed's best validation, the earliest of equal ones
    assert table.loc[table["selected"], "epoch"].unique().tolist() == [best]
    # the checkpoint is the selected epoch's: its test accuracy, computed here from the saved weights, is the row's
    check = f"""
import torch
from model_eval.torch_compat import import_timm
from model_eval.training.jobs import StudyConfig
from toy_squares import ToySquares
saved = torch.load("toy/{table['checkpoint'].iloc[0]}", weights_only=True)
timm = import_timm()
model = timm.create_model("test_resnet", num_classes=2)
model.load_state_dict(saved["state_dict"])
model.eval()
config = timm.data.resolve_data_config(model=model)
data = ToySquares(study_dir="toy", config=StudyConfig(input_size=16)).load_data()
x, y = data.evaluated["test"]
mean, std = (torch.tensor(config[k]).view(1, 3, 1, 1) for k in ("mean", "std"))
with torch.no_grad():
    right = (model((x.float() / 255 - mean) / std).argmax(1) == y).sum()
print(saved["epoch"], saved["class_names"], int(right))
"""
    checked = run(plugins, tmp_path, code=check)
    assert checked.returncode == 0, checked.stderr
    epoch, rest = checked.stdout.strip().split(" ", 1)
    names, right = rest.rsplit(" ", 1)
    assert int(epoch) == best and names == "['dark', 'bright']"
    test_row = table[(table["split"] == "test") & (table["epoch"] == best)].iloc[0]
    assert test_row["accuracy"] == pytest.approx(int(right) / 12)

