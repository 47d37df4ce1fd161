"""Matplotlib figures for notebooks and reports; each returns a ``Figure`` labelled with its source.

Every figure carries a corner note ``source: ...`` (read it back with :func:`figure_source`):
``"measured (CPU)"``, ``"measured (NVIDIA H200)"``, ``"reference data (H200, 2026-12-01)"``,
``"model"``, or what a synthetic input was. Figures are built with ``matplotlib.figure.Figure``
(no pyplot state), so they are safe to build in tests and servers; Jupyter displays a returned
Figure inline (it renders itself as PNG). These functions draw what they are given; they do not measure or model.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure

from ..core.config import GraphConfig
from ..core.dispatcher import CudagraphDispatcher
from .explain import make_dispatcher

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "figure_source",
    "ladder_figure",
    "hit_rate_figure",
    "speedup_figure",
    "memory_figure",
    "capture_time_figure",
]

SOURCE_GID = "cgdispatch-source"  # gid of the corner note that names the data source
MODE_COLORS = {
    "FULL": "#1f77b4",
    "PIECEWISE": "#ff7f0e",
    "NONE": "#7f7f7f",
    "FULL_AND_PIECEWISE": "#2ca02c",
    "FULL_DECODE_ONLY": "#9467bd",
}
_MIB = 2**20


class SourcedFigure(Figure):
    """A ``Figure`` that renders itself as PNG in Jupyter and Voila without pyplot's inline backend."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue()


def _label_source(fig: Figure, source: str) -> Figure:
    if not isinstance(source, str) or not source.strip():
        raise ValueError(
            f"source={source!r} is invalid: name where the data came from, e.g. 'model', "
            "'measured (CPU)' or 'reference data (H200, 2026-12-01)'"
        )
    # a figure-level x label, so that constrained layout keeps room for it under the axes
    note = fig.supxlabel(f"source: {source}", x=0.995, ha="right", fontsize=8, color="0.35")
    note.set_gid(SOURCE_GID)
    return fig


def figure_source(fig: Figure) -> str | None:
    """The source a figure was labelled with, or None if it carries no label."""
    for text in fig.texts:
        if text.get_gid() == SOURCE_GID:
            return text.get_text().removeprefix("source: ")
    return None


def _require(frame: pd.DataFrame, columns: Sequence[str], what: str) -> pd.DataFrame:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{what} needs columns {list(columns)}; the frame lacks {missing} "
            f"(it has {list(frame.columns)})"
        )
    if "status" in frame.columns:  # sweep rows that failed or were skipped carry no figure
        frame = frame[frame["status"].isin(["ok", "OK", ""]) | frame["status"].isna()]
    if frame.empty:
        raise ValueError(f"{what}: the frame has no rows to plot (after dropping failed rows)")
    return frame


def _frame_source(frame: pd.DataFrame, source: str | None) -> str:
    """``source`` if given, else the frame's ``source`` column values joined."""
    if source is not None:
        return source
    if "source" in frame.columns:
        values = [str(v) for v in dict.fromkeys(frame["source"].dropna())]
        if values:
            return "; ".join(values)
    raise ValueError(
        "source=None and the frame has no 'source' column: say where the numbers came from, "
        "e.g. source='measured (CPU)'"
    )


def ladder_figure(
    config: GraphConfig | CudagraphDispatcher,
    *,
    max_num_tokens: int | None = None,
    source: str = "computed from the config (dispatcher padding table)",
    log_x: bool = True,
) -> Figure:
    """The capture-size ladder and the padding it implies.

    Top: padded size against num_tokens (a step function; above the largest capture size a
    batch runs eagerly at its own size, drawn dashed), with the capture sizes marked on the
    size axis. Bottom: padding waste, the share of the padded batch that is padding.
    ``max_num_tokens`` defaults to a quarter beyond the largest capture size, capped by
    max_num_batched_tokens.
    """
    dispatcher = make_dispatcher(config)
    cfg = dispatcher.config
    sizes = list(cfg.cudagraph_capture_sizes)
    largest = dispatcher.max_capture_size
    if max_num_tokens is None:
        max_num_tokens = min(
            max(largest + largest // 4, largest + 1, 2), cfg.max_num_batched_tokens
        )
    n = np.arange(1, max_num_tokens + 1)
    padded = np.array([dispatcher.padded_size(int(i)) for i in n])
    graphed = n <= largest

    fig = SourcedFigure(figsize=(8, 5.2), layout="constrained")
    ax, ax_waste = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1.4])
    ax.plot(
        n[graphed],
        padded[graphed],
        drawstyle="steps-post",
        color=MODE_COLORS["FULL"],
        label="padded size",
        gid="padded-size",
    )
    if (~graphed).any():
        ax.plot(
            n[~graphed],
            padded[~graphed],
            ls="--",
            color=MODE_COLORS["NONE"],
            label="eager (above the largest capture size)",
            gid="eager",
        )
    ax.plot(n, n, ls=":", lw=0.8, color="0.6", label="no padding")
    ax.plot(
        sizes,
        sizes,
        ls="none",
        marker="o",
        ms=3.5,
        color="k",
        label=f"capture sizes ({len(sizes)})",
        gid="capture-sizes",
    )
    ax.set_ylabel("padded size (tokens)")
    ax.set_title(f"capture ladder: {cfg.cudagraph_mode}, {len(sizes)} sizes up to {largest}")
    ax.legend(loc="upper left", fontsize=8)

    waste_pct = 100.0 * (padded - n) / padded
    ax_waste.fill_between(n, waste_pct, step="post", alpha=0.35, color=MODE_COLORS["PIECEWISE"])
    ax_waste.plot(n, waste_pct, drawstyle="steps-post", color=MODE_COLORS["PIECEWISE"], gid="waste")
    ax_waste.set_ylabel("padding (%)")
    ax_waste.set_xlabel("num_tokens (unpadded batch)")
    ax_waste.set_ylim(0, max(5.0, float(waste_pct.max()) * 1.1))
    if log_x:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
    return _label_source(fig, source)


def hit_rate_figure(stats: pd.DataFrame, *, source: str, max_sizes: int = 40) -> Figure:
    """Calls by runtime mode (left) and by padded size, coloured by mode (right).

    ``stats`` is ``CudagraphDispatcher.stats_frame()`` (runtime_mode, padded_size, calls,
    ...). Eager steps are one bar on the right ("eager") since their sizes are unpadded.
    Only the ``max_sizes`` most-called graph sizes are drawn on the right, the rest summed
    into "other".
    """
    stats = _require(stats, ["runtime_mode", "padded_size", "calls"], "hit_rate_figure")
    total = int(stats["calls"].sum())
    by_mode = stats.groupby("runtime_mode")["calls"].sum()
    modes = [m for m in ("FULL", "PIECEWISE", "NONE") if m in by_mode.index]

    fig = SourcedFigure(figsize=(10, 4), layout="constrained")
    ax_mode, ax_size = fig.subplots(1, 2, width_ratios=[1, 3])
    bars = ax_mode.bar(
        modes,
        [by_mode[m] for m in modes],
        color=[MODE_COLORS[m] for m in modes],
        gid="calls-by-mode",
    )
    ax_mode.bar_label(bars, labels=[f"{100 * by_mode[m] / total:.1f}%" for m in modes], fontsize=8)
    ax_mode.set_ylabel("steps")
    graphed = total - int(by_mode.get("NONE", 0))
    ax_mode.set_title(f"{100 * graphed / total:.1f}% of {total} steps ran a graph", fontsize=10)

    graph_rows = stats[stats["runtime_mode"] != "NONE"]
    per_size = graph_rows.pivot_table(
        index="padded_size", columns="runtime_mode", values="calls", aggfunc="sum", fill_value=0
    )
    top = per_size.sum(axis=1).nlargest(max_sizes).index.sort_values()
    other = per_size.drop(index=top).sum()
    labels = [str(s) for s in top]
    table = per_size.loc[top]
    if len(per_size) > len(top):
        table.loc["other"] = other
        labels.append("other")
    x = np.arange(len(labels) + 1)
    bottom = np.zeros(len(labels) + 1)
    for mode in ("FULL", "PIECEWISE"):
        if mode in table.columns:
            heights = np.append(table[mode].to_numpy(dtype=float), 0.0)
            ax_size.bar(
                x, heights, bottom=bottom, color=MODE_COLORS[mode], label=mode, gid=f"calls-{mode}"
            )
            bottom += heights
    eager = float(by_mode.get("NONE", 0))
    ax_size.bar(x[-1:], [eager], color=MODE_COLORS["NONE"], label="NONE (eager)", gid="calls-NONE")
    ax_size.set_xticks(x, [*labels, "eager"], rotation=90, fontsize=7)
    ax_size.set_xlabel("padded size (tokens)")
    ax_size.set_ylabel("steps")
    ax_size.legend(fontsize=8)
    ax_size.set_title("steps per captured graph", fontsize=10)
    return _label_source(fig, source)


def speedup_figure(
    frame: pd.DataFrame,
    *,
    source: str | None = None,
    by: str = "mode",
    x: str = "num_tokens",
    split: str | None = "uniform_decode",
) -> Figure:
    """Speed-up (eager time / graph time, ``speedup_x``) against batch size, one line per ``by``.

    Rows with the same (by, split, x) are averaged. When the frame has a ``split`` column
    with more than one value (uniform-decode and mixed batches), each gets its own line
    (dashed for the truthy value), so decode and mixed steps are never averaged together.
    ``source`` defaults to the frame's ``source`` column. A dotted line marks 1x (no gain).
    """
    frame = _require(frame, [by, x, "speedup_x"], "speedup_figure")
    label = _frame_source(frame, source)
    if split is None or split not in frame.columns or frame[split].nunique() < 2:
        frame, split = frame.assign(_split=""), "_split"  # one line per `by`
    mean = frame.groupby([by, split, x], sort=True)["speedup_x"].mean()
    fig = SourcedFigure(figsize=(8, 4.5), layout="constrained")
    ax = fig.subplots()
    for key, part in dict.fromkeys(zip(frame[by], frame[split])):
        series = mean.loc[(key, part)]
        name = str(key) if split == "_split" else f"{key} ({split}={part})"
        ax.plot(
            series.index.to_numpy(),
            series.to_numpy(),
            marker="o",
            ms=3,
            ls="--" if bool(part) else "-",
            label=name,
            color=MODE_COLORS.get(str(key)),
            gid=f"speedup-{name}",
        )
    ax.axhline(1.0, ls=":", color="0.5", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"{x} (tokens)")
    ax.set_ylabel("speed-up (eager / graph, x)")
    ax.set_title(f"step speed-up by {by}")
    ax.legend(fontsize=8)
    return _label_source(fig, label)


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
    frame = _require(frame, [by, value], what)  # group is used when the frame has it
    label = _frame_source(frame, source)
    keys = [by] + ([group] if group and group in frame.columns else [])
    table = frame.groupby(keys, sort=False)[value].agg(agg) / scale
    table = table.unstack(group) if len(keys) == 2 else table.to_frame(value)
    fig = SourcedFigure(figsize=(8, 4), layout="constrained")
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
    ax.set_xticks(x, [str(i) for i in table.index])
    ax.set_ylabel(unit)
    ax.set_title(title)
    if len(table.columns) > 1:
        ax.legend(title=group, fontsize=8)
    return _label_source(fig, label)


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
    hold each graph's own size.
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
    """Total capture time (``capture_s``, summed) per mode, one bar per ``group`` (ladder)."""
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
