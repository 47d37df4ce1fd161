"""Whether a figure reads: no two texts drawn over each other, no legend drawn over the data.

:func:`figure_text_problems` draws a figure on the Agg renderer and compares the window
extents (display pixels) of every text it drew: titles, axis and tick labels, legend
entries, annotations and figure texts. It also reports a legend whose box covers a plotted
point, a bar or a scatter marker. It judges boxes, not glyphs: two rotated labels whose boxes
overlap count as overlapping. It changes nothing the figure shows; a figure without a
canvas that can render gets an Agg one (pyplot is not involved).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.text import Text
from matplotlib.transforms import Bbox

__all__ = ["figure_text_problems", "text_size_problems", "drawn_texts", "DrawnText"]

MIN_TEXT_PX = 10.0  # the smallest text a figure shows, in pixels at SHOWN_DPI
SHOWN_DPI = 100  # SourcedFigure's PNG: what Jupyter and Voila show at the default size

TOLERANCE_PX = 1.0  # boxes may touch or share one pixel: antialiasing, not a collision
_SAMPLES_PER_SEGMENT = 16  # a line crossing a legend between two of its points still counts


@dataclass(frozen=True)
class DrawnText:
    """One text as drawn: its string and its box in display pixels."""

    text: str
    box: Bbox
    size_pt: float = 0.0  # its font size in points


def _in_view(axis: Axis, loc: float) -> bool:
    low, high = sorted(axis.get_view_interval())
    slack = 1e-9 * max(abs(low), abs(high), 1.0)
    return low - slack <= loc <= high + slack


def _tick_labels(axis: Axis) -> tuple[set[int], list[Text]]:
    """(ids of all tick label Texts, the ones drawn): a tick outside the view keeps a stale
    label that is never drawn."""
    every, drawn = set(), []
    for locs, ticks in (
        (axis.get_majorticklocs(), axis.get_major_ticks()),
        (axis.get_minorticklocs(), axis.get_minor_ticks()),
    ):
        for i, tick in enumerate(ticks):
            every |= {id(tick.label1), id(tick.label2)}
            if i < len(locs) and _in_view(axis, tick.get_loc()):
                drawn += [tick.label1, tick.label2]
    return every, drawn


def _shown(text: Text) -> bool:
    return text.get_visible() and bool(text.get_text().strip()) and text.get_alpha() != 0


def drawn_texts(fig: Figure) -> list[DrawnText]:
    """Every visible, non-empty text of ``fig`` with its box after drawing it (Agg)."""
    renderer = _draw(fig)
    ticks: set[int] = set()
    labels: list[Text] = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for axis in (ax.xaxis, ax.yaxis):
            every, drawn = _tick_labels(axis)
            ticks |= every
            labels += drawn if axis.get_visible() else []
    others = [t for t in fig.findobj(Text) if id(t) not in ticks]
    out = []
    for text in dict.fromkeys([*labels, *others]):
        if _shown(text) and all(a.get_visible() for a in _ancestors(text, fig)):
            box = text.get_window_extent(renderer)
            out.append(DrawnText(text.get_text(), box, float(text.get_fontsize())))
    return out


def _ancestors(text: Text, fig: Figure) -> Iterator:
    """The axes or legend a text belongs to, when it is hidden with them."""
    if text.axes is not None:
        yield text.axes
    for legend in _legends(fig):
        if text in legend.get_texts() or text is legend.get_title():
            yield legend


def _legends(fig: Figure) -> list[Legend]:
    found = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    return [lg for lg in found if lg is not None and lg.get_visible()]


def _draw(fig: Figure):
    if fig.canvas is None or not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _overlap(a: Bbox, b: Bbox, tolerance: float) -> bool:
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return width > tolerance and height > tolerance


def _data_points(ax) -> np.ndarray:
    """Display coordinates of what ``ax`` plots, inside the axes: line points (and points
    along each segment), scatter markers and bar corners, centres and edge midpoints."""
    chunks = [np.empty((0, 2))]
    for line in ax.get_lines():
        if not line.get_visible():
            continue
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        xy = xy[np.isfinite(xy).all(axis=1)]
        if len(xy) > 1 and line.get_linestyle() not in ("None", "none", " ", ""):
            t = np.linspace(0.0, 1.0, _SAMPLES_PER_SEGMENT)[:, None, None]
            xy = (xy[:-1] * (1 - t) + xy[1:] * t).reshape(-1, 2)
        chunks.append(xy)
    for coll in ax.collections:
        if isinstance(coll, PathCollection) and coll.get_visible():
            chunks.append(coll.get_offset_transform().transform(coll.get_offsets()))
    for container in ax.containers:
        if isinstance(container, BarContainer):
            for bar in container.patches:
                (x0, y0), (x1, y1) = bar.get_window_extent().get_points()
                xs, ys = np.linspace(x0, x1, 5), np.linspace(y0, y1, 5)
                chunks.append(np.array([(x, y) for x in xs for y in ys]))
    points = np.concatenate(chunks)
    box = ax.get_window_extent()
    inside = (points[:, 0] >= box.x0) & (points[:, 0] <= box.x1)
    inside &= (points[:, 1] >= box.y0) & (points[:, 1] <= box.y1)
    return points[inside & np.isfinite(points).all(axis=1)]


def _legend_problems(fig: Figure, renderer, tolerance: float) -> list[str]:
    problems = []
    for legend in _legends(fig):
        box = legend.get_window_extent(renderer).padded(-tolerance)
        axes = [legend.axes] if legend.axes is not None else fig.axes
        for ax in axes:
            points = _data_points(ax)
            covered = (points[:, 0] > box.x0) & (points[:, 0] < box.x1)
            covered &= (points[:, 1] > box.y0) & (points[:, 1] < box.y1)
            if covered.any():
                entries = ", ".join(t.get_text() for t in legend.get_texts()[:3])
                problems.append(
                    f"legend ({entries}, ...) covers {int(covered.sum())} plotted points of "
                    f"the axes titled {ax.get_title()!r}"
                )
    return problems


def figure_text_problems(fig: Figure, *, tolerance_px: float = TOLERANCE_PX) -> list[str]:
    """What makes ``fig`` hard to read, one line each; empty when nothing does.

    Two drawn texts whose boxes overlap by more than ``tolerance_px`` pixels both ways, and
    a legend whose box covers plotted data of its axes (a figure legend: of any axes)."""
    texts = drawn_texts(fig)
    problems = []
    for i, a in enumerate(texts):
        for b in texts[i + 1 :]:
            if _overlap(a.box, b.box, tolerance_px):
                problems.append(f"text {a.text!r} overlaps text {b.text!r}")
    return problems + _legend_problems(fig, fig.canvas.get_renderer(), tolerance_px)


def text_size_problems(
    fig: Figure, *, min_px: float = MIN_TEXT_PX, dpi: float = SHOWN_DPI
) -> list[str]:
    """Texts of ``fig`` smaller than ``min_px`` pixels when shown at ``dpi``, and texts cut
    off by the figure's edge (a caption longer than the figure is wide), one line each."""
    texts = drawn_texts(fig)
    edge = fig.bbox  # display pixels at the figure's own dpi, as the boxes
    problems = [
        f"text {t.text!r} is {t.size_pt * dpi / 72:.1f} px (at least {min_px:g} px)"
        for t in texts
        if t.size_pt * dpi / 72 < min_px - 1e-9
    ]
    slack = TOLERANCE_PX
    problems += [
        f"text {t.text!r} is cut off by the figure's edge"
        for t in texts
        if t.box.x0 < edge.x0 - slack
        or t.box.x1 > edge.x1 + slack
        or t.box.y0 < edge.y0 - slack
        or t.box.y1 > edge.y1 + slack
    ]
    return problems
