"""The response table: one row per observer per trial, for humans and models alike.

This module is the only definition of the response schema (DESIGN.md, "Response
schema"). The web server, the PsychoPy runner and model evaluation all write through
``ResponseStore``; analysis and export read through it. Storage is SQLite in WAL mode
with ``synchronous=FULL`` in the experiment folder, or PostgreSQL (``cuebench.storage``):
a committed answer survives a crash or power loss, and many threads, processes and hosts
may write at once. A row is
keyed by (experiment, observer, session, trial_index): writing the same row twice is a
no-op, writing a different answer to a stored key is refused, so nothing collected is
ever overwritten.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from . import exclusions
from .db_schema import RESPONSE_KEY, RESPONSES, migrate
from .errors import CuebenchError, describe
from .storage import DEFAULT_TIMEOUT_S, Database, is_database_url, open_database, utc_now
from .trials import ROLES

TABLE = RESPONSES.name
BINARY = {"levels": [0, 1]}
"""Schema annotations read by the data dictionaries (``cuebench.psychds``): ``levels`` are a column's allowed
values, ``unit`` its unit; validators ignore both keywords."""
KEY = RESPONSE_KEY


@dataclass(frozen=True)
class Column:
    """How a response column is stored: the Python type that picks its SQL type, and
    whether it holds JSON text (a dict such as phase -> ms, stored encoded)."""

    kind: type
    json: bool = False


def _text(value):
    return value if value is None else str(value)


def _integer(value):
    return value if value is None else int(value)


def _real(value):
    return None if value is None or math.isnan(float(value)) else float(value)


Name = Annotated[str, BeforeValidator(_text), Field(min_length=1), Column(str)]
Text = Annotated[str | None, BeforeValidator(_text), Column(str)]
Integer = Annotated[int | None, BeforeValidator(_integer), Column(int)]
Real = Annotated[float | None, BeforeValidator(_real), Column(float)]
JsonText = Annotated[Any, Column(str, json=True)]
ObserverKind = Literal["human", "model", "pilot"]


class ResponseRow(BaseModel):
    """One observer's answer to one trial: its fields are the response table's columns, in order.

    Values are taken as loosely as the runners produce them (a session number, a numpy
    integer, NaN for no time) and converted to the column's type; JSON columns take any
    JSON value, or its text. ``cuebench schema response`` prints the JSON Schema.
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    experiment: Name = Field(description="experiment name")
    observer: Name = Field(description="participant code or model id")
    observer_kind: Annotated[ObserverKind, Column(str)] = Field(
        description="'human', 'model', or 'pilot' (simulated or pilot sessions; never counted as people)")
    session: Name = Field(description="session label")
    trial_index: Annotated[int, BeforeValidator(_integer), Column(int)] = Field(
        description="0-based position in the order shown")
    trial_id: Name = Field(description="stable trial id from experiment.json")
    role: Name = Field(description="test, practice, catch or attention", json_schema_extra={"levels": list(ROLES)})
    trial_type: Text = Field(None, description="classify, oddity or segment")
    condition: Text = Field(None, description="e.g. patch_shuffle")
    level: Integer = Field(None, description="position on the condition's parameter grid")
    params: JsonText = Field(None, description="JSON: the condition's parameters")
    category: Text = Field(None, description="true (shape) class")
    texture_category: Text = Field(None, description="texture class for cue-conflict trials")
    source_image: Text = Field(None, description="source image name")
    imagename: Text = Field(None, description="file name of the (first) stimulus shown")
    response: Text = Field(None, description="label, 1-based position, 'not clear', or empty on timeout")
    correct_answer: Text = Field(None, description="the answer scored as correct")
    correct: Integer = Field(None, description="1/0, empty when not scorable", json_schema_extra=BINARY)
    rt_ms: Real = Field(None, description="response time in ms from response-screen onset (humans)",
                        json_schema_extra={"unit": "ms"})
    timed_out: Integer = Field(None, description="1 if no answer within the response window", json_schema_extra=BINARY)
    timing_planned: JsonText = Field(None, description="JSON: planned phase durations in ms", json_schema_extra={"unit": "ms"})
    timing_measured: JsonText = Field(None, description="JSON: measured phase durations in ms",
                                      json_schema_extra={"unit": "ms"})
    frames: JsonText = Field(None, description="JSON: frames each phase lasted")
    dropped_frames: Integer = Field(
        None, description="frames longer than 1.2x the refresh period during stimulus phases")
    refresh_hz: Real = Field(None, description="measured refresh rate", json_schema_extra={"unit": "Hz"})
    device: JsonText = Field(None, description="JSON: browser/screen/OS (humans) or model/device/rule (models)")
    decision_rule: Text = Field(None, description="model decision rule, e.g. 16class-mean")
    model_outputs: JsonText = Field(None, description="JSON: per-choice probabilities or feature distances (models); "
                                                      "segment trials: the image's confusion cells [true, predicted, "
                                                      "pixels] under 'confusion' (docs/cue_decomposition.md)")
    events: JsonText = Field(None, description="JSON: blur/visibility/fullscreen-exit events during the trial")
    group: Integer = Field(None, description="assignment group")
    created_at: Text = Field(None, description="UTC ISO time the row was stored")
    excluded: Integer = Field(None, description="1 if excluded (at collection time or by a later exclusion in force)",
                             json_schema_extra=BINARY)
    exclusion_reason: Text = Field(None, description="why")
    adaptive: JsonText = Field(None, description="JSON: QUEST+ posterior after this answer of an adaptive block "
                                                 "(quest_threshold, ci_low, ci_high, trials; rows stored before it was "
                                                 "renamed carry threshold)")


def _column(name: str) -> Column:
    return next(m for m in ResponseRow.model_fields[name].metadata if isinstance(m, Column))


COLUMNS: dict[str, tuple[type, str]] = {
    name: (_column(name).kind, field.description) for name, field in ResponseRow.model_fields.items()}
"""name -> (stored Python type, description), in table order."""
JSON_COLUMNS = tuple(name for name in COLUMNS if _column(name).json)


def column_dictionary() -> list[dict]:
    """Each column's ``name``, ``description``, JSON ``type`` (``"JSON text"`` for the JSON columns), ``unit`` and
    allowed ``levels`` (None where the schema names none), in table order, from the response schema itself: the
    data dictionaries of the Psych-DS and BIDS exports and ``cuebench schema response`` share this one source."""
    properties = ResponseRow.model_json_schema()["properties"]
    out = []
    for name in COLUMNS:
        schema = properties[name]
        kinds = [s.get("type") for s in schema.get("anyOf", [schema]) if s.get("type") not in (None, "null")]
        out.append({"name": name, "description": schema["description"],
                    "type": "JSON text" if name in JSON_COLUMNS else (kinds[0] if kinds else "any"),
                    "unit": schema.get("unit"), "levels": schema.get("levels") or schema.get("enum")})
    return out


class ResponseError(CuebenchError, ValueError):
    """A response row is malformed; the message names the field."""


class ResponseConflict(ResponseError):
    """A different answer is already stored under the same key; the stored one is kept."""


@dataclass(frozen=True)
class WriteResult:
    stored: bool  # False when an identical row was already there (duplicate submission)


def normalise(row: dict[str, Any]) -> dict[str, Any]:
    """Validate a row against ``ResponseRow`` and convert it to storable values (JSON columns as text)."""
    try:
        out = dict(ResponseRow.model_validate(row))
    except ValidationError as err:
        field, problem = describe(err.errors()[0])
        if problem == "unknown field":
            raise ResponseError(f"unknown response field {field!r}") from None
        joint = " " if problem.startswith(("is ", "must ")) else ": "
        raise ResponseError(f"response field {field!r}{joint}{problem}") from None
    for name in JSON_COLUMNS:
        if out[name] is not None and not isinstance(out[name], str):
            out[name] = json.dumps(out[name], sort_keys=True, default=_json_default)
    if out["created_at"] is None:
        out["created_at"] = utc_now()
    if out["excluded"] is None:
        out["excluded"] = 0
    return out


def _json_default(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


_COMPARED = tuple(c for c in COLUMNS if c not in ("created_at",))
_QUOTED_COLUMNS = ",".join(f'"{c}"' for c in COLUMNS)
_INSERT_NEW = (f'INSERT INTO "{TABLE}" ({_QUOTED_COLUMNS}) VALUES ({",".join("?" for _ in COLUMNS)}) '
               "ON CONFLICT DO NOTHING")
"""Inserts unless the key (the unique index on ``KEY``) is taken; ``rowcount`` says which."""


class ResponseStore:
    """The experiment's response table: durable, idempotent, append-only per key.

    ``location`` is the SQLite file (the experiment's ``responses.sqlite``) or a
    ``postgresql://`` URL; both follow the same rules and export the same bytes. Any number
    of stores (threads, processes, hosts) may write at once: each write is one transaction
    and waits for the others up to ``timeout`` seconds (``cuebench.storage``)."""

    def __init__(self, location: str | Path, timeout: float = DEFAULT_TIMEOUT_S):
        if not is_database_url(location):
            location = Path(location)
            location.parent.mkdir(parents=True, exist_ok=True)
        self.path = location
        self._lock = threading.Lock()
        self.database = open_database(location, timeout)
        migrate(self.database)  # the table and its indexes (``cuebench.db_schema``)

    @property
    def conn(self) -> Database:
        """The store's connection (``execute(sql, params)`` with ``?`` placeholders on either backend)."""
        return self.database

    def write(self, row: dict[str, Any]) -> WriteResult:
        """Store one answer, committed before returning. Identical resubmission: ``stored=False``."""
        return self.write_many([row])[0]

    def write_many(self, rows: Iterable[dict[str, Any]]) -> list[WriteResult]:
        """Store answers in one transaction (all or none), each with the idempotency rule of ``write``."""
        clean = [normalise(r) for r in rows]
        with self._lock, self.database.write_transaction():
            results = [self._insert(row) for row in clean]
            refused = next((r for r in results if isinstance(r, ResponseConflict)), None)
            if refused is not None:
                raise refused
        return results

    def write_each(self, rows: Iterable[dict[str, Any]], also: Callable[[Database], None] | None = None,
                   normalised: bool = False, urgent: bool = False,
                   refused: Callable[[Database, set[str]], dict[str, BaseException]] | None = None,
                   ) -> list[WriteResult | BaseException]:
        """Group commit: store answers from several writers in one transaction (one fsync), each
        judged on its own. A conflicting row is refused (its ``ResponseConflict`` is returned in
        its place) while the others are stored; ``also(conn)`` runs in the same transaction.
        ``refused(conn, observers)``, asked first in the same transaction: the observers whose rows may
        not be stored (a person who withdrew while their answer was on its way), each with the error
        returned in their rows' places.
        ``normalised``: the rows came through ``normalise`` already (each writer checks its own
        before its turn, so the one committing a batch does not check everybody's again); ``urgent``: people are
        waiting for these answers to be stored, so this process's other writers wait (``storage.WriterGate``)."""
        clean = list(rows) if normalised else [normalise(r) for r in rows]
        with self._lock, self.database.write_transaction(urgent) as db:
            refusals = refused(db, {row["observer"] for row in clean}) if refused is not None else {}
            results = [refusals.get(row["observer"]) or self._insert(row) for row in clean]
            if also is not None:
                also(db)
        return results

    def _insert(self, row: dict) -> WriteResult | ResponseConflict:
        """Insert a normalised row inside the caller's transaction, unless its key is taken: one
        statement for a new answer; the stored row is read only when the key was taken."""
        if self.database.execute(_INSERT_NEW, [row[c] for c in COLUMNS]).rowcount == 1:
            return WriteResult(stored=True)
        existing = self._get(row)
        diffs = [c for c in _COMPARED if not _same(existing.get(c), row.get(c))]
        if diffs:
            return ResponseConflict(
                f"trial {row['trial_index']} of {row['observer']} session {row['session']} is already "
                f"stored with a different {diffs[0]!r} ({existing.get(diffs[0])!r} vs {row.get(diffs[0])!r}); "
                "the stored answer is kept")
        return WriteResult(stored=False)

    def _get(self, row: dict) -> dict | None:
        found = self.database.execute(
            f'SELECT {_QUOTED_COLUMNS} FROM "{TABLE}" WHERE experiment=? AND observer=? AND session=? AND trial_index=?',
            [row[k] for k in KEY]).fetchone()
        return None if found is None else dict(zip(COLUMNS, found))

    def answered_indices(self, experiment: str, observer: str, session: str) -> set[int]:
        cur = self.conn.execute(
            f'SELECT trial_index FROM "{TABLE}" WHERE experiment=? AND observer=? AND session=?',
            [experiment, observer, str(session)])
        return {r[0] for r in cur.fetchall()}

    def answered_trial_ids(self, experiment: str, observer: str) -> set[str]:
        cur = self.conn.execute(f'SELECT trial_id FROM "{TABLE}" WHERE experiment=? AND observer=?', [experiment, observer])
        return {r[0] for r in cur.fetchall()}

    def rows(self, where: str | None = None, params: Iterable | None = None) -> list[dict]:
        """All rows (JSON columns decoded), in storage order, with the exclusions in force marked."""
        return [decode_row(r) for r in self._marked(where, params)]

    def _marked(self, where: str | None, params: Iterable | None) -> list[dict]:
        return exclusions.mark([dict(zip(COLUMNS, r)) for r in self._select(where, params)], self.database)

    def _select(self, where: str | None, params: Iterable | None) -> list[tuple]:
        condition = f" WHERE {where}" if where else ""
        return self.database.execute(f'SELECT {_QUOTED_COLUMNS} FROM "{TABLE}"{condition} '
                                     f"ORDER BY {self.database.row_order}", list(params or [])).fetchall()

    def count(self) -> int:
        return self.database.execute(f'SELECT COUNT(*) FROM "{TABLE}"').fetchone()[0]

    def dataframe(self):
        """The table as a pandas DataFrame with the schema's columns (JSON columns kept as text),
        the exclusions in force marked."""
        import pandas as pd

        return pd.DataFrame.from_records(self._marked(None, None), columns=list(COLUMNS), coerce_float=True)

    def close(self) -> None:
        self.database.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def decode_row(row: dict) -> dict:
    out = dict(row)
    for name in JSON_COLUMNS:
        if isinstance(out.get(name), str):
            out[name] = json.loads(out[name])
    return out


def score(trial, response: str | None) -> int | None:
    """How the trial's card scores an answer (``TrialTypeCard.score``: 1 if it is the correct one, 0 if
    not, a timeout or "not clear" wrong; None when the trial has no correct answer)."""
    return trial.card.score(trial, response)


def trial_row(experiment, trial, *, observer: str, observer_kind: str, session: str | int, trial_index: int,
              response: str | None, **fields) -> dict:
    """A response row carrying the trial's metadata, so analysis never needs experiment.json.

    Runners add what they measured (``rt_ms``, ``timing_measured``, ``frames`` ...) as
    keyword fields; scoring is the same for every observer."""
    stim = experiment.stimuli.get(trial.stimuli[0])
    row = {
        "experiment": experiment.name,
        "observer": observer,
        "observer_kind": observer_kind,
        "session": str(session),
        "trial_index": trial_index,
        "trial_id": trial.trial_id,
        "role": trial.role,
        "trial_type": trial.trial_type,
        "condition": trial.condition,
        "level": trial.level,
        "params": trial.params,
        "category": trial.category,
        "texture_category": trial.texture_category,
        "source_image": trial.source_image,
        "imagename": stim.path.rsplit("/", 1)[-1] if stim else None,
        "response": response if response is not None else "",
        "correct_answer": trial.correct,
        "correct": score(trial, response),
        "timing_planned": trial.timing.model_dump(),
    }
    row.update(fields)
    return row
