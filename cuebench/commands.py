"""What every package's ``cli.py`` shares when it adds a ``cuebench`` subcommand, so each command's
``--help`` looks alike (every option's default shown)."""

from __future__ import annotations

import argparse


def add_command(sub, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """``sub.add_parser(name)`` with its one-line ``help`` (in ``cuebench --help``) and its ``description``
    (in ``cuebench NAME --help``), showing each option's default."""
    return sub.add_parser(name, help=help, description=description,
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)
