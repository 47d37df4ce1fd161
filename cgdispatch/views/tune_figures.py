"""The trade-off a ``tune`` weighs, one panel per cost: graphs, capture seconds, graph memory
on x, the change in mean step time against vLLM's default on y. In-sample points are hollow,
held-out points filled; the plan is highlighted and each held-out point says its eager share
(the long prefills no graph takes)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from ..plan.tune_result import TuneResult
from .sources import SourcedFigure, label_source, legend_outside

__all__ = ["tradeoff_figure"]

_MIB = 1 << 20
_PANELS = (
    ("num_graphs", "capture sizes (graphs to plan)", 1.0),
    ("capture_s", "capture time (s)", 1.0),
    ("graph_memory_bytes", "graph memory (MiB)", 1.0 / _MIB),
)
_BASE = "vllm default"
_PLAN = "planned"


def _delta_pct(table: pd.DataFrame) -> np.ndarray:
    base = float(table.loc[table["ladder"] == _BASE, "mean_step_ms"].iloc[0])
    return 100.0 * (table["mean_step_ms"].to_numpy(dtype=float) / base - 1.0)


def tradeoff_figure(result: TuneResult) -> Figure:
    """Δ mean step time (%) against vLLM's default for every ladder ``result`` replayed, in
    sample (hollow) and held out (filled), against each cost; the plan in red, the default
    at 0. Needs ``result.tables`` (every :func:`~cgdispatch.plan.tune.tune` fills them)."""
    held, in_sample = result.tables.get("held out"), result.tables.get("in sample")
    if held is None or in_sample is None or "mean_step_ms" not in held:
        raise ValueError(
            "tradeoff_figure needs a TuneResult with its held-out and in-sample tables and "
            "step times: run cgdispatch.tune with a cost model"
        )
    panels = [p for p in _PANELS if p[0] in held.columns]
    fig = SourcedFigure(figsize=(4.2 * len(panels), 4.0), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(panels), sharey=True))
    for ax, (column, label, scale) in zip(axes, panels):
        for table, filled, kind in ((in_sample, False, "in sample"), (held, True, "held out")):
            x = table[column].to_numpy(dtype=float) * scale
            y = _delta_pct(table)
            for name, xi, yi in zip(table["ladder"], x, y):
                color = "tab:red" if name == _PLAN else "0.2" if name == _BASE else "tab:blue"
                ax.scatter(
                    xi, yi, s=46, marker="o", edgecolors=color,
                    facecolors=color if filled else "none", zorder=3,
                    label=f"{kind}", gid=f"tradeoff-{column}-{kind}-{name}",
                )  # fmt: skip
            if filled:
                share = table["eager_step_share"].to_numpy(dtype=float)
                for name, xi, yi, e in zip(table["ladder"], x, y, share):
                    key = name in (_PLAN, _BASE)  # their eager share: the prefills no graph takes
                    text = f"{name}" + (f"\neager {100 * e:.1f}%" if key else "")
                    ax.annotate(text, (xi, yi), textcoords="offset points", xytext=_OFFSETS[0],
                                fontsize=7, color="tab:red" if name == _PLAN else "0.25",
                                gid="tradeoff-label", in_layout=False)  # fmt: skip
        ax.axhline(0.0, color="0.6", linewidth=0.8)
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Δ mean step time vs vLLM's default (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    legend_outside(axes[-1], list(unique.values()), list(unique.keys()))
    verdict = "plan recommended" if result.recommendation == _PLAN else "vLLM's default kept"
    fig.suptitle(
        f"what each ladder costs and buys ({verdict}; held out: last {result.holdout:g} of "
        f"{result.trace_label})",
        fontsize=10,
    )
    label_source(fig, result.source)
    _spread_labels(fig)
    return fig


# where a point's label may go, in points from the point: right-above first, then around it
_OFFSETS = [(5, 4), (5, -12), (-5, 4), (-5, -12), (5, 14), (-5, 14), (5, -22), (-5, -22),
            (5, 24), (-5, 24), (5, -32), (-5, -32)]  # fmt: skip


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
