"""What-if engine: a config and a step trace -> hit rates, padding waste, eager fallbacks, time.

Every step goes through the real dispatcher of the config's generation (V1's
``CudagraphDispatcher`` or generation 2's ``CudaGraphManager``, as the registry of
:mod:`cgdispatch.core.generation` builds it): it is asked once per distinct step
shape of the trace (num_tokens, uniform_decode, LoRA and, for generation 2, num_reqs) and
the answers are mapped back to all steps with numpy, so the result equals a loop over
``dispatch()`` while costing a few array passes. It does not run or time a model: times come
from the cost model given (see :mod:`cgdispatch.plan.costs`) and carry its ``source`` label.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..core.config import GraphConfig
from ..core.generation import (
    CaptureKey,
    GraphDispatcher,
    capture_keys,
    dispatch_step,
    generation_of,
    make_graph_dispatcher,
)
from ..core.modes import CUDAGraphMode
from ..workload.trace import check_trace
from .costs import CostModel, as_cost_model, cost_source
from .ladder_latency import ladder_latency

__all__ = ["WhatIfResult", "evaluate", "dispatch_arrays", "graph_costs", "MODE_CODES"]

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


@dataclass(frozen=True)
class _StepKeys:
    """A dense int key per step and how to read a key back.

    ``key = ((rank * lora_span + lora_code) * 2 + uniform) * width + num_tokens`` with
    ``lora_code = num_active_loras * 2 + has_lora``. V1 does not read the request count
    (``rank`` = 0). Generation 2 reads it only by comparing it with each graph's
    ``num_reqs`` (``num_reqs >= count``), so two counts that lie between the same two
    graph request counts get the same answer: ``rank`` is the number of graph request
    counts below the step's, and ``reqs_of_rank[rank]`` the smallest count of that rank
    (what the dispatcher is asked). This keeps the distinct keys few (bench_whatif.py).
    """

    key: np.ndarray  # [steps] int64
    width: int
    lora_span: int
    reqs_of_rank: np.ndarray  # [ranks] int64

    def decode(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(num_tokens, uniform, lora_code, request count asked) of each key."""
        rest = keys // self.width
        lora = (rest // 2) % self.lora_span
        reqs = self.reqs_of_rank[rest // 2 // self.lora_span]
        return keys % self.width, rest % 2, lora, reqs


def _step_keys(trace: pd.DataFrame, graph_reqs: list[int] | None) -> _StepKeys:
    """Keys of every step; ``graph_reqs``: the captured graphs' request counts (generation
    2), None for V1."""
    n = trace["num_tokens"].to_numpy(dtype=np.int64)
    width = int(n.max(initial=0)) + 1
    lora_code = trace["num_active_loras"].to_numpy(dtype=np.int64) * 2 + trace["has_lora"].to_numpy(
        dtype=bool
    )
    span = int(lora_code.max(initial=0)) + 1
    rest = trace["uniform_decode"].to_numpy(dtype=bool) + 2 * lora_code
    reqs_of_rank = np.ones(1, dtype=np.int64)
    if graph_reqs:
        limits = np.array(sorted(set(graph_reqs)), dtype=np.int64)
        reqs = trace["num_reqs"].to_numpy(dtype=np.int64)
        rest = rest + 2 * span * np.searchsorted(limits, reqs, side="left")
        reqs_of_rank = np.concatenate([[1], limits + 1])
    return _StepKeys(n + width * rest, width, span, reqs_of_rank)


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
    dispatcher: GraphDispatcher, keys: np.ndarray, steps: _StepKeys
) -> tuple[np.ndarray, np.ndarray]:
    """(mode code, padded tokens) per key: one dispatch each, V1 statistics switched off."""
    modes = np.zeros(len(keys), dtype=np.int8)
    padded = np.zeros(len(keys), dtype=np.int64)
    fields = [a.tolist() for a in steps.decode(keys)]
    gen2 = generation_of(dispatcher).runner.keys_count_requests
    was_recording = getattr(dispatcher, "record_stats", False)
    if not gen2:
        dispatcher.record_stats = False
    try:
        for i, (num, uniform, lora, reqs) in enumerate(zip(*fields)):
            if gen2:  # generation 2 reads the request count, not has_lora
                answer = dispatch_step(dispatcher, num, min(reqs, num), bool(uniform), lora // 2)
                mode, tokens = answer.runtime_mode, answer.padded_tokens
            else:  # V1 asked as before (has_lora and the count apart, as traces give them)
                mode, desc = dispatcher.dispatch(
                    num,
                    uniform_decode=bool(uniform),
                    has_lora=bool(lora % 2),
                    num_active_loras=lora // 2,
                )
                tokens = desc.num_tokens
            modes[i], padded[i] = MODE_CODES[mode], tokens
    finally:
        if not gen2:
            dispatcher.record_stats = was_recording
    return modes, padded


def dispatch_arrays(
    config: GraphConfig | GraphDispatcher, trace: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """Per step of ``trace``: runtime-mode code (int8, :data:`MODE_CODES`) and padded tokens."""
    result = evaluate(config, trace)
    return result.runtime_mode, result.padded_tokens


def evaluate(
    config: GraphConfig | GraphDispatcher,
    trace: pd.DataFrame,
    cost_model: CostModel | None = None,
    *,
    requests: pd.DataFrame | None = None,
) -> WhatIfResult:
    """Replay ``trace`` through the dispatcher of ``config`` and report what it would do.

    The config's ``vllm_version`` picks the generation (generation 2's
    ``CudaGraphManager`` also reads each step's ``num_reqs``; None is the newest); a dispatcher of
    any generation may be passed instead. Resolve the config first, as the engine does.

    Summary keys: ``steps``, ``real_tokens``, ``graph_steps``, ``padding_tokens`` (added by
    padding), ``padded_token_ratio`` (padding tokens / real tokens over graph-replayed
    steps; 0 means no waste), ``eager_step_share``, ``step_share_<MODE>``, ``num_graphs``
    (V1: capture sizes; generation 2: prefill token sizes plus decode request sizes that
    capture a graph), ``num_captured_graphs`` (keys, all modes and LoRA cases),
    ``vllm_version``; with a cost
    model also ``mean_step_ms``, ``total_time_s``, ``source`` and, when the model has
    ``graph_memory_bytes``, ``graph_memory_bytes`` and ``capture_s`` (:func:`graph_costs`). With ``requests`` (the request table behind the
    trace) also vLLM's own scheduler's latencies for this config, steps priced by its
    dispatch (:func:`~cgdispatch.plan.ladder_latency.ladder_latency`): p50/p99 TTFT and
    TPOT, throughput and preemptions.
    """
    dispatcher = make_graph_dispatcher(config, record_stats=False)
    trace = check_trace(trace)
    if len(trace) == 0:
        raise ValueError("the step trace is empty: give at least one step")
    gen2 = generation_of(dispatcher).runner.keys_count_requests
    graph_reqs = [k.num_reqs for k in capture_keys(dispatcher) if k.num_reqs is not None]
    steps = _step_keys(trace, graph_reqs if gen2 else None)
    present, count, index = _group(steps.key)
    key_mode, key_pad = _answers(dispatcher, present, steps)
    model = as_cost_model(cost_model)
    step_ms, key_ms = None, None
    if model is not None:
        key_ms = np.zeros(len(present))
        for code, mode in _MODES.items():
            sel = key_mode == code
            if sel.any():
                key_ms[sel] = model.step_time_ms(mode, key_pad[sel])
        step_ms = key_ms[index]
    by_size = _by_size(dispatcher, key_mode, key_pad, present % steps.width, count, key_ms)
    summary = _summary(dispatcher, by_size, len(trace), model)
    if requests is not None:
        summary.update(ladder_latency(dispatcher.config, requests, model))
    return WhatIfResult(
        dispatcher.config, key_mode[index], key_pad[index], step_ms, by_size, summary
    )


def _by_size(
    dispatcher: GraphDispatcher,
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
    captured = {(MODE_CODES[k.runtime_mode], k.num_tokens) for k in capture_keys(dispatcher)}
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
    dispatcher: GraphDispatcher, by_size: pd.DataFrame, steps: int, model: CostModel | None
) -> dict[str, Any]:
    graph = by_size[by_size["runtime_mode"] != "NONE"]
    real_graph = int(graph["real_tokens"].sum())
    padding = int(graph["padding_tokens"].sum())
    per_mode = by_size.groupby("runtime_mode")["steps"].sum()
    keys = capture_keys(dispatcher)
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
    out["num_graphs"] = _num_graphs(dispatcher, keys)
    out["num_captured_graphs"] = len(keys)
    out["vllm_version"] = generation_of(dispatcher).release
    if model is not None:
        total_ms = float(by_size["time_ms"].sum())
        out["mean_step_ms"] = total_ms / steps
        out["total_time_s"] = total_ms / 1e3
        out["source"] = cost_source(model)
        out.update(graph_costs(keys, model))
    return out


def _num_graphs(dispatcher: GraphDispatcher, keys: list[CaptureKey]) -> int:
    """The sizes ``max_graphs`` counts: V1's capture sizes; generation 2's prefill token
    sizes and decode request sizes that capture a graph (LoRA cases and microbatch twins
    of one size count once)."""
    return generation_of(dispatcher).ladder.num_sizes(dispatcher, keys)


def graph_costs(keys: list[CaptureKey], model: CostModel) -> dict[str, float]:
    """Graph memory and capture time of capturing ``keys``.

    A calibrated model (``graph_memory_additive``: the start-up model of
    :mod:`cgdispatch.estimate.startup_pricing`) prices each key and adds a fixed part paid once;
    any other model gives the pool one graph needs alone, and the ladder's pool is the largest
    (graphs share one pool and vLLM keeps only weak references to their outputs)."""
    out: dict[str, float] = {}
    by_mode = []
    for mode in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL):
        sizes = [k.num_tokens for k in keys if k.runtime_mode is mode]
        if sizes:
            by_mode.append((mode, np.array(sizes, dtype=np.int64)))
    additive = bool(getattr(model, "graph_memory_additive", False))
    memory = getattr(model, "graph_memory_bytes", None)
    if callable(memory) and by_mode:
        if additive:
            out["graph_memory_bytes"] = float(model.graph_pool_base_bytes) + sum(
                float(np.sum(memory(m, n))) for m, n in by_mode
            )
        else:
            out["graph_memory_bytes"] = max(float(np.max(memory(m, n))) for m, n in by_mode)
    capture = getattr(model, "capture_time_s", None)
    if callable(capture) and by_mode:
        base = float(getattr(model, "capture_base_s", 0.0) or 0.0)
        out["capture_s"] = base + sum(float(np.sum(capture(m, n))) for m, n in by_mode)
    return out
