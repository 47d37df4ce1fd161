"""What capturing costs, as figures: graph memory and capture time per mode, and per key.

Each function draws one chart from the frame it is given and returns a
:class:`~cgdispatch.views.sources.SourcedFigure` labelled with its source (read it back with
:func:`~cgdispatch.views.sources.figure_source`). They draw; they do not measure or model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure

from .sources import (
    SourcedFigure,
    category_ticks,
    frame_source,
    label_source,
    legend_outside,
    rows_to_plot,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "memory_figure",
    "capture_time_figure",
    "capture_per_key_figure",
    "memory_per_key_figure",
]

_MIB = 2**20


def _bars_by_mode(
    frame: pd.DataFrame,
    value: str,
    scale: float,
    unit: str,
    agg: str,
    source: str | None,
    by: str,
    group: str | None,
    title: str,
    what: str,
) -> Figure:
    frame = rows_to_plot(frame, [by, value], what)  # group is used when the frame has it
    label = frame_source(frame, source)
    keys = [by] + ([group] if group and group in frame.columns else [])
    table = frame.groupby(keys, sort=False)[value].agg(agg) / scale
    table = table.unstack(group) if len(keys) == 2 else table.to_frame(value)
    fig = SourcedFigure(figsize=(9, 4), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(table.index))
    width = 0.8 / max(len(table.columns), 1)
    for i, col in enumerate(table.columns):
        bars = ax.bar(
            x + (i - (len(table.columns) - 1) / 2) * width,
            table[col].to_numpy(dtype=float),
            width,
            label=str(col),
            gid=f"bars-{col}",
        )
        ax.bar_label(bars, fmt="%.3g", fontsize=7)
    category_ticks(ax, x, [str(i) for i in table.index], fontsize=9)
    ax.set_ylabel(unit)
    ax.set_title(title)
    if len(table.columns) > 1:
        legend_outside(ax, title=group)
    return label_source(fig, label)


def memory_figure(
    frame: pd.DataFrame,
    *,
    source: str | None = None,
    by: str = "mode",
    group: str | None = "ladder",
    agg: str = "max",
) -> Figure:
    """Graph memory (``pool_bytes``, drawn in MiB) per mode, one bar per ``group`` (ladder).

    ``agg="max"`` reads each row's pool_bytes as the shared pool's size after that capture
    (graphs reuse one pool, so the last/max is the total); use ``agg="sum"`` for rows that
    hold each graph's own size. :func:`~cgdispatch.views.sweepviews.graph_memory_table`
    gives measured and estimated bars of a sweep (draw it with ``group="bar"``).
    """
    return _bars_by_mode(
        frame,
        "pool_bytes",
        _MIB,
        "graph memory (MiB)",
        agg,
        source,
        by,
        group,
        f"graph memory by {by}",
        "memory_figure",
    )


def capture_time_figure(
    frame: pd.DataFrame,
    *,
    source: str | None = None,
    by: str = "mode",
    group: str | None = "ladder",
) -> Figure:
    """Total capture time (``capture_s``, summed) per mode, one bar per ``group`` (ladder).

    Rows must each hold their own time: capture reports (one row per key) or
    :func:`~cgdispatch.views.sweepviews.unit_table` (one row per unit), not raw sweep rows
    (every shape of a unit repeats the unit's time)."""
    return _bars_by_mode(
        frame,
        "capture_s",
        1.0,
        "capture time (s)",
        "sum",
        source,
        by,
        group,
        f"capture time by {by}",
        "capture_time_figure",
    )


def capture_per_key_figure(captures: pd.DataFrame, *, source: str | None = None) -> Figure:
    """Graph capture time of each key (ms) against its num_tokens, one line per (mode,
    ladder, runtime mode of the keys). ``captures`` is a sweep's per-key capture records
    (:func:`~cgdispatch.sweep.store.load_captures`)."""
    cols = ["mode", "ladder", "runtime_mode", "num_tokens", "capture_s"]
    captures = rows_to_plot(captures, cols, "capture_per_key_figure")
    label = frame_source(captures, source)
    fig = SourcedFigure(figsize=(9, 4.2), layout="constrained")
    ax = fig.subplots()
    for (mode, ladder, kind), part in captures.groupby(cols[:3], sort=False):
        part = part.sort_values("num_tokens")
        name = f"{mode} / {ladder}: {kind} keys"
        ax.plot(part["num_tokens"], part["capture_s"] * 1e3, marker=".", label=name, gid=name)
    ax.set_xlabel("num_tokens of the key (tokens)")
    ax.set_ylabel("graph capture (ms)")
    ax.set_title("capture time of each key (graph capture only)", fontsize=10)
    legend_outside(ax, fontsize=7)
    return label_source(fig, label)


def memory_per_key_figure(captures: pd.DataFrame, per_key: pd.DataFrame) -> Figure:
    """Per-key pool growth measured on a GPU (``captures`` rows with pool bytes) against the
    estimate (``per_key``: ``MemoryEstimate.per_key`` plus mode and ladder, source
    ``model``): one point per key; on the dashed diagonal the estimate is exact."""
    cols = ["mode", "ladder", "runtime_mode", "num_tokens", "uniform"]
    measured = rows_to_plot(captures, [*cols, "pool_bytes"], "memory_per_key_figure")
    measured = measured[measured["pool_bytes"].notna()]
    both = measured.merge(per_key, on=cols, how="inner")
    if both.empty:
        raise ValueError(
            "memory_per_key_figure: no key has both a measured pool size and an estimate; "
            "pass capture records from a CUDA sweep and the estimate of the same units"
        )
    fig = SourcedFigure(figsize=(7.5, 5), layout="constrained")
    ax = fig.subplots()
    for (mode, ladder), part in both.groupby(["mode", "ladder"], sort=False):
        ax.scatter(
            part["pool_increment_bytes"] / _MIB,
            part["pool_bytes"] / _MIB,
            s=12,
            label=f"{mode} / {ladder}",
        )
    top = max(float(both[["pool_increment_bytes", "pool_bytes"]].max().max()) / _MIB, 1e-3)
    ax.plot([0, top], [0, top], color="grey", lw=0.8, ls="--")
    ax.set_xlabel("estimated pool growth per key (MiB) [model]")
    ax.set_ylabel(f"measured pool growth per key (MiB) [{frame_source(measured, None)}]")
    legend_outside(ax, fontsize=7)
    ax.set_title("graph memory per key: estimate vs measurement", fontsize=10)
    return label_source(fig, f"{frame_source(measured, None)}; model")
