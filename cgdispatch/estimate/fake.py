"""Running a model on fake tensors: the shared ground of the memory estimate and the kernel
profiles. Picks the fake mode for a model (meta tensors directly, else ``FakeTensorMode``),
builds a toy LM's dummy step, and recognises splitting ops and tensors in op results.
It runs nothing itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ..core.batch import BatchDescriptor

__all__ = ["fake_mode_for", "toy_inputs", "is_splitting_op", "tensors_in"]


def fake_mode_for(model: Any) -> Any:
    """No mode for a model on ``meta`` (meta tensors are already fake), else FakeTensorMode."""
    params = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
    if params and all(p.device.type == "meta" for p in params):
        return contextlib.nullcontext()
    return FakeTensorMode(allow_non_fake_inputs=True)


def is_splitting_op(func: Any, splitting_ops: Sequence[str]) -> bool:
    """Whether an aten/custom op overload is one of ``splitting_ops`` (``"ns::name"``).

    ``aten::scaled_dot_product_attention`` also matches the backend-specific variants it
    decomposes into below autograd (``aten::_scaled_dot_product_*``).
    """
    name = func.name().split(".")[0]  # "aten::addmm.default" -> "aten::addmm"
    if name in splitting_ops:
        return True
    return "aten::scaled_dot_product_attention" in splitting_ops and name.startswith(
        "aten::_scaled_dot_product"
    )


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors of an op's arguments or results (nested tuples and lists)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_in(v)]
    return []


def toy_inputs(model: Any, desc: BatchDescriptor, q: int = 1) -> tuple[torch.Tensor, ...]:
    """``(input_ids, positions, slots)`` of a dummy step for the toy LM, on its device.

    Every token writes the padding slot (as the runner's capture does); positions are
    ``arange % q`` for uniform keys and 0 otherwise.
    """
    n, dev = desc.num_tokens, getattr(model, "device", "cpu")
    q = q if desc.uniform else 1
    ids = torch.randint(0, model.config.vocab_size, (n,), device=dev)
    positions = torch.arange(n, device=dev) % q
    slots = torch.full((n,), model.dummy_slot, dtype=torch.long, device=dev)
    return ids, positions, slots
