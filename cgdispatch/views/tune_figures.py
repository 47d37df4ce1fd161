"""The trade-off a ``tune`` weighs, one panel per cost: graphs, capture seconds, graph memory
on x, the change in the objective the verdict judges (p99 TTFT by default, mean step time
for ``--objective step``) against vLLM's default on y, in the objective's unit. In-sample
points are hollow, held-out points filled (a latency objective has no in-sample replay);
the plan is highlighted with the band ``tune`` judged its gain against, and each held-out
point of the plan and the default says its eager share (the long prefills no graph takes)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator
from matplotlib.transforms import Bbox

from ..plan.tune_result import OBJECTIVES, TuneResult
from .numbers import format_in, nbytes
from .sources import SourcedFigure, label_source, legend_outside

__all__ = ["tradeoff_figure", "judged_column"]

_PANELS = (  # column, axis label, unit for numbers.format_in
    ("num_graphs", "capture sizes (graphs to plan)", ""),
    ("capture_s", "capture time", "s"),
    ("graph_memory_bytes", "graph memory", "bytes"),
)
_BASE = "vllm default"
_PLAN = "planned"
_LABEL_PT = 8  # point labels: 11 px at the 100 dpi the notebooks and dashboard show
_TEXT_PT = 9  # axis labels and ticks
# what the y axis says for each judged figure, and the unit it is kept in
_JUDGED = {"mean_step_ms": ("mean step time", "ms"), "p99_ttft_ms": ("p99 TTFT", "ms"),
           "throughput_tok_s": ("throughput", "tok/s"), "capture_s": ("capture time", "s"),
           "kv_cache_tokens": ("KV-cache tokens", "tokens")}  # fmt: skip


def judged_column(result: TuneResult) -> str:
    """The column the figure's y axis shows: the objective's figure when the held-out table
    has it, else mean step time (a trace of steps has no latency)."""
    key = OBJECTIVES[result.objective][0]
    held = result.tables.get("held out")
    return key if held is not None and key in held.columns else "mean_step_ms"


def _delta(table: pd.DataFrame, column: str) -> np.ndarray:
    base = float(table.loc[table["ladder"] == _BASE, column].iloc[0])
    return table[column].to_numpy(dtype=float) - base


def tradeoff_figure(result: TuneResult) -> Figure:
    """The change in the judged objective against vLLM's default for every ladder ``result``
    replayed, in sample (hollow, where the objective has in-sample figures) and held out
    (filled), against each cost; the plan in red with its judged band, the default at 0.
    Needs ``result.tables`` (every :func:`~cgdispatch.plan.tune.tune` fills them)."""
    held, in_sample = result.tables.get("held out"), result.tables.get("in sample")
    if held is None or in_sample is None or "mean_step_ms" not in held:
        raise ValueError(
            "tradeoff_figure needs a TuneResult with its held-out and in-sample tables and "
            "step times: run cgdispatch.tune with a cost model"
        )
    column = judged_column(result)
    name, unit = _JUDGED.get(column, (column, ""))
    judged = column == OBJECTIVES[result.objective][0]
    panels = [p for p in _PANELS if p[0] in held.columns]
    fig = SourcedFigure(figsize=(3.6 * len(panels), 3.9), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(panels), sharey=True))
    tables = [(held, True, "held out")]
    if column in in_sample.columns:
        tables.insert(0, (in_sample, False, "in sample"))
    for ax, (x_column, label, x_unit) in zip(axes, panels):
        for table, filled, kind in tables:
            x = table[x_column].to_numpy(dtype=float)
            y = _delta(table, column)
            for ladder, xi, yi in zip(table["ladder"], x, y):
                color = "tab:red" if ladder == _PLAN else "0.2" if ladder == _BASE else "tab:blue"
                ax.scatter(
                    xi, yi, s=46, marker="o", edgecolors=color,
                    facecolors=color if filled else "none", zorder=3,
                    label=f"{kind}", gid=f"tradeoff-{x_column}-{kind}-{ladder}",
                )  # fmt: skip
            if filled:
                share = table["eager_step_share"].to_numpy(dtype=float)
                for ladder, xi, yi, e in zip(table["ladder"], x, y, share):
                    key = ladder in (_PLAN, _BASE)  # their eager share: the prefills no graph takes
                    text = f"{ladder}" + (f"\neager {100 * e:.1f}%" if key else "")
                    ax.annotate(text, (xi, yi), textcoords="offset points", xytext=_OFFSETS[0],
                                fontsize=_LABEL_PT, color="tab:red" if ladder == _PLAN else "0.25",
                                gid="tradeoff-label", in_layout=False)  # fmt: skip
        if judged and result.band > 0:
            plan = (held["ladder"] == _PLAN).to_numpy()
            ax.errorbar(
                held[x_column].to_numpy(dtype=float)[plan], _delta(held, column)[plan],
                yerr=result.band, fmt="none", ecolor="tab:red", elinewidth=1.2, capsize=4,
                zorder=2, label="plan's judged band", gid=f"tradeoff-band-{x_column}",
            )  # fmt: skip
        ax.axhline(0.0, color="0.6", linewidth=0.8)
        ax.set_xlabel(label, fontsize=_TEXT_PT)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))  # "1.25 GiB" labels need room
        if x_unit:
            ax.xaxis.set_major_formatter(FuncFormatter(_formatter(x_unit)))
        ax.tick_params(labelsize=_TEXT_PT)
        ax.grid(alpha=0.3)
    axes[0].yaxis.set_major_formatter(FuncFormatter(_formatter(unit, sign=True)))
    lower = OBJECTIVES[result.objective][1] if judged else True  # mean step: lower is better
    better = "lower" if lower else "higher"
    axes[0].set_ylabel(f"\u0394 {name} vs vLLM's default\n({better} is better)", fontsize=_TEXT_PT)
    handles, labels = axes[0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    legend_outside(axes[-1], list(unique.values()), list(unique.keys()))
    verdict = "plan recommended" if result.recommendation == _PLAN else "vLLM's default kept"
    what = f"judged on {name}" if judged else f"{name} (the objective has no figure to plot)"
    fig.suptitle(
        f"what each ladder costs and buys: {what} ({verdict}; held out: last "
        f"{result.holdout:g} of the trace)",
        fontsize=10,
    )
    label_source(fig, result.source)
    _spread_labels(fig)
    return fig


def _formatter(unit: str, sign: bool = False):
    """Tick text in ``unit`` as a person writes it (no 1e8 offset text, no trailing zeros:
    ``+0.08 ms``, ``1.5 s``)."""

    def tick(value: float, _pos: int) -> str:
        text = nbytes(value, sign=sign) if unit == "bytes" else format_in(value, unit, sign=sign)
        text = _TRAILING_ZEROS.sub(r"\1", text).replace(". ", " ").removesuffix(".")
        return text.removesuffix(f" {unit}" if "tok" in unit else "")

    return tick


_TRAILING_ZEROS = re.compile(r"(\.\d*?)0+(?=\s|$)")


# where a point's label may go, in points from the point: right-above first, then around it
_OFFSETS = [(5, 4), (5, -12), (-5, 4), (-5, -12), (5, 14), (-5, 14), (5, -22), (-5, -22),
            (5, 24), (-5, 24), (5, -32), (-5, -32), (5, 36), (-5, 36), (5, -44), (-5, -44),
            (5, 48), (-5, 48), (5, -56), (-5, -56)]  # fmt: skip


_MARKER_RADIUS_PT = 3.5  # s=46 points²: a marker about 7 points across


def _spread_labels(fig: Figure) -> None:
    """Move each point label to the first place in :data:`_OFFSETS` where its box meets no
    marker and no label placed before it and stays inside its axes (else leave it where it was first put).
    Lays the figure out once to measure the boxes; the labels do not take part in the layout,
    so the axes do not move afterwards."""
    canvas = FigureCanvasAgg(fig)  # pyplot-free; Jupyter still shows the figure as PNG
    canvas.draw()
    renderer = canvas.get_renderer()
    for ax in fig.axes:
        area = ax.get_window_extent(renderer)
        radius = renderer.points_to_pixels(_MARKER_RADIUS_PT)
        placed = [  # the markers, so that no label hides a point
            Bbox.from_extents(px - radius, py - radius, px + radius, py + radius)
            for coll in ax.collections
            for px, py in coll.get_offset_transform().transform(coll.get_offsets())
        ]
        for label in (t for t in ax.texts if t.get_gid() == "tradeoff-label"):
            for dx, dy in _OFFSETS:
                label.set_position((dx, dy))
                label.set_horizontalalignment("left" if dx > 0 else "right")
                box = label.get_window_extent(renderer)
                inside = area.x0 <= box.x0 and box.x1 <= area.x1 and area.y0 <= box.y0
                if inside and box.y1 <= area.y1 and not any(box.overlaps(p) for p in placed):
                    break
            else:
                label.set_position(_OFFSETS[0])
                label.set_horizontalalignment("left")
                box = label.get_window_extent(renderer)
            placed.append(box)
