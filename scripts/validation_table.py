"""Write docs/validation.md: every statistic the tests validate, from their ``@pytest.mark.validates`` marks.

A test that checks a reported statistic against an independent reference (a published value, a reference
implementation, a hand computation or a simulation from the documented model written without the project's
code) carries ``@pytest.mark.validates(statistic, definition=..., source=..., reference=..., tolerance=...)``.
This script reads those marks from the test files' source (no test module is imported, so it takes a second
and needs none of the suite's packages) and writes one row per mark, sorted by statistic and test, so the same
tests always give the same file. ``tests/conftest.py`` checks at every collection that pytest sees exactly the
marks read here.

    python scripts/validation_table.py            # rewrite docs/validation.md
    python scripts/validation_table.py --check    # exit 1 when docs/validation.md is out of date
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
OUTPUT = ROOT / "docs" / "validation.md"
MARK = "validates"
FIELDS = ("statistic", "definition", "source", "reference", "tolerance")
HEADER = """# Validation table

Every estimator and statistic the reports print, its definition and source, the independent reference a test
checks it against (a published value, a reference implementation, a hand computation, or a simulation from the
documented model written without the project's code), the tolerance or coverage asked for, and the test.

Generated from the tests' `@pytest.mark.validates(...)` marks by `python scripts/validation_table.py`; do not
edit by hand (`tests/system/test_validation_table.py` fails when this file is out of date). A statistic without a row
is not finished.

| statistic | definition and source | independent reference | tolerance or coverage | test |
| --- | --- | --- | --- | --- |
"""


class MarkError(ValueError):
    """A validates mark that cannot be read from the source; the message names the file, line and problem."""


@dataclass(frozen=True, order=True)
class Row:
    statistic: str
    definition: str
    source: str
    reference: str
    tolerance: str
    test: str


def _is_validates(node: ast.expr) -> bool:
    """``pytest.mark.validates(...)`` (or ``mark.validates(...)``)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == MARK
            and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "mark")


def _fields(call: ast.Call, where: str) -> dict[str, str]:
    """The mark's five fields as strings: the statistic positional or by name, the others by name."""
    values: dict[str, object] = {}
    try:
        for name, arg in zip(FIELDS, call.args):
            values[name] = ast.literal_eval(arg)
        for keyword in call.keywords:
            if keyword.arg is None:
                raise ValueError("**kwargs")
            values[keyword.arg] = ast.literal_eval(keyword.value)
    except ValueError as err:
        raise MarkError(f"{where}: write the validates mark's arguments as literal strings ({err})") from None
    missing = [f for f in FIELDS if not isinstance(values.get(f), str) or not values[f].strip()]
    unknown = sorted(set(values) - set(FIELDS))
    if missing or unknown:
        raise MarkError(f"{where}: a validates mark needs the non-empty strings {', '.join(FIELDS)}"
                        + (f"; missing {', '.join(missing)}" if missing else "")
                        + (f"; unknown {', '.join(unknown)}" if unknown else ""))
    return {f: " ".join(str(values[f]).split()) for f in FIELDS}


def _marks_of(node, where: str) -> list[dict[str, str]]:
    return [_fields(d, f"{where}:{d.lineno}") for d in node.decorator_list if _is_validates(d)]


def file_rows(path: Path, root: Path = ROOT) -> list[Row]:
    """The rows of one test file: each test function's marks, and a class's marks on each of its tests."""
    name = path.relative_to(root).as_posix()
    rows: list[Row] = []

    def visit(body, prefix: str, inherited: list[dict[str, str]]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                visit(node.body, f"{prefix}{node.name}::", inherited + _marks_of(node, name))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                test = f"{name}::{prefix}{node.name}"
                rows.extend(Row(**fields, test=test) for fields in inherited + _marks_of(node, name))

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=name).body, "", [])
    return rows


def collect(tests: Path = TESTS, root: Path = ROOT) -> list[Row]:
    """Every row of every ``test_*.py`` under ``tests``, sorted (statistic, then test, then the rest)."""
    rows = [row for path in sorted(tests.rglob("test_*.py")) for row in file_rows(path, root)]
    return sorted(rows, key=lambda r: (r.statistic.casefold(), r.test, r))


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|")


def render(rows: list[Row]) -> str:
    """docs/validation.md for ``rows``."""
    lines = [f"| {_cell(r.statistic)} | {_cell(r.definition)} ({_cell(r.source)}) | {_cell(r.reference)} | "
             f"{_cell(r.tolerance)} | `{r.test}` |" for r in rows]
    return HEADER + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether docs/validation.md is up to date")
    args = parser.parse_args(argv)
    try:
        text = render(collect())
    except MarkError as err:
        print(f"validation table: {err}", file=sys.stderr)
        return 2
    current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.is_file() else ""
    if args.check:
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is out of date: run python scripts/validation_table.py",
                  file=sys.stderr)
            return 1
        return 0
    if current != text:
        OUTPUT.write_text(text, encoding="utf-8")
    print(f"{OUTPUT.relative_to(ROOT)}: {text.count(chr(10)) - HEADER.count(chr(10))} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
