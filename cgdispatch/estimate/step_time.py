"""Step time by mode: how the host issues a step's kernels and how the device runs them.

One formula for every mode, timed from a kernel list (:mod:`cgdispatch.estimate.kernels`):

- **NONE** (eager): every kernel is launched from the host (``kernel_launch_us`` of host
  time each) and the device idles ``kernel_gap_us`` before each one, so a step is
  host-bound when launching takes longer than the device work;
- **FULL**: one graph launch (``graph_launch_us`` of host time) runs every kernel back to
  back; the device pays ``piece_overhead_us`` once for the graph launch;
- **PIECEWISE**: one graph launch per piece between splitting ops (``piece_overhead_us``
  on the device each) and the splitting ops (attention) launched eagerly between them, as
  in NONE;
- **FULL_DECODE_ONLY** and **FULL_AND_PIECEWISE** are not runtime modes: the dispatcher
  (:mod:`cgdispatch.core.generation`, asked in :func:`routed_modes`) says which of the three a
  step of each size and batch kind gets, and that mode is timed.

Each issued item ``j`` has a host cost ``h_j``, a device gap ``g_j`` and device work
``D_j``; the device starts an item when it has been issued and the previous one is done,
so the step ends at ``max_j(issued_j + sum_{i>=j} (g_i + D_i))`` with
``issued_j = step_overhead_us + h_1 + ... + h_j``. It times; it does not count kernels
(:mod:`~cgdispatch.estimate.kernels`) or fit constants
(the ``DeviceSpec`` constants, compared with published step times in docs/calibration.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..core import cache
from ..core.modes import CUDAGraphMode
from .profiles import LinearProfile

if TYPE_CHECKING:
    from .devices import DeviceSpec

__all__ = [
    "TIMING_FIELDS",
    "kernel_times_us",
    "issue_items",
    "step_us",
    "fuse_pointwise",
    "routed_modes",
    "step_times_by_mode",
]

# the DeviceSpec fields this module's formula reads besides peak rates (fitted ones first)
TIMING_FIELDS = ("kernel_launch_us", "kernel_gap_us", "piece_overhead_us", "step_overhead_us")
# ops that stay their own kernel when neighbouring pointwise ops are fused (fuse_pointwise)
_UNFUSED_PREFIXES = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::_scaled_dot_product",
    "aten::embedding",
    "aten::index",
    "aten::gather",
    "aten::clone",  # the architectures' stand-in for a TP all-reduce: a collective kernel
)


def kernel_times_us(
    flops: np.ndarray, nbytes: np.ndarray, half: np.ndarray, spec: DeviceSpec
) -> np.ndarray:
    """Each kernel's device time: roofline ``max(compute, memory)``, floored at ``kernel_min_us``."""
    peak = np.where(half, spec.peak_flops, spec.peak_fp32_flops) * spec.flop_efficiency
    compute = flops / peak
    memory = nbytes / (spec.bandwidth_bytes_per_s * spec.bw_efficiency)
    return np.maximum(np.maximum(compute, memory) * 1e6, spec.kernel_min_us)


def _runtime_mode(mode: CUDAGraphMode | str) -> CUDAGraphMode:
    mode = CUDAGraphMode.parse(mode)
    if not mode.is_valid_runtime_mode():
        raise ValueError(
            f"runtime_mode={mode} is invalid: predict NONE, PIECEWISE or FULL steps (route "
            "FULL_DECODE_ONLY and FULL_AND_PIECEWISE with routed_modes or step_times_by_mode)"
        )
    return mode


def issue_items(
    splitting: np.ndarray, mode: CUDAGraphMode | str, spec: DeviceSpec
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(starts, host_us, gap_us)`` of the items the host issues in a runtime mode.

    ``starts``: index of each item's first kernel (an item runs kernels up to the next
    start); ``host_us``: host time to issue it; ``gap_us``: device idle time before it runs.
    """
    mode = _runtime_mode(mode)
    n = len(splitting)
    if n == 0:
        empty = np.zeros(0)
        return np.zeros(0, dtype=np.int64), empty, empty
    if mode is CUDAGraphMode.NONE:
        return (
            np.arange(n),
            np.full(n, spec.kernel_launch_us),
            np.full(n, spec.kernel_gap_us),
        )
    if mode is CUDAGraphMode.FULL:
        return (
            np.zeros(1, dtype=np.int64),
            np.array([spec.graph_launch_us]),
            np.array([spec.piece_overhead_us]),
        )
    split = np.asarray(splitting, dtype=bool)
    starts = np.flatnonzero(split | np.r_[True, split[:-1]])  # each split op, each piece
    eager = split[starts]
    host = np.where(eager, spec.kernel_launch_us, spec.graph_launch_us)
    gap = np.where(eager, spec.kernel_gap_us, spec.piece_overhead_us)
    return starts, host, gap


def step_us(
    kernel_us: np.ndarray, splitting: np.ndarray, mode: CUDAGraphMode | str, spec: DeviceSpec
) -> tuple[np.ndarray, float]:
    """``(step time per row, host time to issue the step)`` in microseconds.

    ``kernel_us``: ``[rows, kernels]`` device times (one row per batch size).
    """
    kernel_us = np.atleast_2d(np.asarray(kernel_us, dtype=np.float64))
    starts, host, gap = issue_items(splitting, mode, spec)
    if len(starts) == 0:
        return np.full(kernel_us.shape[0], spec.step_overhead_us), spec.step_overhead_us
    work = np.add.reduceat(kernel_us, starts, axis=1) + gap  # [rows, items]
    issued = spec.step_overhead_us + np.cumsum(host)  # host clock once item j is issued
    tail = np.cumsum(work[:, ::-1], axis=1)[:, ::-1]  # device time of items j..end
    return np.max(issued + tail, axis=1), float(issued[-1])


def fuse_pointwise(profile: LinearProfile, *, at_tokens: int = 1024) -> LinearProfile:
    """The kernels vLLM launches: each run of pointwise and reduction ops between matmuls,
    gathers, collectives and splitting ops fused into one kernel.

    vLLM's compiled graphs (Inductor) and its eager custom ops (fused RMSNorm, rotary,
    SiLU-and-mul) both run such a run as one kernel, so the aten-level count (about 43
    kernels per Llama layer) overstates launches about four-fold. A fused kernel moves the
    bytes of its largest member at ``at_tokens`` tokens (it reads its inputs and writes its
    output once) and does the members' FLOPs.
    """
    names = profile.names
    keep = np.array(
        [bool(s) or n.startswith(_UNFUSED_PREFIXES) for n, s in zip(names, profile.splitting)]
    )
    group = np.cumsum(keep | np.r_[True, keep[:-1]]) - 1  # a new kernel at/after each kept op
    count = int(group[-1]) + 1 if len(group) else 0
    size_at = profile.bytes_at_zero + at_tokens * profile.bytes_per_token
    rows = []
    for g in range(count):
        idx = np.flatnonzero(group == g)
        big = idx[np.argmax(size_at[idx])]
        name = names[idx[0]] if len(idx) == 1 else f"fused[{len(idx)}]"
        rows.append((name, idx, big))
    return LinearProfile(
        names=tuple(r[0] for r in rows),
        half=np.array([profile.half[r[1]].any() for r in rows], dtype=bool),
        splitting=np.array([profile.splitting[r[1]].any() for r in rows], dtype=bool),
        flops_at_zero=np.array([profile.flops_at_zero[r[1]].sum() for r in rows]),
        flops_per_token=np.array([profile.flops_per_token[r[1]].sum() for r in rows]),
        bytes_at_zero=np.array([profile.bytes_at_zero[r[2]] for r in rows]),
        bytes_per_token=np.array([profile.bytes_per_token[r[2]] for r in rows]),
    )


@cache.memo(maxsize=64)
def _routes(mode_name: str, sizes: tuple[int, ...], uniform_decode: bool) -> tuple[str, ...]:
    from ..core.config import GraphConfig
    from ..core.generation import dispatch_step, make_graph_dispatcher
    from ..core.v1 import RELEASE as V1_RELEASE

    top = max(sizes)
    config = GraphConfig(  # one token ladder: V1's sizes
        vllm_version=V1_RELEASE,
        cudagraph_mode=mode_name,
        cudagraph_capture_sizes=list(sizes),
        max_num_seqs=top,
        max_num_batched_tokens=top,
    ).resolve()
    dispatcher = make_graph_dispatcher(config, record_stats=False)
    return tuple(
        dispatch_step(dispatcher, n, None, uniform_decode).runtime_mode.name for n in sizes
    )


def routed_modes(
    mode: CUDAGraphMode | str, num_tokens: Sequence[int] | np.ndarray, uniform_decode: bool = True
) -> np.ndarray:
    """The runtime mode (NONE, PIECEWISE or FULL) a step of each size gets under ``mode``
    when every size is captured, as the dispatcher answers it (V1 rules).

    A runtime mode is its own answer; FULL_DECODE_ONLY and FULL_AND_PIECEWISE depend on
    the batch kind (``uniform_decode``). Returns an object array of ``CUDAGraphMode``.
    """
    mode = CUDAGraphMode.parse(mode)
    n = np.asarray(num_tokens, dtype=np.int64).reshape(-1)
    if n.size and n.min() < 1:
        raise ValueError(f"num_tokens={int(n.min())} is invalid: every size must be >= 1")
    out = np.empty(n.shape, dtype=object)
    if mode.is_valid_runtime_mode() or n.size == 0:
        out[:] = mode
        return out
    sizes = tuple(sorted({int(v) for v in n}))
    answer = dict(zip(sizes, _routes(mode.name, sizes, bool(uniform_decode))))
    out[:] = [CUDAGraphMode[answer[int(v)]] for v in n]
    return out


def step_times_by_mode(
    profile: LinearProfile,
    mode: CUDAGraphMode | str,
    num_tokens: np.ndarray,
    spec: DeviceSpec,
    *,
    uniform_decode: bool = True,
    chunk: int = 256,
    kernel_rows: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """Step time (ms) of each size in ``mode``, any of the five modes (routed per size by
    :func:`routed_modes`). Sizes are timed ``chunk`` at a time: a ``[sizes, kernels]``
    matrix of 8192 sizes and 3600 kernels would be 240 MB. ``kernel_rows(sizes)``: each
    kernel's device time (us) per size, ``[sizes, kernels]``; default the roofline of
    :func:`kernel_times_us` (what the start-up model's capture time was fitted with)."""
    n = np.asarray(num_tokens, dtype=np.int64)
    flat = n.reshape(-1)
    runtime = routed_modes(mode, flat, uniform_decode) if flat.size else np.empty(0, object)
    out = np.empty(flat.shape, dtype=np.float64)
    for rmode in dict.fromkeys(runtime.tolist()):
        sel = np.flatnonzero(runtime == rmode)
        for lo in range(0, len(sel), chunk):
            part = sel[lo : lo + chunk]
            if kernel_rows is None:
                flops, nbytes = profile.at(flat[part])
                dev = kernel_times_us(flops, nbytes, profile.half, spec)
            else:
                dev = kernel_rows(flat[part])
            out[part] = step_us(dev, profile.splitting, rmode, spec)[0] / 1e3
    return out.reshape(n.shape)
