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

import pandas as pd

from ..core.config import GraphConfig
from ..core.generation import NEWEST
from ..workload.latency import LATENCY_COLUMNS, dispatched_step_time, simulate_latencies
from ..workload.scheduler import SchedulerLimits, default_step_time_ms
from .costs import CostModel

__all__ = ["ladder_latency", "scheduler_limits_for"]

KvBlocksFn = Callable[[GraphConfig], "int | None"]


def scheduler_limits_for(config: GraphConfig) -> SchedulerLimits:
    """vLLM's scheduler settings that ``config`` carries (its release, or the newest)."""
    return SchedulerLimits(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        num_speculative_tokens=config.num_speculative_tokens,
        max_loras=config.max_loras or None,
        vllm_version=config.vllm_version or NEWEST.release,
    )


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

    Without a cost model steps take :func:`~cgdispatch.workload.scheduler.default_step_time_ms`
    (the same for every ladder)."""
    limits = limits or scheduler_limits_for(config)
    if limits.vllm_version is None:
        limits = replace(limits, vllm_version=config.vllm_version or NEWEST.release)
    if kv_blocks is not None:
        limits = replace(limits, num_gpu_blocks=kv_blocks(config))
    step = default_step_time_ms if cost_model is None else dispatched_step_time(config, cost_model)
    summary = simulate_latencies(requests, limits, step_time_ms=step, seed=seed).summary
    return {c: summary[c] for c in LATENCY_COLUMNS}
