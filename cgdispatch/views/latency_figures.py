"""Latency as the request rate rises, one line per ladder (from
:func:`~cgdispatch.plan.latency_sweep.latency_by_rate`): where preemptions start and what a
ladder's graph memory costs there."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .sources import SourcedFigure, frame_source, label_source, rows_to_plot

__all__ = ["latency_by_rate_figure", "preemption_onset"]

_PANELS = (
    ("ttft_p99_ms", "p99 time to first token (ms, log)", True),
    ("tpot_p99_ms", "p99 time per output token (ms)", False),
    ("num_preemptions", "preemptions in the run", False),
)


def preemption_onset(frame: pd.DataFrame) -> dict[str, float | None]:
    """Per ladder, the lowest rate (req/s) whose run preempted a request, or None."""
    rows_to_plot(frame, ["rate_req_s", "ladder", "num_preemptions"], "preemption_onset")
    out: dict[str, float | None] = {}
    for name, group in frame.groupby("ladder", sort=False):
        hit = group[group["num_preemptions"] > 0]["rate_req_s"]
        out[str(name)] = float(hit.min()) if len(hit) else None
    return out


def latency_by_rate_figure(frame: pd.DataFrame, *, source: str | None = None) -> Figure:
    """Three panels against the request rate (log axis): p99 TTFT, p99 TPOT, preemptions;
    one line per ladder, its graph memory (MiB) and KV blocks in the legend, and a dotted
    line where the first ladder starts preempting."""
    cols = ["rate_req_s", "ladder", "graph_memory_mib", *(c for c, _, _ in _PANELS)]
    frame = rows_to_plot(frame, cols, "latency_by_rate_figure")
    fig = SourcedFigure(figsize=(12, 3.8), layout="constrained")
    axes = fig.subplots(1, len(_PANELS))
    onset = [r for r in preemption_onset(frame).values() if r is not None]
    for ax, (column, label, log_y) in zip(axes, _PANELS):
        for name, group in frame.groupby("ladder", sort=False):
            group = group.sort_values("rate_req_s")
            mib = float(group["graph_memory_mib"].iloc[0])
            blocks = group["num_gpu_blocks"].iloc[0] if "num_gpu_blocks" in group else None
            kv = "" if blocks is None or pd.isna(blocks) else f", {int(blocks)} KV blocks"
            ax.plot(
                group["rate_req_s"],
                group[column],
                marker="o",
                label=f"{name} ({mib:.0f} MiB graphs{kv})",
                gid=f"latency-{column}-{name}",
            )
        ax.set_xscale("log", base=2)
        rates = np.unique(frame["rate_req_s"].to_numpy())
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        ax.minorticks_off() if not log_y else None
        if log_y:
            ax.set_yscale("log", nonpositive="clip")
        ax.set_xlabel("request rate (req/s, log)")
        ax.set_ylabel(label)
        if onset:
            ax.axvline(min(onset), color="0.4", linestyle=":", linewidth=1)
    axes[0].legend(fontsize=7)
    start = f"preemptions start at {min(onset):g} req/s" if onset else "no preemptions"
    fig.suptitle(f"latency as the rate rises: {start}", fontsize=10)
    return label_source(fig, frame_source(frame, source))
