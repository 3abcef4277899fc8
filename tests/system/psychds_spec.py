"""A Psych-DS dataset checker written from the published specification, independent of cuebench.

No installable Psych-DS validator exists on the package registries this project uses (the community
validator is a Deno program), so the tests check exported datasets against these rules, transcribed from
the specification's schema (``rules.files.common.core``, ``rules.files.tabular_data.data.Datafile``,
``rules.compiled_metadata.CompiledMetadata``, ``rules.errors``; the principles "keywords", "columns",
"inheritance" and the CSV extension rules). Each problem is reported with the specification's own error
code, so a failing test names the rule the dataset breaks. Warnings (recommended files, unofficial
keywords) are returned apart. This module imports nothing of the project.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

DATAFILE = re.compile(r"([a-z]+-[a-zA-Z0-9]+)(_[a-z]+-[a-zA-Z0-9]+)*_data\.csv")
OFFICIAL_KEYWORDS = {"study", "site", "subject", "session", "task", "condition", "trial", "stimulus", "description"}
REQUIRED_FIELDS = ("name", "description", "variableMeasured")
RECOMMENDED_FIELDS = ("author", "citation", "license", "funder", "url", "identifier", "privacyPolicy", "keywords")
SCHEMA_ORG = re.compile(r"^https?://schema\.org/?$")
RECOMMENDED_ROOT = {"README": (".md", ".txt"), "CHANGES": (".md", ".txt")}
RECOMMENDED_DIRS = ("analysis", "results", "materials", "documentation")


@dataclass(frozen=True)
class Issue:
    code: str
    path: str
    detail: str = ""


def _read_json(path: Path, errors: list[Issue]) -> dict | None:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        errors.append(Issue("JSON_ENCODING_ERROR", str(path)))
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        errors.append(Issue("JSON_INVALID", str(path), str(err)))
        return None
    if not isinstance(value, dict):
        errors.append(Issue("INVALID_JSON_FORMATTING", str(path), "not a JSON object"))
        return None
    return value


def _check_jsonld(meta: dict, path: str, errors: list[Issue], warnings: list[Issue]) -> None:
    context = meta.get("@context")
    contexts = context if isinstance(context, list) else [context]
    if context is None or not any(isinstance(c, str) and SCHEMA_ORG.match(c) for c in contexts):
        errors.append(Issue("INVALID_JSONLD_FORMATTING", path, "@context must name http(s)://schema.org/"))
    kind = meta.get("@type", meta.get("type"))
    if kind is None:
        errors.append(Issue("MISSING_DATASET_TYPE", path))
    elif kind != "Dataset":
        errors.append(Issue("INCORRECT_DATASET_TYPE", path, repr(kind)))
    for item in meta.get("variableMeasured") or []:
        if isinstance(item, dict) and "@type" not in item:
            warnings.append(Issue("OBJECT_TYPE_MISSING", path, f"variableMeasured item {item.get('name')!r}"))


def _column_names(meta: dict) -> set[str]:
    """``variableMeasured`` entries are column names, or ``PropertyValue`` objects with a ``name``."""
    names = set()
    for item in meta.get("variableMeasured") or []:
        names.add(item.get("name") if isinstance(item, dict) else item)
    return names


def _compiled(root: Path, datafile: Path, description: dict) -> dict:
    """The inheritance principle: dataset_description, then every ``file_metadata.json`` from ``data/``
    down to the file's folder, then the file's sidecar; a key is replaced wholesale, never merged."""
    meta = dict(description)
    folders = [root / "data"]
    for part in datafile.parent.relative_to(root / "data").parts:
        folders.append(folders[-1] / part)
    for folder in folders:
        level = folder / "file_metadata.json"
        if level.is_file():
            meta.update(json.loads(level.read_text(encoding="utf-8")))
    sidecar = datafile.with_suffix(".json")
    if sidecar.is_file():
        meta.update(json.loads(sidecar.read_text(encoding="utf-8")))
    return meta


def _check_csv(path: Path, meta: dict, errors: list[Issue]) -> None:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        errors.append(Issue("CSV_FORMATTING_ERROR", str(path), "not UTF-8"))
        return
    if not text.strip():
        errors.append(Issue("FILE_EMPTY", str(path)))
        return
    try:
        rows = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    except csv.Error as err:
        errors.append(Issue("CSV_FORMATTING_ERROR", str(path), str(err)))
        return
    header = rows[0] if rows else []
    if not header or not any(h.strip() for h in header):
        errors.append(Issue("CSV_HEADER_MISSING", str(path)))
        return
    if len(set(header)) != len(header):
        errors.append(Issue("CSV_HEADER_REPEATED", str(path), ", ".join(sorted({h for h in header if header.count(h) > 1}))))
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            errors.append(Issue("CSV_HEADER_LENGTH_MISMATCH", str(path), f"line {number}: {len(row)} of {len(header)}"))
            break
    if "row_id" in header:
        ids = [r[header.index("row_id")] for r in rows[1:] if len(r) == len(header)]
        if len(set(ids)) != len(ids):
            errors.append(Issue("ROWID_VALUES_NOT_UNIQUE", str(path)))
    missing = [h for h in header if h not in _column_names(meta)]
    if missing:
        errors.append(Issue("CSV_COLUMN_MISSING_FROM_METADATA", str(path), ", ".join(missing)))


def validate(root: str | Path) -> tuple[list[Issue], list[Issue]]:
    """``(errors, warnings)`` of the dataset at ``root`` under the Psych-DS rules above."""
    root = Path(root)
    errors: list[Issue] = []
    warnings: list[Issue] = []
    description_path = root / "dataset_description.json"
    if not description_path.is_file():
        errors.append(Issue("MISSING_DATASET_DESCRIPTION", str(description_path)))
        description = None
    else:
        description = _read_json(description_path, errors)
    for misplaced in root.rglob("dataset_description.json"):
        if misplaced != description_path:
            warnings.append(Issue("WRONG_METADATA_LOCATION", str(misplaced)))
    data = root / "data"
    if not data.is_dir():
        errors.append(Issue("MISSING_DATA_DIRECTORY", str(data)))
    for stem, extensions in RECOMMENDED_ROOT.items():
        if not any((root / f"{stem}{e}").is_file() for e in extensions):
            warnings.append(Issue(f"MISSING_{stem}_DOC", str(root)))
    for name in RECOMMENDED_DIRS:
        if not (root / name).is_dir():
            warnings.append(Issue(f"MISSING_{name.upper()}_DIRECTORY", str(root)))
    if description is not None:
        _check_jsonld(description, str(description_path), errors, warnings)
    valid = []
    for path in sorted(data.rglob("*.csv")) if data.is_dir() else []:
        if not path.name.endswith("_data.csv"):
            continue
        if not DATAFILE.fullmatch(path.name):
            errors.append(Issue("FILENAME_KEYWORD_FORMATTING_ERROR", str(path)))
            continue
        keywords = {pair.split("-", 1)[0] for pair in path.name[: -len("_data.csv")].split("_")}
        for keyword in sorted(keywords - OFFICIAL_KEYWORDS):
            warnings.append(Issue("FILENAME_UNOFFICIAL_KEYWORD_WARNING", str(path), keyword))
        valid.append(path)
    if data.is_dir() and not valid:
        errors.append(Issue("MISSING_DATAFILE", str(data)))
    if description is None:
        return errors, warnings
    for path in valid:
        meta = _compiled(root, path, description)
        for field in REQUIRED_FIELDS:
            if not meta.get(field):
                errors.append(Issue("JSON_KEY_REQUIRED", str(path), field))
        for field in RECOMMENDED_FIELDS:
            if not meta.get(field):
                warnings.append(Issue("JSON_KEY_RECOMMENDED", str(path), field))
        _check_csv(path, meta, errors)
    return errors, warnings
