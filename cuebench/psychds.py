"""The response table as a Psych-DS dataset (``cuebench export --format psych-ds``).

Journals and funders ask for data in a documented standard; Psych-DS (the format jsPsych and lab.js
export) is a folder with a schema.org ``dataset_description.json`` whose ``variableMeasured`` is the
data dictionary, and CSV data files under ``data/`` named by keyword-value pairs ending ``_data.csv``
(Psych-DS specification, "Datafile" and "CompiledMetadata" rules). Here:

- ``data/study-<name>_observer-<kind>_data.csv``: one row per observer per trial, people, models and
  pilots apart, every column of the response schema (JSON columns as JSON text), the exclusions in
  force marked exactly as the CSV export marks them (``excluded``, ``exclusion_reason``); withdrawn
  people are not in the table, so they are nowhere here either;
- ``variableMeasured``: one ``PropertyValue`` per column, made from the response schema itself
  (``cuebench schema response``: description, JSON type, ``unit`` and ``levels`` annotations), so
  the dictionary and the schema cannot disagree;
- ``materials/``: ``experiment.json`` and the stimuli as shown; ``README.md`` says what a row is.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from pathlib import Path

from .csvsafe import csv_text
from .expdir import ExperimentDir, atomic_write
from .export import ExportError, response_rows
from .responses import COLUMNS, column_dictionary
from .trials import Experiment

SCHEMA_VERSION = "Psych-DS 0.4.0"
"""The specification version written to ``schemaVersion`` (the one jsPsych's exporter writes)."""
CONTEXT = "https://schema.org/"
KEYWORD_VALUE = re.compile(r"[^A-Za-z0-9]")
"""Psych-DS keyword values are letters and digits only (the Datafile ``fileRegex``)."""
ROW_KEY = ("experiment", "observer", "session", "trial_index")


def keyword_value(text: str) -> str:
    """``text`` as a Psych-DS keyword value (or BIDS label): letters and digits, others dropped (``my-study_2`` ->
    ``mystudy2``); never empty."""
    value = KEYWORD_VALUE.sub("", text)
    if not value:
        raise ExportError(f"{text!r} has no letter or digit to name a data file by")
    return value


def data_dictionary() -> list[dict]:
    """``variableMeasured``: one schema.org ``PropertyValue`` per response column, in table order, from the
    response schema (:func:`cuebench.responses.column_dictionary`), with the ``levels`` and ``dataType`` keys
    jsPsych's and the Psych-DS R package's exporters use for allowed values and types."""
    dictionary = []
    for column in column_dictionary():
        entry = {"@type": "PropertyValue", "name": column["name"], "description": column["description"],
                 "dataType": column["type"]}
        if column["levels"]:
            entry["levels"] = list(column["levels"])
        if column["unit"]:
            entry["unitText"] = column["unit"]
        dictionary.append(entry)
    return dictionary


def dataset_inputs(expdir: ExperimentDir, out: str | Path, database: str | None, authors: tuple[str, ...],
                   license: str | None) -> tuple[Path, Experiment, list[dict]]:
    """What a published dataset is made of: the folder ``out`` (it names its authors and licence, and starts
    empty, so nothing of an earlier export lingers), the experiment and its response rows (there must be some)."""
    if not authors or not license:
        raise ExportError("a published dataset names its authors and licence: give --author (once per author) "
                          "and --license (e.g. CC-BY-4.0)")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} is not empty; give a new folder for the dataset")
    rows = response_rows(expdir, database)
    if not rows:
        raise ExportError(f"{expdir.root} has no responses to export")
    return out, expdir.load(), rows


def json_cell(value):
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def _description(experiment, rows: list[dict], files: dict[str, int]) -> str:
    """What the dataset holds, counted from what is written (never from defaults)."""
    people = {r["observer"] for r in rows if r["observer_kind"] == "human"}
    excluded = {r["observer"] for r in rows if r["observer_kind"] == "human" and r.get("excluded")}
    models = {r["observer"] for r in rows if r["observer_kind"] == "model"}
    pilots = {r["observer"] for r in rows if r["observer_kind"] == "pilot"}
    conditions = sorted({t.condition for t in experiment.trials if t.condition})
    return (f"cuebench experiment '{experiment.name}' (design {experiment.design}): {len(experiment.trials)} trials"
            + (f" in the conditions {', '.join(conditions)}" if conditions else "")
            + f", shown to people and models alike. {len(people)} people ({len(excluded)} of them excluded, marked "
              f"in the excluded and exclusion_reason columns), {len(pilots)} pilot sessions and {len(models)} models "
              f"answered; {sum(files.values())} rows in {len(files)} data files, one row per observer per trial, "
              f"keyed by {', '.join(ROW_KEY)}. People who withdrew are not in the data.")


def export_psych_ds(expdir: ExperimentDir, out: str | Path, database: str | None = None, *,
                    authors: tuple[str, ...] = (), license: str | None = None) -> list[Path]:
    """A Psych-DS dataset with its data dictionary, in the new folder ``out`` (an existing non-empty folder is
    refused, so nothing of an earlier export lingers); returns the files written."""
    out, experiment, rows = dataset_inputs(expdir, out, database, authors, license)
    study = keyword_value(experiment.name)
    by_kind: dict[str, list[dict]] = {}
    for row in rows:
        by_kind.setdefault(row["observer_kind"], []).append(row)
    written, counts = [], {}
    for kind, items in sorted(by_kind.items()):
        path = out / "data" / f"study-{study}_observer-{keyword_value(kind)}_data.csv"
        atomic_write(path, csv_text(COLUMNS, ({k: json_cell(v) for k, v in r.items()} for r in items)).encode("utf-8"))
        written.append(path)
        counts[path.name] = len(items)
    description = {
        "@context": CONTEXT, "@type": "Dataset", "schemaVersion": SCHEMA_VERSION,
        "name": experiment.name, "description": _description(experiment, rows, counts),
        "author": list(authors), "license": license,
        "datePublished": dt.datetime.now(dt.timezone.utc).date().isoformat(),
        "keywords": ["psychophysics", "human-model comparison", experiment.design],
        "variableMeasured": data_dictionary(),
    }
    atomic_write(out / "dataset_description.json",
                 (json.dumps(description, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    written.append(out / "dataset_description.json")
    readme = (f"# {experiment.name}\n\n{description['description']}\n\n"
              "`dataset_description.json` holds the data dictionary (`variableMeasured`: every column, its "
              "meaning, type, unit and allowed values). `materials/` holds `experiment.json` (every trial, the "
              "label set, timing and the assignment plan) and the stimuli as shown.\n")
    atomic_write(out / "README.md", readme.encode("utf-8"))
    written.append(out / "README.md")
    materials = out / "materials"
    atomic_write(materials / "experiment.json", expdir.experiment_file.read_bytes())
    written.append(materials / "experiment.json")
    if expdir.stimuli_dir.is_dir():
        shutil.copytree(expdir.stimuli_dir, materials / "stimuli")
        written += sorted((materials / "stimuli").iterdir())
    return written
