"""The published JSON Schemas: ``cuebench schema experiment|response`` against real experiment.json
files of every design and real response rows, checked by the ``jsonschema`` package."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from cuebench_app.cli import main
from cuebench.contract_cli import SCHEMAS, json_schema, schema_text
from cuebench.responses import ResponseStore, trial_row
from cuebench.trials import Experiment
from stimuli.web_sample import build_sample_experiment
from support import dist_subset

DOCS_SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
DESIGN_BUILDS = [
    pytest.param("suppression", ["--conditions", "grayscale"], id="suppression"),
    pytest.param("corruptions", ["--corruptions", "contrast"], id="corruptions"),
    pytest.param("labelled-set", [], id="labelled-set"),
    pytest.param("diagvib", ["--diagvib-digits", "sklearn-digits", "--sizes", "90,18,60", "--diagvib-human-trials",
                             "4", "--study", "ZGO", "--target", "shape", "--correlated", "hue", "--dataset-sample", "0"],
                 id="diagvib"),
    pytest.param("cue-decomposition", ["--eed-steps", "3"], id="cue-decomposition", marks=pytest.mark.slow),
    pytest.param("cue-conflict-eed", ["--eed-steps", "3", "--conflict-textures", "1"], id="cue-conflict-eed",
                 marks=pytest.mark.slow),
    pytest.param("dist", ["--synthesis-steps", "2", "--synthesis-device", "cpu", "--catch-every", "3"], id="dist",
                 marks=pytest.mark.slow),
]
"""Each design built from the default photos (or generated digits), as small as its options allow;
the importers, which need the published data, are checked on a few of its files below."""


def validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = json_schema(kind)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def assert_valid_experiment(root: Path) -> None:
    data = json.loads((root / "experiment.json").read_text(encoding="utf-8"))
    errors = sorted(validator("experiment").iter_errors(data), key=lambda e: list(e.absolute_path))
    assert not errors, f"{root}: {errors[0].json_path}: {errors[0].message}"


def build(tmp_path: Path, design: str, *options: str) -> Path:
    out = tmp_path / design
    assert main(["stimuli", "build", "--design", design, "--out", str(out), "--workers", "1", *options]) == 0
    return out


def test_schema_command_prints_and_writes_the_schemas(capsys, tmp_path):
    for kind in SCHEMAS:
        assert main(["schema", kind]) == 0
        assert json.loads(capsys.readouterr().out) == json_schema(kind)
    out = tmp_path / "sub" / "response.schema.json"
    assert main(["schema", "response", "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == schema_text("response")
    assert json_schema("experiment")["properties"]["trials"]["items"] == {"$ref": "#/$defs/Trial"}


@pytest.mark.parametrize("kind", SCHEMAS)
def test_published_schema_files_are_current(kind):
    path = DOCS_SCHEMAS / f"{kind}.schema.json"
    assert path.read_text(encoding="utf-8") == schema_text(kind), \
        f"{path.name} is out of date: run `cuebench schema {kind} --out docs/schemas/{path.name}`"


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, Experiment]:
    """The web sample: every kind of trial (classify, oddity, practice, attention, catch) in one experiment."""
    root = tmp_path_factory.mktemp("web-sample")
    return root, build_sample_experiment(root)


@pytest.mark.parametrize("design, options", DESIGN_BUILDS)
def test_every_design_writes_a_valid_experiment_json(tmp_path, design, options):
    assert_valid_experiment(build(tmp_path, design, "--images", "default", *options))


def test_web_sample_experiment_json_is_valid(sample):
    assert_valid_experiment(sample[0])


@pytest.mark.shared
def test_imported_experiments_are_valid(shared, tmp_path):
    cue_conflict = tmp_path / "cue-conflict" / "airplane"
    cue_conflict.mkdir(parents=True)
    for f in sorted((shared / "data/geirhos2019/stimuli/cue-conflict/airplane").glob("*.png"))[:3]:
        shutil.copy(f, cue_conflict / f.name)
    dist = dist_subset(shared / "data/dist", tmp_path / "dist", 2)
    assert_valid_experiment(build(tmp_path / "out", "cue-conflict-import", "--images", str(cue_conflict.parent)))
    assert_valid_experiment(build(tmp_path / "out", "dist-import", "--images", str(dist)))


def test_the_schema_refuses_what_the_loader_refuses(sample):
    data = json.loads((sample[0] / "experiment.json").read_text(encoding="utf-8"))
    data["trials"][0]["role"] = "bonus"
    data["schedule"]["colour"] = "red"
    problems = {tuple(e.absolute_path) for e in validator("experiment").iter_errors(data)}
    assert ("trials", 0, "role") in problems and ("schedule",) in problems


def test_malformed_experiment_json_names_file_and_field_on_the_command_line(tmp_path, capsys):
    out = build(tmp_path, "suppression", "--images", "default", "--conditions", "grayscale")
    data = json.loads((out / "experiment.json").read_text(encoding="utf-8"))
    data["trials"][3]["correct"] = "unicorn"
    (out / "experiment.json").write_text(json.dumps(data), encoding="utf-8")
    assert main(["stimuli", "build", "--design", "suppression", "--images", "default", "--out", str(out),
                 "--conditions", "grayscale"]) == 2
    message = capsys.readouterr().err
    assert f"{out / 'experiment.json'}: field 'trials[3].correct': 'unicorn' is not one of the choices" in message


def test_response_rows_validate_as_stored_and_as_exported(sample, tmp_path):
    root, experiment = sample
    rows = [trial_row(experiment, trial, observer="p1", observer_kind="human", session=1, trial_index=i,
                      response=trial.choices[0], rt_ms=400.0 + i, timing_measured={"stimulus": 201.3},
                      device={"browser": "chromium"}, group=0)
            for i, trial in enumerate(experiment.trials)]
    rows.append(trial_row(experiment, experiment.trials[0], observer="m", observer_kind="model", session="1",
                          trial_index=0, response=None, decision_rule="16class-mean", model_outputs={"cat": 0.7}))
    with ResponseStore(root / "responses.sqlite") as store:
        store.write_many(rows)
        stored = store.rows()
    assert main(["export", str(root), "--format", "parquet", "--out", str(tmp_path / "r.parquet")]) == 0
    import pandas as pd

    exported = json.loads(pd.read_parquet(tmp_path / "r.parquet").to_json(orient="records"))
    check = validator("response")
    for row in stored + exported:
        check.validate(row)
    assert len(exported) == len(stored) == len(experiment.trials) + 1
    with pytest.raises(jsonschema.ValidationError, match="'robot' is not one of"):
        check.validate({**stored[0], "observer_kind": "robot"})


def test_an_experiment_json_of_schema_version_1_loads_and_writes_back_unchanged():
    """``data/experiment_v1.json`` is the web sample as written before the models were pydantic models."""
    path = Path(__file__).resolve().parents[1] / "data" / "experiment_v1.json"
    experiment = Experiment.load(path)
    assert experiment.schema_version == 1 and experiment.to_json() == path.read_text(encoding="utf-8")
