"""Where a step trace comes from: a synthetic preset or a file, replayed the same way for
every caller (``python -m cgdispatch plan``, notebook 04, the what-if dashboard), and how a
trace is split into a planning part and a held-out part.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from .files import TIME_ORDERED, load_trace, shown_name
from .limits import SchedulerLimits
from .mooncake import HASH_BLOCK_SIZE
from .prefix_presets import PREFIX_PRESETS, prefix_requests
from .synthetic import synthetic_requests
from .trace import simulate_steps
from .trace_source import (
    PRODUCTION_TRACES,
    SYNTHETIC_NAMES,
    TRACE_NAMES,
    TraceSource,
    resolve_trace,
    trace_path,
)

__all__ = [
    "workload_trace",
    "workload_requests",
    "read_workload",
    "WorkloadTable",
    "split_holdout",
    "arrival_cut",
    "PRODUCTION_TRACES",
    "TRACE_NAMES",
    "TraceSource",
    "resolve_trace",
    "trace_path",
    "preset_requests",
    "SYNTHETIC_NAMES",
]

TableKind = Literal["requests", "steps"]


def preset_requests(
    name: str,
    *,
    num_requests: int,
    rate_per_s: float,
    seed: int,
    hash_block_size: int = HASH_BLOCK_SIZE,
) -> pd.DataFrame:
    """The request table of a synthetic preset's name (:data:`SYNTHETIC_NAMES`)."""
    if name in PREFIX_PRESETS:
        return prefix_requests(
            num_requests, name, rate_per_s=rate_per_s, seed=seed, hash_block_size=hash_block_size
        )
    return synthetic_requests(num_requests, name, rate_per_s=rate_per_s, seed=seed)


@dataclass(frozen=True)
class WorkloadTable:
    """A workload drawn or read once: its resolved source and its table, requests (to
    replay through vLLM's scheduler) or steps (used as they are)."""

    source: TraceSource
    kind: TableKind
    table: pd.DataFrame

    @property
    def requests(self) -> pd.DataFrame | None:
        """The request table, or None for a file of steps (latency needs requests)."""
        return self.table if self.kind == "requests" else None


def read_workload(
    workload: str | Path | TraceSource,
    *,
    num_requests: int = 300,
    rate_per_s: float = 8.0,
    seed: int = 0,
    hash_block_size: int = HASH_BLOCK_SIZE,
    progress: bool = False,
    what: str = "workload",
) -> WorkloadTable:
    """``workload`` resolved (:func:`~cgdispatch.workload.trace_source.resolve_trace`; ``what``
    names it in an error) and drawn or read once: a preset's ``num_requests`` synthetic
    requests at ``rate_per_s``, else the file's table
    (:func:`~cgdispatch.workload.files.load_trace`; a bar on stderr for a large file when
    ``progress``)."""
    source = resolve_trace(workload, hash_block_size=hash_block_size, what=what)
    if source.synthetic:
        table = preset_requests(
            source.name,
            num_requests=num_requests,
            rate_per_s=rate_per_s,
            seed=seed,
            hash_block_size=source.hash_block_size,
        )
        return WorkloadTable(source, "requests", table)
    kind, table = load_trace(source.path, progress=progress, hash_block_size=source.hash_block_size)
    return WorkloadTable(source, kind, table)


def workload_trace(
    workload: str | Path | TraceSource,
    *,
    num_requests: int = 300,
    rate_per_s: float = 8.0,
    seed: int = 0,
    limits: SchedulerLimits | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    num_speculative_tokens: int | None = None,
    max_loras: int | None = None,
    progress: bool = False,
    hash_block_size: int = HASH_BLOCK_SIZE,
    requests: pd.DataFrame | None = None,
    steps: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, str]:
    """``(step trace, source label)`` for a synthetic preset, a production trace or a file
    (:func:`~cgdispatch.workload.trace_source.resolve_trace` says which).

    A preset name (``"sharegpt"``, ``"alpaca"``) gives ``num_requests`` synthetic requests at
    ``rate_per_s`` run through the replay of vLLM's scheduler under ``limits`` (default: the
    newest release's defaults; the keyword limits, when given, replace those fields); a CSV of
    requests is replayed the same way; a CSV of steps (or a vLLM ``--cudagraph-metrics`` log)
    is used as is. The CLI's ``plan`` and ``tune``, the dashboards and notebook 04 read traces
    through this function. The label says which (``synthetic ...`` / ``... replayed from
    <file>`` / ``steps from <file>``). A preset of
    :data:`~cgdispatch.workload.prefix_presets.PREFIX_PRESETS` and a mooncake_trace ``.jsonl``
    file give requests with ``hash_ids`` (``hash_block_size`` tokens per id). ``requests``
    (or ``steps``): the workload's table as the caller already has it (e.g. without the
    requests vLLM would reject), used instead of a fresh draw or read.
    """
    source = resolve_trace(workload, hash_block_size=hash_block_size, what="workload")
    settings = {
        "limits": limits,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "num_speculative_tokens": num_speculative_tokens,
        "max_loras": max_loras or None,
        "progress": progress,
    }
    if requests is not None:
        kind, table = "requests", requests
    elif steps is not None:
        kind, table = "steps", steps
    else:
        read = read_workload(
            source, num_requests=num_requests, rate_per_s=rate_per_s, seed=seed, progress=progress
        )
        kind, table = read.kind, read.table
    if kind == "steps":
        return table, f"steps from {_shown(source)}"
    trace = simulate_steps(table, seed=seed, **settings)
    if source.synthetic:
        label = (
            f"synthetic ({source.name} preset, {num_requests} requests at {rate_per_s:g}/s, "
            f"seed {seed}; vLLM's scheduler replayed)"
        )
        return trace, label
    return trace, f"requests from {_shown(source)}, vLLM's scheduler replayed"


def workload_requests(
    workload: str | Path | TraceSource,
    *,
    num_requests: int = 300,
    rate_per_s: float = 8.0,
    seed: int = 0,
    hash_block_size: int = HASH_BLOCK_SIZE,
) -> pd.DataFrame | None:
    """The request table behind :func:`workload_trace`'s trace (the same draw for a preset),
    or None when the workload is a file of steps (latency needs requests)."""
    return read_workload(
        workload,
        num_requests=num_requests,
        rate_per_s=rate_per_s,
        seed=seed,
        hash_block_size=hash_block_size,
    ).requests


def _shown(source: TraceSource) -> str:
    """The file's name as a label shows it (``stdin`` for ``-``)."""
    return "stdin" if str(source.path) == "-" else shown_name(source.path.name)


def split_holdout(
    trace: pd.DataFrame, holdout: float, *, cut_s: float | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(first part, last holdout share)`` of a step trace, in time order.

    With ``cut_s`` the steps starting before it (``time_s``) are the first part (``tune``
    cuts a simulated trace at an arrival: :func:`arrival_cut`). Otherwise, with a ``time_s``
    column the cut is at ``(1 - holdout)`` of the time span; a histogram or a metrics table
    (``trace.attrs["time_ordered"]`` False) has no time, so each distinct step is split by
    its count, ``1 - holdout`` of it planned on, whatever the order of the rows; a plain step
    list is taken in row order. Raises ValueError when either part would be empty.
    """
    if isinstance(holdout, bool) or not isinstance(holdout, (int, float)) or not 0 < holdout < 1:
        raise ValueError(f"holdout={holdout!r} is invalid: give the held-out share, 0 < x < 1")
    if cut_s is not None:
        first = trace["time_s"].to_numpy(dtype=np.float64) < cut_s
    elif "time_s" in trace.columns and len(trace):
        t = trace["time_s"].to_numpy(dtype=np.float64)
        first = t < t.min() + (1 - holdout) * (t.max() - t.min())
    elif not trace.attrs.get(TIME_ORDERED, True):
        first = _split_counts(trace, holdout)
    else:
        first = np.arange(len(trace)) < round((1 - holdout) * len(trace))
    train, test = trace[first].reset_index(drop=True), trace[~first].reset_index(drop=True)
    train.attrs, test.attrs = dict(trace.attrs), dict(trace.attrs)
    if not len(train) or not len(test):
        raise ValueError(
            f"holdout={holdout} leaves an empty part of a {len(trace)}-step trace: "
            "give a longer trace or a holdout nearer 0.5"
        )
    return train, test


def _split_counts(trace: pd.DataFrame, holdout: float) -> np.ndarray:
    """Rows of the first part of an orderless trace: of each distinct step (all columns
    equal) ``round((1 - holdout) * count)`` rows, the same multiset in any row order."""
    groups = trace.groupby(list(trace.columns), sort=False, dropna=False)
    rank = groups.cumcount().to_numpy()
    size = groups[trace.columns[0]].transform("size").to_numpy()
    return rank < np.floor((1 - holdout) * size + 0.5)


def arrival_cut(arrival_s: np.ndarray, holdout: float) -> float:
    """The time at which the last ``holdout`` share of requests (by arrival order) starts
    arriving: ``tune`` plans on the steps before it and replays those requests after it, so
    a burst that the scheduler drains long after its last arrival still splits."""
    if isinstance(holdout, bool) or not isinstance(holdout, (int, float)) or not 0 < holdout < 1:
        raise ValueError(f"holdout={holdout!r} is invalid: give the held-out share, 0 < x < 1")
    t = np.sort(np.asarray(arrival_s, dtype=np.float64))
    first_held = min(len(t) - 1, int(np.ceil((1 - holdout) * len(t))))
    if len(t) < 2 or t[first_held] <= t[0]:
        raise ValueError(
            f"holdout={holdout:g} leaves no request to plan on: the {len(t)} requests arrive "
            "at the same time; give more requests or a trace whose arrivals are spread"
        )
    return float(t[first_held])
