"""Kernel profiles of a model step, counted on fake tensors: what the device model times.

:func:`profile_step` runs a model once on fake (or meta) tensors under a
``TorchDispatchMode`` and records each aten op that launches a kernel, in order: its
FLOPs (matmuls, attention), the bytes it reads and writes (from tensor sizes; gathers read
only their rows), whether it works in 16 bits, and whether it is a splitting op (attention,
eager in piecewise modes). Views, metadata and allocation-only ops launch nothing and are
skipped. It counts; it does not time (see :mod:`cgdispatch.estimate.device_model`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..core.config import DEFAULT_SPLITTING_OPS
from .fake import fake_mode_for, is_splitting_op, tensors_in
from .profiles import LinearProfile, StepProfile

__all__ = ["StepProfile", "LinearProfile", "profile_step", "toy_profiles", "linear_profile"]

_SKIP = {
    "aten::empty",
    "aten::empty_like",
    "aten::empty_strided",
    "aten::new_empty",
    "aten::detach",
    "aten::alias",
    "aten::lift_fresh",
    "aten::_local_scalar_dense",
}
_GATHER = {"aten::embedding", "aten::index", "aten::index_select", "aten::gather"}
_HALF = (torch.float16, torch.bfloat16)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _matmul_flops(func_name: str, args: tuple[Any, ...], out: Any) -> float:
    if func_name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"):
        a = args[1] if func_name in ("aten::addmm", "aten::baddbmm") else args[0]
        return 2.0 * out.numel() * a.shape[-1]  # 2 * M * N * K (per batch)
    if func_name.startswith("aten::_scaled_dot_product"):
        q, k = args[0], args[1]  # [..., Lq, D], [..., Lk, D]
        return 4.0 * q.numel() * k.shape[-2]
    return 0.0


def _attention_cost(args: tuple[Any, ...], context_len: int | None) -> tuple[float, float]:
    """(flops, bytes) of the toy paged-attention op: each token reads its context's K/V.

    q [T, H, D], k/v [T, Hkv, D], kv_cache [2, slots, L, Hkv, D]; ``context_len``
    defaults to L (the worst case).
    """
    q, k, cache = args[0], args[1], args[3]
    tokens, heads, head_dim = q.shape
    ctx = cache.shape[2] if context_len is None else context_len
    kv_bytes = 2 * tokens * ctx * k.shape[1] * head_dim * cache.element_size()
    return 4.0 * tokens * heads * head_dim * ctx, float(kv_bytes + 2 * _nbytes(q) + 2 * _nbytes(k))


class _KernelCounter(TorchDispatchMode):
    def __init__(self, splitting_ops: Sequence[str], context_len: int | None) -> None:
        super().__init__()
        self.splitting_ops, self.context_len = splitting_ops, context_len
        self.rows: list[tuple[str, float, float, bool, bool]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        name = func.name().split(".")[0]
        if func.is_view or name in _SKIP or name.startswith("prim::"):
            return out
        inputs = tensors_in(list(args) + list((kwargs or {}).values()))
        outs = [
            t
            for i, t in enumerate(tensors_in(out))
            if i >= len(func._schema.returns) or func._schema.returns[i].alias_info is None
        ]
        if not inputs and not outs:
            return out
        split = is_splitting_op(func, self.splitting_ops)
        if split and name.startswith("cgdispatch::attention"):
            flops, nbytes = _attention_cost(args, self.context_len)
        elif name in _GATHER:  # reads the gathered rows, not the whole table
            flops = 0.0
            nbytes = float(2 * sum(map(_nbytes, outs)) + sum(map(_nbytes, inputs[1:])))
        else:
            flops = _matmul_flops(name, args, out)
            nbytes = float(sum(map(_nbytes, inputs)) + sum(map(_nbytes, outs)))
        half = any(t.dtype in _HALF for t in inputs + outs)
        self.rows.append((name, flops, nbytes, half, split))
        return out


def profile_step(
    model: Callable[..., Any],
    args: tuple[Any, ...] | Callable[[], tuple[Any, ...]],
    *,
    splitting_ops: Sequence[str] = DEFAULT_SPLITTING_OPS,
    context_len: int | None = None,
) -> StepProfile:
    """Count the kernels of ``model(*args)`` on fake tensors (no real compute or memory).

    A model on the ``meta`` device runs on meta tensors directly, others under
    ``FakeTensorMode``.
    ``args`` may be a function building them (called under the fake mode). The first
    tensor argument's first dimension is taken as ``num_tokens``.
    """
    return _profile_step(model, args, tuple(splitting_ops), context_len, ())[0]


def _profile_step(
    model: Callable[..., Any],
    args: tuple[Any, ...] | Callable[[], tuple[Any, ...]],
    splitting_ops: tuple[str, ...],
    context_len: int | None,
    marks: Sequence[torch.nn.Module],
) -> tuple[StepProfile, tuple[tuple[int, int], ...]]:
    """:func:`profile_step`, and the ``[start, end)`` rows each module in ``marks`` launched
    (its first call's; forward hooks read the row count, they change no kernel)."""
    counter = _KernelCounter(splitting_ops, context_len)
    spans: dict[int, list[int]] = {}

    def before(module: torch.nn.Module, *_: Any) -> None:
        spans.setdefault(id(module), [len(counter.rows)])

    def after(module: torch.nn.Module, *_: Any) -> None:
        if len(spans[id(module)]) == 1:
            spans[id(module)].append(len(counter.rows))

    handles = [m.register_forward_pre_hook(before) for m in marks]
    handles += [m.register_forward_hook(after) for m in marks]
    try:
        with torch.no_grad(), fake_mode_for(model):
            real_args = args() if callable(args) else args
            with counter:
                model(*real_args)
    finally:
        for handle in handles:
            handle.remove()
    first = next((a for a in real_args if isinstance(a, torch.Tensor)), None)
    rows = counter.rows
    profile = StepProfile(
        num_tokens=int(first.shape[0]) if first is not None and first.dim() else 0,
        names=tuple(r[0] for r in rows),
        flops=np.array([r[1] for r in rows], dtype=float),
        bytes=np.array([r[2] for r in rows], dtype=float),
        half=np.array([r[3] for r in rows], dtype=bool),
        splitting=np.array([r[4] for r in rows], dtype=bool),
    )
    return profile, tuple((spans[id(m)][0], spans[id(m)][-1]) for m in marks)


def toy_profiles(
    model: Any,
    sizes: Sequence[int],
    *,
    uniform: bool = False,
    q: int = 1,
    context_len: int | None = None,
) -> dict[int, StepProfile]:
    """Kernel profiles of a toy LM's dummy step at each size (build it with ``device="meta"``).

    Feed them to :func:`predict_frame` for eager vs FULL vs PIECEWISE step times at any size,
    or to :func:`calibrate` with measured sweep rows.
    """
    from ..core.batch import BatchDescriptor
    from .fake import toy_inputs

    return {
        int(n): profile_step(
            model,
            lambda n=n: toy_inputs(model, BatchDescriptor(int(n), None, uniform), q),
            context_len=context_len,
        )
        for n in sizes
    }


def linear_profile(
    model: Any, *, anchors: tuple[int, int] = (64, 128), context_len: int | None = None
) -> LinearProfile:
    """Profile a toy-input model (toy LM, architecture presets) at two sizes; see
    :class:`LinearProfile`. Raises ValueError when the kernel lists differ between them."""
    return _linear_profile(model, anchors, context_len, ())[0]


def _linear_profile(
    model: Any,
    anchors: tuple[int, int],
    context_len: int | None,
    marks: Sequence[torch.nn.Module],
) -> tuple[LinearProfile, tuple[tuple[int, int], ...]]:
    """:func:`linear_profile`, and the ``[start, end)`` kernels each module in ``marks``
    launched (equal at both anchors, else ValueError)."""
    from ..core.batch import BatchDescriptor
    from .fake import toy_inputs

    lo, hi = sorted(int(a) for a in anchors)
    if lo < 1 or lo == hi:
        raise ValueError(f"anchors={anchors} are invalid: give two different sizes >= 1")
    runs = [
        _profile_step(
            model,
            lambda n=n: toy_inputs(model, BatchDescriptor(n, None, False), 1),
            DEFAULT_SPLITTING_OPS,
            context_len,
            marks,
        )
        for n in (lo, hi)
    ]
    (a, spans), (b, spans_hi) = runs
    if a.names != b.names or not np.array_equal(a.splitting, b.splitting) or spans != spans_hi:
        raise ValueError(
            f"the kernels at {lo} and {hi} tokens differ: this model's step is not affine in "
            "num_tokens; profile each size with toy_profiles instead"
        )
    flops_slope = (b.flops - a.flops) / (hi - lo)
    bytes_slope = (b.bytes - a.bytes) / (hi - lo)
    profile = LinearProfile(
        a.names,
        a.half,
        a.splitting,
        a.flops - lo * flops_slope,
        flops_slope,
        a.bytes - lo * bytes_slope,
        bytes_slope,
    )
    return profile, spans
