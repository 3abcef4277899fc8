"""The contract's own commands: ``cuebench export`` (the response table in its export formats)
and ``cuebench schema`` (the JSON Schema of experiment.json and of a response row)."""

from __future__ import annotations

import json
from pathlib import Path

from .paths import user_path

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMAS = ("experiment", "response")


def register(sub) -> None:
    export = sub.add_parser("export", help="export an experiment's responses")
    export.add_argument("expdir", type=user_path, help="experiment directory")
    export.add_argument("--format", default="csv",
                        help="csv/parquet: the common schema; mvh: model-vs-human raw CSVs, one per observer "
                             "and session (--out is then a folder); psychopy: PsychoPy-style CSV; participants: "
                             "statuses, times and exclusions; prolific: approve/reject list "
                             "(all: `cuebench list export-formats`); every format marks the exclusions in force")
    export.add_argument("--out", type=user_path, required=True)
    export.add_argument("--database", metavar="URL",
                        help="postgresql://USER@HOST/DB holding the responses (default: the folder's responses.sqlite)")
    export.set_defaults(func=run_export)

    schema = sub.add_parser("schema", help="print the JSON Schema of experiment.json or of a response row")
    schema.add_argument("kind", choices=SCHEMAS, help="experiment: experiment.json; response: one response row")
    schema.add_argument("--out", type=Path, default=None, help="write the schema to this file instead")
    schema.set_defaults(func=run_schema)


def run_export(args) -> int:
    from .export import export

    for path in export(args.expdir, args.format, args.out, args.database):
        print(f"wrote {path}")
    return 0


def json_schema(kind: str) -> dict:
    """The JSON Schema (draft 2020-12) generated from the contract's pydantic models."""
    if kind == "experiment":
        from .trials import Experiment as model
    else:
        from .responses import ResponseRow as model
    return {"$schema": JSON_SCHEMA_DIALECT, **model.model_json_schema()}


def schema_text(kind: str) -> str:
    return json.dumps(json_schema(kind), indent=2, ensure_ascii=False) + "\n"


def run_schema(args) -> int:
    text = schema_text(args.kind)
    if args.out is None:
        print(text, end="")
        return 0
    from .expdir import atomic_write

    atomic_write(args.out, text.encode("utf-8"))
    print(f"wrote {args.out}")
    return 0
