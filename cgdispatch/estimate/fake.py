"""Running a model on fake tensors: the shared ground of the memory estimate and the kernel
profiles. Picks the fake mode for a model (meta tensors directly, else ``FakeTensorMode``),
builds a toy LM's dummy step, and recognises splitting ops and tensors in op results.
It runs nothing itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ..capture.context import get_forward_context
from ..capture.graph_key import GraphKey
from ..capture.pool import AllocationTracker, OutputLifetime, tensors_in
from ..core.config import GraphConfig
from ..core.modes import CUDAGraphMode

__all__ = ["fake_mode_for", "toy_inputs", "is_splitting_op", "tensors_in", "split_step"]


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


def toy_inputs(model: Any, desc: GraphKey, q: int = 1) -> tuple[torch.Tensor, ...]:
    """``(input_ids, positions, slots)`` of a dummy step for the toy LM, on its device.

    Every token writes the padding slot (as the runner's capture does); positions are
    ``arange % q`` for uniform keys and 0 otherwise. ``q`` is a V1 key's query length (the
    config's ``1 + num_speculative_tokens``); a generation-2 key carries its own
    (``uniform_token_count``), as ``capture/graph_key.uniform_query_len`` reads it.
    """
    n, dev = desc.num_tokens, getattr(model, "device", "cpu")
    q = desc.query_len(q) or 1
    ids = torch.randint(0, model.config.vocab_size, (n,), device=dev)
    positions = torch.arange(n, device=dev) % q
    slots = torch.full((n,), model.dummy_slot, dtype=torch.long, device=dev)
    return ids, positions, slots


class _PieceRegion:
    """One graph piece as a capture region of the tracker's ledgers, in PIECEWISE steps only.

    What a PIECEWISE ``CUDAGraphWrapper`` does to the CPU stand-in's ledger, without the
    graph: the last piece's outputs are the step's (``last_lifetimes``, one per ledger),
    the others stay while the split graph holds them (CALLER).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        index: int,
        last: bool,
        tracker: AllocationTracker,
        last_lifetimes: Sequence[OutputLifetime],
    ) -> None:
        self.fn, self.index, self.tracker = fn, index, tracker
        self.lifetimes = tuple(last_lifetimes) if last else (OutputLifetime.CALLER,)

    def __call__(self, *args: Any) -> Any:
        ctx = get_forward_context()
        if ctx is None or ctx.runtime_mode is not CUDAGraphMode.PIECEWISE:
            return self.fn(*args)
        self.tracker.begin((ctx.batch_descriptor, self.index))
        try:
            return self.fn(*args)
        finally:
            self.tracker.end(*self.lifetimes)


def split_step(
    model: Callable[..., Any],
    config: GraphConfig,
    max_num_tokens: int,
    tracker: AllocationTracker,
    last_lifetimes: Sequence[OutputLifetime],
    example: tuple[torch.Tensor, ...],
) -> Callable[..., Any]:
    """``model`` compiled and split as the runner compiles it, pieces marked as regions.

    The estimate runs this for piecewise modes, so that values live exactly as long as on
    the capture path (dynamo's split graph frees each one after its last use; the eager
    model holds its locals longer). ``example`` inputs compile it once, outside the
    tracker. Needs a model on ``meta`` (no FakeTensorMode around dynamo).
    """
    from ..capture.split_compile import compile_split

    def wrap(fn: Callable[..., Any], index: int, last: bool) -> _PieceRegion:
        return _PieceRegion(fn, index, last, tracker, last_lifetimes)

    step, _ = compile_split(model, config.effective_splitting_ops, max(max_num_tokens, 1), wrap)
    step(*example)  # the compile, outside any region: no forward context, pieces run plain
    return step
