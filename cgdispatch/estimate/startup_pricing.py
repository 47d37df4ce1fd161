"""What each captured graph of a vLLM start-up costs on one GPU: the start-up model's fitted
constants and the per-key graph-memory and capture-time terms.

Each model is traced per GPU (one tensor-parallel rank of one pipeline stage, on meta
tensors, pointwise kernels fused as torch.compile fuses them) and the capture keys come from
the config's generation (:func:`~cgdispatch.core.generation.capture_keys`). From them:

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

:data:`CALIBRATION` holds the constants as fitted on every covered reference run
(:mod:`cgdispatch.estimate.startup_fit`). :class:`GraphPricing` is the price list; the
whole start-up (the sums over a config's keys, activations, KV cache) is
:func:`~cgdispatch.estimate.startup.estimate_startup`'s, and the planner's sums are
:class:`~cgdispatch.estimate.device_model.DeviceCostModel`'s. This module reads no reference
run and fits nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..core import cache
from ..core.config import GraphConfig
from ..core.generation import capture_keys
from ..core.modes import CUDAGraphMode
from ..models.arch_spec import DTYPE_BYTES, ArchSpec
from ..models.published import PublishedModel, arch_spec, published_model
from .datafile import DataFileError, data_bytes, data_from_bytes
from .devices import DeviceSpec, device_label, device_spec
from .profiles import LinearProfile
from .step_time import fuse_pointwise, step_times_by_mode

__all__ = [
    "StartupCoefficients",
    "CALIBRATION",
    "GraphPricing",
    "graph_pricing",
    "startup_features",
    "check_startup_config",
    "check_startup_run",
]

GIB = float(1 << 30)
# the most a fixed base may be: a whole small ladder's logged cost (issue 35: Llama-2-7b
# with max_num_seqs 1, 4 sizes, 0.08 GiB of graphs and 0.37 s of capture); the fit puts
# the rest of the base on a per-key term (startup_fit)
POOL_BASE_CAP_GIB = 0.08
CAPTURE_BASE_CAP_S = 0.37


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
    activation_per_logits: float  # per GiB of fp32 sampler logits (0.19: 14 B per logit)
    activation_per_mlp: float  # per GiB of the profile run's MLP activation
    activation_moe_gib: float  # mixture-of-experts workspaces
    non_torch_single_gib: float  # one GPU
    non_torch_tp_gib: float  # tensor parallel (NCCL, custom all-reduce)
    non_torch_pp_gib: float  # pipeline parallel without TP
    fitted_on: int  # reference runs
    # graph-pool factors whose logged pools differ from the H100 runs the terms above are
    # fitted on (issue 28), fitted on the "device_fit" runs by fit_pool_factors(): one per
    # GPU (DeviceSpec.name) with device_fit runs of its own (issue 35: A100 40GB runs log
    # ~3x the pool of A100 80GB runs of the same model), else one per architecture
    # (DeviceSpec.architecture); 1 for a GPU matching neither
    pool_factors: tuple[tuple[str, float], ...] = ()
    pool_factor_runs: int = 0  # device_fit runs behind pool_factors
    # the part of the base that grows with the ladder: GiB and seconds per captured key
    # (issue 35: the fixed bases are capped at POOL_BASE_CAP_GIB and CAPTURE_BASE_CAP_S)
    pool_per_key_gib: float = 0.0
    capture_per_key_s: float = 0.0

    def pool_factor(self, device: str | DeviceSpec) -> float:
        """The graph-pool factor of ``device``: its own GPU's where one is fitted, else its
        architecture's, else 1."""
        spec, factors = device_spec(device), dict(self.pool_factors)
        if spec.name in factors:
            return factors[spec.name]
        return factors.get(spec.architecture, 1.0) if spec.architecture else 1.0


# fitted by fit_startup_model() on every covered run of reference_vllm_startups.csv
# (tests/estimate/test_startup.py refits and checks these; scripts/fit_startup_model.py
# prints them)
CALIBRATION = StartupCoefficients(
    pool_base_gib=0.08,  # held at POOL_BASE_CAP_GIB (the free fit put 0.24 here)
    pool_per_node_gib=1.5149459558406425e-05,
    pool_per_boundary=0.8856543397699943,
    capture_base_s=0.37,  # held at CAPTURE_BASE_CAP_S (the free fit put 1.40 here)
    capture_per_node_s=3.918467959693692e-05,
    capture_per_eager=0.6688772809098664,
    capture_per_moe_key_s=0.0022828985080449987,
    activation_base_gib=0.11681512703152136,
    activation_per_logits=3.5397633718364148,
    activation_per_mlp=0.18491709236088472,
    activation_moe_gib=0.38606673610389364,
    non_torch_single_gib=0.26404761904761903,
    non_torch_tp_gib=2.11,
    non_torch_pp_gib=0.07,
    fitted_on=59,
    # fit_pool_factors() on the 8 "device_fit" runs (issues 28 and 35;
    # tests/estimate/test_pool_factors.py): per architecture group (its GPUs without runs of
    # their own), then per GPU with runs
    pool_factors=(
        ("Ampere", 1.121807137513995),
        ("Ada", 1.121807137513995),
        ("A100 SXM 40GB", 3.3213228412520146),
        ("A100 SXM 80GB", 0.9293050388053168),
        ("L40S", 0.7804263200424866),
        ("RTX 3090", 0.5865184254521837),
        ("RTX 4090", 1.4337486688328602),
    ),
    pool_factor_runs=8,
    pool_per_key_gib=0.0014485451045066094,
    capture_per_key_s=0.009288516048558428,
)


def _stage_profile(model: PublishedModel, tp: int, pp: int, rank: int, dtype: str) -> LinearProfile:
    """Fused kernels of one GPU's captured forward (the stage's layers; vLLM computes the
    logits outside the graph, so the LM head is left out). Its one cache (memory, then
    disk: :mod:`cgdispatch.core.cache`) is keyed by the parsed config's value (every shape
    it is built from) and the stage: building it takes seconds (the model on the meta
    device), reading it needs no torch."""
    return cache.cached(
        "stage-profile",
        cache.digest(repr(model), str(tp), str(pp), str(rank), dtype),
        lambda: _build_stage_profile(model, tp, pp, rank, dtype),
        encode=lambda profile: data_bytes(profile, kind="LinearProfile"),
        decode=_decode_profile,
        suffix="json",
        memory=64,
    )


def _decode_profile(raw: bytes) -> LinearProfile:
    profile = data_from_bytes(raw, kind="LinearProfile", classes=(LinearProfile,))
    if not isinstance(profile, LinearProfile):
        raise DataFileError(f"holds a {type(profile).__name__}, not a LinearProfile")
    return profile


def _build_stage_profile(
    model: PublishedModel, tp: int, pp: int, rank: int, dtype: str
) -> LinearProfile:
    """The stage's fused kernels, with each distinct kind of layer profiled once: exactly
    (every name, flag and number) what profiling the whole stage gives
    (:func:`_full_stage_profile`), in a few layers' time instead of the stage's.

    A decoder layer's kernels depend on the spec it is built from and on its index only
    through :func:`~cgdispatch.models.architectures._layer_kind` (dense MLP or routed
    experts: :class:`~cgdispatch.models.architectures._Block` reads its index there alone),
    and every layer takes and returns ``[tokens, hidden]`` activations of one dtype. So the
    stage's unfused kernel list is: the kernels before its first layer, then each layer's
    kernels, each a copy of the first layer of its kind, then those after the last layer.
    This builds the stage with one layer of each kind (the first of it, with its own index),
    profiles it once, splices the rows in the full stage's order and fuses pointwise runs
    over the whole list, as the full build does (fusion crosses layer boundaries).
    """
    return fuse_pointwise(_layerwise_profile(_stage_spec(model, tp, pp, rank, dtype), dtype))


def _layerwise_profile(spec: ArchSpec, dtype: str, context_len: int | None = None) -> LinearProfile:
    """``linear_profile`` of ``ArchLM(spec)`` in ``dtype`` (unfused), each distinct kind of
    layer profiled once and its rows repeated for the layers of its kind (see
    :func:`_build_stage_profile`): exactly what profiling the whole model gives."""
    import torch  # the meta-device build: only when no cached estimate is read

    from ..models.architectures import ArchLM, _Block, _layer_kind
    from .kernels import _linear_profile

    kinds = [_layer_kind(spec, i) for i in range(spec.num_layers)]
    first = {kind: kinds.index(kind) for kind in dict.fromkeys(kinds)}  # in stage order
    with torch.device("meta"):
        net = ArchLM(dataclasses.replace(spec, num_layers=0))  # embedding, rope, stage input
        net.layers = torch.nn.ModuleList(_Block(spec, i) for i in first.values())
    net.spec = spec  # the stage's spec (the layers above are its own)
    net = net.for_inference(getattr(torch, dtype))
    profile, spans = _linear_profile(net, (64, 128), context_len, tuple(net.layers))
    span = dict(zip(first, spans))
    ends = [s for pair in spans for s in pair]
    if ends != sorted(ends) or any(a != b for a, b in zip(ends[1:-1:2], ends[2::2])):
        raise RuntimeError(f"layer kernel spans {spans} are not back to back: a bug")
    start, end = (ends[0], ends[-1]) if spans else (profile.num_kernels,) * 2
    rows = np.concatenate(
        [np.arange(start)]
        + [np.arange(*span[kind]) for kind in kinds]
        + [np.arange(end, profile.num_kernels)]
    ).astype(np.intp)
    return LinearProfile(
        tuple(profile.names[i] for i in rows),
        profile.half[rows],
        profile.splitting[rows],
        profile.flops_at_zero[rows],
        profile.flops_per_token[rows],
        profile.bytes_at_zero[rows],
        profile.bytes_per_token[rows],
    )


def _full_stage_profile(
    model: PublishedModel, tp: int, pp: int, rank: int, dtype: str
) -> LinearProfile:
    """The stage's fused kernels from profiling every layer (the reference
    :func:`_build_stage_profile` equals; tests and benchmarks/bench_stage_profile.py)."""
    import torch

    from ..models.architectures import ArchLM
    from .kernels import linear_profile

    with torch.device("meta"):
        net = ArchLM(_stage_spec(model, tp, pp, rank, dtype))
    return fuse_pointwise(linear_profile(net.for_inference(getattr(torch, dtype))))


def _stage_spec(model: PublishedModel, tp: int, pp: int, rank: int, dtype: str) -> ArchSpec:
    """The spec of one GPU's captured forward: its stage, without the LM head."""
    spec = arch_spec(
        model,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        rank=rank,
        dtype=dtype,
    )
    return dataclasses.replace(spec, has_head=False)


def _attention_input_bytes(pm: PublishedModel, tp: int, dtype_bytes: int) -> float:
    """Bytes per token of one layer's attention inputs (q, k, v) on one GPU."""
    if pm.is_mla:
        width = pm.num_heads / tp * (pm.qk_nope_head_dim + pm.qk_rope_head_dim) * 3
    else:
        width = (pm.num_heads / tp + 2 * pm.kv_heads_per_rank(tp)) * pm.head_dim
    return width * dtype_bytes


def check_startup_config(config: GraphConfig) -> None:
    """ValueError unless ``config`` is a :class:`GraphConfig` (a start-up's settings)."""
    if not isinstance(config, GraphConfig):
        raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig")


def check_startup_run(
    model: object, device: str | DeviceSpec, tp: int, pp: int, dtype: str | None
) -> tuple[PublishedModel, str]:
    """The published model and dtype of one start-up, after checking the model, the device,
    the TP/PP sizes against the model's heads and layers, and the dtype (ValueError naming
    the value)."""
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
        """The graph-pool factor of this GPU: its own where fitted, else its architecture's (1 on
        the fitted H100's)."""
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
        gib = (
            c.pool_per_key_gib
            + c.pool_per_node_gib * self.nodes(mode)
            + c.pool_per_boundary * n * (self.boundary_bytes_per_token / GIB)
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
            c.capture_per_key_s
            + c.capture_per_node_s * self.nodes(mode)
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
    pm, dtype = check_startup_run(model, device, tp, pp, dtype)
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


def startup_features(pricing: GraphPricing, config: GraphConfig) -> dict[str, float]:
    """The quantities the graph-memory and capture-time models are linear in: the sums of
    ``pricing``'s per-key terms over ``config``'s keys (``pricing``: one GPU's
    :func:`graph_pricing`; the coefficients are not read)."""
    if not isinstance(pricing, GraphPricing):
        raise ValueError(
            f"pricing={pricing!r} is invalid: pass a GraphPricing (graph_pricing(model, "
            "device, tensor_parallel_size=..., pipeline_parallel_size=..., dtype=...))"
        )
    check_startup_config(config)
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
