"""What a ladder means for latency: vLLM's own scheduler run over a request table with each
step priced at the mode and padded size the ladder's dispatcher picks (``model`` figures).

The KV capacity is a hook: ``kv_blocks(config)`` gives ``num_gpu_blocks`` for a ladder's
config (the cost issue's estimate, which shrinks as graph memory grows); without it the
scheduler limits' own ``num_gpu_blocks`` is used (None: unlimited).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from ..core import cache
from ..core.config import GraphConfig
from ..core.modes import CUDAGraphMode
from ..workload.latency import LATENCY_COLUMNS, dispatched_step_time, simulate_latencies
from ..workload.limits import SchedulerLimits, scheduler_limits
from ..workload.replay import default_step_time_ms
from ..workload.request_table import check_requests
from ..workload.sustain import Sustainability, sustainability
from .costs import CostModel

__all__ = ["KvBlocksFn", "ladder_latency", "ladder_sustainability", "replay_limits"]

# the Sustainability fields stored beside the latency columns of one run
_SUSTAIN_FIELDS = ("num_requests", "window_s", "queue_start", "queue_end", "offered_tok_s",
                   "served_tok_s")  # fmt: skip

KvBlocksFn = Callable[[GraphConfig], "int | None"]


def ladder_latency(
    config: GraphConfig,
    requests: pd.DataFrame,
    cost_model: CostModel | None = None,
    *,
    limits: SchedulerLimits | None = None,
    kv_blocks: KvBlocksFn | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """:data:`~cgdispatch.workload.latency.LATENCY_COLUMNS` for one ladder's config.

    ``limits``: the scheduler limits (default: ``config``'s, built by
    :func:`~cgdispatch.workload.limits.scheduler_limits`).

    Without a cost model steps take :func:`~cgdispatch.workload.scheduler.default_step_time_ms`
    (the same for every ladder)."""
    stored = _run(config, requests, cost_model, limits, kv_blocks, seed)
    return {c: stored[c].item() for c in LATENCY_COLUMNS}


def ladder_sustainability(
    config: GraphConfig,
    requests: pd.DataFrame,
    cost_model: CostModel | None = None,
    *,
    limits: SchedulerLimits | None = None,
    kv_blocks: KvBlocksFn | None = None,
    seed: int = 0,
) -> Sustainability:
    """Whether one replica running ``config`` holds ``requests``
    (:func:`~cgdispatch.workload.sustain.sustainability` of the same run as
    :func:`ladder_latency`'s, and stored with it: asking both replays once)."""
    stored = _run(config, requests, cost_model, limits, kv_blocks, seed)
    values = {f: stored[f].item() for f in _SUSTAIN_FIELDS}
    return Sustainability(**{**values, "num_requests": int(values["num_requests"])})


def replay_limits(
    config: GraphConfig, limits: SchedulerLimits | None, kv_blocks: KvBlocksFn | None
) -> SchedulerLimits:
    """The scheduler limits a replay of ``config`` runs under: ``limits`` (None: the
    config's own), with ``kv_blocks(config)`` GPU blocks when that hook is given."""
    limits = limits or scheduler_limits(config)
    if kv_blocks is not None:
        limits = replace(limits, num_gpu_blocks=kv_blocks(config))
    return limits


def _run(
    config: GraphConfig,
    requests: pd.DataFrame,
    cost_model: CostModel | None,
    limits: SchedulerLimits | None,
    kv_blocks: KvBlocksFn | None,
    seed: int,
) -> dict[str, np.ndarray]:
    """One replay of vLLM's scheduler for ``config`` over ``requests``: its latency columns
    and its sustainability figures, from the result cache when it holds them."""
    limits = replay_limits(config, limits, kv_blocks)
    step = default_step_time_ms if cost_model is None else dispatched_step_time(config, cost_model)

    def build() -> dict[str, np.ndarray]:
        run = simulate_latencies(requests, limits, step_time_ms=step, seed=seed)
        held = sustainability(run.requests, run.steps)
        out = {c: np.asarray(run.summary[c]) for c in LATENCY_COLUMNS}
        out.update({f: np.asarray(float(getattr(held, f))) for f in _SUSTAIN_FIELDS})
        return out

    # vLLM's scheduler over azure-conv's held-out half takes about 7 s per ladder on two
    # cores (bench_trace_switch.py); the run is a pure function of this key
    key = cache.digest(
        "ladder_latency+sustain",
        *cache.frame_parts(check_requests(requests)), repr(limits), repr(config), str(seed),
        repr(getattr(step, "serving_overhead", None)),
        *_price_table(cost_model, config),
    )  # fmt: skip
    return cache.cached_arrays("latency", key, build, memory=64)


def _price_table(cost_model: CostModel | None, config: GraphConfig) -> list[str | np.ndarray]:
    """What the step clock reads of ``cost_model``: its step time in each runtime mode at
    every size a dispatch can pad to (1 to the larger of the token budget and the largest
    capture size), or a mode's refusal; the cache key holds these, not the object."""
    if cost_model is None:
        return ["default_step_time_ms"]
    top = max(config.max_num_batched_tokens, *(config.cudagraph_capture_sizes or [1]))
    sizes = np.arange(1, top + 1)
    parts: list[str | np.ndarray] = []
    for mode in (CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL):
        try:
            parts.append(np.asarray(cost_model.step_time_ms(mode, sizes), dtype=np.float64))
        except ValueError as err:
            parts.append(f"{mode.name} refused: {err}")
    return parts
