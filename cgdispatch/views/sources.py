"""Where a figure's numbers came from: the label every figure carries, and the figure class.

Every figure of :mod:`cgdispatch.views` carries a corner note ``source: ...``, read back
with :func:`figure_source`: ``"measured (CPU)"``, ``"measured (NVIDIA H200)"``,
``"reference data (H200, 2026-12-01)"``, ``"model"``, ``"model (H200 SXM)"``, or what a
synthetic input was. Figure modules use these helpers; they hold no chart of their own.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

from matplotlib.figure import Figure  # pyplot-free: no backend is touched, notebooks keep theirs

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "SourcedFigure",
    "MODE_COLORS",
    "label_source",
    "figure_source",
    "frame_source",
    "rows_to_plot",
]

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
