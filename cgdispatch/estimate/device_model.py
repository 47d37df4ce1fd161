"""An analytic device model of step latency per (mode, size), with no GPU needed.

Kernels are counted from the model's aten operators on fake tensors
(:mod:`cgdispatch.estimate.kernels`, imported only when a model is profiled: a cost model
read from the disk cache needs no torch). Each kernel's device time is
``max(flops / (peak_flops * flop_efficiency), bytes / (bandwidth * bw_efficiency),
kernel_min_us)``. How the host issues them and the device runs them in each mode (eager
launches with a device gap each, one graph launch for FULL, one per piece plus eager
attention for PIECEWISE) is :mod:`cgdispatch.estimate.step_time`, the one formula
:func:`predict_step`, :func:`step_times_ms` and :class:`DeviceCostModel` share.

Every number this model produces is labelled ``model (<device>)``; it is not a
measurement. Device presets come from datasheets (docs/references.md); the launch and gap
constants were set to match published step times (docs/calibration.md compares the model with
them, :func:`~cgdispatch.estimate.published_steps.published_step_comparison`); graph memory and
capture time of published models come from the start-up model calibrated on logged vLLM
start-ups (:mod:`cgdispatch.estimate.startup_pricing`); :func:`calibrate` fits the constants to
measured sweep rows instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core import cache
from ..core.modes import CUDAGraphMode
from ..core.validate import MAX_MODEL_LEN, MAX_PARALLEL, MAX_STEP_TOKENS, check_int
from .datafile import DataFileError, data_bytes, data_from_bytes
from .devices import DEVICE_PRESETS, DeviceSpec, device_spec
from .profiles import AttentionShape, LinearProfile, StepProfile
from .startup import startup_source
from .startup_pricing import GraphPricing, StartupCoefficients, graph_pricing
from .step_cost import WEIGHT_BYTES, StepPricer
from .step_time import fuse_pointwise, kernel_times_us, step_times_by_mode, step_us

# the weight dtypes device_cost_model takes ("auto": the config's 16-bit dtype)
WEIGHT_DTYPES = {"auto": 2.0, **WEIGHT_BYTES}

__all__ = [
    "DeviceSpec",
    "DEVICE_PRESETS",
    "StepProfile",
    "predict_step",
    "predict_frame",
    "step_times_ms",
    "DeviceCostModel",
    "device_cost_model",
    "cached_cost_model",
    "attention_shape",
]


def check_token_array(name: str, num_tokens: Any) -> np.ndarray:
    """``num_tokens`` (a size or an array of them) as an int64 array whose every entry is a
    whole number in [1, MAX_STEP_TOKENS], else ValueError naming the first bad entry: a cost
    model prices real steps, not 10**12-token or negative ones."""
    array = np.asarray(num_tokens)
    if array.dtype == bool or array.dtype.kind not in "iuf":
        raise ValueError(f"{name}={num_tokens!r} is invalid: give step sizes as integers >= 1")
    if array.size:
        bad = (array < 1) | (array > MAX_STEP_TOKENS) | (array != np.floor(array))
        if bad.any():
            first = array.flat[int(np.flatnonzero(bad.ravel())[0])].item()
            raise ValueError(
                f"{name} holds {first!r}: a step size must be a whole number of tokens from 1 "
                f"to {MAX_STEP_TOKENS:_} (GPU kernels index a step's tokens with int32)"
            )
    return array.astype(np.int64, copy=False)


def predict_step(
    profile: StepProfile, runtime_mode: CUDAGraphMode | str, spec: DeviceSpec
) -> dict[str, float]:
    """``step_ms``, ``host_ms`` and ``device_ms`` of one step in a runtime mode (model).

    ``device_ms`` is the kernels' work alone (no gaps); :mod:`~cgdispatch.estimate.step_time`
    says how the step time follows from it.
    """
    dev = kernel_times_us(profile.flops, profile.bytes, profile.half, spec)
    step, host = step_us(dev[None, :], profile.splitting, runtime_mode, spec)
    return {
        "step_ms": float(step[0]) / 1e3,
        "host_ms": host / 1e3 if profile.num_kernels else 0.0,
        "device_ms": float(dev.sum()) / 1e3,
    }


def predict_frame(
    profiles: Mapping[int, StepProfile],
    spec: DeviceSpec,
    modes: Sequence[CUDAGraphMode | str] = ("FULL", "PIECEWISE"),
) -> pd.DataFrame:
    """Eager vs graph step time and speed-up per (mode, num_tokens), labelled ``model``."""
    rows = []
    for num_tokens, prof in sorted(profiles.items()):
        eager = predict_step(prof, "NONE", spec)
        for mode in modes:
            graph = predict_step(prof, mode, spec)
            rows.append(
                {
                    "mode": str(CUDAGraphMode.parse(mode)),
                    "num_tokens": num_tokens,
                    "num_kernels": prof.num_kernels,
                    "eager_ms": eager["step_ms"],
                    "graph_ms": graph["step_ms"],
                    "eager_host_ms": eager["host_ms"],
                    "graph_host_ms": graph["host_ms"],
                    "device_ms": graph["device_ms"],
                    "speedup_x": eager["step_ms"] / graph["step_ms"],
                    "source": f"model ({spec.name})",
                }
            )
    return pd.DataFrame(rows)


def step_times_ms(
    profile: LinearProfile,
    runtime_mode: CUDAGraphMode | str,
    num_tokens: np.ndarray,
    spec: DeviceSpec,
    chunk: int = 256,
) -> np.ndarray:
    """:func:`predict_step`'s ``step_ms`` at many sizes at once (same formula, numpy rows)."""
    mode = CUDAGraphMode.parse(runtime_mode)
    if not mode.is_valid_runtime_mode():
        raise ValueError(f"runtime_mode={mode} is invalid: predict NONE, PIECEWISE or FULL steps")
    return step_times_by_mode(profile, mode, num_tokens, spec, chunk=chunk)


@dataclass(frozen=True)
class MemoryLine:
    """One graph's pool bytes under weak outputs as a line in num_tokens, through two
    estimator runs (allocations are affine in num_tokens up to 512 B block rounding)."""

    at_zero: float
    per_token: float

    def __call__(self, num_tokens: np.ndarray) -> np.ndarray:
        return self.at_zero + self.per_token * np.asarray(num_tokens, dtype=np.float64)


@dataclass(frozen=True)
class DeviceCostModel:
    """The analytic device model of one model on one device, as a ``CostModel``.

    ``step_time_ms`` is :func:`step_times_ms`. Graph memory and capture time:

    - for a model with a published config (``pricing``: the start-up model calibrated on
      logged vLLM start-ups, :mod:`cgdispatch.estimate.startup_pricing`),
      ``graph_memory_bytes(mode, n)`` and ``capture_time_s(mode, n)`` are what one key of that size *adds*; a ladder
      costs ``graph_pool_base_bytes`` / ``capture_base_s`` plus the sum over its keys
      (``graph_memory_additive`` is True);
    - otherwise (toy models) ``graph_memory_bytes(mode, n)`` is the shared pool one graph of
      that size needs with vLLM's weak outputs (fake-tensor estimator, ``keep_outputs=False``:
      the pool of a ladder is the largest of these) and ``capture_time_s(mode, n)`` is
      ``num_warmups + 1`` eager steps plus one ``graph_instantiate_us`` per graph.

    Everything it returns is a model; build it with :func:`device_cost_model`.
    """

    model_name: str
    spec: DeviceSpec
    profile: LinearProfile
    # "FULL" / "PIECEWISE" -> pool bytes per graph; empty when ``pricing`` prices the graphs
    memory: Mapping[str, MemoryLine]
    num_warmups: int = 1  # vLLM's compilation_config.cudagraph_num_of_warmups
    pricing: GraphPricing | None = None  # the calibrated per-graph costs, published models
    # heads and KV bytes per token on one GPU: attention priced per request (step_cost.py);
    # None: the kernels' roofline at a fixed context (a cost model built before it existed)
    attention: AttentionShape | None = None
    # the context each decode's attention reads when only a step's size is known
    context_len: int = 512
    # how the checkpoint stores its linear weights: bfloat16 (as profiled), fp8 (W8A8 where
    # the GPU has fp8 tensor cores, else weight-only), int8 (W8A8), int4 (weight-only)
    weight_dtype: str = "bfloat16"
    num_experts: int = 0  # routed experts of a mixture-of-experts model (0: dense)
    # where kernel times come from: "model" (the fitted formulas) or "aic" (kernels measured
    # with vLLM, aiconfigurator-core: estimate/measured_kernels.py) on this preset
    kernel_source: str = "model"
    kernel_device: str = ""  # the preset whose measured kernels "aic" reads

    def with_dtypes(
        self, weight_dtype: str = "auto", kv_cache_dtype: str = "auto"
    ) -> DeviceCostModel:
        """This model with quantized weights and/or an fp8 KV cache (see device_cost_model)."""
        changes: dict[str, Any] = {}
        if weight_dtype != "auto":
            changes["weight_dtype"] = weight_dtype
        if kv_cache_dtype == "fp8" and self.attention is not None:
            a = self.attention
            scale = 1.0 / a.kv_dtype_bytes
            changes["attention"] = dataclasses.replace(
                a, kv_bytes_per_token=a.kv_bytes_per_token * scale, kv_dtype_bytes=1.0
            )
        return dataclasses.replace(self, **changes) if changes else self

    def pricer(self) -> StepPricer:
        """The :class:`~cgdispatch.estimate.step_cost.StepPricer` of this model (one per
        cost model: it keeps the lines it has priced)."""
        found = self.__dict__.get("_pricer")
        if found is None and self.kernel_source == "aic":
            from .measured_kernels import MeasuredKernelPricer

            found = MeasuredKernelPricer(self, self.kernel_device)
            object.__setattr__(self, "_pricer", found)
        if found is None:
            found = StepPricer(self)
            object.__setattr__(self, "_pricer", found)  # a cache, not a field
        return found

    @property
    def source(self) -> str:
        if self.kernel_source == "aic":
            return (
                f"model ({self.spec.name}) with kernel times measured in vLLM "
                "(aiconfigurator-core 0.12.0)"
            )
        if self.pricing is not None and "vLLM startups on " in self.memory_source:
            # the step-time model is the datasheet's; the graph costs are carried over from
            # the fitted GPU (the label names it; the fitted GPU's own label does not)
            return startup_source(self.spec, self.pricing.coefficients)
        return f"model ({self.spec.name})"

    @property
    def graph_memory_additive(self) -> bool:
        """True when a ladder's graph memory is a base plus a sum over its keys."""
        return self.pricing is not None

    @property
    def graph_pool_base_bytes(self) -> float | None:
        return None if self.pricing is None else self.pricing.base_memory_bytes

    @property
    def capture_base_s(self) -> float:
        return 0.0 if self.pricing is None else self.pricing.base_capture_s

    @property
    def memory_source(self) -> str:
        if self.pricing is None:
            return f"model ({self.spec.name}, fake-tensor pool estimate)"
        device = self.pricing.device
        return startup_source(
            device if device in DEVICE_PRESETS else self.pricing.spec, self.pricing.coefficients
        )

    def step_time_ms(
        self, mode: CUDAGraphMode, num_tokens: np.ndarray, uniform_decode: bool = True
    ) -> np.ndarray:
        """Step time (ms) per size in any mode; FULL_DECODE_ONLY and FULL_AND_PIECEWISE
        run what the dispatcher routes a step of that size and batch kind to."""
        num_tokens = check_token_array("num_tokens", num_tokens)
        rows = None
        if self.attention is not None:  # each token a decode at context_len (step_cost.py)
            pricer = self.pricer()

            def rows(sizes: np.ndarray) -> np.ndarray:
                attention = pricer.decode_attention_rows(sizes, self.context_len)
                return pricer.kernel_rows(sizes, sizes, attention)

        return step_times_by_mode(
            self.profile,
            mode,
            num_tokens,
            self.spec,
            uniform_decode=uniform_decode,
            kernel_rows=rows,
        )

    def _graph_mode(self, mode: CUDAGraphMode | str) -> str:
        name = CUDAGraphMode.parse(mode).name
        if name not in ("FULL", "PIECEWISE"):
            raise ValueError(f"mode={name} captures no graph: ask for FULL or PIECEWISE")
        return name

    def graph_memory_bytes(self, mode: CUDAGraphMode, num_tokens: np.ndarray) -> np.ndarray:
        name = self._graph_mode(mode)
        num_tokens = check_token_array("num_tokens", num_tokens)
        if self.pricing is not None:
            return self.pricing.memory_bytes(name, num_tokens)
        return self.memory[name](num_tokens)

    def capture_time_s(self, mode: CUDAGraphMode, num_tokens: np.ndarray) -> np.ndarray:
        name = self._graph_mode(mode)
        num_tokens = check_token_array("num_tokens", num_tokens)
        if self.pricing is not None:
            return self.pricing.capture_s(name, num_tokens, self.num_warmups)
        graphs = 1 if name == "FULL" else 1 + int(self.profile.splitting.sum())
        eager_s = self.step_time_ms(CUDAGraphMode.NONE, num_tokens) / 1e3
        return (self.num_warmups + 1) * eager_s + graphs * self.spec.graph_instantiate_us / 1e6


def check_sharding(model: object, tensor_parallel_size: int | None) -> None:
    """ValueError unless vLLM can shard ``model`` over ``tensor_parallel_size`` GPUs, for the
    layers that may not import models (``plan``):
    :func:`cgdispatch.models.registry.check_model_tensor_parallel`, the one home of the rule."""
    from ..models.registry import check_model_tensor_parallel

    check_model_tensor_parallel(model, tensor_parallel_size)


def device_cost_model(
    model: object = "llama-3.1-8b",
    device: str | DeviceSpec = "H200",
    *,
    context_len: int = 512,
    tensor_parallel_size: int | None = None,
    weight_dtype: str = "auto",
    kv_cache_dtype: str = "auto",
    kernels: str = "model",
) -> DeviceCostModel:
    """The device model of ``model`` (built on meta) on ``device`` (a preset name or a
    :class:`DeviceSpec`). ``model``: a registry name, a published Hugging Face id, or any
    supported decoder's ``config.json`` (a path, dict or transformers config, read offline).
    It prices one GPU: one rank of ``tensor_parallel_size`` (default the registry model's
    own, else 1), its share of heads, MLP and vocabulary and one all-reduce kernel after
    attention and after the MLP; a registry model with a published config is rebuilt from
    that config at another TP size, a toy model only runs at its own.

    ``weight_dtype``: ``auto`` (the config's dtype), ``fp8``, ``int8`` or ``int4`` (a
    quantized checkpoint's linear weights, priced with their bytes and GEMM rate);
    ``kv_cache_dtype``: ``auto`` or ``fp8`` (vLLM's ``--kv-cache-dtype``: the KV bytes each
    decode reads halve). ``kernels``: ``model`` (the formulas fitted on measured kernels, no
    extra package) or ``aic`` (the measured kernels themselves where aiconfigurator-core has
    them for this model and GPU: ``pip install 'cgdispatch[aic]'``; refused otherwise).
    ``context_len``: KV positions each token's attention reads (ShareGPT's mean prompt plus
    output is about 500 tokens, docs/references.md). Two kernel profiles on fake tensors,
    plus the calibrated per-graph prices of a published model or, for other models, four
    graph-memory estimates on fake tensors: about a second for an 8B model, cached.
    """
    from ..models.published import PublishedModel

    # a config.json file or folder by its resolved path and bytes; any other model by the
    # value it resolves to below (a registry name, or the PublishedModel of a config)
    source = cache.source_digest(model) if isinstance(model, (str, Path)) else ""
    if source.startswith("value "):
        source = ""
    tp = tensor_parallel_size
    if tp is not None:
        tp = check_int("tensor_parallel_size", tp, 1, MAX_PARALLEL)
    model = _sharded_model(model, tp)
    device_spec(device)  # before the cache hashes the arguments (a list cannot be)
    context_len = check_int("context_len", context_len, 1, MAX_MODEL_LEN)
    if weight_dtype not in WEIGHT_DTYPES:
        raise ValueError(
            f"weight_dtype={weight_dtype!r} is unknown: use one of {sorted(WEIGHT_DTYPES)}"
        )
    if kv_cache_dtype not in ("auto", "fp8"):
        raise ValueError(f"kv_cache_dtype={kv_cache_dtype!r} is unknown: use 'auto' or 'fp8'")
    if isinstance(model, PublishedModel):
        model.check_parallel(tp or 1, 1)
        built = _cached_cost_model(source, model, device, context_len, tp or 1)
    else:
        built = _cached_cost_model(source, model, device, context_len, None)
    built = built.with_dtypes(weight_dtype, kv_cache_dtype)
    if kernels == "model":
        return built
    if kernels != "aic":
        raise ValueError(f"kernels={kernels!r} is unknown: use 'model' or 'aic'")
    if not isinstance(device, str):
        raise ValueError("kernels='aic' reads a preset GPU's measured kernels: name the device")
    from .measured_kernels import check_measured_backend

    name = model.model if isinstance(model, PublishedModel) else model
    check_measured_backend(name, device)
    return dataclasses.replace(built, kernel_source="aic", kernel_device=device)


def _sharded_model(model: object, tp: int | None) -> object:
    """The model to build at TP size ``tp``: a published config (hashable, for the cache)
    where one exists or the size differs from a registry model's own; refused where a model
    cannot shard."""
    from ..models.arch_spec import ARCHITECTURES
    from ..models.config_json import is_config_source
    from ..models.published import PUBLISHED_MODELS, PublishedModel, published_model

    if isinstance(model, PublishedModel) or model in PUBLISHED_MODELS or is_config_source(model):
        model = published_model(model)  # hashable: the cache below keys on it
    elif not isinstance(model, str):
        raise ValueError(
            f"model={model!r} is invalid: give a registry model's name, a Hugging Face id "
            "with a published config, or a config.json path"
        )
    elif (
        tp is not None
        and model in ARCHITECTURES
        and tp != ARCHITECTURES[model].tensor_parallel_size
    ):
        spec = ARCHITECTURES[model]
        if not spec.published:
            raise ValueError(
                f"tensor_parallel_size={tp} is invalid for {model!r}: it has no published "
                f"config to shard again; it runs at its own {spec.tensor_parallel_size}"
            )
        model = published_model(spec.published)
    elif tp not in (None, 1) and model not in ARCHITECTURES:
        raise ValueError(
            f"tensor_parallel_size={tp} is invalid for {model!r}: only models with a "
            "published config (registry models with one, Hugging Face ids, config.json) shard"
        )
    return model


def _build(model: object, tensor_parallel_size: int | None = None) -> object:
    """The meta-tensor model: a registry name's, or one GPU's (one TP rank's) decoder of a
    published config."""
    import dataclasses

    import torch

    from ..models.architectures import ArchLM
    from ..models.published import PublishedModel, arch_spec
    from ..models.registry import build_model

    if not isinstance(model, PublishedModel):
        return build_model(model, device="meta")
    # the registry's stand-in cache sizes, so the profile matches a registry model's
    spec = arch_spec(model, tensor_parallel_size=tensor_parallel_size or 1)
    spec = dataclasses.replace(spec, num_slots=256, max_seq_len=1024)
    with torch.device("meta"):
        net = ArchLM(spec)
    return net.for_inference(getattr(torch, spec.dtype))


def _net_profile(net: Any, context_len: int) -> LinearProfile:
    """``linear_profile(net)`` (unfused); an architecture preset's (``ArchLM``: a registry
    preset or a published config's decoder) with each distinct kind of layer profiled once
    (:func:`~cgdispatch.estimate.startup_pricing._layerwise_profile`, exactly the same)."""
    from ..models.architectures import ArchLM
    from .kernels import linear_profile
    from .startup_pricing import _layerwise_profile

    if type(net) is ArchLM and len(net.layers):
        dtype = str(net.layers[0].o_proj.weight.dtype).removeprefix("torch.")
        return _layerwise_profile(net.spec, dtype, context_len)
    return linear_profile(net, context_len=context_len)


# the name of older releases, when the disk cache was a module of its own: device_cost_model
# is cached itself now (core.cache), so both names are one function
cached_cost_model = device_cost_model


# the classes a cached cost model may hold: nothing else is rebuilt from a cache file
_STORED = (
    DeviceCostModel, DeviceSpec, LinearProfile, MemoryLine, GraphPricing, AttentionShape,
    StartupCoefficients,
)  # fmt: skip


def _cached_cost_model(
    source: str,
    model: object,
    device: str | DeviceSpec,
    context_len: int,
    tensor_parallel_size: int | None,
) -> DeviceCostModel:
    """The cost model's one cache (memory, then disk: :mod:`cgdispatch.core.cache`), keyed
    by the model's source (a config.json's resolved path and bytes), its parsed value, the
    device's spec, the context length and the TP size. Building one traces the model on
    fake tensors (about 10 s for an 8B model on two cores); a cached one needs no torch."""
    key = cache.digest(
        source, repr(model), repr(device_spec(device)), str(context_len), repr(tensor_parallel_size)
    )
    return cache.cached(
        "cost-model",
        key,
        lambda: _device_cost_model(model, device, context_len, tensor_parallel_size),
        encode=lambda built: data_bytes(built, kind="DeviceCostModel"),
        decode=_decode_cost_model,
        suffix="json",
    )


def _decode_cost_model(raw: bytes) -> DeviceCostModel:
    built = data_from_bytes(raw, kind="DeviceCostModel", classes=_STORED)
    if not isinstance(built, DeviceCostModel):
        raise DataFileError(f"holds a {type(built).__name__}, not a DeviceCostModel")
    return built


def _device_cost_model(
    model: object, device: str | DeviceSpec, context_len: int, tensor_parallel_size: int | None
) -> DeviceCostModel:
    from ..core.config import GraphConfig
    from ..core.v1 import RELEASE as V1_RELEASE
    from ..models.published import PublishedModel
    from .graph_memory import estimate_graph_memory

    net = _build(model, tensor_parallel_size)
    spec = device_spec(device)
    attention = attention_shape(net)
    experts = int(getattr(getattr(net, "config", None), "num_experts", 0) or 0)
    # the kernels vLLM launches: pointwise runs fused (compiled graphs, eager custom ops)
    profile = fuse_pointwise(_net_profile(net, context_len))
    published = getattr(getattr(net, "spec", None), "published", "")
    if isinstance(model, PublishedModel):
        published, model = model, model.model
    if published:  # graph memory and capture time from the calibrated start-up model
        pricing = graph_pricing(
            published, device, tensor_parallel_size=net.spec.tensor_parallel_size
        )
        return DeviceCostModel(
            model,
            spec,
            profile,
            {},
            pricing=pricing,
            attention=attention,
            context_len=context_len,
            num_experts=experts,
        )
    anchors = (256, 512)
    lines = {}
    for mode in ("FULL", "PIECEWISE"):
        pools = []
        for size in anchors:
            config = GraphConfig(  # one token size: V1's graphs
                vllm_version=V1_RELEASE,
                cudagraph_mode=mode,
                cudagraph_capture_sizes=[size],
            )
            config = config.resolve(net.attention_cg_support)
            pools.append(estimate_graph_memory(net, config, keep_outputs=False).shared_pool_bytes)
        slope = (pools[1] - pools[0]) / (anchors[1] - anchors[0])
        lines[mode] = MemoryLine(pools[0] - anchors[0] * slope, slope)
    return DeviceCostModel(
        model,
        spec,
        profile,
        lines,
        attention=attention,
        context_len=context_len,
        num_experts=experts,
    )


def attention_shape(net: object) -> AttentionShape | None:
    """Heads, KV heads, head size and KV bytes per token of one GPU's attention, from a
    registry or published model's config (None when the model says nothing of them)."""
    from ..models.arch_spec import DTYPE_BYTES

    cfg = getattr(net, "config", None)
    if cfg is None or not hasattr(cfg, "num_heads"):
        return None
    dtype = DTYPE_BYTES.get(str(getattr(cfg, "dtype", "bfloat16")).replace("torch.", ""), 2)
    if hasattr(cfg, "shard"):  # ArchSpec: one tensor-parallel rank
        heads, kv_heads, tp = (
            cfg.shard("num_heads"),
            cfg.shard("num_kv_heads"),
            cfg.tensor_parallel_size,
        )
    else:
        heads, kv_heads, tp = cfg.num_heads, cfg.num_kv_heads, 1
    head_dim = int(cfg.head_dim)
    per_token = 2.0 * kv_heads * head_dim * dtype
    if getattr(cfg, "kv_lora_rank", 0):  # latent attention caches one latent and a rope key
        per_token = float((cfg.kv_lora_rank + cfg.qk_rope_head_dim) * dtype)
    return AttentionShape(int(heads), int(kv_heads), head_dim, per_token, float(dtype), int(tp))
