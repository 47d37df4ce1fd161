"""One home for turning a person's tune settings into a :class:`TuneResult`.

``python -m cgdispatch tune`` and the tune dashboard both take a model, a device, traffic
and vLLM's limits from a person; :func:`tune_for` builds what
:func:`cgdispatch.plan.tune.tune` needs from them (the resolved config, the request table,
the start-up estimate and the cost model from the disk cache, the trace) and calls it. It
checks, in this order, what can be refused before the trace is simulated: the config, a TP
size the model cannot take, a model that does not fit its GPUs, a ``max_model_len`` the KV
cache cannot hold; requests vLLM would reject (a prompt of ``max_model_len`` or more) are
dropped and counted, and a trace is refused only when all are. It does not parse flags or
draw: the CLI and the dashboard do.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..core.generation import default_release
from ..core.modes import CUDAGraphMode

if TYPE_CHECKING:
    from ..core.config import GraphConfig
    from ..estimate.devices import DeviceSpec
    from ..plan.tune_result import TuneResult
    from ..workload.sources import WorkloadTable
    from ..workload.trace_source import TraceSource

__all__ = ["TuneSettings", "tune_for"]


@dataclass(frozen=True)
class TuneSettings:
    """What a person sets for one ``tune`` run (the CLI's flags, the dashboard's controls)."""

    model: str = "llama-3.1-8b"  # architecture, published id or path to a config.json
    device: str | DeviceSpec = "H200"  # a preset name or a spec (--device-spec)
    tensor_parallel_size: int | None = None  # None: the model's own (a TP preset's), else 1
    # synthetic preset, production trace or file path (resolved by tune_for), or a resolved
    # source (workload.trace_source.resolve_trace)
    trace: str | TraceSource = "sharegpt"
    num_requests: int = 1000  # preset traces only
    rate_per_s: float = 8.0  # preset traces only
    seed: int = 0  # synthetic traffic's draw
    vllm_version: str = field(default_factory=default_release)  # the newest
    # a mode or its name (case-insensitive): parsed here, once, and kept as the mode
    cudagraph_mode: CUDAGraphMode = CUDAGraphMode.FULL_AND_PIECEWISE
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
    # vLLM's --max-model-len; None: what vLLM would pick (workload.model_len.vllm_max_model_len)
    max_model_len: int | None = None
    max_concurrency: int | None = None  # a client's requests in flight (None: open loop)
    hash_block_size: int = 512  # prompt tokens per hash id of a mooncake_trace or hash_ids
    replicas: int = 1  # identical replicas the arrivals are split across; one's share is tuned
    balance: str = "round-robin"  # how (workload.replicas.BALANCES)
    enable_prefix_caching: bool = True  # vLLM's default; False: --no-prefix-caching

    def __post_init__(self) -> None:
        object.__setattr__(self, "cudagraph_mode", CUDAGraphMode.parse(self.cudagraph_mode))

    def config(self) -> GraphConfig:
        """The resolved engine config these settings describe (the TP size the model's own
        when not given)."""
        from ..core.config import GraphConfig
        from ..models.registry import tensor_parallel_size_for

        return GraphConfig(
            vllm_version=self.vllm_version,
            cudagraph_mode=self.cudagraph_mode,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            tensor_parallel_size=tensor_parallel_size_for(self.model, self.tensor_parallel_size),
        ).resolve()

    def tp_flag(self) -> int | None:
        """The TP size as ``tune``'s flag: None at the model's own size (the same figures,
        and the cache key the dashboard and CLI have always used)."""
        from ..models.registry import tensor_parallel_flag

        return tensor_parallel_flag(self.model, self.tensor_parallel_size)


def tune_for(settings: TuneSettings, *, progress: bool = False) -> TuneResult:
    """:func:`cgdispatch.plan.tune.tune` for ``settings``; ``progress``: a bar while the
    trace is read and simulated. Raises ValueError (``DoesNotFitError`` among them) for a
    setting that cannot run, naming it."""
    from ..estimate.device_model import check_sharding
    from ..estimate.devices import device_label
    from ..estimate.kv_bytes import kv_bytes_per_token
    from ..plan.tune import DEFAULT_GRAPHS, tune
    from ..workload.limits import kv_cache_blocks, scheduler_limits
    from ..workload.model_len import served_requests
    from ..workload.prefix_stats import prefix_hit_rate
    from ..workload.replicas import check_balance
    from ..workload.sources import workload_trace

    s = settings
    check_balance(s.balance, s.replicas)  # before any work
    tp_flag = s.tp_flag()
    # before the caches and any arithmetic: a TP size vLLM could not load is refused
    check_sharding(s.model, tp_flag)
    config = s.config()
    workload = _workload(s, progress)  # drawn or read once
    requests = workload.requests  # None for a file of steps: then no latency figures
    profile, startup = _profile_and_startup(s, tp_flag, config.tensor_parallel_size)
    kv = None
    num_gpu_blocks = None  # no start-up estimate: an unlimited KV cache
    if startup is not None:  # a model that does not fit is refused here, before simulating
        kv = startup(config).kv_cache_tokens
        num_gpu_blocks = kv_cache_blocks(kv)
    where = f"{s.model} on {device_label(s.device)}, model estimate"
    max_model_len = _max_model_len(s, kv, where)
    rejected = 0
    if requests is not None:  # vLLM rejects a prompt that reaches max_model_len
        requests, rejected = served_requests(requests, max_model_len, where)
    # the one value the planning trace obeys: the config's limits with vLLM's default ladder's
    # KV cache, so the plan is made on the steps the judge replays for vLLM's default
    limits = scheduler_limits(
        config, num_gpu_blocks=num_gpu_blocks, enable_prefix_caching=s.enable_prefix_caching
    )
    cost_model, errors = _costs(s, tp_flag, profile)  # before simulating: refuses a bad TP
    trace, label = workload_trace(
        workload.source, num_requests=s.num_requests, rate_per_s=s.rate_per_s, seed=s.seed,
        limits=limits, progress=progress, requests=requests,
        steps=workload.table if requests is None else None,
    )  # fmt: skip
    result = tune(
        trace, requests=requests, config=config, cost_model=cost_model, holdout=s.holdout,
        max_graphs=DEFAULT_GRAPHS if s.max_graphs is None else s.max_graphs,
        memory_budget_bytes=s.memory_budget_bytes, capture_budget_s=s.capture_budget_s,
        kv_bytes_per_token=kv_bytes_per_token(s.model, tensor_parallel_size=tp_flag),
        trace_label=label, startup=startup, objective=s.objective, errors=errors,
        replicas=s.replicas, balance=s.balance, limits=limits,
    )  # fmt: skip
    hit_rate = None if requests is None else prefix_hit_rate(requests)
    return replace(result, traffic={"max_model_len": max_model_len, "rejected_requests": rejected,
                                    "prefix_hit_rate": hit_rate,
                                    "max_concurrency": s.max_concurrency})  # fmt: skip


def _workload(s: TuneSettings, progress: bool) -> WorkloadTable:
    """``s.trace`` resolved and drawn or read once; its requests closed-loop when a client
    concurrency is set. ValueError for replicas over a file of steps."""
    from ..workload.closed_loop import with_max_concurrency
    from ..workload.sources import read_workload

    workload = read_workload(
        s.trace,
        num_requests=s.num_requests,
        rate_per_s=s.rate_per_s,
        seed=s.seed,
        hash_block_size=s.hash_block_size,
        progress=progress,
        what="trace",
    )
    if workload.requests is not None and s.max_concurrency is not None:
        closed = with_max_concurrency(workload.requests, s.max_concurrency)
        workload = replace(workload, table=closed)
    if s.replicas > 1 and workload.requests is None:
        raise ValueError(
            f"replicas={s.replicas}: traffic {workload.source.name!r} is a file of steps, which cannot be "
            "split across replicas; give requests (a requests CSV, a preset or a production "
            "trace), or 1 replica"
        )
    return workload


def _profile_and_startup(s: TuneSettings, tp_flag: int | None, tp_size: int) -> tuple[Any, Any]:
    """``(calibration profile, start-up estimate)`` of ``s``: the profile (None when not
    given) refused when it is of another model, GPU or TP; the estimate's stage profile from
    the cache, with the profile's coefficients and factors when one is given."""
    from .tune_calibration import calibrated_startup, load_calibration

    profile = None
    if s.calibration is not None:
        profile = load_calibration(s.calibration, s.model, s.device, tp_size)
    startup = _startup(s, tp_flag, profile)
    if profile is not None and startup is not None:
        startup = calibrated_startup(startup, profile)
    return profile, startup


def _costs(s: TuneSettings, tp_flag: int | None, profile: Any) -> tuple[Any, Any]:
    """``(cost model, model errors)`` of ``s`` (the disk-cached device cost model; errors
    None: the device's), calibrated by ``profile`` when one is given. Refuses a TP size the
    model cannot take."""
    from ..estimate.device_model import device_cost_model
    from ..estimate.uncertainty import errors_for
    from .tune_calibration import calibrated_costs

    cost_model = device_cost_model(
        s.model, s.device, context_len=s.context_len, tensor_parallel_size=tp_flag
    )
    if profile is None:
        return cost_model, None
    return calibrated_costs(profile, cost_model, errors_for(s.device))


def _startup(s: TuneSettings, tp_flag: int | None, profile: Any) -> Any:
    """The start-up estimate for ``s`` (its stage profile comes from the cache), with a
    calibration profile's coefficients when one is given."""
    from ..estimate.startup import startup_for

    options: dict[str, Any] = {}  # TP and coefficients left out when not given: the defaults
    if tp_flag is not None:
        options["tensor_parallel_size"] = tp_flag
    if profile is not None:
        options["coefficients"] = profile.coefficients()
    return startup_for(  # its stage profile (~5 s to build) comes from the cache
        s.model, s.device, gpu_memory_utilization=s.gpu_memory_utilization,
        vllm_version=s.vllm_version,  # any release from 0.8: its KV budget
        **options,
    )  # fmt: skip


def _max_model_len(s: TuneSettings, kv: float | None, where: str) -> int | None:
    """The ``max_model_len`` vLLM would run with: the one asked for, else vLLM's pick (the
    config's length capped by the KV cache of ``kv`` tokens). ValueError for one asked for
    that the KV cache cannot hold a request of: vLLM would refuse to start."""
    from ..workload.model_len import config_max_model_len, vllm_max_model_len

    if s.max_model_len is None:
        return vllm_max_model_len(config_max_model_len(s.model), kv)
    if kv is not None and s.max_model_len > kv:
        raise ValueError(
            f"--max-model-len {s.max_model_len:,}: one request of that length needs more KV "
            f"cache than the {int(kv):,} tokens it holds ({where}); vLLM would refuse to start. "
            f"Give --max-model-len {int(kv // 16) * 16} or less, or leave it out (vLLM's pick)"
        )
    return s.max_model_len
