"""Where a figure's numbers came from: the label every figure carries, and the figure class.

Every figure of :mod:`cgdispatch.views` carries a corner note ``source: ...``, read back
with :func:`figure_source`: ``"measured (CPU)"``, ``"measured (NVIDIA H200)"``,
``"reference data (H200, 2026-12-01)"``, ``"model"``, ``"model (H200 SXM)"``, or what a
synthetic input was. Figure modules use these helpers; they hold no chart of their own.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from matplotlib.figure import Figure  # pyplot-free: no backend is touched, notebooks keep theirs

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.legend import Legend

__all__ = [
    "SourcedFigure",
    "MODE_COLORS",
    "label_source",
    "figure_source",
    "frame_source",
    "rows_to_plot",
    "legend_outside",
    "category_ticks",
]

_CAPTION_PT = 8  # 11 px at the 100 dpi figures are shown at
SOURCE_GID = "cgdispatch-source"  # gid of the corner note that names the data source
MODE_COLORS = {
    "FULL": "#1f77b4",
    "PIECEWISE": "#ff7f0e",
    "NONE": "#7f7f7f",
    "FULL_AND_PIECEWISE": "#2ca02c",
    "FULL_DECODE_ONLY": "#9467bd",
}


class SourcedFigure(Figure):
    """A ``Figure`` that renders itself as PNG in Jupyter and Voila without pyplot's inline backend."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue()


def label_source(fig: Figure, source: str) -> Figure:
    """Write ``source: <source>`` in the figure's bottom-right corner; returns ``fig``."""
    if not isinstance(source, str) or not source.strip():
        raise ValueError(
            f"source={source!r} is invalid: name where the data came from, e.g. 'model', "
            "'measured (CPU)' or 'reference data (H200, 2026-12-01)'"
        )
    # wrapped to the figure's width: a long source (a calibrated model's) on one line ran
    # past both edges of a narrow figure (issue 37)
    fits = max(24, int(fig.get_figwidth() * 72 * 0.97 / (_CHAR_WIDTH_EM * _CAPTION_PT)))
    text = "\n".join(textwrap.wrap(f"source: {source}", fits, break_on_hyphens=False))
    # a figure-level x label, so that constrained layout keeps room for it under the axes
    note = fig.supxlabel(text, x=0.995, ha="right", fontsize=_CAPTION_PT, color="0.35")
    note.set_multialignment("right")
    note.set_gid(SOURCE_GID)
    note.cgdispatch_source = source  # figure_source reads it back unwrapped
    return fig


def figure_source(fig: Figure) -> str | None:
    """The source a figure was labelled with, or None if it carries no label."""
    for text in fig.texts:
        if text.get_gid() == SOURCE_GID:
            return getattr(text, "cgdispatch_source", text.get_text().removeprefix("source: "))
    return None


def frame_source(frame: pd.DataFrame, source: str | None) -> str:
    """``source`` if given, else the frame's distinct ``source`` values joined with ``"; "``."""
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


def rows_to_plot(frame: pd.DataFrame, columns: Sequence[str], what: str) -> pd.DataFrame:
    """The rows of ``frame`` a figure draws: it must have ``columns``; sweep rows that failed
    or were skipped (``status`` other than ok) are dropped. ``what`` names the figure in errors."""
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


LEGEND_WRAP = 40  # characters per line of a legend entry


def legend_outside(
    ax: Axes, handles: list | None = None, labels: list | None = None, **kw
) -> Legend:
    """The legend of ``ax`` right of its axes, top-aligned, so that it never covers the data;
    constrained layout narrows the axes to make room. ``kw`` go to ``Axes.legend``."""
    kw = {"fontsize": 8, "loc": "upper left", "bbox_to_anchor": (1.01, 1.0), **kw}
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    # long entries ("FULL = FULL_DECODE_ONLY = ... (uniform_decode=True)") wrap, so the legend
    # never takes the whole width and collapses the axes
    labels = [textwrap.fill(str(label), LEGEND_WRAP) for label in labels or []]
    return ax.legend(handles, labels, borderaxespad=0.0, **kw)


_CHAR_WIDTH_EM = 0.62  # a typical glyph of the default sans-serif font, in font sizes


def category_ticks(ax: Axes, x: Sequence[float], labels: Sequence[str], fontsize: float = 8):
    """Tick labels of a bar chart's categories that do not run into each other: horizontal
    when the longest line of a label fits the width of one category, else vertical."""
    width_pt = ax.figure.get_figwidth() * 72.0 * ax.get_position().width
    slot_pt = width_pt / max(len(labels), 1)
    longest = max((len(line) for label in labels for line in str(label).split("\n")), default=0)
    fits = longest * _CHAR_WIDTH_EM * fontsize < 0.85 * slot_pt
    ax.set_xticks(x, labels, fontsize=fontsize, rotation=0 if fits else 90)
