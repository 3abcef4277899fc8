"""Open-science outputs as a researcher makes them: a Psych-DS dataset checked against the specification, BIDS
behavioural files checked with bidsschematools, ``cuebench archive`` against a stand-in of OSF's storage API, and a
preregistration whose every number is the study's, the plan's and the report's.

One study serves every test: the sample web experiment answered by four people (one excluded by the admin, one who
later withdraws, one pilot) and a model; every command runs as a subprocess from the work folder with relative
paths, as the docs show it."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuebench.responses import ResponseStore, trial_row
from experiment_server.db import ServerDB
from experiment_server.server_secrets import ServerSecrets, default_secrets_path
from stimuli.web_sample import build_sample_experiment

sys.path.insert(0, str(Path(__file__).resolve().parent))
from osf_standin import OSFStandIn  # noqa: E402
from psychds_spec import validate  # noqa: E402

CUEBENCH = str(Path(sys.executable).with_name("cuebench"))
AUTHORS = ("--author", "Ada Researcher", "--author", "Ben Second", "--license", "CC-BY-4.0")
SECRET = "f" * 64


def cuebench(work: Path, *args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([CUEBENCH, *args], cwd=work, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if check:
        assert done.returncode == 0, done.stderr
    return done


def read_csv(path: Path, delimiter: str = ",") -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8")), delimiter=delimiter))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """``work/exp``: people ``in``, ``out`` (excluded by the admin), ``gone`` (withdrew) and ``pilot``, and the
    model ``resnet``; the folder's secrets file beside it holds :data:`SECRET`."""
    work = tmp_path_factory.mktemp("open-science")
    root = work / "exp"
    experiment = build_sample_experiment(root)
    ServerSecrets(default_secrets_path(root)).set("signing_key", SECRET)
    db = ServerDB(root / "responses.sqlite", experiment.name)
    codes = {}
    for who, pilot in (("out", False), ("in", False), ("gone", False), ("pilot", True)):
        participant, _ = db.start(experiment.name, 2, entry_code=who, pilot=pilot)
        codes[who] = participant.code
    with ResponseStore(root / "responses.sqlite") as store:
        for who, code in codes.items():
            store.write_many([trial_row(experiment, t, observer=code, observer_kind="pilot" if who == "pilot" else
                                        "human", session="1", trial_index=i, response=t.choices[i % 2],
                                        rt_ms=400.0 + i, group=0) for i, t in enumerate(experiment.trials)])
        store.write_many([trial_row(experiment, t, observer="resnet", observer_kind="model", session="1",
                                    trial_index=i, response=t.choices[0]) for i, t in enumerate(experiment.trials)])
    db.set_excluded(codes["out"], True, "typed the same key throughout", "admin")
    db.close()
    cuebench(work, "withdraw", "exp", codes["gone"], "--yes")
    return work, codes, experiment


@pytest.fixture(scope="module")
def dataset(study):
    work, codes, experiment = study
    cuebench(work, "export", "exp", "--format", "psych-ds", "--out", "ds", *AUTHORS)
    return work / "ds"


def test_the_psych_ds_dataset_meets_the_specification_with_the_schema_as_its_dictionary(study, dataset):
    work, codes, experiment = study
    errors, warnings = validate(dataset)
    assert errors == []
    assert {w.code for w in warnings} <= {"MISSING_CHANGES_DOC", "MISSING_ANALYSIS_DIRECTORY", "MISSING_RESULTS_DIRECTORY",
                                          "MISSING_DOCUMENTATION_DIRECTORY", "FILENAME_UNOFFICIAL_KEYWORD_WARNING",
                                          "JSON_KEY_RECOMMENDED"}  # recommended, not required
    description = json.loads((dataset / "dataset_description.json").read_text(encoding="utf-8"))
    assert description["@type"] == "Dataset" and description["author"] == ["Ada Researcher", "Ben Second"]
    assert description["license"] == "CC-BY-4.0" and re.fullmatch(r"\d{4}-\d\d-\d\d", description["datePublished"])
    schema = json.loads(cuebench(work, "schema", "response").stdout)["properties"]
    measured = {v["name"]: v for v in description["variableMeasured"]}
    assert list(measured) == list(schema)  # every column, in the schema's order, from the schema
    assert all(measured[n]["description"] == schema[n]["description"] for n in schema)
    assert measured["rt_ms"]["unitText"] == "ms" and measured["refresh_hz"]["unitText"] == "Hz"
    assert measured["role"]["levels"] == ["test", "practice", "catch", "attention"]
    assert measured["observer_kind"]["levels"] == ["human", "model", "pilot"]
    assert measured["excluded"]["levels"] == [0, 1] and measured["trial_index"]["dataType"] == "integer"

    data = {p.name: read_csv(p) for p in (dataset / "data").iterdir()}
    assert set(data) == {"study-websample_observer-human_data.csv", "study-websample_observer-model_data.csv",
                         "study-websample_observer-pilot_data.csv"}
    people = {r["observer"]: r["excluded"] for r in data["study-websample_observer-human_data.csv"]}
    assert people == {codes["in"]: "0", codes["out"]: "1"}  # the excluded person marked, the withdrawn one gone
    assert {r["observer"] for r in data["study-websample_observer-pilot_data.csv"]} == {codes["pilot"]}
    assert len(data["study-websample_observer-model_data.csv"]) == len(experiment.trials)  # one row per trial
    assert (dataset / "materials" / "experiment.json").read_bytes() == (work / "exp" / "experiment.json").read_bytes()
    assert {p.name for p in (dataset / "materials" / "stimuli").iterdir()} == \
        {p.name for p in (work / "exp" / "stimuli").iterdir()}
    everything = b"".join(p.read_bytes() for p in dataset.rglob("*") if p.is_file())
    assert codes["gone"].encode() not in everything and SECRET.encode() not in everything


@pytest.mark.parametrize("edit, code", [
    (lambda d: _json_edit(d, lambda m: m.pop("@type")), "MISSING_DATASET_TYPE"),
    (lambda d: _json_edit(d, lambda m: m.pop("name")), "JSON_KEY_REQUIRED"),
    (lambda d: _json_edit(d, lambda m: m.update(variableMeasured=m["variableMeasured"][1:])),
     "CSV_COLUMN_MISSING_FROM_METADATA"),
    (lambda d: _json_edit(d, lambda m: m.update({"@context": "https://example.org/"})), "INVALID_JSONLD_FORMATTING"),
    (lambda d: _first_data(d).rename(_first_data(d).with_name("study-web_sample_data.csv")),
     "FILENAME_KEYWORD_FORMATTING_ERROR"),
    (lambda d: _first_data(d).write_text(_first_data(d).read_text().rstrip("\n") + ",extra\n"),
     "CSV_HEADER_LENGTH_MISMATCH"),
    (lambda d: (d / "dataset_description.json").unlink(), "MISSING_DATASET_DESCRIPTION"),
])
def test_an_edited_dataset_fails_with_the_rule_it_breaks(dataset, tmp_path, edit, code):
    broken = tmp_path / "ds"
    shutil.copytree(dataset, broken)
    edit(broken)
    assert code in {e.code for e in validate(broken)[0]}


def _json_edit(root: Path, change) -> None:
    path = root / "dataset_description.json"
    meta = json.loads(path.read_text(encoding="utf-8"))
    change(meta)
    path.write_text(json.dumps(meta), encoding="utf-8")


def _first_data(root: Path) -> Path:
    return sorted((root / "data").glob("*_data.csv"))[0]


def test_bids_behavioural_files_match_the_bids_schema(study, tmp_path):
    from bidsschematools.validator import validate_bids

    work, codes, experiment = study
    cuebench(work, "export", "exp", "--format", "bids-beh", "--out", "bids", *AUTHORS)
    bids = work / "bids"
    result = validate_bids(str(bids))
    assert result["path_tracking"] == []  # every file matches a rule of the BIDS schema
    assert not [r for r in result["schema_tracking"] if r["mandatory"]]  # nothing required is missing
    participants = {r["observer"]: r for r in read_csv(bids / "participants.tsv", "\t")}
    assert {o: (r["observer_kind"], r["excluded"]) for o, r in participants.items()} == {
        codes["in"]: ("human", "0"), codes["out"]: ("human", "1"), codes["pilot"]: ("pilot", "0"),
        "resnet": ("model", "0")}
    beh = read_csv(bids / f"sub-resnet/ses-1/beh/sub-resnet_ses-1_task-websample_beh.tsv", "\t")
    assert len(beh) == len(experiment.trials) and beh[0]["rt_ms"] == "n/a"  # BIDS' missing value
    sidecar = json.loads((bids / "task-websample_beh.json").read_text(encoding="utf-8"))
    assert sidecar["rt_ms"]["Units"] == "ms" and set(sidecar) - {"TaskName"} == set(beh[0])
    stray = bids / "sub-resnet" / "ses-1" / "beh" / "resnet_answers.tsv"
    stray.write_text("x\n")
    assert [Path(p).name for p in validate_bids(str(bids))["path_tracking"]] == ["resnet_answers.tsv"]


def test_archive_sends_each_file_once_and_never_the_secrets_or_a_withdrawn_person(study):
    """Two runs: the first sends the dataset and the preregistration (a report older than the withdrawal is not
    sent), the second only the preregistration that changed in between."""
    work, codes, experiment = study
    (work / "prereg.md").write_text("# Preregistration\n", encoding="utf-8")
    with OSFStandIn() as osf:
        env = {"OSF_TOKEN": osf.token, "CUEBENCH_OSF_API": osf.api}
        first = cuebench(work, "archive", "exp", "--osf", osf.project, "--prereg", "prereg.md", *AUTHORS, env=env)
        arrived = {path for kind, path in osf.writes if kind == "file"}
        assert arrived == {f"/web-sample/dataset/{name}" for name in (
            "README.md", "dataset_description.json", "materials/experiment.json",
            "data/study-websample_observer-human_data.csv", "data/study-websample_observer-model_data.csv",
            "data/study-websample_observer-pilot_data.csv")} | {"/web-sample/preregistration/prereg.md"}
        assert "not sent: report (none yet" in first.stdout
        for content in osf.files.values():
            assert SECRET.encode() not in content and codes["gone"].encode() not in content
        (work / "prereg.md").write_text("# Preregistration, amended\n", encoding="utf-8")
        before = len(osf.writes)
        second = cuebench(work, "archive", "exp", "--osf", osf.project, "--prereg", "prereg.md", *AUTHORS, env=env)
        assert osf.writes[before:] == [("version", "/web-sample/preregistration/prereg.md")]
        assert "0 sent, 1 updated, 6 unchanged" in second.stdout
        refused = cuebench(work, "archive", "exp", "--osf", "nope9", *AUTHORS, env=env, check=False)
        assert refused.returncode == 2 and "OSF project 'nope9' cannot be opened" in refused.stderr
    no_token = cuebench(work, "archive", "exp", "--osf", "abc12", *AUTHORS, env={"OSF_TOKEN": ""}, check=False)
    assert no_token.returncode == 2 and "set OSF_TOKEN" in no_token.stderr


def pilot_answers(people: int = 5, images: int = 60, seed: int = 1) -> list[dict]:
    """A pilot: people of different skill and one model answer the same 60 images, right at random."""
    rng = np.random.default_rng(seed)
    observers = [(f"p{i}", "human", 0.6 + 0.06 * i) for i in range(people)] + [("model-a", "model", 0.55)]
    return [{"experiment": "pilot", "observer": o, "observer_kind": kind, "session": "1", "trial_index": t,
             "trial_id": f"img{t}", "role": "test", "trial_type": "classify", "condition": "original", "level": None,
             "params": {}, "category": "cat", "response": "cat" if rng.random() < p else "dog",
             "correct_answer": "cat", "rt_ms": 500.0 if kind == "human" else None}
            for o, kind, p in observers for t in range(images)]


def test_the_preregistration_names_the_studys_design_the_plans_n_and_the_reports_tests(study):
    work, codes, experiment = study
    rows = pilot_answers()
    for row in rows:
        row["correct"] = int(row["response"] == "cat")
    with ResponseStore(work / "pilot.sqlite") as store:
        store.write_many(rows)
    rules = ("--max-attention-failures", "1", "--max-catch-errors", "2", "--timeouts", "error")
    plan = cuebench(work, "plan", "pilot.sqlite", "--effect", "0.2", "--simulations", "100", "--max-n", "40",
                    *rules).stdout
    n = int(re.match(r"(\d+) people give expected power", plan).group(1))
    methods = cuebench(work, "analyze", "pilot.sqlite", "--metric", "methods", *rules).stdout
    cuebench(work, "prereg", "exp", "--pilot", "pilot.sqlite", "--effect", "0.2", "--simulations", "100",
             "--max-n", "40", "--out", "prereg.md", *rules)
    text = (work / "prereg.md").read_text(encoding="utf-8")
    assert f"Sample size: {n} people." in text and plan.splitlines()[0] in text
    assert f"Recruitment stops when {n} people" in text
    models = re.search(r"Statistical models: .*?pilot's\): (.*)", text).group(1)
    assert models and " ".join(models.split()) in " ".join(methods.split())  # the report's own test sentences
    roles = {r: sum(t.role == r for t in experiment.trials) for r in ("test", "practice", "catch", "attention")}
    assert not experiment.adaptive  # so every test trial is a fixed-level one
    assert (f"Besides its {roles['test']} fixed-level test trials the experiment held {roles['practice']} practice, "
            f"{roles['catch']} catch, {roles['attention']} attention trial(s)") in text
    photos = len({t.source_image for t in experiment.trials if t.role == "test"})
    assert f"showed {photos} photo(s)" in text and f"the {len(experiment.label_set.labels)} class labels" in text
    classify = [t.timing for t in experiment.trials if t.role == "test" and t.trial_type == "classify"]
    assert (f"{len(classify)} classify test trial(s): fixation {classify[0].fixation} ms, stimulus "
            f"{classify[0].stimulus} ms") in text
    assert "fails more than 1 attention check(s)" in text and "more than 2 catch trial(s) wrong" in text
    assert "trials without an answer (timeouts) are scored wrong" in text
    assert "Models compared: model-a, resnet" in text and text.count("**TO WRITE:**") == 4
    cuebench(work, "serve", "rules", "exp", "--target-n", "12")  # without a pilot, N is the stored target
    cuebench(work, "prereg", "exp", "--format", "aspredicted", "--out", "short.md")
    short = (work / "short.md").read_text(encoding="utf-8")
    assert [int(q) for q in re.findall(r"^## (\d)\)", short, re.MULTILINE)] == list(range(1, 10))
    assert "Sample size: 12 people." in short and "the server closes the study once 12 sessions count" in short
