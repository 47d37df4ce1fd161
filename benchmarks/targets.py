"""What a benchmark run checks against its targets, and its exit status (not a benchmark).

Each ``bench_*.py`` prints its figures and, per target, met or missed; :class:`Targets`
keeps the missed ones so that the run ends non-zero naming them (``make bench`` stops
there). Imported as ``from targets import Targets``: the script's folder is on sys.path.
"""

from __future__ import annotations

import sys

__all__ = ["Targets"]


class Targets:
    """The targets of one run: :meth:`check` each, then ``raise SystemExit(t.exit_code())``."""

    def __init__(self) -> None:
        self.missed: list[str] = []  # the names of the targets missed so far, in order

    def check(self, name: str, met: bool) -> bool:
        """Record target ``name`` as met or missed; returns ``met``."""
        if not met:
            self.missed.append(name)
        return bool(met)

    def exit_code(self) -> int:
        """0 when every target was met, else 1 after naming the missed ones on stderr."""
        if not self.missed:
            return 0
        print(f"targets missed ({len(self.missed)}): " + "; ".join(self.missed), file=sys.stderr)
        return 1
