"""Paths the user types on the command line."""

from __future__ import annotations

from pathlib import Path


def user_path(text: str | Path) -> Path:
    """A path as the user typed it, made absolute against the working directory once, at the
    command line's edge: later code (Flask's ``send_from_directory`` resolves relative folders
    against the package, subprocesses may change directory) then never sees a relative path."""
    return Path(text).expanduser().absolute()


def recorded_path(path: str | Path, start: str | Path | None = None) -> str:
    """A path as an output records it (provenance, a study's record, a report's header): relative to
    ``start`` (default: the working directory, where the command ran) when it lies inside it, else
    its last part. Outputs are shared; the researcher's file system is not."""
    absolute, base = Path(path).absolute(), Path(start if start is not None else Path.cwd()).absolute()
    try:
        return absolute.relative_to(base).as_posix()
    except ValueError:
        return absolute.name
