"""What a user feels: time to first token, time per output token and end-to-end latency per
request, and throughput, preemptions and KV use per run, from the replay of vLLM's own
scheduler (:func:`~cgdispatch.workload.replay.start_replay`, the run
:func:`~cgdispatch.workload.replay.replay_scheduler` returns the steps of).

Times are on the simulator's clock, so they are ``model`` figures: as good as the step-time
function given (:func:`dispatched_step_time` prices each step at the mode and padded size the
generation's dispatcher picks, from any cost model with ``step_time_ms(mode, num_tokens)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from ..core import cache
from ..core.config import GraphConfig
from ..core.generation import dispatch_step, make_graph_dispatcher
from ..core.modes import CUDAGraphMode
from ..core.step_content import StepContent
from .limits import SchedulerLimits
from .replay import default_step_time_ms, start_replay
from .serving_overhead import VLLM_SERVING_OVERHEAD, ServingOverhead, serving_overhead_of

__all__ = [
    "LatencyRun",
    "request_latencies",
    "latency_summary",
    "simulate_latencies",
    "dispatched_step_time",
    "serving_step_time",
    "DispatchedStepTime",
    "LATENCY_COLUMNS",
]

# the per-ladder columns compare() and the CLI report (latency_summary's keys)
LATENCY_COLUMNS = (
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "throughput_req_s",
    "throughput_tok_s",
    "num_preemptions",
)


class _StepCost(Protocol):
    def step_time_ms(self, mode: CUDAGraphMode, num_tokens: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class LatencyRun:
    """One simulated run: its steps, its requests with their latencies, and the summary."""

    steps: pd.DataFrame  # replay_scheduler()'s columns
    requests: pd.DataFrame  # request_latencies()'s columns, in the caller's row order
    summary: dict[str, Any]  # latency_summary()'s keys


def request_latencies(times: pd.DataFrame) -> pd.DataFrame:
    """Per request (``ExactRun.request_times()``'s columns): adds ``ttft_s`` (arrival to first
    token), ``tpot_s`` (first token to finish per further output token; NaN for one token)
    and ``e2e_s`` (arrival to finish)."""
    out = times.copy()
    out["ttft_s"] = out["first_token_s"] - out["arrival_s"]
    out["e2e_s"] = out["finish_s"] - out["arrival_s"]
    more = out["output_tokens"] - 1
    out["tpot_s"] = (out["finish_s"] - out["first_token_s"]) / more.where(more > 0)
    return out


def latency_summary(
    latencies: pd.DataFrame, steps: pd.DataFrame, num_gpu_blocks: int | None = None
) -> dict[str, Any]:
    """Per run: p50 / p99 TTFT, TPOT and end-to-end latency (ms), throughput (requests/s and
    output tokens/s from the first arrival to the last finish), preemptions, and KV-cache use
    (mean and peak share of the usable blocks; NaN when ``num_gpu_blocks`` is None)."""
    if len(latencies) == 0 or len(steps) == 0:
        raise ValueError("latency_summary needs at least one request and one step")
    span = float(latencies["finish_s"].max() - latencies["arrival_s"].min())
    span = span if span > 0 else float("nan")

    def pct(col: str, q: float) -> float:
        values = latencies[col].dropna()
        return float(np.percentile(values, q) * 1e3) if len(values) else float("nan")

    usable = num_gpu_blocks - 1 if num_gpu_blocks is not None else None
    used = steps["kv_blocks_used"].to_numpy(dtype=np.float64)
    return {
        "ttft_p50_ms": pct("ttft_s", 50),
        "ttft_p99_ms": pct("ttft_s", 99),
        "tpot_p50_ms": pct("tpot_s", 50),
        "tpot_p99_ms": pct("tpot_s", 99),
        "e2e_p50_ms": pct("e2e_s", 50),
        "e2e_p99_ms": pct("e2e_s", 99),
        "throughput_req_s": len(latencies) / span,
        "throughput_tok_s": float(latencies["output_tokens"].sum()) / span,
        "num_preemptions": int(steps["num_preempted"].sum()),
        "kv_util_mean": float(used.mean() / usable) if usable else float("nan"),
        "kv_util_peak": float(used.max() / usable) if usable else float("nan"),
        "source": "model",
    }


def simulate_latencies(
    requests: pd.DataFrame,
    limits: SchedulerLimits | None = None,
    *,
    step_time_ms: Callable[[int, int], float] = default_step_time_ms,
    seed: int = 0,
) -> LatencyRun:
    """Replay vLLM's own scheduler (``limits.vllm_version``'s release; default limits: the
    newest release's defaults) and report latencies. ``step_time_ms(num_tokens, num_reqs)``:
    e.g. :func:`dispatched_step_time`."""
    run = start_replay(requests, limits, step_time_ms=step_time_ms, seed=seed)
    steps = run.frame()
    lat = request_latencies(run.request_times())
    limits = run.limits
    return LatencyRun(steps, lat, latency_summary(lat, steps, limits.num_gpu_blocks))


class DispatchedStepTime:
    """``step_time_ms(num_tokens, num_reqs)`` priced at the runtime mode and padded size that
    a config's dispatcher picks, and :meth:`content_ms` for a step whose content is known.

    Built by :func:`dispatched_step_time`; the replay of vLLM's scheduler calls
    :meth:`content_ms` (each decode's context, each prompt chunk) when the cost model can
    price requests (``cost_model.pricer()``, :mod:`cgdispatch.estimate.step_cost`), else the
    size-only call.
    """

    def __init__(
        self,
        config: GraphConfig,
        cost_model: _StepCost,
        cache_size: int,
        overhead: ServingOverhead | None = None,
    ) -> None:
        # host-side serving time (per step, per request in it; the front end per request,
        # which the replay reads from here); off: the GPU's step time alone
        self.serving_overhead = serving_overhead_of(overhead)
        self.dispatcher = make_graph_dispatcher(config, record_stats=False)
        self.q = config.uniform_decode_query_len
        self.cost_model = cost_model
        pricer = getattr(cost_model, "pricer", None)
        has_shape = getattr(cost_model, "attention", None) is not None
        self.pricer = pricer() if callable(pricer) and has_shape else None
        self.scale = float(getattr(cost_model, "step_scale", 1.0))
        # many (num_tokens, num_reqs) pad to one (mode, size): azure-conv's held-out replay
        # prices ~18k pairs at ~2.5k sizes, ~150 us a cost-model call (bench_trace_switch.py)
        memo = cache.local_memo(maxsize=cache_size)  # none when caching is off
        self._padded_ms = memo(self._padded_ms_uncached)
        self._route = memo(self._route_uncached)
        self._sized = memo(self._sized_uncached)

    def _padded_ms_uncached(self, mode: CUDAGraphMode, padded_tokens: int) -> float:
        ms = self.cost_model.step_time_ms(mode, np.asarray([padded_tokens]))
        return float(np.asarray(ms)[0])

    def _route_uncached(self, num_tokens: int, num_reqs: int) -> tuple[CUDAGraphMode, int]:
        uniform = num_tokens == self.q * num_reqs
        answer = dispatch_step(self.dispatcher, num_tokens, num_reqs, uniform)
        return answer.runtime_mode, answer.padded_tokens

    def _sized_uncached(self, num_tokens: int, num_reqs: int) -> float:
        if num_tokens == 0:
            return 0.0
        return self._padded_ms(*self._route(num_tokens, num_reqs))

    def __call__(self, num_tokens: int, num_reqs: int) -> float:
        """Size-only: a step of ``num_tokens`` priced as the cost model prices a size."""
        if num_tokens == 0:
            return 0.0
        return self.serving_overhead.paced_ms(self._sized(num_tokens, num_reqs), num_reqs)

    def content_ms(self, content: StepContent) -> float:
        """A step priced from what it holds (size-only when the cost model cannot)."""
        num_tokens = content.num_tokens
        if num_tokens == 0:
            return 0.0
        if self.pricer is None:
            gpu_ms = self._sized(num_tokens, content.num_reqs)
        else:
            mode, padded = self._route(num_tokens, content.num_reqs)
            gpu_ms = self.scale * self.pricer.step_ms(content, mode, padded)
        return self.serving_overhead.paced_ms(gpu_ms, content.num_reqs)

    def decode_ms(self, num_reqs: int) -> Callable[[int], float]:
        """:meth:`content_ms` of a step of ``num_reqs`` one-token decodes (``num_reqs`` >= 1)
        as a function of their summed context: a steady stretch's clock, the same floats."""
        host = self.serving_overhead.step_overhead_ms(num_reqs)  # paces it, as content_ms
        if self.pricer is None:
            ms = max(float(self._sized(num_reqs, num_reqs)), host)
            return lambda kv_tokens: ms
        mode, padded = self._route(num_reqs, num_reqs)
        step, scale = self.pricer.decode_step_ms(num_reqs, mode, padded), self.scale
        if self.serving_overhead.is_off:
            return lambda kv_tokens: scale * step(kv_tokens)
        return lambda kv_tokens: max(scale * step(kv_tokens), host)


def dispatched_step_time(
    config: GraphConfig,
    cost_model: _StepCost,
    *,
    cache_size: int = 1 << 16,
    overhead: ServingOverhead | None = None,
) -> DispatchedStepTime:
    """``step_time_ms(num_tokens, num_reqs)`` priced at the runtime mode and padded size that
    ``config``'s dispatcher (its ``vllm_version``'s generation) picks for the step. A step of
    ``q * num_reqs`` tokens is taken as a uniform decode (q = 1 + speculative tokens); an
    empty schedule call costs nothing. The replay of vLLM's scheduler prices each step from
    what it holds instead (:meth:`DispatchedStepTime.content_ms`) when the cost model can.

    ``overhead``: host-side serving time
    (:class:`~cgdispatch.workload.serving_overhead.ServingOverhead`): its per-step part
    paces every non-empty step, its front-end part delays each request's arrival at the
    scheduler in the replay. None (default): off, the cost model's step time alone; the
    published-run comparison passes
    :data:`~cgdispatch.workload.serving_overhead.VLLM_SERVING_OVERHEAD`; the planning
    paths (``tune``, ``plan``) leave it off (its held-out error: docs/calibration.md)."""
    return DispatchedStepTime(config, cost_model, cache_size, overhead)


def serving_step_time(
    config: GraphConfig,
    cost_model: _StepCost,
    *,
    overhead: ServingOverhead | None = VLLM_SERVING_OVERHEAD,
) -> DispatchedStepTime:
    """The step clock of a served replay: :func:`dispatched_step_time` with the host-side
    serving overhead on (default
    :data:`~cgdispatch.workload.serving_overhead.VLLM_SERVING_OVERHEAD`; None: off). The
    clock the published-run comparison uses (opt-in elsewhere: pass it as ``step_time_ms``)."""
    return dispatched_step_time(config, cost_model, overhead=overhead)
