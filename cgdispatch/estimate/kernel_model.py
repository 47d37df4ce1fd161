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
- decode attention of one layer (FlashAttention reading each request's KV cache):
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
    "decode_rates",
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
    decode: dict[str, float]  # eb, t0_us, per_head_req_us, per_req_us
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


def decode_rates(heads: float, spec: DeviceSpec, coeffs: KernelCoefficients) -> tuple[float, float]:
    """``(us per KV byte, us per request)`` of decode attention: the formula's two slopes
    (a replay prices each step with them in scalar arithmetic, :mod:`.step_cost`)."""
    c = coeffs.decode
    per_byte = 1e6 / (spec.bandwidth_bytes_per_s * c["eb"])
    return per_byte, c["per_head_req_us"] * heads / 64.0 + c.get("per_req_us", 0.0)


def decode_attention_us(
    kv_bytes: np.ndarray,
    num_decodes: np.ndarray,
    heads: int | np.ndarray,
    spec: DeviceSpec,
    coeffs: KernelCoefficients,
) -> np.ndarray:
    """One layer's decode attention: ``num_decodes`` requests reading ``kv_bytes`` of KV
    cache in all (zero when there are no decodes; the launch is the caller's)."""
    per_byte, per_request = decode_rates(heads, spec, coeffs)
    kv_bytes = np.asarray(kv_bytes, dtype=np.float64)
    n = np.asarray(num_decodes, dtype=np.float64)
    return np.where(n > 0, kv_bytes * per_byte + per_request * n, 0.0)


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
