"""What a vLLM start-up costs on one GPU: graph memory, capture time and KV-cache capacity.

Calibrated on the 59 vLLM start-ups of ``cgdispatch/data/reference_vllm_startups.csv``
(H100 80GB, vLLM 0.19.0, llm-d-planner's logs) for the models whose published configs
``cgdispatch/data/model_architectures.csv`` holds. Each model is traced per GPU (one
tensor-parallel rank of one pipeline stage, on meta tensors, pointwise kernels fused as
torch.compile fuses them) and the capture keys come from the config's generation
(:func:`~cgdispatch.core.generation.capture_keys`). From them:

- **Graph memory** (the pool after capture): ``pool_base + per_node x kernel nodes of all
  graphs + per_boundary x sum over keys of num_tokens x attention-input bytes per token``.
  (attention inputs in 16-bit elements whatever the dtype, see :func:`startup_features`).
  A FULL key is one graph of every kernel; a PIECEWISE key is one graph per piece between
  attention ops, its nodes all kernels but attention. Driver memory per node is why the pool
  falls with pipeline parallelism (fewer layers, fewer nodes); the attention inputs each
  key's graphs keep are why it falls with tensor parallelism (fewer heads per GPU).
- **Capture time**: ``capture_base + per_node x nodes (instantiation) + per_eager x the
  warm-up and capture runs of every key, timed eagerly by the device model + per_moe_key x
  keys x MoE layers`` (fused-MoE kernels pick and compile a configuration per batch size).
- **KV cache**, as vLLM's ``gpu_worker.determine_available_memory``: device memory x
  ``gpu_memory_utilization`` - weights - the profile run's activation peak - non-torch
  memory it adds, and under generation 2 also the graph-memory estimate (vLLM 0.34 sets
  ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`` by default; the reference logs, V1, did
  not subtract it). Blocks per GPU are that memory over one block of every layer's KV;
  the run's capacity is the smallest GPU's. The activation peak is the sampler's fp32 logits
  for ``max_num_seqs`` requests, the MLP activation of ``max_num_batched_tokens`` tokens and
  a fixed part; non-torch memory depends on whether TP (NCCL, custom all-reduce buffers) or
  PP is on.

The constants are fitted by (non-negative) least squares: graph memory on relative error,
the others on absolute error. :data:`CALIBRATION` holds them as fitted on every covered
reference run; :func:`fit_startup_model` refits and :func:`calibration_table` reports each
run's errors in-sample and with leave-one-family-out cross-validation. Runs from other
sources are kept out of the fit (``reference_startups(split="held_out")``) and scored by
:mod:`cgdispatch.estimate.held_out`.
Everything here is a model: its ``source`` says so and names the data it was fitted on.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from ..core.config import GraphConfig
from ..core.generation import GENERATIONS, capture_keys, generation_of
from ..core.modes import AttentionCGSupport, CUDAGraphMode
from ..models.arch_spec import DTYPE_BYTES
from ..models.published import PublishedModel, arch_spec, published_model
from .devices import DEVICE_PRESETS, DeviceSpec, device_label, device_spec
from .profiles import LinearProfile
from .step_time import fuse_pointwise, step_times_by_mode

__all__ = [
    "DoesNotFitError",
    "GraphPricing",
    "graph_pricing",
    "StartupEstimate",
    "StartupCoefficients",
    "CALIBRATION",
    "DEVICE_MEMORY_BYTES",
    "FAMILIES",
    "estimate_startup",
    "reference_config",
    "reference_startups",
    "startup_features",
    "fit_startup_model",
    "calibration_table",
    "error_summary",
    "startup_for",
    "startup_source",
]

GIB = float(1 << 30)
# the memory torch reports for the whole device (``total_memory`` in vLLM's start-up log),
# per preset (cgdispatch/data/device_specs.csv): H100 80GB from the reference logs; H200 about
# 139 GiB (public logs show 139.8); L4, L40S, A10G, A100 40/80GB, RTX 3090/4090 and MI300X as
# torch reported them in public logs (each row names its source); the others the marketed
# size x the H100's reported share
DEVICE_MEMORY_BYTES = {name: spec.memory_bytes for name, spec in DEVICE_PRESETS.items()}
# the model families of the leave-one-family-out cross-validation (issue 18)
FAMILIES = (
    "Llama",
    "Qwen",
    "Gemma",
    "Mistral/Mixtral",
    "Granite",
    "Phi",
    "DeepSeek",
    "gpt-oss",
    "Kimi",
)


@dataclass(frozen=True)
class StartupCoefficients:
    """The fitted constants (GiB and seconds per unit of each feature)."""

    pool_base_gib: float
    pool_per_node_gib: float
    pool_per_boundary: float  # GiB of pool per GiB of attention inputs summed over keys
    capture_base_s: float
    capture_per_node_s: float
    capture_per_eager: float  # seconds of capture per modelled second of eager runs
    capture_per_moe_key_s: float
    activation_base_gib: float
    activation_per_logits: float  # per GiB of fp32 sampler logits
    activation_per_mlp: float  # per GiB of the profile run's MLP activation
    activation_moe_gib: float  # mixture-of-experts workspaces
    non_torch_single_gib: float  # one GPU
    non_torch_tp_gib: float  # tensor parallel (NCCL, custom all-reduce)
    non_torch_pp_gib: float  # pipeline parallel without TP
    fitted_on: int  # reference runs
    # graph-pool factor per GPU architecture (DeviceSpec.architecture) whose logged pools
    # differ from the H100 runs the terms above are fitted on (issue 28), fitted on the
    # "device_fit" runs by fit_pool_factors(); 1 for any architecture not listed
    pool_factors: tuple[tuple[str, float], ...] = ()
    pool_factor_runs: int = 0  # device_fit runs behind pool_factors

    def pool_factor(self, device: str | DeviceSpec) -> float:
        """The graph-pool factor of ``device``'s architecture (1 where none is fitted)."""
        return dict(self.pool_factors).get(device_spec(device).architecture, 1.0)


# fitted by fit_startup_model() on every covered run of reference_vllm_startups.csv
# (tests/estimate/test_startup.py refits and checks these; scripts/fit_startup_model.py
# prints them)
CALIBRATION = StartupCoefficients(
    pool_base_gib=0.2381770065318849,
    pool_per_node_gib=1.4934708986384297e-05,
    pool_per_boundary=0.8731390193430919,
    capture_base_s=1.395172905123058,
    capture_per_node_s=3.7308770846302644e-05,
    capture_per_eager=0.6708259678319883,
    capture_per_moe_key_s=0.0023020438229020435,
    activation_base_gib=0.11681512703152136,
    activation_per_logits=3.5397633718364148,
    activation_per_mlp=0.18491709236088472,
    activation_moe_gib=0.38606673610389364,
    non_torch_single_gib=0.26404761904761903,
    non_torch_tp_gib=2.11,
    non_torch_pp_gib=0.07,
    fitted_on=59,
    # fit_pool_factors() on the 8 "device_fit" runs (issue 28; tests/estimate/test_pool_factors.py)
    pool_factors=(("Ampere", 0.815851081318507), ("Ada", 0.815851081318507)),
    pool_factor_runs=8,
)


@dataclass(frozen=True)
class StartupEstimate:
    """What one GPU of a vLLM start-up holds and how long capture takes (model)."""

    model: str
    device: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    num_graphs: int  # FULL keys + PIECEWISE keys x pieces
    num_keys: int
    graph_nodes: int  # kernel nodes of all graphs on one GPU
    graph_memory_bytes: float
    capture_s: float
    weights_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    kv_cache_bytes: float  # on the GPU with the least room
    kv_cache_blocks: int
    kv_cache_tokens: int
    kv_bytes_per_token: float
    graph_memory_subtracted: bool  # generation 2 takes its graph estimate from the KV budget
    source: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        return (
            f"{self.model} on {self.device} (TP{self.tensor_parallel_size} "
            f"PP{self.pipeline_parallel_size}): {self.num_graphs} graphs, graph memory "
            f"{self.graph_memory_bytes / GIB:.2f} GiB, capture {self.capture_s:.1f} s, KV cache "
            f"{self.kv_cache_bytes / GIB:.2f} GiB = {self.kv_cache_tokens:,} tokens [{self.source}]"
        )


@functools.lru_cache(maxsize=1)
def _logged_devices() -> frozenset[str]:
    """Names (``DeviceSpec.name``) of the GPUs whose logged start-ups enter a fit: the
    fitted runs' and the runs behind the graph-pool factors (issue 28: no other GPU may
    say "calibrated")."""
    frame = _reference_frame()
    fitted = frame.loc[frame["split"].isin(["fit", "device_fit"]), "device"]
    return frozenset(device_spec(d).name for d in set(fitted) if d in DEVICE_PRESETS)


def _fitted_devices() -> set[str]:
    """The devices of the runs the constants are fitted on (held-out runs do not count)."""
    frame = _reference_frame()
    return set(frame.loc[frame["split"] == "fit", "device"])


def startup_source(device: str | DeviceSpec, coefficients: StartupCoefficients) -> str:
    """The label of a start-up figure: a model, its device and what it was calibrated on,
    saying so when the device has no logged start-ups (the fit is then carried over) and
    when its graph pool carries its architecture's factor."""
    label, n = device_label(device), coefficients.fitted_on
    spec = device_spec(device)
    factor = coefficients.pool_factor(spec)
    fitted = {device_spec(d).name for d in _fitted_devices()}
    if spec.name in fitted and factor == 1.0:
        return f"model ({label}, calibrated on {n} vLLM startups)"
    on_this = (
        "its start-ups fit only the graph-pool factor"
        if spec.name in _logged_devices()
        else "no logged start-ups on this GPU"
    )
    pool = ""
    if factor != 1.0:
        archs = " and ".join(a for a, f in coefficients.pool_factors if f == factor)
        pool = (
            f"; graph pool x{factor:.2f} for {archs} GPUs, fitted on "
            f"{coefficients.pool_factor_runs} start-ups"
        )
    logged = ", ".join(sorted(_fitted_devices()))
    return f"model ({label}, {on_this}; calibrated on {n} vLLM startups on {logged}{pool})"


@functools.lru_cache(maxsize=64)
def _stage_profile(model: PublishedModel, tp: int, pp: int, rank: int, dtype: str) -> LinearProfile:
    """Fused kernels of one GPU's captured forward (the stage's layers; vLLM computes the
    logits outside the graph, so the LM head is left out)."""
    spec = arch_spec(
        model,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        rank=rank,
        dtype=dtype,
    )
    import torch  # the meta-device build: only when no cached estimate is read

    from ..models.architectures import ArchLM
    from .kernels import linear_profile

    spec = dataclasses.replace(spec, has_head=False)
    with torch.device("meta"):
        net = ArchLM(spec)
    net = net.to(getattr(torch, dtype)).eval().requires_grad_(False)
    net.rope_cos, net.rope_sin = net.rope_cos.float(), net.rope_sin.float()
    return fuse_pointwise(linear_profile(net))


def _attention_input_bytes(pm: PublishedModel, tp: int, dtype_bytes: int) -> float:
    """Bytes per token of one layer's attention inputs (q, k, v) on one GPU."""
    if pm.is_mla:
        width = pm.num_heads / tp * (pm.qk_nope_head_dim + pm.qk_rope_head_dim) * 3
    else:
        width = (pm.num_heads / tp + 2 * pm.kv_heads_per_rank(tp)) * pm.head_dim
    return width * dtype_bytes


def _check_config(config: GraphConfig) -> None:
    if not isinstance(config, GraphConfig):
        raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig")


def _check_run(
    model: object, device: str | DeviceSpec, tp: int, pp: int, dtype: str | None
) -> tuple[PublishedModel, str]:
    pm = published_model(model)
    device_spec(device)
    pm.check_parallel(tp, pp)
    dtype = dtype or pm.dtype
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype={dtype!r} is invalid: use one of {sorted(DTYPE_BYTES)}")
    return pm, dtype


@dataclass(frozen=True)
class GraphPricing:
    """What each captured graph of one model on one GPU costs, from the calibrated model:
    the per-key terms of the graph-memory and capture-time sums, and their fixed parts.

    The one price list behind :func:`estimate_startup` (summed over a config's keys) and
    :class:`~cgdispatch.estimate.device_model.DeviceCostModel`'s ``graph_memory_bytes`` /
    ``capture_time_s`` (what the planner, ``compare``, the what-if and ``tune`` add up).
    """

    model: str
    device: str  # the preset name, or a DeviceSpec's name
    spec: DeviceSpec  # the device's rates (the eager runs' unit)
    profile: LinearProfile  # fused kernels of the GPU's captured forward
    moe_layers: int
    boundary_bytes_per_token: float  # one layer's attention inputs, 16-bit elements
    coefficients: StartupCoefficients

    @property
    def pieces(self) -> int:
        return int(self.profile.splitting.sum()) + 1

    def nodes(self, mode: CUDAGraphMode | str) -> int:
        """Kernel nodes of one key's graphs: every kernel (FULL) or all but the splitting
        ops, over ``pieces`` graphs (PIECEWISE)."""
        name = CUDAGraphMode.parse(mode).name
        if name == "FULL":
            return self.profile.num_kernels
        if name == "PIECEWISE":
            return self.profile.num_kernels - int(self.profile.splitting.sum())
        raise ValueError(f"mode={name} captures no graph: price FULL or PIECEWISE keys")

    def graphs(self, mode: CUDAGraphMode | str) -> int:
        self.nodes(mode)
        return 1 if CUDAGraphMode.parse(mode).name == "FULL" else self.pieces

    @property
    def pool_factor(self) -> float:
        """The graph-pool factor of this GPU's architecture (1 on the fitted H100's)."""
        return self.coefficients.pool_factor(self.spec)

    @property
    def base_memory_bytes(self) -> float:
        """The pool any capture has (paid once)."""
        return self.coefficients.pool_base_gib * GIB * self.pool_factor

    @property
    def base_capture_s(self) -> float:
        return self.coefficients.capture_base_s

    def memory_bytes(self, mode: CUDAGraphMode | str, num_tokens: np.ndarray) -> np.ndarray:
        """Pool bytes one key of each size adds: its nodes and its attention inputs."""
        n = np.asarray(num_tokens, dtype=np.float64)
        c = self.coefficients
        gib = c.pool_per_node_gib * self.nodes(mode) + c.pool_per_boundary * n * (
            self.boundary_bytes_per_token / GIB
        )
        return gib * GIB * self.pool_factor

    def eager_s(self, num_tokens: np.ndarray) -> np.ndarray:
        """One eager run of each size (device model), the warm-ups' and capture's unit."""
        n = np.asarray(num_tokens, dtype=np.int64)
        if not n.size:
            return np.zeros(n.shape)
        return step_times_by_mode(self.profile, "NONE", n, self.spec) / 1e3

    def capture_s(
        self, mode: CUDAGraphMode | str, num_tokens: np.ndarray, num_warmups: int = 1
    ) -> np.ndarray:
        """Seconds one key of each size adds to capture: instantiating its nodes, its
        ``num_warmups`` + 1 runs, its MoE kernels' per-size set-up."""
        c = self.coefficients
        n = np.asarray(num_tokens, dtype=np.int64)
        return (
            c.capture_per_node_s * self.nodes(mode)
            + c.capture_per_eager * (num_warmups + 1) * self.eager_s(n)
            + c.capture_per_moe_key_s * self.moe_layers
        )


def graph_pricing(
    model: object,
    device: str | DeviceSpec,
    *,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    dtype: str | None = None,
    coefficients: StartupCoefficients | None = None,
) -> GraphPricing:
    """The calibrated per-graph costs of ``model`` (a published config, or any config
    :func:`~cgdispatch.models.published.published_model` reads) on ``device`` (a preset
    name or a :class:`DeviceSpec`), for the GPU with the most layers (the last stage)."""
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    pm, dtype = _check_run(model, device, tp, pp, dtype)
    rank = pp - 1
    first = pm.layers // pp * rank
    on_rank = range(first, first + pm.layers_on_rank(pp, rank))
    return GraphPricing(
        model=pm.model,
        device=device_label(device),
        spec=device_spec(device),
        profile=_stage_profile(pm, tp, pp, rank, dtype),
        moe_layers=sum(layer >= pm.dense_layers for layer in on_rank) if pm.is_moe else 0,
        # one layer's attention inputs per key token (the pieces reuse them layer by
        # layer), counted in 16-bit elements whatever the dtype: the one float32 reference
        # run has a smaller pool than the same model in bf16 (0.79 against 0.91 GiB), so
        # bytes would double the term where the logs show no growth (docs/calibration.md)
        boundary_bytes_per_token=_attention_input_bytes(pm, tp, 2),
        coefficients=CALIBRATION if coefficients is None else coefficients,
    )


def startup_features(
    model: object,
    device: str | DeviceSpec,
    config: GraphConfig,
    *,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    dtype: str | None = None,
) -> dict[str, float]:
    """The quantities the graph-memory and capture-time models are linear in (the sums of
    :class:`GraphPricing`'s per-key terms over ``config``'s keys)."""
    _check_config(config)
    pricing = graph_pricing(
        model,
        device,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
        dtype=dtype,
    )
    keys = capture_keys(config)
    out = {"keys": float(len(keys)), "graphs": 0.0, "nodes": 0.0, "boundary_gib": 0.0}
    out.update(eager_s=0.0, moe_keys=float(len(keys) * pricing.moe_layers))
    runs = config.cudagraph_num_of_warmups + 1
    for mode in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL):
        tokens = np.array([k.num_tokens for k in keys if k.runtime_mode is mode], dtype=np.int64)
        if not tokens.size:
            continue
        out["graphs"] += tokens.size * pricing.graphs(mode)
        out["nodes"] += tokens.size * pricing.nodes(mode)
        out["boundary_gib"] += float(tokens.sum()) * pricing.boundary_bytes_per_token / GIB
        out["eager_s"] += runs * float(pricing.eager_s(tokens).sum())
    return out


def _activation_features(
    pm: PublishedModel, tp: int, dtype: str, max_num_seqs: int, max_num_batched_tokens: int
) -> dict[str, float]:
    if pm.is_moe:
        inter = pm.experts_per_token * 2 * pm.moe_intermediate_size / tp
    else:
        inter = 2 * pm.intermediate_size / tp
    return {
        "logits_gib": max_num_seqs * pm.padded_vocab(1) * 4 / GIB,
        "mlp_gib": max_num_batched_tokens * inter * DTYPE_BYTES[dtype] / GIB,
        "moe": float(pm.is_moe),
    }


def _non_torch_gib(c: StartupCoefficients, tp: int, pp: int) -> float:
    if tp > 1:
        return c.non_torch_tp_gib
    return c.non_torch_pp_gib if pp > 1 else c.non_torch_single_gib


def estimate_startup(
    model: object,
    device: str | DeviceSpec,
    config: GraphConfig,
    *,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    dtype: str | None = None,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    gpu_memory_utilization: float = 0.9,
    block_size: int = 16,
    coefficients: StartupCoefficients | None = None,
) -> StartupEstimate:
    """Graph memory, capture time and KV-cache capacity of one vLLM start-up (model).

    ``model``: a Hugging Face id with a published config
    (:data:`~cgdispatch.models.published.PUBLISHED_MODELS`), or any supported decoder's
    ``config.json`` (a path, a dict or a ``transformers`` config; read offline);
    ``device``: a preset of :data:`~cgdispatch.estimate.devices.DEVICE_PRESETS` (``H100``,
    ``L40S``, ...) or a :class:`DeviceSpec`; ``config``: the graphs it captures (its
    ``max_num_seqs`` and ``max_num_batched_tokens`` size the profile run as vLLM's do).
    ``dtype``, ``quantization`` and ``kv_cache_dtype`` as vLLM's flags; None is the
    checkpoint's dtype and quantization. A model that leaves no room for one KV block is a
    ValueError (vLLM would refuse to start), not an estimate of zero tokens.
    """
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    _check_config(config)
    pm, dtype = _check_run(model, device, tp, pp, dtype)
    if isinstance(gpu_memory_utilization, bool) or not (
        isinstance(gpu_memory_utilization, (int, float)) and 0 < gpu_memory_utilization <= 1
    ):
        raise ValueError(
            f"gpu_memory_utilization={gpu_memory_utilization!r} is invalid: give a fraction "
            "in (0, 1], as vLLM's --gpu-memory-utilization"
        )
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size={block_size!r} is invalid: it must be an integer >= 1")
    c = CALIBRATION if coefficients is None else coefficients
    f = startup_features(
        pm, device, config, tensor_parallel_size=tp, pipeline_parallel_size=pp, dtype=dtype
    )
    graph_gib = c.pool_factor(device) * (
        c.pool_base_gib + c.pool_per_node_gib * f["nodes"] + c.pool_per_boundary * f["boundary_gib"]
    )
    if not f["keys"]:
        graph_gib = 0.0
    capture_s = 0.0
    if f["keys"]:
        capture_s = (
            c.capture_base_s
            + c.capture_per_node_s * f["nodes"]
            + c.capture_per_eager * f["eager_s"]
            + c.capture_per_moe_key_s * f["moe_keys"]
        )
    a = _activation_features(pm, tp, dtype, config.max_num_seqs, config.max_num_batched_tokens)
    activation_gib = (
        c.activation_base_gib
        + c.activation_per_mlp * a["mlp_gib"]
        + c.activation_moe_gib * a["moe"]
    )
    non_torch = _non_torch_gib(c, tp, pp)
    subtract = generation_of(config).profiles_graph_memory
    budget = device_spec(device).memory_bytes * gpu_memory_utilization
    kv_bytes, blocks = math.inf, None
    for rank in range(pp):
        peak = activation_gib + (c.activation_per_logits * a["logits_gib"] if rank == pp - 1 else 0)
        weights = pm.weight_bytes(
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            rank=rank,
            dtype=dtype,
            quantization=quantization,
        )
        free = budget - weights - (peak + non_torch + (graph_gib if subtract else 0.0)) * GIB
        per_token = pm.kv_bytes_per_token(
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            kv_cache_dtype=kv_cache_dtype,
            dtype=dtype,
            rank=rank,
        )
        rank_blocks = max(int(free // (per_token * block_size)), 0)
        if blocks is None or rank_blocks < blocks:
            blocks, kv_bytes, kv_per_token = rank_blocks, free, per_token
            least = (weights, peak + non_torch + (graph_gib if subtract else 0.0))
    if not blocks:
        _refuse(pm, device, tp, pp, gpu_memory_utilization, least, kv_bytes)
    return StartupEstimate(
        model=pm.model,
        device=device_label(device),
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        num_graphs=int(f["graphs"]),
        num_keys=int(f["keys"]),
        graph_nodes=int(f["nodes"]),
        graph_memory_bytes=graph_gib * GIB,
        capture_s=capture_s,
        weights_bytes=pm.weight_bytes(
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            dtype=dtype,
            quantization=quantization,
        ),
        activation_bytes=(activation_gib + c.activation_per_logits * a["logits_gib"]) * GIB,
        non_torch_bytes=non_torch * GIB,
        kv_cache_bytes=max(kv_bytes, 0.0),
        kv_cache_blocks=int(blocks or 0),
        kv_cache_tokens=int(blocks or 0) * block_size,
        kv_bytes_per_token=kv_per_token,
        graph_memory_subtracted=subtract,
        source=startup_source(device, c),
    )


class DoesNotFitError(ValueError):
    """A run whose fullest GPU has no room for one KV block. ``str()`` is the whole refusal
    with its advice in ``tune``'s terms; ``reason`` (what does not fit, and by how much) and
    ``tensor_parallel_size`` let a view give the advice in its own controls' terms."""

    def __init__(self, reason: str, advice: str, tensor_parallel_size: int) -> None:
        super().__init__(f"{reason}: {advice}")
        self.reason, self.advice = reason, advice
        self.tensor_parallel_size = tensor_parallel_size

    def __reduce__(self) -> tuple[type, tuple[str, str, int]]:  # a worker's refusal pickles
        return type(self), (self.reason, self.advice, self.tensor_parallel_size)


def _refuse(
    pm: PublishedModel,
    device: str | DeviceSpec,
    tp: int,
    pp: int,
    utilization: float,
    least: tuple[float, float],
    free_bytes: float,
) -> None:
    """:class:`DoesNotFitError` for a run whose fullest GPU has no room for one KV block."""
    memory = device_spec(device).memory_bytes
    weights, other_gib = least
    raise DoesNotFitError(
        f"{pm.model} does not fit on {device_label(device)} (TP{tp} PP{pp}): of "
        f"{memory / GIB:.1f} GiB, gpu_memory_utilization={utilization} gives "
        f"{memory * utilization / GIB:.1f} GiB; weights take {weights / GIB:.1f} GiB per GPU "
        f"and activations, non-torch and graph memory {other_gib:.1f} GiB, leaving "
        f"{free_bytes / GIB:.1f} GiB for the KV cache",
        "use more GPUs (tensor_parallel_size), a higher gpu_memory_utilization, or a smaller "
        "or quantized model",
        tp,
    )


# ---------------------------------------------------------------------------------------
# the reference runs and the fit


# the fitted runs (llm-d-planner's logs, rebuilt by scripts/extract_vllm_startups.py) and the
# runs kept out of every fit (other sources, transcribed by hand, each with its URL)
_REFERENCE_FILES = {
    "fit": "reference_vllm_startups.csv",
    "held_out": "reference_vllm_startups_held_out.csv",
    "device_fit": "reference_vllm_startups_device_fit.csv",
}


@functools.lru_cache(maxsize=1)
def _reference_frame() -> pd.DataFrame:
    frames = []
    for split, name in _REFERENCE_FILES.items():
        with resources.files("cgdispatch.data").joinpath(name).open() as f:
            frames.append(pd.read_csv(f).assign(split=split))
    return pd.concat(frames, ignore_index=True)


def reference_startups(*, covered_only: bool = True, split: str | None = "fit") -> pd.DataFrame:
    """The reference start-ups (a copy), with ``family`` and ``split`` added.

    ``split``: ``"fit"`` (default; the runs every constant is fitted on), ``"held_out"``
    (runs from other sources, never fitted: :mod:`cgdispatch.estimate.held_out` reports
    the model's errors on them) or None for both. ``covered_only``: those whose model has
    a published config here.
    """
    from ..models.published import PUBLISHED_MODELS

    if split not in (None, *_REFERENCE_FILES):
        raise ValueError(
            f"split={split!r} is invalid: use one of {sorted(_REFERENCE_FILES)} or None (all)"
        )
    frame = _reference_frame().copy()
    if split is not None:
        frame = frame[frame["split"] == split].reset_index(drop=True)
    frame["covered"] = [m in PUBLISHED_MODELS for m in frame["model"]]
    frame["family"] = [
        PUBLISHED_MODELS[m].family if m in PUBLISHED_MODELS else None for m in frame["model"]
    ]
    return frame[frame["covered"]].reset_index(drop=True) if covered_only else frame


def _field(row: Mapping[str, Any] | pd.Series, name: str) -> Any:
    try:
        return row[name]
    except (KeyError, IndexError) as exc:
        raise ValueError(
            f"row has no {name!r}: pass a row of cgdispatch.reference_startups()"
        ) from exc


def reference_config(row: Mapping[str, Any] | pd.Series) -> GraphConfig:
    """The :class:`GraphConfig` that reproduces a reference run's capture: its mode, sizes,
    ``max_num_seqs`` and ``max_num_batched_tokens``; a run that logged no FULL graph had an
    attention backend without graph support, so its mode is lowered as vLLM lowered it."""
    if not isinstance(row, (Mapping, pd.Series)):
        raise ValueError(
            f"row={row!r} is invalid: pass a row of cgdispatch.reference_startups() (a pandas "
            "Series, e.g. reference_startups().iloc[0], or a dict with its columns)"
        )
    sizes = [int(s) for s in str(_field(row, "cudagraph_capture_sizes")).split()]
    config = GraphConfig(
        cudagraph_mode=str(_field(row, "cudagraph_mode")),
        cudagraph_capture_sizes=sizes,
        max_num_seqs=int(_field(row, "max_num_seqs")),
        max_num_batched_tokens=int(_field(row, "max_num_batched_tokens")),
        tensor_parallel_size=int(_field(row, "tensor_parallel_size")),
        # the logged runs are vLLM 0.19: V1's dispatch, the oldest generation modelled here
        vllm_version=next(iter(GENERATIONS)),
    )
    no_full = int(_field(row, "full_graphs")) == 0 and int(_field(row, "piecewise_graphs")) > 0
    support = AttentionCGSupport.NEVER if no_full else AttentionCGSupport.ALWAYS
    return config.resolve(support)


def _run_args(row: pd.Series) -> dict[str, Any]:
    quant = row["quantization"]
    return {
        "tensor_parallel_size": int(row["tensor_parallel_size"]),
        "pipeline_parallel_size": int(row["pipeline_parallel_size"]),
        "dtype": str(row["dtype"]),
        "quantization": None if pd.isna(quant) else str(quant),
        "kv_cache_dtype": str(row["kv_cache_dtype"]),
        "gpu_memory_utilization": float(row["gpu_memory_utilization"]),
    }


def _feature_frame(rows: pd.DataFrame) -> pd.DataFrame:
    out = []
    for _, row in rows.iterrows():
        args = _run_args(row)
        f = startup_features(
            row["model"],
            row["device"],
            reference_config(row),
            tensor_parallel_size=args["tensor_parallel_size"],
            pipeline_parallel_size=args["pipeline_parallel_size"],
            dtype=args["dtype"],
        )
        pm = published_model(row["model"])
        f.update(
            _activation_features(
                pm,
                args["tensor_parallel_size"],
                args["dtype"],
                int(row["max_num_seqs"]),
                int(row["max_num_batched_tokens"]),
            )
        )
        out.append(f)
    return pd.DataFrame(out, index=rows.index)


def _nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (Lawson-Hanson active set)."""
    n = a.shape[1]
    x, passive = np.zeros(n), np.zeros(n, dtype=bool)
    for _ in range(3 * n + 10):
        gradient = a.T @ (b - a @ x)
        free = ~passive & (gradient > 1e-12 * max(1.0, np.abs(gradient).max()))
        if not free.any():
            break
        passive[np.argmax(np.where(free, gradient, -np.inf))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            bad = passive & (z <= 0)
            step = np.min(x[bad] / (x[bad] - z[bad]))
            x = x + step * (z - x)
            passive &= x > 1e-15
    return x


_POOL = ("one", "nodes", "boundary_gib")
_CAPTURE = ("one", "nodes", "eager_s", "moe_keys")
_ACTIVATION = ("one", "logits_gib", "mlp_gib", "moe")
_NON_TORCH = ("single", "tp", "pp")


def _fit(features: pd.DataFrame, rows: pd.DataFrame) -> StartupCoefficients:
    x = features.assign(one=1.0)
    y = rows["graph_memory_gib"].to_numpy(float)
    a = x[list(_POOL)].to_numpy(float)
    pool = _nonnegative_lstsq(a / y[:, None], np.ones_like(y))  # relative error
    cap = _nonnegative_lstsq(x[list(_CAPTURE)].to_numpy(float), rows["capture_s"].to_numpy(float))
    act = _nonnegative_lstsq(
        x[list(_ACTIVATION)].to_numpy(float), rows["activation_peak_gib"].to_numpy(float)
    )
    tp = rows["tensor_parallel_size"].to_numpy() > 1
    pp = (rows["pipeline_parallel_size"].to_numpy() > 1) & ~tp
    regimes = np.column_stack([~tp & ~pp, tp, pp]).astype(float)
    nt = rows["non_torch_increase_gib"].to_numpy(float)
    non_torch = [float(nt[r == 1].mean()) if (r == 1).any() else 0.0 for r in regimes.T]
    return StartupCoefficients(
        *(float(v) for v in pool),
        *(float(v) for v in cap),
        *(float(v) for v in act),
        *non_torch,
        fitted_on=len(rows),
    )


def fit_startup_model(rows: pd.DataFrame | None = None) -> StartupCoefficients:
    """Fit every constant on ``rows`` (default: every covered reference run)."""
    rows = reference_startups() if rows is None else rows
    if not len(rows):
        raise ValueError("rows is empty: fit on at least one reference run")
    return _fit(_feature_frame(rows), rows)


def calibration_table(
    rows: pd.DataFrame | None = None, *, cross_validate: bool = True
) -> pd.DataFrame:
    """One row per reference run: logged and predicted graph memory, capture seconds and KV
    tokens, in-sample (fitted on all rows) and, with ``cross_validate``, predicted by
    constants fitted without the run's family; with vLLM's own graph-memory estimate."""
    rows = reference_startups() if rows is None else rows.reset_index(drop=True)
    features = _feature_frame(rows)
    fits = {"in_sample": _fit(features, rows)}
    families = rows["family"].to_numpy()
    if cross_validate:
        for family in dict.fromkeys(families):
            held = families == family
            fits[family] = _fit(features[~held], rows[~held])
    records = []
    for _, row in rows.iterrows():
        config = reference_config(row)
        record = {
            "run": row["run"],
            "model": row["model"],
            "family": row["family"],
            "graph_memory_gib": row["graph_memory_gib"],
            "vllm_estimate_gib": row["graph_memory_gib_vllm_estimate"],
            "capture_s": row["capture_s"],
            "kv_cache_tokens": row["kv_cache_tokens"],
        }
        for label, key in (("fit", "in_sample"), ("cv", row["family"])):
            if key not in fits:
                continue
            est = estimate_startup(
                row["model"], row["device"], config, coefficients=fits[key], **_run_args(row)
            )
            record[f"graph_memory_gib_{label}"] = est.graph_memory_bytes / GIB
            record[f"capture_s_{label}"] = est.capture_s
            record[f"kv_cache_tokens_{label}"] = est.kv_cache_tokens
        records.append(record)
    table = pd.DataFrame(records)
    table["vllm_estimate_error"] = (
        table["vllm_estimate_gib"] / table["graph_memory_gib"] - 1
    ).abs()
    for label in ("fit", "cv"):
        if f"graph_memory_gib_{label}" not in table:
            continue
        table[f"graph_memory_error_{label}"] = (
            table[f"graph_memory_gib_{label}"] / table["graph_memory_gib"] - 1
        ).abs()
        table[f"capture_error_s_{label}"] = (table[f"capture_s_{label}"] - table["capture_s"]).abs()
        table[f"kv_tokens_error_{label}"] = (
            table[f"kv_cache_tokens_{label}"] / table["kv_cache_tokens"] - 1
        ).abs()
    return table


def error_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median and max error per quantity and fit (the numbers the issue's targets name)."""
    rows = []
    for label, name in (("fit", "in-sample"), ("cv", "leave one family out")):
        if f"graph_memory_error_{label}" not in table:
            continue
        cap = table[f"capture_error_s_{label}"]
        tolerance = np.maximum(1.0, 0.25 * table["capture_s"])
        rows += [
            {
                "quantity": "graph memory |error| (relative)",
                "fit": name,
                "median": table[f"graph_memory_error_{label}"].median(),
                "max": table[f"graph_memory_error_{label}"].max(),
                "within target": float((table[f"graph_memory_error_{label}"] <= 0.30).mean()),
            },
            {
                "quantity": "capture |error| (s)",
                "fit": name,
                "median": cap.median(),
                "max": cap.max(),
                "within target": float((cap <= tolerance).mean()),
            },
            {
                "quantity": "KV tokens |error| (relative)",
                "fit": name,
                "median": table[f"kv_tokens_error_{label}"].median(),
                "max": table[f"kv_tokens_error_{label}"].max(),
                "within target": float((table[f"kv_tokens_error_{label}"] <= 0.05).mean()),
            },
        ]
    vllm = table["vllm_estimate_error"]
    rows.append(
        {
            "quantity": "graph memory |error| (relative)",
            "fit": "vLLM's own estimate (profiled on the GPU)",
            "median": vllm.median(),
            "max": vllm.max(),
            "within target": float((vllm <= 0.30).mean()),
        }
    )
    return pd.DataFrame(rows)


def startup_for(
    model: object,
    device: str | DeviceSpec,
    *,
    gpu_memory_utilization: float = 0.9,
    **kwargs: Any,
) -> Callable[[GraphConfig], StartupEstimate] | None:
    """``tune``'s start-up seam for ``model``: a registry name with a published config
    (``llama-3.1-8b``: its ``ArchSpec.published``, its TP size), a Hugging Face id or a
    ``config.json`` (path, dict, transformers config, read once here); None for models
    with no published config (toy models). Each call estimates one config's start-up
    (:func:`estimate_startup`)."""
    from ..models.arch_spec import ARCHITECTURES
    from ..models.config_json import is_config_source
    from ..models.published import PUBLISHED_MODELS, PublishedModel

    if isinstance(model, str) and model in ARCHITECTURES and ARCHITECTURES[model].published:
        spec = ARCHITECTURES[model]
        published, tp = spec.published, spec.tensor_parallel_size
    elif model in PUBLISHED_MODELS:
        published, tp = model, 1
    elif isinstance(model, PublishedModel) or is_config_source(model):
        published, tp = published_model(model), 1
    else:
        return None
    kwargs.setdefault("tensor_parallel_size", tp)

    def startup(config: GraphConfig) -> StartupEstimate:
        return estimate_startup(
            published, device, config, gpu_memory_utilization=gpu_memory_utilization, **kwargs
        )

    return startup
