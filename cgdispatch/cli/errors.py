"""Bad flags fail at once with one line on stderr, naming the command's ``--help``
(argparse's own ``error`` would print the whole usage first)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

__all__ = ["command_parser", "one_line_errors"]


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


def command_parser(
    subparsers: argparse._SubParsersAction, command: str, **kwargs: Any
) -> argparse.ArgumentParser:
    """The parser of ``COMMAND`` (``subparsers.add_parser(command, **kwargs)``) reporting a
    bad flag in one line (:func:`one_line_errors`): the command is named once."""
    parser = subparsers.add_parser(command, **kwargs)
    one_line_errors(parser, command)
    return parser
