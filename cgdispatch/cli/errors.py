"""Bad flags fail at once with one line on stderr, naming the command's ``--help``
(argparse's own ``error`` would print the whole usage first)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

__all__ = ["one_line_errors"]


def one_line_errors(parser: argparse.ArgumentParser, command: str) -> None:
    """Make ``parser`` report a bad flag as ``error: COMMAND: message (see python -m
    cgdispatch COMMAND --help)`` and exit with status 2."""

    def error(message: str) -> NoReturn:
        print(
            f"error: {command}: {message} (see python -m cgdispatch {command} --help)",
            file=sys.stderr,
        )
        sys.exit(2)

    parser.error = error  # type: ignore[method-assign]
