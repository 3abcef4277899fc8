"""The response table as BIDS behavioural data (``cuebench export --format bids-beh``).

A lab that records imaging or physiology beside the task keeps its data in BIDS; behaviour recorded
without an imaging run goes in ``beh/`` (BIDS specification, "Behavioral experiments (with no neural
recordings)"). Here each observer and session is ``sub-<label>/ses-<session>/beh/sub-<label>_ses-<session>_task-
<task>_beh.tsv`` (one row per trial, ``n/a`` where a value is missing), one top-level ``task-<task>_beh.json``
describes every column for all of them (the inheritance principle), from the response schema itself
(:func:`cuebench.responses.column_dictionary`), and ``participants.tsv`` lists every observer with its kind and
the exclusion in force, as the CSV export marks them; withdrawn people are not in the table, so not here.
Labels are letters and digits only; the observer's own id stays in ``participants.tsv`` and in each row.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

from .csvsafe import csv_text
from .expdir import ExperimentDir, atomic_write
from .psychds import dataset_inputs, json_cell, keyword_value
from .responses import COLUMNS, column_dictionary

BIDS_VERSION = "1.11.0"
MISSING = "n/a"
PARTICIPANT_COLUMNS = ("participant_id", "observer", "observer_kind", "excluded", "exclusion_reason", "group")
PARTICIPANT_SIDECAR = {
    "observer": {"Description": "the observer's id in cuebench: participant code or model id"},
    "observer_kind": {"Description": "who answered", "Levels": {
        "human": "a person", "model": "a model (cuebench eval)", "pilot": "a pilot or simulated session, never "
                                                                        "counted as a person"}},
    "excluded": {"Description": "1 if the exclusion in force leaves this observer out of every statistic",
                 "Levels": {"0": "counted", "1": "excluded"}},
    "exclusion_reason": {"Description": "why (the exclusion log's reason)"},
    "group": {"Description": "the Latin-square group of the observer's first session"},
}


def _labels(observers: list[str]) -> dict[str, str]:
    """A unique BIDS label per observer: its letters and digits, numbered where two ids would collide
    (``resnet50.a1`` and ``resnet50_a1``)."""
    labels, taken = {}, set()
    for observer in observers:
        base = keyword_value(observer)
        label, n = base, 1
        while label in taken:
            n += 1
            label = f"{base}x{n}"
        labels[observer] = label
        taken.add(label)
    return labels


def column_sidecar(task: str) -> dict:
    """``task-<task>_beh.json``: TaskName and each column's Description, Units and Levels."""
    sidecar: dict = {"TaskName": task}
    for column in column_dictionary():
        entry = {"Description": column["description"] + (" (JSON text)" if column["type"] == "JSON text" else "")}
        if column["unit"]:
            entry["Units"] = column["unit"]
        if column["levels"]:
            entry["Levels"] = {str(level): str(level) for level in column["levels"]}
        sidecar[column["name"]] = entry
    return sidecar


def export_bids_beh(expdir: ExperimentDir, out: str | Path, database: str | None = None, *,
                    authors: tuple[str, ...] = (), license: str | None = None) -> list[Path]:
    """A BIDS dataset of the behavioural data in the new folder ``out`` (module docstring); returns the files."""
    out, experiment, rows = dataset_inputs(expdir, out, database, authors, license)
    task = keyword_value(experiment.name)
    observers = list(dict.fromkeys(r["observer"] for r in rows))
    labels = _labels(observers)
    written = []

    def write(path: Path, text: str) -> None:
        atomic_write(path, text.encode("utf-8"))
        written.append(path)

    sessions: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        sessions.setdefault((row["observer"], row["session"]), []).append(row)
    for (observer, session), items in sessions.items():
        sub, ses = labels[observer], keyword_value(session)
        path = out / f"sub-{sub}" / f"ses-{ses}" / "beh" / f"sub-{sub}_ses-{ses}_task-{task}_beh.tsv"
        items = sorted(items, key=lambda r: r["trial_index"])
        write(path, csv_text(COLUMNS, ({k: json_cell(v) for k, v in r.items()} for r in items), delimiter="\t",
                             missing=MISSING))
    first = {observer: next(r for r in rows if r["observer"] == observer) for observer in observers}
    write(out / "participants.tsv", csv_text(PARTICIPANT_COLUMNS, (
        {"participant_id": f"sub-{labels[o]}", "observer": o, "observer_kind": first[o]["observer_kind"],
         "excluded": int(bool(first[o].get("excluded"))), "exclusion_reason": first[o].get("exclusion_reason"),
         "group": first[o].get("group")} for o in observers), delimiter="\t", missing=MISSING))
    write(out / "participants.json", json.dumps(PARTICIPANT_SIDECAR, indent=2) + "\n")
    write(out / f"task-{task}_beh.json", json.dumps(column_sidecar(task), indent=2, ensure_ascii=False) + "\n")
    write(out / "dataset_description.json", json.dumps({
        "Name": experiment.name, "BIDSVersion": BIDS_VERSION, "DatasetType": "raw", "Authors": list(authors),
        "License": license, "GeneratedBy": [{"Name": "cuebench", "Description": "cuebench export --format bids-beh"}],
        "HowToAcknowledge": "cite the dataset's authors",
    }, indent=2, ensure_ascii=False) + "\n")
    write(out / "README.md", f"# {experiment.name}\n\nBehavioural data of people and models answering the same "
                             f"trials (cuebench experiment '{experiment.name}', design {experiment.design}), exported "
                             f"{dt.datetime.now(dt.timezone.utc).date().isoformat()}. One row per trial; the columns "
                             f"are described in task-{task}_beh.json; participants.tsv marks excluded observers "
                             "and pilots. The stimuli are in stimuli/, experiment.json in code/.\n")
    atomic_write(out / "code" / "experiment.json", expdir.experiment_file.read_bytes())
    written.append(out / "code" / "experiment.json")
    if expdir.stimuli_dir.is_dir():
        shutil.copytree(expdir.stimuli_dir, out / "stimuli")
        written += sorted((out / "stimuli").iterdir())
    return written
