"""Latency per ladder as the request rate rises: vLLM's own scheduler over one trace, with each
ladder's steps priced by its dispatch and its KV cache shrunk by its graph memory.

Graph memory and the KV cache share the device: a ladder with more (or wider) graphs leaves
fewer KV blocks, and under load fewer blocks mean preemptions. :func:`kv_blocks_within`
turns a KV budget (the bytes left for KV before any graph is captured) into each ladder's
``num_gpu_blocks``; :func:`latency_by_rate` runs one synthetic trace (the same lengths and
arrival pattern, its rate scaled) at several rates for several ladders. Figures are
``model`` figures: the device cost model's step times and graph memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from ..core.config import GraphConfig
from ..core.generation import capture_keys
from ..core.validate import MAX_REQUESTS, check_int
from ..workload.latency import LATENCY_COLUMNS
from ..workload.synthetic import synthetic_requests
from .costs import CostModel, cost_source
from .gen2_ladder import Gen2Ladder, ladder_config
from .ladder_latency import KvBlocksFn, ladder_latency
from .tune_result import StartupCosts
from .whatif import graph_costs

__all__ = ["graph_memory_of", "kv_blocks_within", "within_kv_budget", "latency_by_rate"]

_MIB = 1 << 20


def graph_memory_of(config: GraphConfig, cost_model: CostModel) -> float:
    """Modelled graph memory (bytes) of the graphs ``config`` captures: the shared pool."""
    return float(graph_costs(capture_keys(config), cost_model).get("graph_memory_bytes", 0.0))


def kv_blocks_within(
    kv_budget_bytes: float,
    *,
    kv_bytes_per_token: float,
    cost_model: CostModel,
    block_size: int = 16,
) -> KvBlocksFn:
    """``kv_blocks(config)`` for :func:`~cgdispatch.plan.ladder_latency.ladder_latency`: the
    blocks of ``block_size`` tokens that fit in ``kv_budget_bytes`` less the config's graph
    memory, plus vLLM's null block. ValueError when a ladder leaves less than one block."""
    if not kv_budget_bytes > 0:
        raise ValueError(f"kv_budget_bytes={kv_budget_bytes!r} is invalid: give bytes > 0")
    if not kv_bytes_per_token > 0:
        raise ValueError(f"kv_bytes_per_token={kv_bytes_per_token!r} is invalid: give bytes > 0")
    check_int("block_size", block_size, 1, 1024)
    per_block = kv_bytes_per_token * block_size

    def blocks(config: GraphConfig) -> int:
        left = kv_budget_bytes - graph_memory_of(config, cost_model)
        usable = int(left // per_block)
        if usable < 1:
            raise ValueError(
                f"a KV budget of {kv_budget_bytes / _MIB:.0f} MiB leaves no KV block once this "
                f"ladder's graphs take {graph_memory_of(config, cost_model) / _MIB:.0f} MiB: "
                "raise the budget or capture fewer graphs"
            )
        return usable + 1

    return blocks


@dataclasses.dataclass(frozen=True)
class _LabelledCosts(StartupCosts):
    """Start-up costs that say where they come from (``tune`` prints ``source``)."""

    source: str = "model"


def within_kv_budget(
    startup: Any, kv_blocks: KvBlocksFn, *, what_if: str, block_size: int = 16
) -> Any:
    """``startup`` (``tune``'s start-up seam) with each ladder's KV cache that of
    ``kv_blocks`` (a what-if budget, :func:`kv_blocks_within`) instead of the GPU's: the
    KV-cache tokens are ``(kv_blocks(config) - 1) * block_size`` (vLLM's null block holds
    none), and the estimate's source ends in ``KV cache: what-if <what_if>``. A ``tune``
    given it then judges, and its verdict prints and labels, the KV figure of the what-if,
    not the full GPU's. Graph memory and capture time are ``startup``'s own."""
    if not what_if.strip():
        raise ValueError("what_if='' is invalid: say which budget, e.g. 'a 1.2 GiB budget'")

    def estimate(config: GraphConfig) -> Any:
        costs = startup(config)
        blocks = kv_blocks(config)
        tokens = (blocks - 1) * block_size
        source = f"{getattr(costs, 'source', 'model')}; KV cache: what-if {what_if}"
        fields = (
            {f.name for f in dataclasses.fields(costs)}
            if dataclasses.is_dataclass(costs)
            else set()
        )
        if "source" in fields:
            extra = {"kv_cache_blocks": blocks} if "kv_cache_blocks" in fields else {}
            if "kv_cache_bytes" in fields and "kv_bytes_per_token" in fields:
                extra["kv_cache_bytes"] = tokens * costs.kv_bytes_per_token
            return dataclasses.replace(costs, kv_cache_tokens=tokens, source=source, **extra)
        return _LabelledCosts(costs.graph_memory_bytes, costs.capture_s, tokens, source)

    return estimate


def latency_by_rate(
    ladders: Mapping[str, Gen2Ladder | list[int]],
    rates: Iterable[float],
    *,
    config: GraphConfig,
    cost_model: CostModel,
    preset: str = "sharegpt",
    num_requests: int = 300,
    seed: int = 0,
    kv_blocks: KvBlocksFn | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """One row per (rate, ladder): the latency columns (p50/p99 TTFT and TPOT, throughput,
    preemptions) of vLLM's scheduler over ``num_requests`` synthetic ``preset`` requests
    arriving at ``rate`` per second, plus the ladder's ``graph_memory_mib`` and
    ``num_gpu_blocks`` (None: unlimited KV) and the ``source`` of the figures.

    Every rate uses the same draw (``seed``): lengths are identical and arrival gaps scale
    as 1 / rate, so the rows differ only by load. ``kv_blocks(config)`` gives each ladder's
    KV capacity (see :func:`kv_blocks_within`); without it the KV cache is unlimited.
    """
    rates = [float(r) for r in rates]
    if not rates or not all(r > 0 for r in rates):
        raise ValueError(f"rates={rates!r} is invalid: give one or more rates > 0 (req/s)")
    if not ladders:
        raise ValueError("ladders is empty: give at least one {name: sizes}")
    check_int("num_requests", num_requests, 1, MAX_REQUESTS)
    configs = {name: ladder_config(config, sizes) for name, sizes in ladders.items()}
    memory = {name: graph_memory_of(cfg, cost_model) for name, cfg in configs.items()}
    blocks = {name: kv_blocks(cfg) if kv_blocks else None for name, cfg in configs.items()}
    rows: list[dict[str, Any]] = []
    runs = [(rate, name) for rate in rates for name in configs]
    for rate, name in tqdm(runs, desc="latency by rate", disable=not progress):
        requests = synthetic_requests(num_requests, preset, rate_per_s=rate, seed=seed)
        fixed = (lambda cfg, n=blocks[name]: n) if blocks[name] is not None else None
        summary = ladder_latency(configs[name], requests, cost_model, kv_blocks=fixed, seed=seed)
        rows.append(
            {
                "rate_req_s": rate,
                "ladder": name,
                **{c: summary[c] for c in LATENCY_COLUMNS},
                "graph_memory_mib": memory[name] / _MIB,
                "num_gpu_blocks": blocks[name],
                "source": cost_source(cost_model),
            }
        )
    return pd.DataFrame(rows)
