"""An analytic device model of step latency per (mode, size), with no GPU needed.

Kernels are counted from the model's aten operators on fake tensors
(:mod:`cgdispatch.kernels`; re-exported here). Each kernel's device time is
``max(flops / (peak_flops * flop_efficiency), bytes / (bandwidth * bw_efficiency),
kernel_min_us)``. The host issues work in order and the device runs it in order:

- eager (NONE): every kernel costs ``kernel_launch_us`` of host time;
- FULL: one graph replay (``graph_launch_us``) runs every kernel;
- PIECEWISE: one replay per piece between splitting ops; the splitting ops (attention)
  run eagerly and pay a launch each.

A step takes ``max_j(host time when item j is issued + device time of items j..end)``
plus ``step_overhead_us`` of host work common to every mode. Every number this model
produces is labelled ``model (<device>)``; it is not a measurement. Device presets come
from datasheets (shared/references.md); the launch costs and efficiencies are assumptions
to be fitted with :func:`calibrate` on measured sweep rows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .kernels import StepProfile, profile_step, toy_profiles
from .modes import CUDAGraphMode

__all__ = [
    "DeviceSpec",
    "DEVICE_PRESETS",
    "StepProfile",
    "profile_step",
    "predict_step",
    "predict_frame",
    "calibrate",
    "toy_profiles",
    "calibrate_rows",
    "predict_config",
]


@dataclass(frozen=True)
class DeviceSpec:
    """Peak rates of a device and the host costs of launching work on it. All overridable."""

    name: str
    peak_flops: float  # dense bf16/fp16 tensor-core FLOP/s
    peak_fp32_flops: float  # dense fp32 FLOP/s (kernels with no 16-bit operand)
    bandwidth_bytes_per_s: float  # HBM bandwidth
    flop_efficiency: float = 0.6  # assumed share of peak a GEMM reaches
    bw_efficiency: float = 0.75  # assumed share of peak bandwidth a kernel reaches
    kernel_launch_us: float = 10.0  # host cost per eager launch: 5-20 us (references.md)
    graph_launch_us: float = 10.0  # host cost per graph replay (assumption)
    kernel_min_us: float = 1.5  # floor of one kernel on the device (80 kernels in 70 us replay)
    step_overhead_us: float = 20.0  # host work per step in every mode (input copies, dispatch)

    def replace(self, **changes: Any) -> DeviceSpec:
        return dataclasses.replace(self, **changes)


# Datasheet figures as quoted in shared/references.md (NVIDIA H100/H200/A100 datasheets);
# fp32 (non-tensor) rates: H100/H200 SXM 67 TFLOP/s, A100 19.5 TFLOP/s.
DEVICE_PRESETS: dict[str, DeviceSpec] = {
    "H100": DeviceSpec("H100 SXM", 989e12, 67e12, 3.35e12),
    "H200": DeviceSpec("H200 SXM", 989e12, 67e12, 4.8e12),
    "A100": DeviceSpec("A100 SXM 80GB", 312e12, 19.5e12, 2.0e12),
}


def _kernel_us(p: StepProfile, spec: DeviceSpec) -> np.ndarray:
    peak = np.where(p.half, spec.peak_flops, spec.peak_fp32_flops) * spec.flop_efficiency
    compute = p.flops / peak
    memory = p.bytes / (spec.bandwidth_bytes_per_s * spec.bw_efficiency)
    return np.maximum(np.maximum(compute, memory) * 1e6, spec.kernel_min_us)


def predict_step(
    profile: StepProfile, runtime_mode: CUDAGraphMode | str, spec: DeviceSpec
) -> dict[str, float]:
    """``step_ms``, ``host_ms`` and ``device_ms`` of one step in a runtime mode (model)."""
    mode = CUDAGraphMode.parse(runtime_mode)
    if not mode.is_valid_runtime_mode():
        raise ValueError(f"runtime_mode={mode} is invalid: predict NONE, PIECEWISE or FULL steps")
    dev = _kernel_us(profile, spec)
    n = len(dev)
    if mode is CUDAGraphMode.NONE or n == 0:
        host_items, dev_items = np.full(n, spec.kernel_launch_us), dev
    elif mode is CUDAGraphMode.FULL:
        host_items, dev_items = np.array([spec.graph_launch_us]), np.array([dev.sum()])
    else:  # PIECEWISE: group runs of non-splitting kernels into one replay each
        split = profile.splitting
        piece_id = np.cumsum(split | np.r_[True, split[:-1]])  # new item at/after each split
        items = np.unique(piece_id)
        dev_items = np.array([dev[piece_id == i].sum() for i in items])
        host_items = np.array(
            [
                spec.kernel_launch_us if split[piece_id == i][0] else spec.graph_launch_us
                for i in items
            ]
        )
    issued = spec.step_overhead_us + np.cumsum(host_items)  # host clock after issuing item j
    tail = np.cumsum(dev_items[::-1])[::-1]  # device time of items j..end
    step_us = float(np.max(issued + tail)) if len(tail) else spec.step_overhead_us
    return {
        "step_ms": step_us / 1e3,
        "host_ms": float(issued[-1]) / 1e3 if len(issued) else 0.0,
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


_FIT = ("kernel_launch_us", "graph_launch_us", "flop_efficiency", "bw_efficiency", "kernel_min_us")


def calibrate(
    measurements: pd.DataFrame,
    profiles: Mapping[int, StepProfile],
    spec: DeviceSpec,
    *,
    fit: Sequence[str] = _FIT,
    rounds: int = 60,
) -> DeviceSpec:
    """Fit launch costs and efficiencies to measured rows; returns a new spec.

    ``measurements`` has ``runtime_mode``, ``num_tokens``, ``padded_size``, ``eager_ms``
    and ``graph_ms`` columns (sweep rows with ``status == "ok"``); ``profiles`` maps each
    num_tokens / padded size to its kernel profile. Minimises the squared log error of
    both times by coordinate search in log space (no SciPy needed).
    """
    need = {"runtime_mode", "num_tokens", "padded_size", "eager_ms", "graph_ms"}
    missing = need - set(measurements.columns)
    if missing:
        raise ValueError(
            f"measurements lack columns {sorted(missing)}: pass sweep rows from run_sweep"
        )
    unknown = [f for f in fit if f not in _FIT]
    if unknown:
        raise ValueError(f"fit={unknown} is invalid: fit a subset of {list(_FIT)}")
    rows = measurements.dropna(subset=["eager_ms", "graph_ms"])
    cases = []
    for r in rows.itertuples():
        for size, mode, ms in (
            (r.num_tokens, "NONE", r.eager_ms),
            (r.padded_size, r.runtime_mode, r.graph_ms),
        ):
            if int(size) not in profiles:
                raise ValueError(f"no profile for {int(size)} tokens: add it to profiles")
            cases.append((profiles[int(size)], mode, math.log(ms)))
    if not cases:
        raise ValueError("measurements have no row with eager_ms and graph_ms: nothing to fit")

    def loss(s: DeviceSpec) -> float:
        return sum((math.log(predict_step(p, m, s)["step_ms"]) - y) ** 2 for p, m, y in cases)

    best, best_loss, step = spec, loss(spec), 1.0
    for _ in range(rounds):
        improved = False
        for name in fit:
            for factor in (math.exp(step), math.exp(-step)):
                value = getattr(best, name) * factor
                if name.endswith("efficiency"):
                    value = min(value, 1.0)
                trial = best.replace(**{name: value})
                trial_loss = loss(trial)
                if trial_loss < best_loss:
                    best, best_loss, improved = trial, trial_loss, True
        if not improved:
            step /= 2
            if step < 1e-3:
                break
    return best.replace(name=f"{spec.name} (calibrated)")


def calibrate_rows(rows: pd.DataFrame, spec: DeviceSpec, **kwargs: Any) -> DeviceSpec:
    """:func:`calibrate` on sweep rows of one toy-model preset (``status == "ok"``), with
    kernel profiles built on meta tensors at every num_tokens and padded size."""
    from .models.toy import build_toy_model

    ok = rows[rows["status"] == "ok"].dropna(subset=["eager_ms", "graph_ms"])
    presets = ok[["model", "dtype"]].drop_duplicates()
    if len(presets) != 1:
        raise ValueError(
            f"rows hold {len(presets)} (model, dtype) pairs with ok timings: calibrate on the "
            "rows of one model and dtype (filter the frame first)"
        )
    name, dtype = presets.iloc[0]
    model = build_toy_model(name, device="meta", dtype=dtype)
    sizes = sorted({int(n) for n in ok["num_tokens"]} | {int(n) for n in ok["padded_size"]})
    return calibrate(ok, toy_profiles(model, sizes), spec, **kwargs)


def predict_config(
    model: Any,
    config: Any,
    num_tokens: Sequence[int],
    spec: DeviceSpec,
    *,
    uniform_decode: bool = False,
) -> pd.DataFrame:
    """Modelled step time of a toy LM under a :class:`~cgdispatch.config.GraphConfig`: each
    batch is dispatched (runtime mode, padding) as the runner would, then timed by the model.

    Columns: num_tokens, runtime_mode, padded_size, eager_ms, graph_ms, speedup_x, source.
    """
    from .dispatcher import CudagraphDispatcher

    config = config.resolve(model.attention_cg_support)
    dispatcher = CudagraphDispatcher(config, record_stats=False)
    dispatcher.initialize_cudagraph_keys()
    plan = [(int(n), *dispatcher.dispatch(int(n), uniform_decode)) for n in num_tokens]
    q = config.uniform_decode_query_len if uniform_decode else 1
    sizes = {n for n, _, _ in plan} | {d.num_tokens for _, _, d in plan}
    profiles = toy_profiles(model, sorted(sizes), uniform=uniform_decode, q=q)
    rows = []
    for n, mode, desc in plan:
        eager = predict_step(profiles[n], "NONE", spec)["step_ms"]
        graph = predict_step(profiles[desc.num_tokens], mode, spec)["step_ms"]
        rows.append(
            {
                "num_tokens": n,
                "runtime_mode": str(mode),
                "padded_size": desc.num_tokens,
                "eager_ms": eager,
                "graph_ms": graph,
                "speedup_x": eager / graph,
                "source": f"model ({spec.name})",
            }
        )
    return pd.DataFrame(rows)
