"""The report and the training plan read a study directory through the core's schema (``cuebench.studies``): a
malformed study.json is one line naming file and field, a cue study's splits and input size are checked before
any job is planned. The schema itself is checked in ``tests/core/test_studies.py``, whose study files these are."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core.test_studies import CUE_STUDY, ENTRY, write_study
from cuebench.errors import SchemaError
from model_eval.training.cue_study import CueConfig, plan_cue_jobs
from model_eval.training.jobs import TrainingError


def test_the_report_and_the_training_plan_read_a_study_through_its_schema(tmp_path):
    write_study(tmp_path / "factor", {**ENTRY, "dataset_sample": -1})
    done = subprocess.run([sys.executable, "-m", "cuebench", "report", str(tmp_path / "factor")], capture_output=True,
                          text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "factor/study.json: field 'entries[0].dataset_sample': must be >= 0" in done.stderr
    cue = tmp_path / "cue"
    cue.mkdir()
    (cue / "cue_study.json").write_text(json.dumps({**CUE_STUDY, "splits": {"train": "a"}}))
    with pytest.raises(SchemaError, match=r"cue_study.json: field 'splits.train': expected a list"):
        plan_cue_jobs(cue, ["erm"], 1)
    (cue / "cue_study.json").write_text(json.dumps(CUE_STUDY))
    with pytest.raises(TrainingError, match="the study's images are 64 px, the training asks for --input-size 224"):
        plan_cue_jobs(cue, ["erm"], 1, CueConfig(input_size=224))
    assert len(plan_cue_jobs(cue, ["erm"], 2, CueConfig(input_size=64))) == 2
