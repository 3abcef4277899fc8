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

import inspect
import io
import re
from pathlib import Path

from . import exclusions, questionnaire
from .csvsafe import csv_text
from .errors import CuebenchError
from .expdir import ExperimentDir, atomic_write, private_files
from .registry import Registry
from .responses import COLUMNS, ResponseStore
from .trial_types import UNTYPED
from .trials import ROLES

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


def export_csv(expdir: ExperimentDir, out: str | Path, database: str | None = None) -> Path:
    """The common schema, one row per observer per trial, JSON columns as JSON text."""
    import json

    rows = ({k: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v for k, v in row.items()}
            for row in response_rows(expdir, database))
    out = Path(out)
    atomic_write(out, csv_text(COLUMNS, rows).encode("utf-8"))
    return out


def export_parquet(expdir: ExperimentDir, out: str | Path, database: str | None = None) -> Path:
    """The common schema as Parquet (JSON columns as JSON text)."""
    with _store(expdir, database) as store:
        frame = store.dataframe()
    out = Path(out)
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    atomic_write(out, buf.getvalue())
    return out


NAME_TOKEN_KEEPS = re.compile(r"[^A-Za-z0-9 ]")
"""What an image-name token keeps as it is: letters, digits and spaces. Everything else (``_``, which
model-vs-human splits names on; ``-``, which marks a cue-conflict texture; ``.``, where it cuts the
extension; ``%``) is percent-encoded, so every token reads back exactly (``urllib.parse.unquote``)."""
CONDITION_RESERVED = re.compile(r"[%:/@,=]")
"""The characters that structure the raw ``condition`` value, percent-encoded inside a name or key."""


def _percent(match: re.Match) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group().encode("utf-8"))


def name_token(text) -> str:
    """One ``_``-separated token of an exported image name, reversible (:data:`NAME_TOKEN_KEEPS`);
    an absent value is the empty token."""
    return "" if text is None else NAME_TOKEN_KEEPS.sub(_percent, str(text))


def condition_token(text) -> str:
    """A condition name or parameter key inside the raw ``condition`` value, reversible."""
    return CONDITION_RESERVED.sub(_percent, str(text))


def mvh_condition(row: dict) -> str:
    """The raw ``condition`` value: ``[<role>@][<trial type>/]<condition>:<level>:<k>=<json>,...``, so
    that every condition keeps its own name, level and parameters in one flat export
    (``patch_shuffle:4:grid=6``), a trial that is not a classification says what it is
    (``oddity/dist::``) and a trial that is not a test trial says its role (``catch@oddity/catch::``),
    read back by ``analysis.load``. Names and keys are percent-encoded where they hold one of
    ``%:/@,=`` (:func:`condition_token`); values are JSON. Model-vs-human reads the value as an opaque
    condition label, so catch, practice and attention trials are conditions of their own there."""
    import json

    level = "" if row.get("level") is None else int(row["level"])
    params = row.get("params") or {}
    if isinstance(params, str):
        params = json.loads(params) if params else {}
    pairs = ",".join(f"{condition_token(k)}={json.dumps(v)}" for k, v in sorted(params.items()))
    trial_type = row.get("trial_type") or UNTYPED
    role = row.get("role") or "test"
    prefix = ("" if role == "test" else f"{condition_token(role)}@") + \
             ("" if trial_type == UNTYPED else f"{condition_token(trial_type)}/")
    return f"{prefix}{condition_token(row.get('condition') or '')}:{level}:{pairs}"


def mvh_category(row: dict) -> str:
    """The raw ``category``: what ``object_response`` is scored against, as model-vs-human scores it: the
    trial's correct answer (a classification's class, an oddity trial's odd position, the label an
    attention check asks for; a classification's class where a row does not say); ``na`` when the trial
    has none. The class itself stands in the image name."""
    if row.get("correct_answer"):
        return row["correct_answer"]
    classify = (row.get("trial_type") or UNTYPED) == UNTYPED
    return (row.get("category") if classify else None) or "na"


def mvh_imagename(row: dict) -> str:
    """``NNNN_<kind>_<condition>_<level>_<class>_<trial id>_<stimulus>.png``, each token reversible
    (:func:`name_token`), as model-vs-human names images (trial number first, the stimulus last). The
    stimulus is the source image; a cue-conflict stimulus is ``<shape source>-<texture class>``
    (Geirhos et al.'s ``airplane1-bicycle2``), so model-vs-human's parser (the last ``-`` token of the
    last ``_`` token, up to its first ``.``, digits removed) finds the texture class of every class
    spelled in letters and spaces. The trial id makes every name unique within an experiment: two
    cue-conflict trials of one shape photo with two texture photos of one class differ in it (their
    texture images are in ``condition``'s parameters)."""
    level = "" if row.get("level") is None else int(row["level"])
    stimulus = name_token(row.get("source_image") or row["trial_id"])
    texture = row.get("texture_category")
    if texture:
        stimulus = f"{stimulus}-{name_token(texture)}"
    tokens = [f"{int(row['trial_index']) + 1:04d}", row["observer_kind"], row.get("condition"), level,
              row.get("category"), row["trial_id"]]
    return "_".join(name_token(t) for t in tokens) + f"_{stimulus}.png"


def export_mvh(expdir: ExperimentDir, out_dir: str | Path, database: str | None = None,
               roles: tuple[str, ...] = ROLES) -> list[Path]:
    """Model-vs-human raw CSVs, one per observer and session (OUT is a folder), every role's trials
    (the role in ``condition``, :func:`mvh_condition`).

    The raw format has no exclusion column, and model-vs-human reads every CSV of a folder:
    excluded observers' files go to ``excluded/`` and pilots' to ``pilot/`` beneath it. A trial left
    out by a trial-level rule of the analysis (left the page, dropped frames) has no column to say so
    here; a timeout is ``na``, as model-vs-human writes it."""
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
        path = folder / f"{name_token(row['experiment'])}_{safe}_session_{session}.csv"
        atomic_write(path, csv_text(MVH_COLUMNS, lines).encode("utf-8"))
        written.append(path)
    return written


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


def export(expdir: str | Path, fmt: str, out: str | Path, database: str | None = None, **options) -> list[Path]:
    """Export in ``fmt`` (an ``EXPORT_FORMATS`` name); ``database`` is a ``postgresql://`` URL
    when the responses are not in the folder; ``options`` go to the formats that take them (a dataset's
    authors and licence). Every file holds participants' data, so it is
    made 0600 like the database (``private_files``; a format that writes without
    ``atomic_write`` gets its files' mode set after)."""
    exporter = EXPORT_FORMATS[fmt]
    unused = set(options) - set(inspect.signature(exporter).parameters)
    if unused:
        raise ExportError(f"the {fmt} format takes no {', '.join('--' + o.rstrip('s') for o in sorted(unused))}")
    with private_files():
        written = exporter(ExperimentDir(expdir), Path(out), database, **options)
    written = written if isinstance(written, list) else [written]
    for path in written:
        Path(path).chmod(0o600)
    return written
