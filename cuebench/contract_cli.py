"""The contract's own commands: ``cuebench export`` (the response table in its export formats),
``cuebench schema`` (the JSON Schema of experiment.json, of a response row, of the runners' trial plan and
trial answer, and of the files later stages define, handed in by the command: a study's rules.json) and
``cuebench labels search`` (the ImageNet classes a label may stand for)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Callable

from .paths import user_path

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMAS = ("experiment", "response", "trial-plan", "trial-answer")
SHOWN_PATHS = 12
"""Files an export lists one by one (a dataset with its stimuli names the rest by count)."""


def register(sub, *, more_schemas: dict[str, Callable[[], type]] | None = None) -> None:
    """``more_schemas``: kind -> a function returning the pydantic model of a file a later stage defines
    (the core may not import it; ``cuebench_app.cli`` hands these in)."""
    more_schemas = more_schemas or {}
    export = sub.add_parser("export", help="export an experiment's responses")
    export.add_argument("expdir", type=user_path, help="experiment directory")
    export.add_argument("--format", default="csv",
                        help="csv/parquet: the common schema; mvh: model-vs-human raw CSVs, one per observer "
                             "and session (--out is then a folder); psychopy: PsychoPy-style CSV; participants: "
                             "statuses, times and exclusions; prolific: approve/reject list (pilots left out); "
                             "questionnaire: the answers; psych-ds: a Psych-DS dataset with its data dictionary "
                             "(--out is a new folder; needs --author and --license); bids-beh: BIDS behavioural "
                             "files (all: `cuebench list export-formats`); every format marks "
                             "the exclusions in force and tells pilots apart (observer_kind)")
    export.add_argument("--out", type=user_path, required=True)
    export.add_argument("--database", metavar="URL",
                        help="postgresql://USER@HOST/DB holding the responses (default: the folder's responses.sqlite)")
    export.add_argument("--author", action="append", default=[], metavar="NAME",
                        help="psych-ds/bids-beh: an author of the dataset (once per author, in order)")
    export.add_argument("--license", metavar="LICENCE", help="psych-ds/bids-beh: the data's licence, e.g. CC-BY-4.0")
    export.set_defaults(func=run_export)

    schema = sub.add_parser("schema", help="print the JSON Schema of experiment.json, a response row, a runner's trial plan "
                                        "or answer, or rules.json")
    schema.add_argument("kind", choices=(*SCHEMAS, *more_schemas),
                        help="experiment: experiment.json; response: one response row; trial-plan: what a runner "
                             "shows one trial by; trial-answer: what it gives back; rules: a study's rules.json")
    schema.add_argument("--out", type=Path, default=None, help="write the schema to this file instead")
    schema.set_defaults(func=partial(run_schema, more_schemas=more_schemas))

    labels = sub.add_parser("labels", help="find the ImageNet-1k classes (and indices) an experiment label stands for")
    labels_sub = labels.add_subparsers(dest="labels_command", metavar="ACTION", required=True)
    search = labels_sub.add_parser(
        "search", help="print the ImageNet-1k classes with WORD in one of their names, with their indices",
        description="Candidates for a label's ImageNet indices; '*' marks those a build picks for a folder named "
                    "WORD (stored in experiment.json's label_set.imagenet_indices).")
    search.add_argument("word", nargs="+", help="a word or phrase, e.g. cat or 'sports car'")
    search.set_defaults(func=run_labels_search)


def run_export(args) -> int:
    from .export import export

    options = {"authors": tuple(args.author), "license": args.license} if args.author or args.license else {}
    written = export(args.expdir, args.format, args.out, args.database, **options)
    for path in written[:SHOWN_PATHS]:
        print(f"wrote {path}")
    if len(written) > SHOWN_PATHS:
        print(f"... and {len(written) - SHOWN_PATHS} more files under {args.out}")
    return 0


def json_schema(kind: str, model: type | None = None) -> dict:
    """The JSON Schema (draft 2020-12) generated from the contract's pydantic models (or ``model``'s)."""
    if model is None:
        model = _contract_model(kind)
    return {"$schema": JSON_SCHEMA_DIALECT, **model.model_json_schema()}


def _contract_model(kind: str) -> type:
    from . import responses, runner_contract, trials

    return {"experiment": trials.Experiment, "response": responses.ResponseRow,
            "trial-plan": runner_contract.TrialPlan, "trial-answer": runner_contract.TrialAnswer}[kind]


def schema_text(kind: str, model: type | None = None) -> str:
    return json.dumps(json_schema(kind, model), indent=2, ensure_ascii=False) + "\n"


def run_schema(args, more_schemas: dict[str, Callable[[], type]] | None = None) -> int:
    more = more_schemas or {}
    text = schema_text(args.kind, more[args.kind]() if args.kind in more else None)
    if args.out is None:
        print(text, end="")
        return 0
    from .expdir import atomic_write

    atomic_write(args.out, text.encode("utf-8"))
    print(f"wrote {args.out}")
    return 0


def run_labels_search(args) -> int:
    from .errors import CuebenchError
    from .labels import matching_classes, search_classes

    word = " ".join(args.word)
    found = search_classes(word)
    if not found:
        raise CuebenchError(f"no ImageNet-1k class has {word!r} in its names; try a broader or singular word")
    picked = {c.index for c in matching_classes(word)}
    for c in found:
        print(f"{'*' if c.index in picked else ' '} {c.index:>3}  {c.name}  ({', '.join(c.synonyms)})")
    return 0
