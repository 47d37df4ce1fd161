"""One home for turning a person's tune settings into a :class:`TuneResult`.

``python -m cgdispatch tune`` and the tune dashboard both take a model, a device, traffic
and vLLM's limits from a person; :func:`tune_for` builds what
:func:`cgdispatch.plan.tune.tune` needs from them (the resolved config, the request table,
the start-up estimate and the cost model from the disk cache, the trace) and calls it. It
checks, in this order, what can be refused before the trace is simulated: the config, a TP
size the model cannot take, a model that does not fit its GPUs, a request longer than the
KV cache. It does not parse flags or draw: the CLI and the dashboard do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.generation import default_release

if TYPE_CHECKING:
    from ..estimate.devices import DeviceSpec
    from ..plan.tune_result import TuneResult

__all__ = ["TuneSettings", "tune_for"]


@dataclass(frozen=True)
class TuneSettings:
    """What a person sets for one ``tune`` run (the CLI's flags, the dashboard's controls)."""

    model: str = "llama-3.1-8b"  # architecture, published id or path to a config.json
    device: str | DeviceSpec = "H200"  # a preset name or a spec (--device-spec)
    tensor_parallel_size: int | None = None  # None: the model's own (a TP preset's), else 1
    trace: str = "sharegpt"  # synthetic preset, production trace or file path
    num_requests: int = 1000  # preset traces only
    rate_per_s: float = 8.0  # preset traces only
    seed: int = 0  # synthetic traffic's draw
    vllm_version: str = field(default_factory=default_release)  # the newest
    cudagraph_mode: str = "FULL_AND_PIECEWISE"
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    holdout: float = 0.5  # held-out share the verdict is judged on
    max_graphs: int | None = None  # None: the planner's default (plan.tune.DEFAULT_GRAPHS)
    memory_budget_bytes: float | None = None  # graph pool budget
    capture_budget_s: float | None = None
    context_len: int = 512  # KV positions per token of the cost model
    gpu_memory_utilization: float = 0.9  # vLLM's flag, for the KV-cache estimate
    objective: str | None = None  # None: p99-ttft with requests, step for a trace of steps
    calibration: str | None = None  # a calibrate profile's name or path: its factors and bands

    def tp_flag(self) -> int | None:
        """The TP size as ``tune``'s flag: None at the model's own size (the same figures,
        and the cache key the dashboard and CLI have always used)."""
        from ..models.registry import tensor_parallel_flag

        return tensor_parallel_flag(self.model, self.tensor_parallel_size)


def tune_for(settings: TuneSettings, *, progress: bool = False) -> TuneResult:
    """:func:`cgdispatch.plan.tune.tune` for ``settings``; ``progress``: a bar while the
    trace is simulated. Raises ValueError (``DoesNotFitError`` among them) for a setting
    that cannot run, naming it."""
    from ..core.config import GraphConfig
    from ..estimate.devices import device_label
    from ..estimate.kv_bytes import kv_bytes_per_token
    from ..estimate.uncertainty import errors_for
    from ..models.registry import check_model_tensor_parallel, tensor_parallel_size_for
    from ..plan.tune import DEFAULT_GRAPHS, tune
    from ..workload.sources import workload_requests, workload_trace
    from ..workload.trace import check_requests_fit
    from .model_cache import cached_cost_model, cached_startup
    from .tune_calibration import calibrated_costs, calibrated_startup, load_calibration

    s = settings
    tp_flag = s.tp_flag()
    # before the caches and any arithmetic: a TP size vLLM could not load is refused
    check_model_tensor_parallel(s.model, tp_flag)
    config = GraphConfig(
        vllm_version=s.vllm_version,
        cudagraph_mode=s.cudagraph_mode,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        tensor_parallel_size=tensor_parallel_size_for(s.model, s.tensor_parallel_size),
    ).resolve()
    requests = workload_requests(
        s.trace, num_requests=s.num_requests, rate_per_s=s.rate_per_s, seed=s.seed
    )  # None for a file of steps: then no latency figures
    profile = None
    if s.calibration is not None:  # refused here when it is of another model, GPU or TP
        profile = load_calibration(s.calibration, s.model, s.device, config.tensor_parallel_size)
    startup = cached_startup(  # the disk cache: a stage profile takes ~5 s to build
        s.model,
        s.device,
        gpu_memory_utilization=s.gpu_memory_utilization,
        tensor_parallel_size=tp_flag,
        coefficients=None if profile is None else profile.coefficients(),
    )
    if profile is not None and startup is not None:
        startup = calibrated_startup(startup, profile)
    if startup is not None:  # a model that does not fit is refused here, before simulating
        kv = startup(config).kv_cache_tokens
        if requests is not None:
            where = f"{s.model} on {device_label(s.device)}, model estimate"
            check_requests_fit(requests, kv, where)
    # before simulating too: it refuses a TP size the model cannot take
    cost_model = cached_cost_model(
        s.model, s.device, context_len=s.context_len, tensor_parallel_size=tp_flag
    )
    errors = None
    if profile is not None:
        cost_model, errors = calibrated_costs(profile, cost_model, errors_for(s.device))
    trace, label = workload_trace(
        s.trace,
        num_requests=s.num_requests,
        rate_per_s=s.rate_per_s,
        seed=s.seed,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        progress=progress,
    )
    return tune(
        trace,
        requests=requests,
        config=config,
        cost_model=cost_model,
        holdout=s.holdout,
        max_graphs=DEFAULT_GRAPHS if s.max_graphs is None else s.max_graphs,
        memory_budget_bytes=s.memory_budget_bytes,
        capture_budget_s=s.capture_budget_s,
        kv_bytes_per_token=kv_bytes_per_token(s.model, tensor_parallel_size=tp_flag),
        trace_label=label,
        startup=startup,
        objective=s.objective,
        errors=errors,
    )
