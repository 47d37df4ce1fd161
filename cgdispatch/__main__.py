"""Command line: ``python -m cgdispatch COMMAND ...`` (``--help`` lists the commands)."""

from __future__ import annotations

import argparse
import importlib
import sys

# command name -> module defining ``add_parser(subparsers)``; each sets ``func`` on its parser
COMMANDS: dict[str, str] = {
    "demo": "cgdispatch.cli.dispatch",
    "dispatch": "cgdispatch.cli.dispatch",
    "plan": "cgdispatch.cli.plan",
    "capture": "cgdispatch.cli.capture",
    "sweep": "cgdispatch.cli.sweep",
    "report": "cgdispatch.cli.sweep",
    "estimate-memory": "cgdispatch.cli.sweep",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cgdispatch",
        description="Plan, capture and measure CUDA graphs with vLLM V1 dispatch semantics.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in dict.fromkeys(COMMANDS.values()):
        importlib.import_module(module).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as err:  # user errors: one clear line, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
