"""Algorithm options from the command line: ``--algorithm-option NAME.KEY=VALUE`` parsed and validated
per algorithm, and the options listed with their defaults and bounds (``--algorithm-option help``)."""

from __future__ import annotations

import typing
from typing import Any, Literal

from .base import ALGORITHMS, AlgorithmError, AlgorithmOptions


def parse_algorithm_options(pairs: list[str] | tuple[str, ...], algorithms: list[str]) -> dict[str, AlgorithmOptions]:
    """Each algorithm's validated options from ``--algorithm-option`` pairs: ``NAME.KEY=VALUE``, or
    ``KEY=VALUE`` when exactly one of ``algorithms`` has the option ``KEY``; ``none`` is None."""
    given: dict[str, dict[str, str | None]] = {name: {} for name in algorithms}
    for pair in pairs:
        target, sep, value = pair.partition("=")
        if not sep or not target.strip():
            raise AlgorithmError(f"--algorithm-option {pair!r} must be NAME.KEY=VALUE (or KEY=VALUE)")
        name, dot, key = target.strip().rpartition(".")
        if dot and name not in given:
            raise AlgorithmError(f"--algorithm-option {pair!r}: {name!r} is not among the algorithms trained here "
                                 f"({', '.join(algorithms)})")
        if not dot:
            owners = [n for n in algorithms if key in ALGORITHMS[n].Options.model_fields]
            if len(owners) != 1:
                why = (f"{', '.join(owners)} all have it; write NAME.{key}" if owners else
                       f"no algorithm trained here has it ({options_summary(algorithms)})")
                raise AlgorithmError(f"--algorithm-option {pair!r}: {why}")
            name = owners[0]
        value = value.strip()
        given[name][key] = None if value.lower() == "none" else value
    return {name: ALGORITHMS[name].Options.parse(values, name) for name, values in given.items()}


def options_summary(algorithms: list[str] | None = None) -> str:
    """``name: key=default, ...`` per algorithm with options, on one line (for error messages)."""
    parts = []
    for name in algorithms or ALGORITHMS.names():
        fields = ALGORITHMS[name].Options.model_fields
        if fields:
            parts.append(f"{name}: " + ", ".join(f"{k}={_shown(f.default)}" for k, f in fields.items()))
    return "; ".join(parts) or "none has options"


def options_help(algorithms: list[str] | None = None) -> str:
    """Every option of ``algorithms`` with its default, bounds and description (``--algorithm-option help``)."""
    lines = []
    for name in algorithms or ALGORITHMS.names():
        fields = ALGORITHMS[name].Options.model_fields
        lines.append(f"{name}:" + ("" if fields else " no options"))
        for key, info in fields.items():
            bounds = [f"{sign} {getattr(m, attr)}" for m in info.metadata for attr, sign in
                      (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")) if getattr(m, attr, None) is not None]
            kind = info.annotation
            choices = f" one of {', '.join(map(str, typing.get_args(kind)))};" if typing.get_origin(kind) is Literal else ""
            lines.append(f"  {name}.{key}={_shown(info.default)}  ({', '.join(bounds) + ';' if bounds else ''}{choices}"
                         f" {info.description})".replace("( ", "(").replace(";)", ")"))
    return "\n".join(lines)


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else "none" if value is None else str(value)
