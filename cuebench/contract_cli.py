"""``cuebench export``: the contract's own command (the response table in its export formats)."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    export = sub.add_parser("export", help="export an experiment's responses")
    export.add_argument("expdir", type=Path, help="experiment directory")
    export.add_argument("--format", choices=("csv", "parquet", "mvh"), default="csv",
                        help="csv/parquet: the common schema; mvh: model-vs-human raw CSVs, one per observer "
                             "and session (--out is then a folder)")
    export.add_argument("--out", type=Path, required=True)
    export.set_defaults(func=run_export)


def run_export(args) -> int:
    from .export import export

    for path in export(args.expdir, args.format, args.out):
        print(f"wrote {path}")
    return 0
