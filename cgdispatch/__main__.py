"""Command line: ``python -m cgdispatch COMMAND ...`` (``--help`` lists the commands)."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys

# command name -> module defining ``add_parser(subparsers)``; each sets ``func`` on its parser
COMMANDS: dict[str, str] = {
    "demo": "cgdispatch.cli.dispatch",
    "dispatch": "cgdispatch.cli.dispatch",
    "plan": "cgdispatch.cli.plan",
    "tune": "cgdispatch.cli.tune",
    "calibrate": "cgdispatch.cli.calibrate",
    "capture": "cgdispatch.cli.capture",
    "sweep": "cgdispatch.cli.sweep",
    "report": "cgdispatch.cli.sweep",
    "estimate-memory": "cgdispatch.cli.sweep",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cgdispatch",
        description=(
            "Plan, capture and measure CUDA graphs with vLLM's dispatch semantics "
            "(V1 as in vLLM 0.33, generation 2 as in vLLM 0.34)."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in dict.fromkeys(COMMANDS.values()):
        importlib.import_module(module).add_parser(subparsers)
    return parser


def user_error_line(err: BaseException) -> str | None:
    """The one stderr line for a user's mistake, or None for a bug (which keeps its
    traceback). User mistakes: bad values (ValueError, JSON errors included), files that
    cannot be read or written (OSError), store failures (sqlite3.Error), malformed YAML."""
    import sqlite3

    import yaml

    if isinstance(err, sqlite3.Error):  # a store failure that no store method named
        return f"error: the result store failed: {' '.join(str(err).split())}"
    if isinstance(err, OSError):
        what = err.strerror or str(err)
        where = f" {err.filename!r}" if err.filename else ""
        return f"error: cannot use{where}: {what} (check the path and its permissions)"
    if isinstance(err, yaml.YAMLError):
        return f"error: malformed YAML: {' '.join(str(err).split())}"
    if isinstance(err, ValueError):
        return f"error: {' '.join(str(err).split())}"
    return None


INTERRUPTED = 130  # the exit code of a command stopped by Ctrl-C (128 + SIGINT)


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 prints escaped
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        if code == INTERRUPTED and argv is None:
            # the command line, interrupted and cleaned up: a second Ctrl-C while the
            # interpreter exits would end it with a traceback instead of this exit code
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        return code
    except Exception as err:
        line = user_error_line(err)
        if line is None:
            raise  # an internal bug: show the traceback, do not pass it off as a user error
        print(line, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
