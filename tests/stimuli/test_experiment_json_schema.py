"""Every design's experiment.json against the published JSON Schema (``cuebench schema experiment``), checked by
the ``jsonschema`` package: each design built small from the default photos, the web sample, the importers on a few
published files, and a malformed file refused on the command line naming file and field. The schemas themselves
are checked in ``tests/core/test_json_schema.py``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from cuebench.contract_cli import json_schema
from cuebench_app.cli import main
from stimuli.web_sample import build_sample_experiment
from support import dist_subset

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
    pytest.param("dist", ["--synthesis-steps", "2", "--synthesis-device", "cpu"], id="dist",
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


@pytest.mark.parametrize("design, options", DESIGN_BUILDS)
def test_every_design_writes_a_valid_experiment_json(tmp_path, design, options):
    assert_valid_experiment(build(tmp_path, design, "--images", "default", *options))


def test_web_sample_experiment_json_is_valid(tmp_path):
    build_sample_experiment(tmp_path / "web-sample")
    assert_valid_experiment(tmp_path / "web-sample")


@pytest.mark.shared
def test_imported_experiments_are_valid(shared, tmp_path):
    cue_conflict = tmp_path / "cue-conflict" / "airplane"
    cue_conflict.mkdir(parents=True)
    for f in sorted((shared / "data/geirhos2019/stimuli/cue-conflict/airplane").glob("*.png"))[:3]:
        shutil.copy(f, cue_conflict / f.name)
    dist = dist_subset(shared / "data/dist", tmp_path / "dist", 2)
    assert_valid_experiment(build(tmp_path / "out", "cue-conflict-import", "--images", str(cue_conflict.parent)))
    assert_valid_experiment(build(tmp_path / "out", "dist-import", "--images", str(dist)))


def test_malformed_experiment_json_names_file_and_field_on_the_command_line(tmp_path, capsys):
    out = build(tmp_path, "suppression", "--images", "default", "--conditions", "grayscale")
    data = json.loads((out / "experiment.json").read_text(encoding="utf-8"))
    data["trials"][3]["correct"] = "unicorn"
    (out / "experiment.json").write_text(json.dumps(data), encoding="utf-8")
    assert main(["stimuli", "build", "--design", "suppression", "--images", "default", "--out", str(out),
                 "--conditions", "grayscale"]) == 2
    message = capsys.readouterr().err
    assert f"{out / 'experiment.json'}: field 'trials[3].correct': 'unicorn' is not one of the choices" in message
