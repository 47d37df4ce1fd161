"""What-if engine: a config and a step trace -> hit rates, padding waste, eager fallbacks, time.

Every step goes through the real :class:`CudagraphDispatcher`: the dispatcher is asked once
per distinct (num_tokens, uniform_decode, has_lora, num_active_loras) in the trace and the
answers are mapped back to all steps with numpy, so the result equals a loop over
``dispatch()`` while costing a few array passes. It does not run or time a model: times come
from the cost model given (see :mod:`cgdispatch.plan.costs`) and carry its ``source`` label.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..core.config import GraphConfig
from ..core.dispatcher import CudagraphDispatcher, ready_dispatcher
from ..core.modes import CUDAGraphMode
from ..workload.trace import check_trace
from .costs import CostModel, as_cost_model, cost_source

__all__ = ["WhatIfResult", "evaluate", "dispatch_arrays", "MODE_CODES"]

# runtime mode <-> int8 code in per-step arrays (the enum values of the runtime modes)
MODE_CODES: dict[CUDAGraphMode, int] = {
    CUDAGraphMode.NONE: 0,
    CUDAGraphMode.PIECEWISE: 1,
    CUDAGraphMode.FULL: 2,
}
_MODES = {code: mode for mode, code in MODE_CODES.items()}


@dataclass(frozen=True)
class WhatIfResult:
    """The outcome of replaying a trace under one config.

    ``runtime_mode`` (int8, :data:`MODE_CODES`) and ``padded_tokens`` (int64) have one entry
    per step of the trace; ``step_time_ms`` too when a cost model was given. ``by_size`` has
    one row per (runtime_mode, padded_size) that was hit or captured; ``summary`` the totals.
    """

    config: GraphConfig
    runtime_mode: np.ndarray
    padded_tokens: np.ndarray
    step_time_ms: np.ndarray | None
    by_size: pd.DataFrame
    summary: dict[str, Any]


def _step_keys(trace: pd.DataFrame) -> tuple[np.ndarray, int]:
    """Dense int key per step: ``(lora_code * 2 + uniform) * width + num_tokens``."""
    n = trace["num_tokens"].to_numpy(dtype=np.int64)
    width = int(n.max(initial=0)) + 1
    lora_code = trace["num_active_loras"].to_numpy(dtype=np.int64) * 2 + trace["has_lora"].to_numpy(
        dtype=bool
    )
    return n + width * (trace["uniform_decode"].to_numpy(dtype=bool) + 2 * lora_code), width


def _group(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct keys (sorted), their counts, and each step's position among them.

    Keys are dense (at most a few times the largest step), so counting with ``bincount``
    beats sorting 10 M steps; a sparse key range (huge LoRA counts) falls back to a sort.
    """
    span = int(key.max()) + 1
    if span > 4 * len(key) + 1_000_000:
        uniq, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
        return uniq, counts, inverse.reshape(-1)
    counts = np.bincount(key, minlength=span)
    present = np.flatnonzero(counts)
    position = np.zeros(span, dtype=np.int64)
    position[present] = np.arange(len(present))
    return present, counts[present], position[key]


def _answers(
    dispatcher: CudagraphDispatcher, keys: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """(mode code, padded tokens) per key, one ``dispatch()`` call each, stats switched off."""
    modes = np.zeros(len(keys), dtype=np.int8)
    padded = np.zeros(len(keys), dtype=np.int64)
    was_recording, dispatcher.record_stats = dispatcher.record_stats, False
    try:
        for i, k in enumerate(keys.tolist()):
            num, rest = k % width, k // width
            code = rest // 2
            mode, desc = dispatcher.dispatch(
                num,
                uniform_decode=bool(rest % 2),
                has_lora=bool(code % 2),
                num_active_loras=code // 2,
            )
            modes[i], padded[i] = MODE_CODES[mode], desc.num_tokens
    finally:
        dispatcher.record_stats = was_recording
    return modes, padded


def dispatch_arrays(
    config: GraphConfig | CudagraphDispatcher, trace: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """Per step of ``trace``: runtime-mode code (int8, :data:`MODE_CODES`) and padded tokens."""
    result = evaluate(config, trace)
    return result.runtime_mode, result.padded_tokens


def evaluate(
    config: GraphConfig | CudagraphDispatcher,
    trace: pd.DataFrame,
    cost_model: CostModel | None = None,
) -> WhatIfResult:
    """Replay ``trace`` through the dispatcher of ``config`` and report what it would do.

    Summary keys: ``steps``, ``real_tokens``, ``graph_steps``, ``padding_tokens`` (added by
    padding), ``padded_token_ratio`` (padding tokens / real tokens over graph-replayed
    steps; 0 means no waste), ``eager_step_share``, ``step_share_<MODE>``, ``num_graphs``
    (capture sizes), ``num_captured_graphs`` (keys, all modes and LoRA cases); with a cost
    model also ``mean_step_ms``, ``total_time_s``, ``source`` and, when the model has
    ``graph_memory_bytes``, ``graph_memory_bytes`` (sum over captured graphs: an upper
    bound, pool reuse is not modelled).
    """
    dispatcher = ready_dispatcher(config, record_stats=False)
    trace = check_trace(trace)
    if len(trace) == 0:
        raise ValueError("the step trace is empty: give at least one step")
    key, width = _step_keys(trace)
    present, count, index = _group(key)
    key_mode, key_pad = _answers(dispatcher, present, width)
    model = as_cost_model(cost_model)
    step_ms, key_ms = None, None
    if model is not None:
        key_ms = np.zeros(len(present))
        for code, mode in _MODES.items():
            sel = key_mode == code
            if sel.any():
                key_ms[sel] = model.step_time_ms(mode, key_pad[sel])
        step_ms = key_ms[index]
    by_size = _by_size(dispatcher, key_mode, key_pad, present % width, count, key_ms)
    summary = _summary(dispatcher, by_size, len(trace), model)
    return WhatIfResult(
        dispatcher.config, key_mode[index], key_pad[index], step_ms, by_size, summary
    )


def _by_size(
    dispatcher: CudagraphDispatcher,
    key_mode: np.ndarray,
    key_pad: np.ndarray,
    key_n: np.ndarray,
    key_count: np.ndarray,
    key_ms: np.ndarray | None,
) -> pd.DataFrame:
    """One row per (runtime_mode, padded_size) hit or captured; captured-but-unused rows have 0 steps."""
    frame = pd.DataFrame(
        {
            "runtime_mode": key_mode,
            "padded_size": key_pad,
            "steps": key_count,
            "real_tokens": key_count * key_n,
            "padded_tokens": key_count * key_pad,
            "time_ms": key_count * (key_ms if key_ms is not None else 0.0),
        }
    )
    captured = {
        (MODE_CODES[m], d.num_tokens) for m, descs in dispatcher.get_capture_descs() for d in descs
    }
    if captured:
        extra = pd.DataFrame(sorted(captured), columns=["runtime_mode", "padded_size"])
        frame = pd.concat([frame, extra], ignore_index=True).fillna(0)
    frame = frame.groupby(["runtime_mode", "padded_size"], as_index=False).sum()
    frame = frame.sort_values(["runtime_mode", "padded_size"], ascending=[False, True])
    frame["runtime_mode"] = frame["runtime_mode"].map(lambda c: _MODES[int(c)].name)
    frame = frame.astype(
        {"steps": "int64", "real_tokens": "int64", "padded_tokens": "int64", "padded_size": "int64"}
    )
    frame["padding_tokens"] = frame["padded_tokens"] - frame["real_tokens"]
    frame["step_share"] = frame["steps"] / max(int(frame["steps"].sum()), 1)
    if key_ms is None:
        frame = frame.drop(columns="time_ms")
    return frame.reset_index(drop=True)


def _summary(
    dispatcher: CudagraphDispatcher, by_size: pd.DataFrame, steps: int, model: CostModel | None
) -> dict[str, Any]:
    graph = by_size[by_size["runtime_mode"] != "NONE"]
    real_graph = int(graph["real_tokens"].sum())
    padding = int(graph["padding_tokens"].sum())
    per_mode = by_size.groupby("runtime_mode")["steps"].sum()
    descs = [(m, d) for m, ds in dispatcher.get_capture_descs() for d in ds]
    out: dict[str, Any] = {
        "steps": steps,
        "real_tokens": int(by_size["real_tokens"].sum()),
        "graph_steps": int(graph["steps"].sum()),
        "padding_tokens": padding,
        "padded_token_ratio": padding / real_graph if real_graph else 0.0,
        "eager_step_share": float(per_mode.get("NONE", 0)) / steps,
    }
    for mode in ("FULL", "PIECEWISE", "NONE"):
        out[f"step_share_{mode}"] = float(per_mode.get(mode, 0)) / steps
    out["num_graphs"] = (
        len(dispatcher.config.cudagraph_capture_sizes) if dispatcher.keys_initialized else 0
    )
    out["num_captured_graphs"] = len(descs)
    if model is not None:
        total_ms = float(by_size["time_ms"].sum())
        out["mean_step_ms"] = total_ms / steps
        out["total_time_s"] = total_ms / 1e3
        out["source"] = cost_source(model)
        out.update(_graph_costs(dispatcher, model))
    return out


def _graph_costs(dispatcher: CudagraphDispatcher, model: CostModel) -> dict[str, float]:
    """Graph memory (weak-output pool: graphs are captured into one pool and vLLM keeps only
    weak references to their outputs, so the pool is the largest graph's) and capture time."""
    out: dict[str, float] = {}
    by_mode = [
        (m, np.array([d.num_tokens for d in ds], dtype=np.int64))
        for m, ds in dispatcher.get_capture_descs()
        if ds
    ]
    memory = getattr(model, "graph_memory_bytes", None)
    if callable(memory) and by_mode:
        out["graph_memory_bytes"] = max(float(np.max(memory(m, n))) for m, n in by_mode)
    capture = getattr(model, "capture_time_s", None)
    if callable(capture) and by_mode:
        out["capture_s"] = sum(float(np.sum(capture(m, n))) for m, n in by_mode)
    return out
