"""What a vLLM start-up costs on one GPU: graph memory, capture time and KV-cache capacity.

Calibrated on the 59 vLLM start-ups of ``cgdispatch/data/reference_vllm_startups.csv``
(H100 80GB, vLLM 0.19.0, llm-d-planner's logs; :mod:`cgdispatch.estimate.startup_data`) for
the models whose published configs ``cgdispatch/data/model_architectures.csv`` holds.
Graph memory and capture time are the sums over a config's keys of
:mod:`cgdispatch.estimate.startup_pricing`'s per-graph terms (its docstring gives both
models). Then:

- **KV cache**, as vLLM's ``gpu_worker.determine_available_memory``: device memory x
  ``gpu_memory_utilization`` - weights - the profile run's activation peak - non-torch
  memory it adds, and from vLLM 0.20 on also the graph-memory estimate (0.20.0's
  ``vllm/envs.py`` sets ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`` by default; 0.18
  and 0.19 estimate without subtracting; the release table,
  :mod:`cgdispatch.core.release_table`, says which release does what). Blocks per GPU are that memory over one block of every layer's KV;
  the run's capacity is the smallest GPU's. The activation peak is the sampler warm-up's
  logits for ``max_num_seqs`` requests, the MLP activation of ``max_num_batched_tokens``
  tokens and a fixed part. The warm-up's bytes per logit depend on how the release applies
  top-k/top-p (:func:`sampler_peak_bytes`: the fitted 0.19 runs' Triton path, the sort
  before 0.17, FlashInfer where installed in 0.9-0.11), and before 0.14 the MoE forward's
  buffers are freed before the warm-up, so its MoE part and the logits part do not add
  (the larger of the two counts); non-torch memory depends on whether TP (NCCL, custom all-reduce buffers) or
  PP is on, and for TP on whether the GPUs can use NCCL's NVLink SHARP (Hopper on, on
  NVLink: :func:`has_nvlink_sharp`); without it a TP rank's is one GPU's.

The constants are :data:`~cgdispatch.estimate.startup_pricing.CALIBRATION`, fitted by
:mod:`cgdispatch.estimate.startup_fit` (which imports this module, never the reverse).
Everything here is a model: its ``source`` says so and names the data it was fitted on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..core.config import GraphConfig
from ..core.generation import generation_of
from ..core.release_table import ReleaseDefaults, release_defaults
from ..models.arch_spec import DTYPE_BYTES
from ..models.published import PublishedModel, published_model
from .devices import DEVICE_PRESETS, DeviceSpec, device_label, device_spec
from .startup_data import fitted_devices, logged_devices
from .startup_pricing import (
    CALIBRATION,
    GIB,
    StartupCoefficients,
    check_startup_config,
    check_startup_run,
    graph_pricing,
    startup_features,
)

__all__ = [
    "DoesNotFitError",
    "StartupEstimate",
    "DEVICE_MEMORY_BYTES",
    "estimate_startup",
    "startup_for",
    "startup_source",
    "activation_features",
    "has_nvlink_sharp",
    "sampler_peak_bytes",
    "SAMPLER_PATHS",
]

# the memory torch reports for the whole device (``total_memory`` in vLLM's start-up log),
# per preset (cgdispatch/data/device_specs.csv): H100 80GB from the reference logs; H200 about
# 139 GiB (public logs show 139.8); L4, L40S, A10G, A100 40/80GB, RTX 3090/4090 and MI300X as
# torch reported them in public logs (each row names its source); the others the marketed
# size x the H100's reported share
DEVICE_MEMORY_BYTES = {name: spec.memory_bytes for name, spec in DEVICE_PRESETS.items()}


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
    graph_memory_subtracted: bool  # the release (0.20+) takes its graph estimate from the KV budget
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


# the names a pool factor of a GPU (rather than of an architecture) is keyed by
_GPU_NAMES = frozenset(spec.name for spec in DEVICE_PRESETS.values())


def startup_source(device: str | DeviceSpec, coefficients: StartupCoefficients) -> str:
    """The label of a start-up figure: a model, its device and what it was calibrated on,
    saying so when the device has no logged start-ups (the fit is then carried over) and
    when its graph pool carries its GPU's or its architecture's factor."""
    label, n = device_label(device), coefficients.fitted_on
    spec = device_spec(device)
    factor = coefficients.pool_factor(spec)
    fitted = {device_spec(d).name for d in fitted_devices()}
    if spec.name in fitted and factor == 1.0:
        return f"model ({label}, calibrated on {n} vLLM startups)"
    on_this = (
        "its start-ups fit only the graph-pool factor"
        if spec.name in logged_devices()
        else "no logged start-ups on this GPU"
    )
    pool = ""
    if factor != 1.0 and spec.name in dict(coefficients.pool_factors):
        pool = f"; graph pool x{factor:.2f} fitted on this GPU's start-ups"
    elif factor != 1.0:
        archs = " and ".join(
            a for a, f in coefficients.pool_factors if f == factor and a not in _GPU_NAMES
        )
        pool = (
            f"; graph pool x{factor:.2f} for {archs} GPUs, fitted on "
            f"{coefficients.pool_factor_runs} start-ups"
        )
    logged = ", ".join(sorted(fitted_devices()))
    return f"model ({label}, {on_this}; calibrated on {n} vLLM startups on {logged}{pool})"


def activation_features(
    pm: PublishedModel, tp: int, dtype: str, max_num_seqs: int, max_num_batched_tokens: int
) -> dict[str, float]:
    """The quantities the activation-peak model is linear in (GiB of logits and of one MLP
    pass at the scheduler's limits, and whether the model is MoE): the estimate's and the
    fit's (:mod:`~cgdispatch.estimate.startup_fit`) one home."""
    if pm.is_moe:
        inter = pm.experts_per_token * 2 * pm.moe_intermediate_size / tp
    else:
        inter = 2 * pm.intermediate_size / tp
    return {
        "logits_gib": max_num_seqs * pm.padded_vocab(1) * 4 / GIB,
        "mlp_gib": max_num_batched_tokens * inter * DTYPE_BYTES[dtype] / GIB,
        "moe": float(pm.is_moe),
    }


# the sampler warm-up's tensors alive at its peak, bytes per element of its [rows, vocab]
# logits beyond the model-dtype logits themselves (vllm/v1/sample/sampler.py and
# ops/topk_topp_sampler.py of each release; torch's aten/src/ATen/native/cuda/SortStable.cu
# and cub.cuh for the sort):
# - "triton" (0.17 on, >= 8 rows): the fp32 copy (4), modified in place, its softmax probs
#   (4) and random_sample's exponential q (4);
# - "flashinfer" (0.9 to 0.11 where installed): the fp32 copy (4), top_k_mask_logits'
#   masked logits (4) and their softmax (4) in top_k_top_p_sampling_from_logits;
# - "sort" (apply_top_k_top_p): the fp32 copy (4), logits.sort's values (4) and int64
#   indices (8), and inside torch's sort: on 1 or >= 128 rows int64 reverse indices (8) and
#   cub's alternate key (4) and value (8) buffers (segmented_sort_pairs, or one row at a
#   time); on 2-127 rows segmented_sort_pairs_by_full_sort's two int2 index-and-segment
#   arrays (8 + 8), the keys cub writes (4) and cub's alternate keys (4) and int2 values (8).
# "model runner v2" (0.34's own sampler) is not counted: the fitted runs' path is kept.
_SAMPLER_EXTRA_BYTES = {"triton": 12, "flashinfer": 12, "sort": 36}
_SORT_FULL_SORT_EXTRA_BYTES = 4 + 4 + 8 + 8 + 8 + 4 + 4 + 8  # 2-127 rows
SAMPLER_PATHS = (*_SAMPLER_EXTRA_BYTES, "model runner v2")
_FITTED_SAMPLER = ("triton", "bfloat16", 1024)  # the calibration's runs: vLLM 0.19, bf16


def sampler_peak_bytes(path: str, dtype: str, rows: int) -> int:
    """Bytes per logit element alive at the peak of the profile run's sampler warm-up when
    top-k/top-p is applied by ``path`` (one of :data:`SAMPLER_PATHS`) on ``rows`` rows
    (requests) of logits of ``dtype`` (the model's)."""
    if path not in SAMPLER_PATHS:
        raise ValueError(
            f"path={path!r} is not a sampler path: use one of {', '.join(SAMPLER_PATHS)}"
        )
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype={dtype!r} is unknown: use one of {', '.join(DTYPE_BYTES)}")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ValueError(f"rows={rows!r} is invalid: the sampler warms up >= 1 row")
    if path == "model runner v2":
        path, dtype, rows = _FITTED_SAMPLER
    if path == "sort" and 1 < rows < 128:
        return DTYPE_BYTES[dtype] + _SORT_FULL_SORT_EXTRA_BYTES
    return DTYPE_BYTES[dtype] + _SAMPLER_EXTRA_BYTES[path]


# GPU generations without NVLink SHARP (NVLS: NCCL's all-reduce offload to the NVSwitch,
# Hopper on; NCCL's NCCL_NVLS_ENABLE documentation), and the per-GPU link rate below which a
# GPU is on PCIe (device_specs.csv: PCIe Gen5 x16 is 64 GB/s, NVLink 3 is 300)
_NO_NVLS_ARCHITECTURES = frozenset({"Ampere", "Ada", "Turing", "Volta"})
_PCIE_LINK_BYTES_PER_S = 100e9


def has_nvlink_sharp(device: str | DeviceSpec) -> bool:
    """Whether a tensor-parallel group of ``device`` can use NCCL's NVLink SHARP buffers:
    False for the generations before Hopper (Ampere, Ada, Turing, Volta) and for GPUs on
    PCIe (``link_bytes_per_s`` known and under 100 GB/s); True otherwise (Hopper and
    Blackwell on NVLink, and a GPU whose generation and link are unknown: the fitted
    value, the larger one, is kept)."""
    spec = device_spec(device)
    if spec.architecture in _NO_NVLS_ARCHITECTURES:
        return False
    return not 0 < spec.link_bytes_per_s < _PCIE_LINK_BYTES_PER_S


def _non_torch_gib(c: StartupCoefficients, tp: int, pp: int, device: str | DeviceSpec) -> float:
    """Non-torch memory of the profile run. Tensor parallel: the fitted TP value (H100 SXM
    runs: NCCL with NVLink SHARP, ~1.8 GiB over one GPU's) where the group can use NVLink
    SHARP, else one GPU's (issue 35: A100 NVLink and L40S PCIe TP logs imply 0.5-1.0 GiB
    of non-KV memory beyond weights and KV, activations included, not 2.1 + activations)."""
    if tp > 1:
        return c.non_torch_tp_gib if has_nvlink_sharp(device) else c.non_torch_single_gib
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
    vllm_version: str | None = None,
    flashinfer_installed: bool = False,
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
    ``vllm_version``: the release that starts (any from 0.8, ``"0.21.0"``; default the
    whole release the config names, ``config.release``); its KV budget is computed as that release
    computes it: from 0.20 vLLM takes its graph-memory estimate from it
    (:func:`~cgdispatch.core.release_table.release_defaults`). It must dispatch as the
    config's generation (ValueError otherwise). ``flashinfer_installed``: FlashInfer is
    importable (the ``vllm[flashinfer]`` extra, vLLM's Docker image), so releases 0.9 to
    0.11 warm the sampler up with it (their log says "Using FlashInfer for top-p & top-k
    sampling"), which needs less memory than their sort.
    """
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    check_startup_config(config)
    pm, dtype = check_startup_run(model, device, tp, pp, dtype)
    if isinstance(gpu_memory_utilization, bool) or not (
        isinstance(gpu_memory_utilization, (int, float)) and 0 < gpu_memory_utilization <= 1
    ):
        raise ValueError(
            f"gpu_memory_utilization={gpu_memory_utilization!r} is invalid: give a fraction "
            "in (0, 1], as vLLM's --gpu-memory-utilization"
        )
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size={block_size!r} is invalid: it must be an integer >= 1")
    if not isinstance(flashinfer_installed, bool):
        raise ValueError(
            f"flashinfer_installed={flashinfer_installed!r} is invalid: give True or False "
            "(whether FlashInfer is importable where vLLM runs)"
        )
    c = CALIBRATION if coefficients is None else coefficients
    # the GPU's share of the model: what every per-GPU figure below is asked for
    shard = {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "dtype": dtype}
    f = startup_features(graph_pricing(pm, device, **shard), config)
    graph_gib = c.pool_factor(device) * (
        c.pool_base_gib
        + c.pool_per_key_gib * f["keys"]
        + c.pool_per_node_gib * f["nodes"]
        + c.pool_per_boundary * f["boundary_gib"]
    )
    if not f["keys"]:
        graph_gib = 0.0
    capture_s = 0.0
    if f["keys"]:
        capture_s = (
            c.capture_base_s
            + c.capture_per_key_s * f["keys"]
            + c.capture_per_node_s * f["nodes"]
            + c.capture_per_eager * f["eager_s"]
            + c.capture_per_moe_key_s * f["moe_keys"]
        )
    a = activation_features(pm, tp, dtype, config.max_num_seqs, config.max_num_batched_tokens)
    release = _release_of(config, vllm_version)
    rows = min(config.max_num_seqs, config.max_num_batched_tokens)
    path = release.sampler_path(rows, flashinfer_installed=flashinfer_installed)
    # the fitted logits term, scaled from the fitted runs' sampler bytes to this release's
    sampler_gib = (
        c.activation_per_logits
        * a["logits_gib"]
        * sampler_peak_bytes(path, dtype, rows)
        / sampler_peak_bytes(*_FITTED_SAMPLER)
    )
    moe_gib = c.activation_moe_gib * a["moe"]
    activation_gib = c.activation_base_gib + c.activation_per_mlp * a["mlp_gib"]

    def rank_peak(last: bool) -> float:
        logits = sampler_gib if last else 0.0
        if release.moe_buffers_persist:  # the MoE workspace is held through the warm-up
            return activation_gib + moe_gib + logits
        return activation_gib + max(moe_gib, logits)  # freed first: the larger counts

    non_torch = _non_torch_gib(c, tp, pp, device)
    subtract = release.subtracts_graph_estimate
    budget = device_spec(device).memory_bytes * gpu_memory_utilization
    kv_bytes, blocks = math.inf, None
    for rank in range(pp):
        peak = rank_peak(rank == pp - 1)
        weights = pm.weight_bytes(**shard, rank=rank, quantization=quantization)
        free = budget - weights - (peak + non_torch + (graph_gib if subtract else 0.0)) * GIB
        per_token = pm.kv_bytes_per_token(**shard, kv_cache_dtype=kv_cache_dtype, rank=rank)
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
        weights_bytes=pm.weight_bytes(**shard, quantization=quantization),
        activation_bytes=rank_peak(True) * GIB,
        non_torch_bytes=non_torch * GIB,
        kv_cache_bytes=max(kv_bytes, 0.0),
        kv_cache_blocks=int(blocks or 0),
        kv_cache_tokens=int(blocks or 0) * block_size,
        kv_bytes_per_token=kv_per_token,
        graph_memory_subtracted=subtract,
        source=startup_source(device, c),
    )


def _release_of(config: GraphConfig, vllm_version: Any) -> ReleaseDefaults:
    """The defaults of the release that starts: ``vllm_version``, else the whole release
    the config names (``config.release``: ``"0.11.0"``, not only its generation)."""
    if vllm_version is None:
        return release_defaults(config.release)
    release = release_defaults(vllm_version)  # ValueError: not a release from 0.8 on
    if release.generation != generation_of(config).release:
        raise ValueError(
            f"vllm_version={vllm_version!r} dispatches as generation {release.generation}, "
            f"but config is of vLLM {config.vllm_version}: build the config with "
            f"vllm_version={release.release!r} (GraphConfig(vllm_version=...)), or drop "
            "vllm_version"
        )
    return release


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
