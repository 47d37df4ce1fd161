"""Dispatch counts as a table: one row per (runtime mode, padded size).

``CudagraphDispatcher.stats_frame`` (what a V1 dispatcher counted) and
``views.explain.dispatch_stats`` (any generation, counted by dispatching a list of
batches) both build their frames here, so their columns and order cannot drift.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["STATS_COLUMNS", "stats_table"]

STATS_COLUMNS = [
    "runtime_mode",
    "padded_size",
    "calls",
    "real_tokens",
    "padded_tokens",
    "padding_tokens",
]
_ORDER = {"FULL": 0, "PIECEWISE": 1, "NONE": 2}


def stats_table(rows: Iterable[tuple[object, int, int, int, int]]) -> pd.DataFrame:
    """``(runtime mode, padded size, calls, real tokens, padded tokens)`` rows summed per
    (mode, size), with ``padding_tokens``; FULL, PIECEWISE, NONE rows, each by size."""
    import pandas as pd

    cols = STATS_COLUMNS[:5]
    frame = pd.DataFrame([(str(r[0]), *r[1:]) for r in rows], columns=cols)
    frame = frame.groupby(["runtime_mode", "padded_size"], as_index=False, sort=False)[
        cols[2:]
    ].sum()
    frame["padding_tokens"] = frame["padded_tokens"] - frame["real_tokens"]
    frame = frame.sort_values(
        ["runtime_mode", "padded_size"],
        key=lambda c: c.map(_ORDER) if c.name == "runtime_mode" else c,
    )
    return frame.reset_index(drop=True).astype({c: "int64" for c in STATS_COLUMNS[1:]})
