"""Figures for the what-if notebook: the workload's step histogram, the ladder comparison,
and the hit rates of one what-if result. (The trace a notebook parameter names comes from
:func:`cgdispatch.workload.sources.workload_trace`.)

Figures are :class:`~cgdispatch.views.plots.SourcedFigure` labelled with their source, as in
:mod:`cgdispatch.views.plots`; they draw what they are given and compute nothing themselves.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..core.generation import generation_for
from .plots import hit_rate_figure
from .sources import MODE_COLORS, SourcedFigure, label_source, rows_to_plot

if TYPE_CHECKING:
    from ..plan.whatif import WhatIfResult

__all__ = ["step_histogram_figure", "ladder_comparison_figure", "whatif_figure"]


def step_histogram_figure(hist: pd.DataFrame, *, source: str, log_x: bool = True) -> Figure:
    """Steps per ``num_tokens`` (log count axis): uniform-decode and mixed steps stacked.

    ``hist`` is :func:`~cgdispatch.workload.trace.step_histogram` (index num_tokens; columns
    uniform_decode, mixed). The title gives each kind's share of the steps.
    """
    hist = rows_to_plot(hist, ["uniform_decode", "mixed"], "step_histogram_figure")
    n = hist.index.to_numpy(dtype=np.int64)
    dec = hist["uniform_decode"].to_numpy(dtype=float)
    mix = hist["mixed"].to_numpy(dtype=float)
    total = dec.sum() + mix.sum()
    fig = SourcedFigure(figsize=(9, 4), layout="constrained")
    ax = fig.subplots()
    # on a log axis a width proportional to n draws every bar equally wide
    width = n * 0.09 if log_x else np.full(len(n), 0.9)
    ax.bar(n, dec, width, color=MODE_COLORS["FULL"], label="uniform decode", gid="hist-decode")
    ax.bar(
        n, mix, width, bottom=dec, color=MODE_COLORS["PIECEWISE"], label="mixed", gid="hist-mixed"
    )
    if log_x:
        ax.set_xscale("log", base=2)
    ax.set_xlabel("num_tokens per step (unpadded)")
    ax.set_yscale("log", nonpositive="clip")  # rare mixed sizes stay visible next to decodes
    ax.set_ylabel("steps (log scale)")
    ax.set_title(
        f"{int(total)} steps: {100 * dec.sum() / total:.1f}% uniform decode, "
        f"{100 * mix.sum() / total:.1f}% mixed",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    return label_source(fig, source)


_PANELS = [
    ("num_graphs", "capture sizes", 1.0),
    ("eager_step_share", "eager steps (%)", 100.0),
    ("padded_token_ratio", "padding / real tokens (%)", 100.0),
    ("mean_step_ms", "mean step (ms)", 1.0),
]


def ladder_comparison_figure(table: pd.DataFrame, *, source: str) -> Figure:
    """One bar per ladder in panels: sizes, eager share, padding waste, mean step time.

    ``table`` is :func:`~cgdispatch.plan.ladder_compare.compare`'s output (for vLLM 0.34 the
    first panel counts prefill token and decode request sizes together); the step-time panel is
    drawn when it has ``mean_step_ms`` (a cost model was given) and is titled with that
    model's ``source``.
    """
    table = rows_to_plot(
        table, ["ladder", "num_graphs", "eager_step_share"], "ladder_comparison_figure"
    )
    panels = [p for p in _PANELS if p[0] in table.columns]
    if "vllm_version" in table.columns:
        # each shape names its count (two ladders: prefill token + decode request sizes)
        labels = {generation_for(v).ladder.count_label for v in table["vllm_version"]}
        if len(labels) == 1 and panels[0][0] == "num_graphs":
            panels[0] = ("num_graphs", labels.pop(), 1.0)
    fig = SourcedFigure(figsize=(3.2 * len(panels), 3.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    names = table["ladder"].astype(str).tolist()
    for ax, (column, label, scale) in zip(axes, panels):
        values = table[column].to_numpy(dtype=float) * scale
        bars = ax.bar(names, values, color="0.55", gid=f"ladders-{column}")
        ax.bar_label(bars, fmt="%.3g", fontsize=7)
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelrotation=60, labelsize=8)
        if column == "mean_step_ms" and "source" in table.columns:
            # a long source wraps to the panel's width (3.2 in holds ~40 characters)
            note = textwrap.fill(f"[{table['source'].iloc[0]}]", 40)
            ax.set_title(f"{label}\n{note}", fontsize=9)
    return label_source(fig, source)


def whatif_figure(result: WhatIfResult, source: str, max_sizes: int = 40) -> Figure:
    """Steps per runtime mode and per padded size for one what-if result.

    :func:`cgdispatch.views.plots.hit_rate_figure` on the result's ``by_size`` table; ``source``
    names the trace (e.g. ``"synthetic (sharegpt preset, ...)"``).
    """
    stats = result.by_size.rename(columns={"steps": "calls"})
    return hit_rate_figure(stats, source=source, max_sizes=max_sizes)
