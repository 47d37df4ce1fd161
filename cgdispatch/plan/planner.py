"""Capture-size planner: the sizes that minimise padding (or step time) under a graph budget.

``plan_capture_sizes`` solves the choice exactly by dynamic programming over candidate
sizes. It plans token sizes for vLLM-style dispatch and captures nothing; comparing plans
with the engines' ladders and exporting them as engine flags is :mod:`cgdispatch.plan.ladder_compare`.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd

from ..core.modes import CUDAGraphMode
from ..core.validate import check_int
from ..workload.trace import step_histogram
from .costs import as_cost_model

__all__ = ["plan_capture_sizes", "plan_cost", "as_histogram"]

Objective = Literal["padded_tokens", "step_time"]


def as_histogram(steps: Any) -> pd.DataFrame:
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


def _check_int(name: str, value: Any, minimum: int) -> int:
    """As :func:`cgdispatch.core.validate.check_int`, numpy integers accepted too."""
    return check_int(name, int(value) if isinstance(value, np.integer) else value, minimum)


def _candidates(
    hist: pd.DataFrame, mode: CUDAGraphMode, max_size: int | None, multiple_of: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Candidate sizes (observed sizes rounded up to ``multiple_of``; the max last) and the
    decode / mixed step counts and real tokens of each candidate's bucket."""
    n = hist.index.to_numpy(dtype=np.int64)
    # steps whose runtime mode is NONE whatever the sizes cost nothing and are left out
    dec = hist["uniform_decode"].to_numpy(dtype=np.float64) * (
        mode.decode_mode() is not CUDAGraphMode.NONE
    )
    mix = hist["mixed"].to_numpy(dtype=np.float64) * (mode.mixed_mode() is not CUDAGraphMode.NONE)
    counted = dec + mix > 0
    n, dec, mix = n[counted], dec[counted], mix[counted]
    if max_size is None:
        if not len(n):
            raise ValueError(
                f"no steps to plan for: the trace is empty or every step runs eagerly under {mode}"
            )
        max_size = -(-int(n[-1]) // multiple_of) * multiple_of
    elif max_size % multiple_of:
        raise ValueError(
            f"max_size={max_size} is not a multiple of multiple_of={multiple_of}: "
            f"use {-(-max_size // multiple_of) * multiple_of}"
        )
    keep = n <= max_size  # larger steps run eagerly under every plan
    n, dec, mix = n[keep], dec[keep], mix[keep]
    rounded = -(-n // multiple_of) * multiple_of
    cand = np.unique(np.append(rounded, max_size))
    bucket = np.searchsorted(cand, n)  # index of the smallest candidate >= n
    m = len(cand)
    return (
        cand,
        np.bincount(bucket, dec, m),
        np.bincount(bucket, mix, m),
        np.bincount(bucket, (dec + mix) * n, m),
    )


def _dp(
    cand_cost: tuple[np.ndarray, np.ndarray], hd: np.ndarray, hm: np.ndarray, k: int
) -> list[int]:
    """Indices of the best <= k candidates (the last always in) for segment costs
    ``cost(j, i) = (PD[i] - PD[j]) * a[i] + (PM[i] - PM[j]) * b[i]``.

    With a and b non-decreasing the cost is Monge, so the leftmost optimal split points are
    monotone and each DP row is solved by divide and conquer, vectorised level by level
    (O(k m log m)); otherwise every split is tried (O(k m^2), chunked).
    """
    a, b = cand_cost
    m = len(a)
    PD = np.concatenate([[0.0], np.cumsum(hd)])
    PM = np.concatenate([[0.0], np.cumsum(hm)])
    a1, b1 = (
        np.concatenate([[0.0], a]),
        np.concatenate([[0.0], b]),
    )  # 1-based: size i covers prefix i
    monge = bool(np.all(np.diff(a) >= 0) and np.all(np.diff(b) >= 0))
    prev = np.full(m + 1, np.inf)
    prev[0] = 0.0
    splits, best = [], []
    for layer in range(1, min(k, m) + 1):
        row_solver = _row_monotone if monge else _row_full
        cur, arg = row_solver(prev, PD, PM, a1, b1, layer, m)
        splits.append(arg)
        best.append(cur[m])
        prev = cur
    layers = int(np.argmin(best)) + 1  # fewest graphs among the best (argmin takes the first)
    chosen, i = [], m
    for layer in range(layers, 0, -1):
        chosen.append(i - 1)
        i = int(splits[layer - 1][i])
    return sorted(chosen)


Arr = np.ndarray


def _seg(prev: Arr, PD: Arr, PM: Arr, a1: Arr, b1: Arr, i: Arr, j: Arr) -> Arr:
    """DP value of closing a segment at size i after a split at j (vectorised over i, j)."""
    return prev[j] + (PD[i] - PD[j]) * a1[i] + (PM[i] - PM[j]) * b1[i]


def _row_monotone(
    prev: Arr, PD: Arr, PM: Arr, a1: Arr, b1: Arr, layer: int, m: int
) -> tuple[Arr, Arr]:
    """One DP row by divide and conquer on monotone split points, all tasks of a level at once."""
    cur = np.full(m + 1, np.inf)
    arg = np.zeros(m + 1, dtype=np.int64)
    # tasks: query range [ql, qr], split range [ol, oh]; split j < i and j >= layer - 1
    ql, qr = np.array([layer]), np.array([m])
    ol, oh = np.array([layer - 1]), np.array([m - 1])
    while len(ql):
        mid = (ql + qr) // 2
        hi = np.minimum(oh, mid - 1)
        length = hi - ol + 1
        starts = np.concatenate([[0], np.cumsum(length)[:-1]])
        task = np.repeat(np.arange(len(mid)), length)
        j = ol[task] + np.arange(length.sum()) - starts[task]
        val = _seg(prev, PD, PM, a1, b1, mid[task], j)
        low = np.minimum.reduceat(val, starts)
        pick = np.where(val == low[task], j, np.iinfo(np.int64).max)
        best_j = np.minimum.reduceat(pick, starts)
        cur[mid], arg[mid] = low, best_j
        left, right = ql <= mid - 1, mid + 1 <= qr
        ql, qr, ol, oh = (
            np.concatenate([ql[left], mid[right] + 1]),
            np.concatenate([mid[left] - 1, qr[right]]),
            np.concatenate([ol[left], best_j[right]]),
            np.concatenate([best_j[left], oh[right]]),
        )
    return cur, arg


def _row_full(
    prev: Arr, PD: Arr, PM: Arr, a1: Arr, b1: Arr, layer: int, m: int, chunk: int = 512
) -> tuple[Arr, Arr]:
    """One DP row trying every split (any segment costs), ``chunk`` rows of the matrix at a time."""
    cur = np.full(m + 1, np.inf)
    arg = np.zeros(m + 1, dtype=np.int64)
    j = np.arange(m)
    for start in range(layer, m + 1, chunk):
        i = np.arange(start, min(start + chunk, m + 1))[:, None]
        val = np.where(j[None, :] < i, _seg(prev, PD, PM, a1, b1, i, j[None, :]), np.inf)
        arg[i[:, 0]] = np.argmin(val, axis=1)
        cur[i[:, 0]] = val[np.arange(len(i)), arg[i[:, 0]]]
    return cur, arg


def _costs(
    cand: np.ndarray, objective: str, cost_model: Any, mode: CUDAGraphMode
) -> tuple[np.ndarray, np.ndarray]:
    if objective == "padded_tokens":
        c = cand.astype(np.float64)
        return c, c
    model = as_cost_model(cost_model)
    if model is None:
        raise ValueError("objective='step_time' needs a cost_model (see cgdispatch.plan.costs)")
    pick = [mode.decode_mode(), mode.mixed_mode()]
    out = [
        np.zeros(len(cand))
        if m is CUDAGraphMode.NONE
        else np.asarray(model.step_time_ms(m, cand), dtype=np.float64)
        for m in pick
    ]
    return out[0], out[1]


def plan_capture_sizes(
    steps: Any,
    max_graphs: int,
    *,
    objective: Objective = "padded_tokens",
    cost_model: Any = None,
    mode: CUDAGraphMode | str = CUDAGraphMode.FULL_AND_PIECEWISE,
    max_size: int | None = None,
    multiple_of: int = 1,
) -> list[int]:
    """The capture sizes (at most ``max_graphs``) that minimise the expected cost of ``steps``.

    ``steps``: a step trace, a histogram, ``{size: count}`` or an array of sizes.
    ``objective="padded_tokens"`` minimises tokens added by padding; ``"step_time"`` the
    summed ``cost_model.step_time_ms`` of the padded steps, uniform-decode steps at the
    mode's decode mode and the others at its mixed mode. Steps whose runtime mode is NONE
    under ``mode`` (mixed steps with FULL_DECODE_ONLY) do not count. ``max_size`` (default:
    the largest step that can replay a graph, rounded up) is always a capture size; larger steps run eagerly.
    ``multiple_of``: sizes are multiples of it (1 + speculative tokens for spec decode, the
    TP size for sequence parallelism, their lcm for both). Sizes are chosen among the
    observed sizes rounded up to ``multiple_of``: exact for padding and for any latency
    that does not fall with size. Fewer sizes are returned when more would not help.
    """
    _check_int("max_graphs", max_graphs, 1)
    _check_int("multiple_of", multiple_of, 1)
    if max_size is not None:
        _check_int("max_size", max_size, 1)
    if objective not in ("padded_tokens", "step_time"):
        raise ValueError(f"objective={objective!r} is unknown: use 'padded_tokens' or 'step_time'")
    mode = CUDAGraphMode.parse(mode)
    cand, hd, hm, _ = _candidates(as_histogram(steps), mode, max_size, multiple_of)
    chosen = _dp(_costs(cand, objective, cost_model, mode), hd, hm, max_graphs)
    return [int(cand[i]) for i in chosen]


def plan_cost(
    steps: Any,
    sizes: list[int],
    *,
    objective: Objective = "padded_tokens",
    cost_model: Any = None,
    mode: CUDAGraphMode | str = CUDAGraphMode.FULL_AND_PIECEWISE,
) -> float:
    """The planner's objective for given ``sizes`` (steps above the largest size left out)."""
    mode = CUDAGraphMode.parse(mode)
    hist = as_histogram(steps)
    sizes_arr = np.asarray(sorted(set(sizes)), dtype=np.int64)
    hist = hist[hist.index <= sizes_arr[-1]]
    n = hist.index.to_numpy(dtype=np.int64)
    pad = sizes_arr[np.searchsorted(sizes_arr, n)]
    a, b = _costs(pad, objective, cost_model, mode)
    dec = hist["uniform_decode"].to_numpy(np.float64) * (
        mode.decode_mode() is not CUDAGraphMode.NONE
    )
    mix = hist["mixed"].to_numpy(np.float64) * (mode.mixed_mode() is not CUDAGraphMode.NONE)
    total = float(np.sum(dec * a + mix * b))
    return total - float(np.sum((dec + mix) * n)) if objective == "padded_tokens" else total
