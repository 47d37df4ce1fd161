"""The held-out judge of :func:`~cgdispatch.plan.tune.tune`: does one replica hold the
held-out traffic, how do the ladders' latencies come out under vLLM's scheduler, and is the
plan's gain on the objective larger than the band the models' errors and the held-out noise
could make alone (:mod:`~cgdispatch.plan.tune_bands`).

It judges ladders tune has already planned; it plans nothing and draws no traffic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..core.config import GraphConfig
from ..estimate.uncertainty import ModelErrors
from ..workload.limits import SchedulerLimits
from .costs import CostModel
from .ladder_compare import compare
from .ladder_latency import ladder_latency, ladder_sustainability
from .overload import first_guess, replicas_needed
from .tune_bands import ScaledCostModel, StepBand, step_band
from .tune_result import LATENCY_KEYS, LATENCY_TOLERANCE, OBJECTIVES

# tune's seams (plan.tune.ReplayFn and StartupFn), named here without importing tune
ReplayFn = Callable[..., pd.DataFrame]
StartupFn = Callable[[GraphConfig], Any]

__all__ = [
    "HeldOutLoad",
    "held_out_load",
    "Verdict",
    "verdict_on",
    "objective_for",
    "gain_and_band",
    "pessimistic_latency",
    "kv_blocks_from",
    "held_out_requests",
    "with_latency",
    "KV_BLOCK_TOKENS",
    "LATENCY_NAMES",
]

KV_BLOCK_TOKENS = 16  # vLLM's default block_size
# the scheduler's columns under the names the verdict uses
LATENCY_NAMES = {"tpot_p99_ms": "p99_tpot_ms", "ttft_p99_ms": "p99_ttft_ms"}


@dataclass(frozen=True)
class HeldOutLoad:
    """What the held-out requests say before any verdict: the replay that prices latencies
    (None: the caller's or :func:`compare`), the overload figures (None: one replica holds
    the traffic) and the replicas that would hold it."""

    replay: ReplayFn | None = None
    held_requests: pd.DataFrame | None = None
    overload: Any = None
    needed: int | None = None


def held_out_load(
    requests: pd.DataFrame,
    fleet: pd.DataFrame,
    cut_s: float,
    default_cfg: GraphConfig,
    cost_model: CostModel,
    kv_blocks: Callable | None,
    balance: str,
    replicas: int,
    limits: SchedulerLimits | None,
) -> HeldOutLoad:
    """The held-out requests replayed on one replica running vLLM's default ladder and
    checked for overload (:mod:`~cgdispatch.workload.sustain`: a waiting queue that grows
    through the window while fewer tokens are served than offered; issue 40). Overloaded,
    ``overload`` holds the figures and ``needed`` the smallest replica count that holds the
    traffic (:func:`~cgdispatch.plan.overload.replicas_needed`)."""
    held_requests = held_out_requests(requests, cut_s)
    replay = with_latency(held_requests, kv_blocks, limits)
    overload = ladder_sustainability(
        default_cfg, held_requests, cost_model, kv_blocks=kv_blocks, limits=limits
    )
    if overload.sustainable:
        return HeldOutLoad(replay, held_requests)
    needed = replicas_needed(
        held_out_requests(fleet, cut_s), default_cfg, cost_model,
        balance=balance, kv_blocks=kv_blocks, at_least=replicas + 1,
        guess=first_guess(overload, replicas), limits=limits,
    )  # fmt: skip
    return HeldOutLoad(replay, held_requests, overload, needed)


@dataclass(frozen=True)
class Verdict:
    """The judged objective, the plan's held-out gain on it, its band, the step-time band
    and the reason of the recommendation."""

    objective: str
    gain: float
    band: float
    steps: StepBand
    reason: str

    @property
    def wins(self) -> bool:
        """Whether the plan is recommended."""
        return self.reason == "measurable gain"


def verdict_on(
    objective: str | None,
    held_out: dict[str, dict[str, Any]],
    deltas: dict[str, float],
    test: pd.DataFrame,
    configs: dict[str, GraphConfig],
    cost_model: CostModel,
    errors: ModelErrors,
    load: HeldOutLoad,
    kv_blocks: Callable | None,
    limits: SchedulerLimits | None,
) -> Verdict:
    """Judge the plan on ``objective`` held out: "measurable gain" only when its gain is
    larger than its band (:mod:`~cgdispatch.plan.tune_bands`), else "no measurable
    difference" or "the plan is worse". Overloaded, nothing is judged on queueing: the
    default objective becomes mean step time, and an explicit ``p99-ttft`` gets no verdict
    (reason "overloaded")."""
    overloaded = load.overload is not None
    if overloaded and objective is None:
        objective = "step"  # a p99 TTFT would measure the queue, not the graphs
    objective = objective_for(objective, "p99_ttft_ms" in held_out["planned"])
    steps = step_band(test, configs["planned"], configs["vllm default"], cost_model,
                      errors.step_kernels or errors.step_time, errors.step_time)  # fmt: skip
    if overloaded and objective == "p99-ttft":  # judged on nothing: a queue
        return Verdict(objective, 0.0, 0.0, steps, "overloaded")
    gain, band = gain_and_band(
        objective, held_out, deltas, steps, errors,
        pessimistic=lambda factor, fewer_tokens: pessimistic_latency(
            configs["planned"], load.held_requests, cost_model, kv_blocks, factor,
            fewer_tokens, limits,
        ),
    )  # fmt: skip
    if gain > band:
        reason = "measurable gain"
    elif gain >= -band:
        reason = "no measurable difference"
    else:
        reason = "the plan is worse"
    return Verdict(objective, gain, band, steps, reason)


def objective_for(objective: str | None, has_latency: bool) -> str:
    """The objective asked for, or the default: p99 TTFT when the replay gives latencies
    (what a server's users see first and SLOs are written on), else mean step time."""
    if objective is None:
        return "p99-ttft" if has_latency else "step"
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r} is unknown: use one of {list(OBJECTIVES)}")
    if OBJECTIVES[objective][0] in LATENCY_KEYS and not has_latency:
        raise ValueError(
            f"objective={objective!r} needs latencies, which a trace of steps cannot give: "
            "give requests (a requests CSV or a preset), or use objective 'step'"
        )
    return objective


def gain_and_band(
    objective: str,
    held_out: dict[str, dict[str, Any]],
    deltas: dict[str, float],
    steps: StepBand,
    errors: ModelErrors,
    pessimistic: Callable[[float, float], dict[str, Any] | None],
) -> tuple[float, float]:
    """(gain, band) on the objective's figure: gain > 0 when the plan is better held out;
    band how large a gain the models' errors and the held-out noise could make alone."""
    key, lower = OBJECTIVES[objective]
    plan, base = held_out["planned"], held_out["vllm default"]
    if key not in plan or key not in base:
        raise ValueError(
            f"objective={objective!r} needs {key}, which this run does not give (a start-up "
            "estimate gives KV-cache tokens: a model with a published config)"
        )
    sign = 1.0 if lower else -1.0
    gain = sign * (base[key] - plan[key])
    if objective == "step":
        return gain, steps.band_ms
    if objective == "startup":
        return gain, errors.capture * abs(deltas.get("capture_s", gain))
    if objective == "kv":
        return gain, errors.graph_memory * abs(gain)
    # a latency: replay the plan as the models' errors would price it at worst
    factor = 1.0 + steps.band_ms / base["mean_step_ms"]
    fewer = errors.graph_memory * abs(deltas.get("kv_cache_tokens", 0.0))
    worst = pessimistic(factor, fewer)
    floor = LATENCY_TOLERANCE * abs(base[key])  # one run's resolution of a p99 or a rate
    if worst is None or key not in worst:
        return gain, (factor - 1.0) * abs(base[key]) + floor
    worst_gain = sign * (base[key] - worst[key])
    return gain, max(0.0, gain - worst_gain) + floor


def kv_blocks_from(startup: StartupFn | None, costs: dict) -> Callable | None:
    """vLLM's ``num_gpu_blocks`` per ladder config from the start-up estimate's KV tokens
    (null block included), so preemption follows each ladder's KV cache; None without."""
    if startup is None or any(getattr(c, "kv_cache_tokens", None) is None for c in costs.values()):
        return None

    def blocks(config: GraphConfig) -> int:
        tokens = float(startup(config).kv_cache_tokens)
        return max(2, int(tokens // KV_BLOCK_TOKENS) + 1)

    return blocks


def pessimistic_latency(
    planned: GraphConfig,
    requests: pd.DataFrame | None,
    cost_model: CostModel,
    kv_blocks: Callable | None,
    factor: float,
    fewer_tokens: float,
    limits: SchedulerLimits | None = None,
) -> dict[str, Any] | None:
    """The plan's latencies with its steps ``factor`` times longer and ``fewer_tokens`` less
    KV cache: where the models' errors, at their cross-validated size, would put it."""
    if requests is None:
        return None
    worse_blocks = None
    if kv_blocks is not None:
        drop = int(np.ceil(fewer_tokens / KV_BLOCK_TOKENS))

        def worse_blocks(config: GraphConfig) -> int:
            return max(2, kv_blocks(config) - drop)

    out = ladder_latency(
        planned,
        requests,
        ScaledCostModel(cost_model, factor),
        kv_blocks=worse_blocks,
        limits=limits,
    )
    return {LATENCY_NAMES.get(k, k): v for k, v in out.items()}


def held_out_requests(requests: pd.DataFrame, cut_s: float) -> pd.DataFrame:
    """The requests arriving from ``cut_s`` on (the held-out part), arrivals shifted to 0."""
    held = requests[requests["arrival_s"].to_numpy() >= cut_s].reset_index(drop=True)
    return held.assign(arrival_s=held["arrival_s"] - held["arrival_s"].min())


def with_latency(
    requests: pd.DataFrame, kv_blocks: Callable | None = None, limits: SchedulerLimits | None = None
) -> ReplayFn:
    """``compare`` plus vLLM's scheduler over ``requests`` (each ladder's KV cache from
    ``kv_blocks``, the rest of ``limits``): p99 TTFT and TPOT, throughput and preemption
    columns."""

    def replay(trace: pd.DataFrame, ladders: dict, **kwargs) -> pd.DataFrame:
        table = compare(
            trace, ladders, requests=requests, kv_blocks=kv_blocks, scheduler=limits, **kwargs
        )
        return table.rename(columns=LATENCY_NAMES)

    return replay
