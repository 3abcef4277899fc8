"""Every export format marks who is excluded and tells pilots apart: one person excluded, one
counting, one pilot and one model answer the sample experiment, and each format is read back."""

from __future__ import annotations

import csv
import io

import pytest

from cuebench import exclusions
from cuebench.export import EXPORT_FORMATS, export
from cuebench.questionnaire import store_answers
from cuebench.responses import ResponseStore, trial_row
from experiment_server.db import ServerDB
from stimuli.web_sample import build_sample_experiment

REASON = "typed the same key throughout"


def read(path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


@pytest.fixture()
def answered(tmp_path):
    """``exp`` with a web participant excluded by the admin (``OUT``), one counting (``IN``), a pilot
    (``PILOT``) and a model; all three people answered the questionnaire."""
    root = tmp_path / "exp"
    experiment = build_sample_experiment(root)
    db = ServerDB(root / "responses.sqlite", experiment.name)
    codes = {}
    for who, pilot in (("out", False), ("in", False), ("pilot", True)):
        participant, _ = db.start(experiment.name, 2, entry_code=who, pilot=pilot)
        codes[who] = participant.code
    with ResponseStore(root / "responses.sqlite") as store:
        for who, code in codes.items():
            kind = "pilot" if who == "pilot" else "human"
            store.write_many([trial_row(experiment, t, observer=code, observer_kind=kind, session="1", trial_index=i,
                                        response=t.choices[0], rt_ms=500.0, group=0)
                              for i, t in enumerate(experiment.trials[:3])])
            store_answers(store.conn, experiment.name, code, {"comments": f"from {who}"}, runner="web")
        store.write_many([trial_row(experiment, t, observer="resnet", observer_kind="model", session="1",
                                    trial_index=i, response=t.choices[0]) for i, t in enumerate(experiment.trials[:3])])
    db.set_excluded(codes["out"], True, REASON, "admin")
    db.close()
    return root, codes


def test_every_format_marks_the_exclusion_and_the_pilot(answered, tmp_path):
    root, codes = answered
    label = f"admin: {REASON}"
    out = tmp_path / "out"

    (path,) = export(root, "questionnaire", out / "questionnaire.csv")
    rows = {r["observer"]: r for r in read(path)}
    assert {c: (rows[c]["observer_kind"], rows[c]["excluded"], rows[c]["exclusion_reason"])
            for c in codes.values()} == {codes["out"]: ("human", "1", label), codes["in"]: ("human", "0", ""),
                                         codes["pilot"]: ("pilot", "0", "")}
    assert rows[codes["in"]]["q_comments"] == "from in"

    (path,) = export(root, "psychopy", out / "psychopy.csv")
    rows = read(path)
    by_person = {(r["participant"], r["observer_kind"], r["excluded"], r["exclusion_reason"]) for r in rows}
    assert by_person == {(codes["out"], "human", "1", label), (codes["in"], "human", "0", ""),
                         (codes["pilot"], "pilot", "0", "")}  # the pilot is marked, not dropped; no model

    (path,) = export(root, "csv", out / "responses.csv")
    marked = {(r["observer"], r["observer_kind"], r["excluded"], r["exclusion_reason"]) for r in read(path)}
    assert (codes["out"], "human", "1", label) in marked and ("resnet", "model", "0", "") in marked

    (path,) = export(root, "participants", out / "participants.csv")
    people = {r["code"]: r for r in read(path)}
    assert (people[codes["out"]]["excluded"], people[codes["out"]]["excluded_by"]) == ("1", "admin")
    assert people[codes["pilot"]]["observer_kind"] == "pilot"

    written = export(root, "mvh", out / "mvh")
    folders = {p.relative_to(out / "mvh").parts[0] if len(p.relative_to(out / "mvh").parts) > 1 else "" for p in written
               if codes["out"] in p.name or codes["pilot"] in p.name}
    assert folders == {"excluded", "pilot"}
    assert set(EXPORT_FORMATS.names()) >= {"csv", "parquet", "mvh", "psychopy", "participants", "prolific",
                                           "questionnaire"}


def test_taking_the_exclusion_back_clears_the_mark_in_the_questionnaire_export(answered, tmp_path):
    root, codes = answered
    with ResponseStore(root / "responses.sqlite") as store:
        exclusions.record(store.conn, "web-sample", codes["out"], False, "wrong person", "admin")
    (path,) = export(root, "questionnaire", tmp_path / "questionnaire.csv")
    assert {r["observer"]: r["excluded"] for r in read(path)}[codes["out"]] == "0"
