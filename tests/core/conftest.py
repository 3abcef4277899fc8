"""What the core's tests share: its own subcommands (``cuebench.contract_cli``), run without the stages."""

from __future__ import annotations

import argparse
import sys

import pytest

from cuebench.contract_cli import register
from cuebench.errors import CuebenchError


@pytest.fixture()
def core_command():
    """``cuebench schema|export|labels ...`` as the command runs them (exit status 2 and one line on an error),
    parsed by the core's own ``register``: the app layer's ``main`` would import every stage."""

    def run(*args: str) -> int:
        parser = argparse.ArgumentParser(prog="cuebench")
        register(parser.add_subparsers(dest="command", required=True))
        parsed = parser.parse_args(args)
        try:
            return int(parsed.func(parsed) or 0)
        except CuebenchError as err:
            print(f"cuebench {parsed.command}: error: {err}", file=sys.stderr)
            return 2

    return run
