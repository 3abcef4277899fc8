"""The one base class for errors caused by user input (files, options, data), and the wording
of the contract's validation errors.

The command line prints these as a one-line message naming what is wrong and exits
with status 2, instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path


class CuebenchError(Exception):
    """Bad input: a malformed file, an unknown name, a corrupt image, a refused request."""


class SchemaError(CuebenchError, ValueError):
    """A definition is malformed; the message names the file (if any) and the field.

    Validators of the contract's models raise it with a field path relative to the model
    they check; ``from_validation`` puts that path under the model's own place in the file.
    """

    def __init__(self, field_path: str, problem: str, source: str | Path | None = None):
        self.field_path = field_path
        self.problem = problem
        self.source = str(source) if source is not None else None
        where = f"{self.source}: " if self.source else ""
        super().__init__(f"{where}field '{field_path}': {problem}")

    @classmethod
    def from_validation(cls, error, source: str | Path | None = None) -> "SchemaError":
        """The first problem of a pydantic ``ValidationError``, as one readable message."""
        return cls(*describe(error.errors()[0]), source)


_EXPECTED = {"int_type": "int", "string_type": "str", "float_type": "float", "bool_type": "bool",
             "bool_parsing": "bool", "dict_type": "an object", "model_type": "an object",
             "model_attributes_type": "an object", "list_type": "a list", "tuple_type": "a list"}
_BOUNDS = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"), "less_than": ("<", "lt"),
           "less_than_equal": ("<=", "le")}


def field_path(loc: tuple) -> str:
    """``("trials", 3, "correct")`` -> ``trials[3].correct``; the top level is ``(top level)``."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path or "(top level)"


def describe(error: dict) -> tuple[str, str]:
    """One pydantic error (an item of ``ValidationError.errors()``) as (field path, problem)."""
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    path, cause = field_path(error["loc"]), ctx.get("error")
    if isinstance(cause, SchemaError):
        inner = cause.field_path
        return (inner if path == "(top level)" else f"{path}{'' if inner.startswith('[') else '.'}{inner}",
                cause.problem)
    if kind == "missing" or (value is None and kind in _EXPECTED):
        return path, "is missing"
    if kind == "extra_forbidden":
        return path, "unknown field"
    if kind == "literal_error":
        return path, f"must be one of {ctx['expected']}, got {value!r}"
    if kind in _BOUNDS:
        sign, key = _BOUNDS[kind]
        return path, f"must be {sign} {ctx[key]}, got {value!r}"
    if kind in _EXPECTED:
        return path, f"expected {_EXPECTED[kind]}, got {type(value).__name__} {value!r}"
    if kind in ("too_short", "string_too_short") and not value:
        return path, "is empty"
    return path, str(cause) if cause is not None else error["msg"]
