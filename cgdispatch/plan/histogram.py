"""The planner's view of a workload: steps per size and class (uniform decode, mixed), from
any of the forms a user has, and smoothed to plan for traffic like it rather than for it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..workload.trace import step_histogram

__all__ = ["Steps", "as_histogram", "smooth_histogram"]

# what the planner takes as steps: a trace or histogram, {size: count}, or step sizes
Steps = pd.DataFrame | pd.Series | dict[int, int] | np.ndarray | list[int]


def as_histogram(steps: Steps) -> pd.DataFrame:
    """Steps per size as :func:`~cgdispatch.workload.trace.step_histogram` gives them.

    Takes a step trace, such a histogram, a Series / dict ``{num_tokens: count}`` or an
    array of step sizes (the last two count as mixed steps).
    """
    if isinstance(steps, pd.DataFrame):
        if "num_tokens" in steps.columns:
            return step_histogram(steps)
        if {"uniform_decode", "mixed"} <= set(steps.columns):
            return steps
        raise ValueError(
            f"DataFrame with columns {list(steps.columns)} is neither a step trace (num_tokens) "
            "nor a histogram (index num_tokens; columns uniform_decode, mixed)"
        )
    if isinstance(steps, dict):
        steps = pd.Series(steps, dtype="int64")
    if isinstance(steps, pd.Series):
        counts = steps.groupby(level=0).sum()
    else:
        sizes = np.asarray(steps, dtype=np.int64)
        counts = pd.Series(sizes).value_counts()
    counts = counts[counts > 0].sort_index()
    if len(counts) and (int(counts.index.min()) < 1 or int(counts.min()) < 0):
        raise ValueError("step sizes must be >= 1 and counts >= 0")
    hist = pd.DataFrame({"uniform_decode": 0, "mixed": counts.astype("int64")}, index=counts.index)
    hist.index = hist.index.astype("int64")
    hist.index.name = "num_tokens"
    hist["total"] = hist["mixed"]
    return hist


def smooth_histogram(hist: pd.DataFrame, smoothing: float) -> pd.DataFrame:
    """Each size's steps spread evenly over ``n +- floor(smoothing * n)`` (sizes >= 1), per
    class: plan for traffic like the trace rather than for its exact sizes. Counts become
    fractional; totals are kept. ``smoothing=0`` returns ``hist`` unchanged."""
    if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) or smoothing < 0:
        raise ValueError(f"smoothing={smoothing!r} is invalid: give a share >= 0 (0.1 = +-10%)")
    if smoothing == 0 or not len(hist):
        return hist
    n = hist.index.to_numpy(dtype=np.int64)
    w = np.floor(smoothing * n).astype(np.int64)
    lo, hi = np.maximum(n - w, 1), n + w
    top = int(hi.max())
    out = {}
    for col in ("uniform_decode", "mixed"):
        per = hist[col].to_numpy(np.float64) / (hi - lo + 1)
        diff = np.zeros(top + 2)
        np.add.at(diff, lo, per)  # difference array: +per from lo, -per after hi
        np.add.at(diff, hi + 1, -per)
        out[col] = np.cumsum(diff)[: top + 1]
    sizes = np.flatnonzero((out["uniform_decode"] > 1e-12) | (out["mixed"] > 1e-12))
    smoothed = pd.DataFrame({c: v[sizes] for c, v in out.items()}, index=sizes)
    smoothed.index.name = "num_tokens"
    smoothed["total"] = smoothed["uniform_decode"] + smoothed["mixed"]
    return smoothed
