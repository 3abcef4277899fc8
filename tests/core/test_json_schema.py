"""The published JSON Schemas: ``cuebench schema experiment|response`` (the core's own command) against a real
experiment.json and real response rows, checked by the ``jsonschema`` package. Every design's experiment.json is
checked against them in ``tests/stimuli/test_experiment_json_schema.py``."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from cuebench.contract_cli import SCHEMAS, json_schema, schema_text
from cuebench.responses import ResponseStore, trial_row
from cuebench.trials import Experiment

DOCS_SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
WEB_SAMPLE_V1 = Path(__file__).resolve().parents[1] / "data" / "experiment_v1.json"


def validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = json_schema(kind)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_schema_command_prints_and_writes_the_schemas(core_command, capsys, tmp_path):
    for kind in SCHEMAS:
        assert core_command("schema", kind) == 0
        assert json.loads(capsys.readouterr().out) == json_schema(kind)
    out = tmp_path / "sub" / "response.schema.json"
    assert core_command("schema", "response", "--out", str(out)) == 0
    assert out.read_text(encoding="utf-8") == schema_text("response")
    assert json_schema("experiment")["properties"]["trials"]["items"] == {"$ref": "#/$defs/Trial"}


@pytest.mark.parametrize("kind", SCHEMAS)
def test_published_schema_files_are_current(kind):
    path = DOCS_SCHEMAS / f"{kind}.schema.json"
    assert path.read_text(encoding="utf-8") == schema_text(kind), \
        f"{path.name} is out of date: run `cuebench schema {kind} --out docs/schemas/{path.name}`"


def test_the_schema_takes_the_written_experiment_and_refuses_what_the_loader_refuses(web_sample):
    data = json.loads((web_sample[0] / "experiment.json").read_text(encoding="utf-8"))
    assert not list(validator("experiment").iter_errors(data))
    data["trials"][0]["role"] = "bonus"
    data["schedule"]["colour"] = "red"
    problems = {tuple(e.absolute_path) for e in validator("experiment").iter_errors(data)}
    assert ("trials", 0, "role") in problems and ("schedule",) in problems


def test_response_rows_validate_as_stored_and_as_exported(web_sample, tmp_path, core_command):
    root, experiment = web_sample
    rows = [trial_row(experiment, trial, observer="p1", observer_kind="human", session=1, trial_index=i,
                      response=trial.choices[0], rt_ms=400.0 + i, timing_measured={"stimulus": 201.3},
                      device={"browser": "chromium"}, group=0)
            for i, trial in enumerate(experiment.trials)]
    rows.append(trial_row(experiment, experiment.trials[0], observer="m", observer_kind="model", session="1",
                          trial_index=0, response=None, decision_rule="16class-mean", model_outputs={"cat": 0.7}))
    with ResponseStore(root / "responses.sqlite") as store:
        store.write_many(rows)
        stored = store.rows()
    assert core_command("export", str(root), "--format", "parquet", "--out", str(tmp_path / "r.parquet")) == 0
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

    experiment = Experiment.load(WEB_SAMPLE_V1)
    assert experiment.schema_version == 1 and experiment.to_json() == WEB_SAMPLE_V1.read_text(encoding="utf-8")
