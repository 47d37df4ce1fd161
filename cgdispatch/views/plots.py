"""Dispatch and step-time figures: the capture ladder and its padding, hit rates, speed-up
and step time per mode. Each returns a :class:`~cgdispatch.views.sources.SourcedFigure`
labelled with its source (read it back with :func:`~cgdispatch.views.sources.figure_source`).

Figures are built with ``matplotlib.figure.Figure`` (no pyplot state), so they are safe to
build in tests and servers; Jupyter displays a returned Figure inline. These functions draw
what they are given; they do not measure or model. What capturing costs (graph memory,
capture time) is drawn by :mod:`cgdispatch.views.capture_figures`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure

from ..core.config import GraphConfig
from ..core.generation import (
    GraphDispatcher,
    capture_keys,
    generation_of,
    make_graph_dispatcher,
    padded_token_table,
)
from ..core.ladder_shape import SplitLadders, TokenLadder
from ..core.modes import CUDAGraphMode
from ..core.v2.cudagraph_manager import CudaGraphManager
from .sources import (
    MODE_COLORS,
    SourcedFigure,
    figure_source,
    frame_source,
    label_source,
    legend_outside,
    rows_to_plot,
)

if TYPE_CHECKING:
    import pandas as pd

_NONE = CUDAGraphMode.NONE

__all__ = [
    "figure_source",
    "ladder_figure",
    "hit_rate_figure",
    "speedup_figure",
    "noise_floor",
    "step_time_figure",
]


def ladder_figure(
    config: GraphConfig | GraphDispatcher,
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
    max_num_batched_tokens. Any generation (``core.generation``): for a release with two
    ladders (generation 2) both are drawn, see :func:`_gen2_ladder_figure`.
    """
    dispatcher = make_graph_dispatcher(config, record_stats=False)
    shape = generation_of(dispatcher).ladder
    if type(shape) not in _LADDER_FIGURES:
        raise ValueError(
            f"no ladder figure draws the ladder shape {shape.name!r}: add one to "
            "cgdispatch.views.plots._LADDER_FIGURES"
        )
    return _LADDER_FIGURES[type(shape)](dispatcher, max_num_tokens, source, log_x)


def _token_ladder_figure(
    dispatcher: GraphDispatcher, max_num_tokens: int | None, source: str, log_x: bool
) -> Figure:
    """One token ladder (V1): the dispatcher's padding of every count, sizes marked."""
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
    return label_source(fig, source)


def _gen2_ladder_figure(
    manager: CudaGraphManager, max_num_tokens: int | None, source: str, log_x: bool
) -> Figure:
    """Generation 2's two ladders: token-keyed graphs on the prefill grid (mixed batches,
    one request: ``padded-size``, ``eager``, ``waste``, sizes as ``capture-sizes``) and
    uniform decode graphs sized by request count (``decode-*``; x and y in tokens,
    ``q * num_reqs``, decode sizes marked at ``q * size``). Padding is the manager's own
    answer (``padded_token_table``); a decode batch above its ladder may pad to a
    token-keyed graph, as vLLM 0.34 does.
    """
    cfg, q = manager.config, manager.config.uniform_decode_query_len
    keys = capture_keys(manager)
    prefill = sorted({k.num_tokens for k in keys if k.key.uniform_token_count is None})
    decode = sorted({k.num_reqs or 0 for k in keys if k.key.uniform_token_count is not None})
    largest = max([k.num_tokens for k in keys], default=1)
    if max_num_tokens is None:
        max_num_tokens = min(
            max(largest + largest // 4, largest + 1, 2), cfg.max_num_batched_tokens
        )
    fig = SourcedFigure(figsize=(8, 5.2), layout="constrained")
    ax, ax_waste = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1.4])
    kinds = (("", False, MODE_COLORS["PIECEWISE"]), ("decode-", True, MODE_COLORS["FULL"]))
    for prefix, uniform, color in kinds:
        table = padded_token_table(manager, uniform, max_tokens=max_num_tokens)
        n = np.arange(q if uniform else 1, max_num_tokens + 1, q if uniform else 1)
        padded = np.array(table.padded_tokens)[n]
        graphed = np.array([table.runtime_modes[i] is not _NONE for i in n], dtype=bool)
        kind = "uniform decode" if uniform else "mixed (1 request)"
        ax.plot(n[graphed], padded[graphed], drawstyle="steps-post", color=color,
                label=f"padded size, {kind}", gid=f"{prefix}padded-size")  # fmt: skip
        if (~graphed).any():
            ax.plot(n[~graphed], padded[~graphed], ls="--", color=color, alpha=0.5,
                    label=f"eager, {kind}", gid=f"{prefix}eager")  # fmt: skip
        waste_pct = 100.0 * (padded - n) / padded
        ax_waste.plot(n, waste_pct, drawstyle="steps-post", color=color, gid=f"{prefix}waste")
    ax.plot(prefill, prefill, ls="none", marker="o", ms=3.5, color="k",
            label=f"prefill token sizes ({len(prefill)})", gid="capture-sizes")  # fmt: skip
    decode_tokens = [q * r for r in decode]
    ax.plot(decode_tokens, decode_tokens, ls="none", marker="s", ms=3.5, mfc="none", color="k",
            label=f"decode request sizes ({len(decode)}) x q={q}", gid="decode-sizes")  # fmt: skip
    ax.set_ylabel("padded size (tokens)")
    ax.set_title(f"capture ladders (vLLM 0.34): {cfg.cudagraph_mode}\n{len(prefill)} prefill "
                 f"token sizes, {len(decode)} decode request sizes")  # fmt: skip
    ax.legend(loc="upper left", fontsize=8)
    ax_waste.set_ylabel("padding (%)")
    ax_waste.set_xlabel("num_tokens (unpadded batch)")
    if log_x:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
    return label_source(fig, source)


def hit_rate_figure(stats: pd.DataFrame, *, source: str, max_sizes: int = 40) -> Figure:
    """Calls by runtime mode (left) and by padded size, coloured by mode (right).

    ``stats`` is ``CudagraphDispatcher.stats_frame()`` (runtime_mode, padded_size, calls,
    ...). Eager steps are one bar on the right ("eager") since their sizes are unpadded.
    Only the ``max_sizes`` most-called graph sizes are drawn on the right, the rest summed
    into "other".
    """
    stats = rows_to_plot(stats, ["runtime_mode", "padded_size", "calls"], "hit_rate_figure")
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
    return label_source(fig, source)


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
    frame = rows_to_plot(frame, [by, x, "speedup_x"], "speedup_figure")
    label = frame_source(frame, source)
    if split is None or split not in frame.columns or frame[split].nunique() < 2:
        frame, split = frame.assign(_split=""), "_split"  # one line per `by`
    mean = frame.groupby([by, split, x], sort=True)["speedup_x"].mean()
    fig = SourcedFigure(figsize=(10.5, 4.5), layout="constrained")
    ax = fig.subplots()
    for group in _coinciding(mean, list(dict.fromkeys(zip(frame[by], frame[split])))):
        key, part = group[0]
        series = mean.loc[(key, part)]
        names = " = ".join(str(k) for k, _ in group)
        name = names if split == "_split" else f"{names} ({split}={part})"
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
    floor = noise_floor(frame, by)
    if floor is not None:
        ax.axhspan(*floor[:2], color="0.5", alpha=0.15, lw=0, label=floor[2], gid="noise-floor")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"{x} (tokens)")
    if label.startswith("measured (CPU)"):  # the CPU stand-in replays no GPU graph
        ax.set_ylabel("eager / runner step time (x)")
        ax.set_title(f"CPU runner overhead by {by} (CPU stand-in: not a GPU speed-up)")
    else:
        ax.set_ylabel("speed-up (eager / graph, x)")
        ax.set_title(f"step speed-up by {by}")
    legend = legend_outside(
        ax, title=f"lines within {100 * SAME_LINE_RTOL:g}%: one line", title_fontsize=7
    )
    # a tall legend (many modes and ladders) gets the height it needs: constrained layout
    # would otherwise squeeze the axes to nothing
    lines = sum(text.get_text().count("\n") + 1 for text in legend.get_texts())
    fig.set_figheight(max(fig.get_figheight(), 0.16 * lines + 1.2))
    return label_source(fig, label)


SAME_LINE_RTOL = 0.005  # series this close at every size look like one line: drawn as one


def _coinciding(mean: pd.Series, series: list[tuple]) -> list[list[tuple]]:
    """``series`` (keys of ``mean``'s first two levels) in groups whose speed-ups agree
    within :data:`SAME_LINE_RTOL` at the same sizes, first-seen order; each group is drawn
    as one line labelled ``A = B``, so that the reader can tell which modes it stands for."""
    groups: list[list[tuple]] = []
    for key in series:
        values = mean.loc[key]
        for group in groups:
            first = mean.loc[group[0]]
            same_sizes = key[1] == group[0][1] and first.index.equals(values.index)
            if same_sizes and np.allclose(values, first, rtol=SAME_LINE_RTOL, atol=0.0):
                group.append(key)
                break
        else:
            groups.append([key])
    return groups


def noise_floor(frame: pd.DataFrame, by: str = "mode") -> tuple[float, float, str] | None:
    """The band of ratios a timing cannot tell from 1x: NONE's spread (it replays nothing,
    so its ratio is noise), else the eager runs' p10-p90 spread; None when neither is there."""
    if by in frame.columns and (frame[by].astype(str) == "NONE").any():
        none = frame.loc[frame[by].astype(str) == "NONE", "speedup_x"].to_numpy(dtype=float)
        return float(none.min()), float(none.max()), "noise floor (NONE's spread)"
    if {"eager_p10_ms", "eager_p90_ms", "eager_ms"} <= set(frame.columns):
        eager = frame["eager_ms"].to_numpy(dtype=float)
        low = frame["eager_p10_ms"].to_numpy(dtype=float) / eager
        high = frame["eager_p90_ms"].to_numpy(dtype=float) / eager
        return float(np.nanmin(low)), float(np.nanmax(high)), "noise floor (eager p10-p90)"
    return None


def step_time_figure(rows: pd.DataFrame, *, source: str | None = None) -> Figure:
    """Median step time vs num_tokens of the ok rows: graphs (solid, the mode's colour) and
    eager (dashed, a lighter shade of it) per mode, each a colour of its own, with the
    p10-p90 spread of the graph runs as thin bars; one panel per batch kind present.
    The y axis is set by the medians (a noisy p90 would flatten every line): bars that
    reach past it are cut at the top, and the title says so.
    ``source`` defaults to the rows' ``source`` column (e.g. ``measured (CPU)``)."""
    cols = ["mode", "num_tokens", "uniform_decode", "eager_ms", "graph_ms"]
    ok = rows_to_plot(rows, cols, "step_time_figure")
    label = frame_source(ok, source)
    kinds = [k for k in (True, False) if (ok["uniform_decode"] == k).any()]
    fig = SourcedFigure(figsize=(6.5 + 3.5 * len(kinds), 4.2), layout="constrained")
    axes = fig.subplots(1, len(kinds), squeeze=False, sharey=True)[0]
    top, p90_top = 0.0, 0.0
    for ax, uniform in zip(axes, kinds):
        part = ok[ok["uniform_decode"] == uniform]
        for mode, group in part.groupby("mode", sort=False):
            group = group.groupby("num_tokens").median(numeric_only=True).sort_index()
            x, color = group.index.to_numpy(), MODE_COLORS.get(str(mode), "0.3")
            graph, eager = group["graph_ms"], group["eager_ms"]
            ax.plot(x, graph, marker="o", ms=3, color=color, label=f"{mode}: graphs")
            ax.plot(x, eager, ls="--", marker=".", color=_lighter(color), label=f"{mode}: eager")
            top = max(top, float(np.nanmax(graph)), float(np.nanmax(eager)))
            if {"graph_p10_ms", "graph_p90_ms"} <= set(group.columns):
                low = (graph - group["graph_p10_ms"]).clip(lower=0).to_numpy(dtype=float)
                high = (group["graph_p90_ms"] - graph).clip(lower=0).to_numpy(dtype=float)
                ax.errorbar(x, graph, yerr=[low, high], fmt="none", ecolor=color, alpha=0.45,
                            elinewidth=0.8, capsize=2)  # fmt: skip
                p90_top = max(p90_top, float(np.nanmax(group["graph_p90_ms"])))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("num_tokens (tokens)")
        ax.set_title("uniform decode" if uniform else "mixed batches", fontsize=10)
    if top > 0:
        axes[0].set_ylim(0.0, 1.5 * top)  # shared: the medians decide, not a noisy p90
    legend_outside(axes[-1], fontsize=8)  # the panels share modes and styles: one legend
    axes[0].set_ylabel("step time, median (ms)")
    bars = "bars: graph runs' p10-p90" + (", cut at the top" if p90_top > 1.5 * top else "")
    fig.suptitle(f"step time: eager vs graphs ({bars})")
    return label_source(fig, label)


def _lighter(color: str, share: float = 0.5) -> tuple[float, float, float]:
    """``color`` mixed with ``share`` white: the eager line beside its mode's graph line."""
    from matplotlib.colors import to_rgb

    return tuple(c + (1.0 - c) * share for c in to_rgb(color))


# ladder shape -> the figure that draws it (ladder_figure's one branch on the shape)
_LADDER_FIGURES = {TokenLadder: _token_ladder_figure, SplitLadders: _gen2_ladder_figure}
