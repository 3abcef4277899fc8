"""Lite0 answers every trial of (subsets of) the published cue-conflict and DiST sets; mvh export reads them."""

from __future__ import annotations

import csv
import shutil

import pytest

from cuebench_app.cli import main
from cuebench.expdir import ExperimentDir
from cuebench.labels import IMAGENET16
from cuebench.responses import ResponseStore
from support import dist_subset

pytestmark = [pytest.mark.slow, pytest.mark.shared]

CUE_CONFLICT_CLASSES = ("cat", "elephant", "knife")
PER_CLASS = 4
DIST_TRIPLETS = 6


def answered(expdir: ExperimentDir) -> list[dict]:
    with ResponseStore(expdir.responses_file) as store:
        return store.rows()


def test_cue_conflict_subset_every_trial_answered_and_exported(shared, tmp_path):
    source = shared / "data/geirhos2019/stimuli/cue-conflict"
    subset = tmp_path / "cue-conflict"
    for cls in CUE_CONFLICT_CLASSES:
        (subset / cls).mkdir(parents=True)
        for f in sorted((source / cls).glob("*.png"))[:PER_CLASS]:
            shutil.copy(f, subset / cls / f.name)
    out = tmp_path / "cc"
    assert main(["stimuli", "build", "--design", "cue-conflict-import", "--images", str(subset),
                 "--out", str(out), "--workers", "1"]) == 0
    assert main(["eval", "--model", "tf_efficientnet_lite0", "--experiment", str(out), "--workers", "1",
                 "--quiet"]) == 0
    expdir = ExperimentDir(out)
    rows = answered(expdir)
    assert len(rows) == len(expdir.load().trials) == len(CUE_CONFLICT_CLASSES) * PER_CLASS
    assert {r["decision_rule"] for r in rows} == {"16class-mean"}
    assert all(r["response"] in IMAGENET16 and len(r["model_outputs"]) == 16 for r in rows)
    assert main(["export", str(out), "--format", "mvh", "--out", str(tmp_path / "mvh")]) == 0
    (written,) = (tmp_path / "mvh").glob("*.csv")
    with written.open(newline="") as fh:
        exported = list(csv.DictReader(fh))
    assert sorted(r["object_response"] for r in exported) == sorted(r["response"] for r in rows)


def test_dist_subset_every_triplet_answered_by_oddity(shared, tmp_path):
    subset = dist_subset(shared / "data/dist", tmp_path / "dist", DIST_TRIPLETS)
    out = tmp_path / "dist-exp"
    assert main(["stimuli", "build", "--design", "dist-import", "--images", str(subset), "--out", str(out),
                 "--workers", "1"]) == 0
    assert main(["eval", "--model", "tf_efficientnet_lite0", "--experiment", str(out), "--workers", "1",
                 "--quiet"]) == 0
    rows = answered(ExperimentDir(out))
    assert len(rows) == DIST_TRIPLETS
    assert {r["decision_rule"] for r in rows} == {"oddity"}
    assert all(r["response"] in ("1", "2", "3") and set(r["model_outputs"]) == {"1", "2", "3"} for r in rows)
    assert all(r["correct"] == int(r["response"] == r["correct_answer"]) for r in rows)
