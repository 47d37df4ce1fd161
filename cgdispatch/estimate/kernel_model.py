"""Kernel times fitted on measured kernels: GEMMs, attention (prefill and decode) and the
tensor-parallel all-reduce, one small formula each.

The coefficients (``cgdispatch/data/kernel_model.json``) were fitted by
``scripts/fit_kernel_model.py`` on the per-kernel tables NVIDIA measured with vLLM and ships
in ``aiconfigurator-core`` 0.12.0 (Apache-2.0; docs/references.md): Hopper on the H100 SXM
tables (vLLM 0.24.0), Ampere on the A100 SXM tables (vLLM 0.14.0). The H200 tables were
kept out of every fit: docs/calibration.md ("Step costs from measured kernels") reports the
error there. Other GPUs take the coefficients of the nearest architecture (the source label
says so) with their own datasheet rates.

The formulas (microseconds; ``peak`` and ``bw`` are the device's datasheet rates):

- GEMM of ``m`` rows (bf16; fp8 W8A8 on Hopper with its own coefficients): ``t0 + max(flops / (peak * ef * m / (m + m_half)), bytes / (bw * eb))``;
- decode attention of one layer on Hopper, FlashAttention 3's split-KV decoding: each of the
  ``units = num_decodes * kv_heads`` (the GQA query heads packed in one tile) reads its
  ``n_blocks = ceil(context / block_n)`` KV tiles in ``splits`` pieces (flash-attention's
  ``num_splits_heuristic``, :func:`fa_num_splits`), one CTA each, ``sms * ctas_per_sm`` at
  a time (``sms``: the device's own count where ``device_specs.csv`` has it, else the
  fitted H100's 132): ``t0 + waves * (cta + ceil(n_blocks / splits) * tile) + (splits > 1) * combine``
  with ``waves = ceil(units * splits / (sms * ctas_per_sm))`` and ``tile`` the time of one
  tile while the running CTAs share ``bw * eb``. In the measured tables the kernel reads
  the same cache over and over, so a layer's KV that fits in L2 stays there: the fit and
  the comparison with the tables (``l2_warm``) multiply ``tile`` by ``l2_factor`` then. A
  served step's layers evict each other's KV, so a served price never does. ``context``
  is the requests' mean. On Ampere (FlashAttention 2 tables, which this form does not fit better) it stays
  ``t0 + kv_bytes / (bw * eb) + num_decodes * (per_head_req * heads / 64 + per_req)``;
- prefill attention of one layer, per prompt chunk of ``n`` new tokens after ``c`` cached:
  ``max(causal_flops / (peak * ef * n / (n + n_half)), bytes / (bw * eb))`` with
  ``causal_flops = 4 * heads * head_dim * (n * c + n * (n + 1) / 2)``, plus ``t0`` once;
- all-reduce of ``msg`` bytes over ``tp`` GPUs (vLLM's custom all-reduce in a graph):
  ``t0[tp] + 2 (tp - 1) / tp * msg / (link * eff)``.

It prices kernels; how a step's kernels are issued per mode is
:mod:`cgdispatch.estimate.step_time`, what a step holds is :mod:`cgdispatch.estimate.step_cost`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np

from ..core import cache

if TYPE_CHECKING:
    from .devices import DeviceSpec

__all__ = [
    "KernelCoefficients",
    "kernel_coefficients",
    "gemm_us",
    "decode_attention_us",
    "decode_attention_scalar_us",
    "decode_attention_fn",
    "fa_num_splits",
    "prefill_attention_us",
    "allreduce_us",
]


# a GPU whose link is unknown: PCIe Gen4 x16, 32 GB/s each way
_PCIE4_BYTES_PER_S = 32e9


@dataclass(frozen=True)
class KernelCoefficients:
    """The fitted coefficients of one GPU architecture (see the module doc)."""

    architecture: str  # the architecture whose tables were fitted (Hopper, Ampere)
    fitted_on: str  # which tables, for the source label
    gemm: dict[str, float]  # ef, eb, t0_us, m_half
    # split-KV (Hopper): eb, t0_us, cta_us, l2_factor, combine_us and the kernel's constants
    # sms, ctas_per_sm, block_n, min_split_blocks, l2_bytes; linear: eb, t0_us,
    # per_head_req_us, per_req_us
    decode: dict[str, float]
    prefill: dict[str, float]  # ef, eb, t0_us, n_half
    allreduce: dict[str, float]  # eff, t0_us_tp2, t0_us_tp4, t0_us_tp8
    # fp8 W8A8 GEMMs (per-tensor scales) where the tables have them (Hopper); None: an fp8
    # checkpoint runs weight-only there (Marlin on Ampere): bf16 rates, 1-byte weights
    gemm_fp8: dict[str, float] | None = None


@cache.memo(maxsize=1)
def _table() -> dict:
    with resources.files("cgdispatch.data").joinpath("kernel_model.json").open() as f:
        return json.load(f)


def kernel_coefficients(spec: DeviceSpec) -> KernelCoefficients:
    """The coefficients for ``spec``'s architecture (an unfitted one takes its fallback's)."""
    table = _table()
    arch = spec.architecture if spec.architecture in table["architectures"] else ""
    if not arch:
        arch = table["fallback"].get(spec.architecture, table["fallback"][""])
    row = table["architectures"][arch]
    return KernelCoefficients(
        arch,
        row["fitted_on"],
        row["gemm"],
        row["decode"],
        row["prefill"],
        row["allreduce"],
        row.get("gemm_fp8"),
    )


def _peak(spec: DeviceSpec, fp8: bool) -> float:
    return spec.peak_fp8_flops if fp8 and spec.peak_fp8_flops > 0 else spec.peak_flops


def gemm_us(
    flops: np.ndarray,
    nbytes: np.ndarray,
    m: np.ndarray,
    spec: DeviceSpec,
    coeffs: KernelCoefficients,
    *,
    fp8: bool = False,
) -> np.ndarray:
    """Device time of GEMMs with ``m`` rows each (arrays broadcast together); ``fp8``: W8A8
    at the fp8 rate with the fp8 coefficients (callers check ``coeffs.gemm_fp8`` first)."""
    c = coeffs.gemm_fp8 if fp8 and coeffs.gemm_fp8 else coeffs.gemm
    m = np.maximum(np.asarray(m, dtype=np.float64), 1.0)
    eff = c["ef"] * m / (m + c["m_half"])
    compute = np.asarray(flops, dtype=np.float64) / (_peak(spec, fp8) * eff)
    memory = np.asarray(nbytes, dtype=np.float64) / (spec.bandwidth_bytes_per_s * c["eb"])
    return c["t0_us"] + np.maximum(compute, memory) * 1e6


def _is_split_kv(c: dict[str, float]) -> bool:
    return "cta_us" in c


@cache.memo(maxsize=65536)
def fa_num_splits(units: int, slots: int, n_blocks: int, min_blocks: int) -> int:
    """How many pieces FlashAttention 3 splits each request's KV into (split-KV decoding):
    ``num_splits_heuristic`` of vLLM's fork of flash-attention (``vllm-flash-attn``,
    ``hopper/heuristics.h``) with ``units`` = requests x KV heads (GQA heads packed in one
    tile), ``slots`` = CTAs that run at once (SMs x CTAs per SM) and ``n_blocks`` KV tiles
    per request. No split once the units nearly fill the GPU (>= 80% of the slots), when a
    request has at most ``min_blocks`` tiles, or at most 8 tiles with 32 units or more; else
    the fewest splits (up to 128 and ``n_blocks``) whose wave efficiency (CTAs / slots over
    its ceiling; times 0.85 where a split gets fewer than 4 tiles) is within 95% of the
    best."""
    if units >= 0.8 * slots or n_blocks <= min_blocks or (n_blocks <= 8 and units >= 32):
        return 1
    most = min(128, slots, n_blocks)
    eff = []
    for s in range(1, most + 1):
        waves = units * s / slots
        eff.append(waves / math.ceil(waves) * (0.85 if n_blocks // s < 4 else 1.0))
    best = max(eff)
    return next(s for s, e in enumerate(eff, start=1) if e >= 0.95 * best)


def _kv_tiles(kv_bytes: float, per_request_bytes: float, block_n: int) -> int:
    """KV tiles per request at the requests' mean context: what the split-KV time depends
    on (with L2 residency), so also what :func:`decode_attention_fn` remembers it by."""
    return max(1, math.ceil(kv_bytes / per_request_bytes / block_n - 1e-9))


def _split_kv_us(
    kv_bytes: float,
    n: float,
    kv_heads: float,
    kv_bytes_per_token: float,
    spec: DeviceSpec,
    c: dict[str, float],
    l2_warm: bool,
) -> float:
    """One layer's split-KV decode (no ``t0``): waves of CTAs, each reading its tiles."""
    if n <= 0:
        return 0.0
    block_n = int(c["block_n"])
    # the GPU's own SMs where the table names them (an H100 PCIe 114, an H20 78), else the
    # fitted GPU's (132: H100 SXM, H200, H800)
    slots = int((spec.sms or c["sms"]) * c["ctas_per_sm"])
    units = max(1, round(n * kv_heads))
    n_blocks = _kv_tiles(kv_bytes, n * kv_bytes_per_token, block_n)
    splits = fa_num_splits(units, slots, n_blocks, int(c["min_split_blocks"]))
    ctas = units * splits
    waves = math.ceil(ctas / slots)
    tiles = math.ceil(n_blocks / splits)  # KV tiles each CTA reads, one after another
    tile_bytes = block_n * kv_bytes_per_token / kv_heads
    # the CTAs running at once share the bandwidth; KV that fits in L2 reads faster where
    # it stays there (a measured table's repeated kernel), never in a served step
    rate = spec.bandwidth_bytes_per_s * c["eb"]
    if l2_warm and kv_bytes <= c["l2_bytes"]:
        rate /= c["l2_factor"]
    per_tile = tile_bytes * min(ctas, slots) / rate * 1e6
    return waves * (c["cta_us"] + tiles * per_tile) + (c["combine_us"] if splits > 1 else 0.0)


def decode_attention_scalar_us(
    kv_bytes: float,
    num_decodes: float,
    heads: float,
    kv_heads: float,
    kv_bytes_per_token: float,
    spec: DeviceSpec,
    coeffs: KernelCoefficients,
    *,
    l2_warm: bool = False,
) -> float:
    """:func:`decode_attention_us` of one step in plain float arithmetic (a replay prices
    every step with it, :mod:`.step_cost`)."""
    c = coeffs.decode
    if num_decodes <= 0:
        return 0.0
    if _is_split_kv(c):
        return _split_kv_us(kv_bytes, num_decodes, kv_heads, kv_bytes_per_token, spec, c, l2_warm)
    per_byte = 1e6 / (spec.bandwidth_bytes_per_s * c["eb"])
    per_request = c["per_head_req_us"] * heads / 64.0 + c.get("per_req_us", 0.0)
    return kv_bytes * per_byte + per_request * num_decodes


def decode_attention_fn(
    num_decodes: int,
    heads: float,
    kv_heads: float,
    kv_bytes_per_token: float,
    spec: DeviceSpec,
    coeffs: KernelCoefficients,
    *,
    l2_warm: bool = False,
) -> Callable[[float], float]:
    """:func:`decode_attention_scalar_us` of ``num_decodes`` requests as a function of the
    KV bytes they read, the same floats: a replay prices thousands of steps of one batch
    that differ only in context; the split-KV time changes only with the tiles per request
    and L2 residency, so each such pair is computed once."""
    c = coeffs.decode
    n = num_decodes

    def direct(kv_bytes: float) -> float:
        return decode_attention_scalar_us(
            kv_bytes, n, heads, kv_heads, kv_bytes_per_token, spec, coeffs, l2_warm=l2_warm
        )

    if n <= 0 or not _is_split_kv(c):
        return direct
    per_request, block_n, l2 = n * kv_bytes_per_token, int(c["block_n"]), c["l2_bytes"]
    memo: dict[tuple[int, bool], float] = {}

    def tiled(kv_bytes: float) -> float:
        key = (_kv_tiles(kv_bytes, per_request, block_n), l2_warm and kv_bytes <= l2)
        t = memo.get(key)
        if t is None:
            t = memo[key] = direct(kv_bytes)
        return t

    return tiled


def decode_attention_us(
    kv_bytes: np.ndarray,
    num_decodes: np.ndarray,
    heads: int | np.ndarray,
    kv_heads: int | np.ndarray,
    kv_bytes_per_token: float | np.ndarray,
    spec: DeviceSpec,
    coeffs: KernelCoefficients,
    *,
    l2_warm: bool = False,
) -> np.ndarray:
    """One layer's decode attention: ``num_decodes`` requests reading ``kv_bytes`` of KV
    cache in all, ``kv_bytes_per_token`` per token of one request (all its ``kv_heads``);
    zero when there are no decodes; ``t0`` (the launch) is the caller's. ``l2_warm``: a
    layer's KV that fits in L2 is read from there, as in a measured table that runs the
    same kernel on the same cache over and over (the fit and the comparison with those
    tables); a served step's layers evict each other's KV, so it is off by default."""
    args = np.broadcast_arrays(
        *(
            np.asarray(x, dtype=np.float64)
            for x in (kv_bytes, num_decodes, heads, kv_heads, kv_bytes_per_token)
        )
    )
    out = [
        decode_attention_scalar_us(b, n, h, kv, per, spec, coeffs, l2_warm=l2_warm)
        for b, n, h, kv, per in zip(*(a.ravel().tolist() for a in args))
    ]
    return np.asarray(out, dtype=np.float64).reshape(args[0].shape)


def prefill_attention_us(
    computed: np.ndarray,
    new: np.ndarray,
    heads: int | np.ndarray,
    kv_heads: int | np.ndarray,
    head_dim: int | np.ndarray,
    kv_dtype_bytes: float,
    spec: DeviceSpec,
    coeffs: KernelCoefficients,
) -> np.ndarray:
    """One layer's causal attention of prompt chunks (``new`` tokens after ``computed``
    cached ones), each chunk's time (add ``t0`` once per layer)."""
    c = coeffs.prefill
    cached = np.asarray(computed, dtype=np.float64)
    n = np.maximum(np.asarray(new, dtype=np.float64), 1.0)
    flops = 4.0 * heads * head_dim * (n * cached + n * (n + 1) / 2)
    eff = c["ef"] * n / (n + c["n_half"])
    nbytes = (n * (2 * heads + 2 * kv_heads) + cached * 2 * kv_heads) * head_dim * kv_dtype_bytes
    compute = flops / (spec.peak_flops * eff)
    memory = nbytes / (spec.bandwidth_bytes_per_s * c["eb"])
    return np.maximum(compute, memory) * 1e6


def allreduce_us(
    message_bytes: np.ndarray,
    tensor_parallel_size: int,
    spec: DeviceSpec,
    coeffs: KernelCoefficients,
) -> np.ndarray:
    """One all-reduce of ``message_bytes`` over ``tensor_parallel_size`` GPUs (0 at TP 1)."""
    tp = int(tensor_parallel_size)
    message = np.asarray(message_bytes, dtype=np.float64)
    if tp <= 1:
        return np.zeros_like(message)
    c = coeffs.allreduce
    # the fitted TP sizes are 2, 4 and 8; another size takes the nearest one's latency
    fitted = min((2, 4, 8), key=lambda k: abs(np.log2(k / tp)))
    t0 = c[f"t0_us_tp{fitted}"]
    link = spec.link_bytes_per_s if spec.link_bytes_per_s > 0 else _PCIE4_BYTES_PER_S
    return t0 + 2 * (tp - 1) / tp * message / (link * c["eff"]) * 1e6
