"""Paths the user types on the command line."""

from __future__ import annotations

from pathlib import Path


def user_path(text: str | Path) -> Path:
    """A path as the user typed it, made absolute against the working directory once, at the
    command line's edge: later code (Flask's ``send_from_directory`` resolves relative folders
    against the package, subprocesses may change directory) then never sees a relative path."""
    return Path(text).expanduser().absolute()
