"""Export the response table: the common schema (CSV/Parquet) and model-vs-human raw CSVs.

Every format is an entry of ``EXPORT_FORMATS`` (``cuebench list export-formats``): the
packages above the core add theirs (the PsychoPy-style CSV in ``human_tasks``, the
participant and Prolific lists in ``experiment_server``). Every format marks the exclusions
in force (``cuebench.exclusions``, read through ``ResponseStore`` or from the log itself) and
tells pilots apart (``observer_kind``; model-vs-human: a ``pilot/`` folder; the Prolific list
leaves them out, as Prolific pays no pilot).

The model-vs-human raw format (Geirhos et al.; one file per observer and session,
``subj,session,trial,rt,object_response,category,condition,imagename``, rt in seconds,
``na`` for no answer) lets existing analysis code read cuebench data unchanged.
"""

from __future__ import annotations

import re
from pathlib import Path

from . import exclusions, questionnaire
from .csvsafe import csv_text
from .errors import CuebenchError
from .expdir import ExperimentDir, atomic_write
from .registry import Registry
from .responses import COLUMNS, ResponseStore

MVH_COLUMNS = ("subj", "session", "trial", "rt", "object_response", "category", "condition", "imagename")


class ExportError(CuebenchError):
    """Nothing to export, or an unknown format."""


EXPORT_FORMATS: Registry = Registry("export-formats", entry_point_group="cuebench.export_formats")
"""name -> ``export(expdir: ExperimentDir, out: Path, database: str | None) -> list[Path]``."""


def _store(expdir: ExperimentDir, database: str | None) -> ResponseStore:
    """The experiment's store: its responses.sqlite, or the ``postgresql://`` database given."""
    if database is None and not expdir.responses_file.exists():
        raise ExportError(f"{expdir.root} has no responses yet ({expdir.responses_file.name} is missing)")
    return ResponseStore(database or expdir.responses_file)


def response_rows(expdir: ExperimentDir, database: str | None) -> list[dict]:
    """Every response row of the experiment, the exclusions in force marked."""
    with _store(expdir, database) as store:
        return store.rows()


@EXPORT_FORMATS.register("csv")
def export_csv(expdir: ExperimentDir, out: str | Path, database: str | None = None) -> Path:
    """The common schema, one row per observer per trial, JSON columns as JSON text."""
    import json

    rows = ({k: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v for k, v in row.items()}
            for row in response_rows(expdir, database))
    out = Path(out)
    atomic_write(out, csv_text(COLUMNS, rows).encode("utf-8"))
    return out


@EXPORT_FORMATS.register("parquet")
def export_parquet(expdir: ExperimentDir, out: str | Path, database: str | None = None) -> Path:
    """The common schema as Parquet (JSON columns as JSON text)."""
    with _store(expdir, database) as store:
        frame = store.dataframe()
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(out)
    return out


def _slug(text) -> str:
    """A name token: no ``_`` (model-vs-human splits names on it) and no ``-`` (it marks a cue-conflict
    texture class), so nothing but the texture class can be parsed from where it stands."""
    return re.sub(r"[\s_/-]+", ".", str(text))


def mvh_condition(row: dict) -> str:
    """The raw ``condition`` value: ``[<trial type>/]<condition>:<level>:<k>=<v>,...`` (JSON values), so
    that every condition keeps its own name, level and parameters in one flat export
    (``patch_shuffle:4:grid=6``) and a trial that is not a classification says what it is
    (``oddity/dist::``), read back by ``analysis.load``; model-vs-human reads it as an opaque condition label."""
    import json

    level = "" if row.get("level") is None else int(row["level"])
    params = row.get("params") or {}
    if isinstance(params, str):
        params = json.loads(params) if params else {}
    pairs = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(params.items()))
    trial_type = row.get("trial_type") or "classify"
    prefix = "" if trial_type == "classify" else f"{trial_type}/"
    return f"{prefix}{row.get('condition') or ''}:{level}:{pairs}"


def mvh_category(row: dict) -> str:
    """The raw ``category``: what ``object_response`` is scored against. A classification's class; for
    any other trial type its correct answer (an oddity trial's odd position), the class then stands
    in the image name."""
    if (row.get("trial_type") or "classify") == "classify":
        return row.get("category") or "na"
    return row.get("correct_answer") or "na"


def mvh_imagename(row: dict) -> str:
    """``NNNN_<kind>_<condition>_<level>_<category>_<source>.png`` as model-vs-human names images; a
    cue-conflict image ends in ``<shape source>-<texture class>`` (Geirhos et al.'s ``airplane1-bicycle2``),
    so the texture class is the last ``-`` token, and no other name contains a ``-``."""
    level = "" if row.get("level") is None else row["level"]
    prefix = [f"{int(row['trial_index']) + 1:04d}", row["observer_kind"], row.get("condition") or "", level,
              row.get("category") or "na"]
    source = _slug(row.get("source_image") or row["trial_id"])
    texture = row.get("texture_category")
    if texture:
        source = f"{source}-{_slug(texture)}"
    return "_".join(_slug(p) for p in prefix) + f"_{source}.png"


@EXPORT_FORMATS.register("mvh")
def export_mvh(expdir: ExperimentDir, out_dir: str | Path, database: str | None = None,
               roles: tuple[str, ...] = ("test",)) -> list[Path]:
    """Model-vs-human raw CSVs, one per observer and session (OUT is a folder).

    The raw format has no exclusion column, and model-vs-human reads every CSV of a folder:
    excluded observers' files go to ``excluded/`` and pilots' to ``pilot/`` beneath it."""
    rows = [r for r in response_rows(expdir, database) if r["role"] in roles]
    if not rows:
        raise ExportError(f"{expdir.root} has no responses to {', '.join(roles)} trials")
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["observer"], row["session"]), []).append(row)
    out_dir = Path(out_dir)
    written = []
    for (observer, session), items in sorted(groups.items()):
        lines = []
        for row in sorted(items, key=lambda r: r["trial_index"]):
            rt = "NaN" if row.get("rt_ms") is None else f"{row['rt_ms'] / 1000:.4f}"
            lines.append([observer, session, int(row["trial_index"]) + 1, rt, row.get("response") or "na",
                          mvh_category(row), mvh_condition(row), mvh_imagename(row)])
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", observer)
        folder = out_dir / ("excluded" if row.get("excluded") else "pilot" if row["observer_kind"] == "pilot" else "")
        path = folder / f"{row['experiment']}_{safe}_session_{session}.csv"
        atomic_write(path, csv_text(MVH_COLUMNS, lines).encode("utf-8"))
        written.append(path)
    return written


@EXPORT_FORMATS.register("questionnaire")
def export_questionnaire(expdir: ExperimentDir, out: str | Path, database: str | None = None) -> Path:
    """The questionnaire answers of everyone, lab and web: observer, ``observer_kind`` (from their
    responses; empty when they have none), the exclusion in force, runner, time, one ``q_<id>``
    column per question (the declared ones first, then any no longer declared)."""
    experiment = expdir.load().name
    with _store(expdir, database) as store:
        answered = questionnaire.stored_answers(store.conn, experiment)
        kinds = dict(store.conn.execute("SELECT DISTINCT observer, observer_kind FROM responses WHERE experiment=?",
                                        [experiment]).fetchall())
        excluded = exclusions.current(store.conn, experiment)
    declared = questionnaire.load_questionnaire(expdir)
    ids = list(declared.ids) if declared else []
    ids += sorted({i for record in answered.values() for i in record["answers"]} - set(ids))
    columns = ("observer", "observer_kind", "excluded", "exclusion_reason", "runner", "at",
               *(questionnaire.ANSWER_COLUMN_PREFIX + i for i in ids))
    rows = ({"observer": observer, "observer_kind": kinds.get(observer), "excluded": int(observer in excluded),
             "exclusion_reason": excluded[observer].label if observer in excluded else None,
             "runner": record["runner"], "at": record["at"],
             **{questionnaire.ANSWER_COLUMN_PREFIX + k: v for k, v in record["answers"].items()}}
            for observer, record in answered.items())
    out = Path(out)
    atomic_write(out, csv_text(columns, rows).encode("utf-8"))
    return out


def export(expdir: str | Path, fmt: str, out: str | Path, database: str | None = None) -> list[Path]:
    """Export in ``fmt`` (an ``EXPORT_FORMATS`` name); ``database`` is a ``postgresql://`` URL
    when the responses are not in the folder."""
    written = EXPORT_FORMATS[fmt](ExperimentDir(expdir), Path(out), database)
    return written if isinstance(written, list) else [written]
