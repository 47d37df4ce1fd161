"""Graph outputs: weak references, and the CPU stand-in's shared arena for weak outputs.

A weak reference (vLLM's ``weak_ref_tensors``) is a tensor on a storage that points at the
same memory but does not own it: when the last owning tensor goes, the memory goes back to
the pool while the weak tensor still reads and writes it. That is safe only inside a pool
that keeps its memory: on CUDA the graph pool, on the CPU stand-in the :class:`OutputArena`
(never the CPU allocator's heap, which would hand the memory to anything).

This module moves no data between steps and decides no lifetimes (see ``pool.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..core.arith import round_up

__all__ = ["map_tensors", "copy_into", "alias_tensors", "OutputArena"]

ALIGN_BYTES = 512  # arena offsets: a CUDA block's alignment, and a multiple of every itemsize


def map_tensors(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``value`` with every tensor replaced by ``fn(tensor)`` (tuples, lists, dict values)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (tuple, list)):
        return type(value)(map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    return value


def copy_into(kept: Any, new: Any) -> None:
    """Copy every tensor of ``new`` into the tensor at the same place in ``kept``."""
    if isinstance(kept, torch.Tensor):
        if kept is not new:
            kept.copy_(new)
    elif isinstance(kept, (tuple, list)):
        for k, n in zip(kept, new):
            copy_into(k, n)
    elif isinstance(kept, dict):
        for key, k in kept.items():
            copy_into(k, new[key])


def _on_storage(storage: torch.UntypedStorage, t: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(
        storage, t.storage_offset(), t.shape, t.stride()
    )


def alias_tensors(
    value: Any, which: Callable[[torch.Tensor], bool] | None = None
) -> tuple[Any, dict[int, torch.UntypedStorage]]:
    """Non-owning aliases of the tensors in ``value`` (vLLM's ``weak_ref_tensors``).

    Tensors that share a storage share one alias storage, so that the alias storage lives
    exactly as long as some alias of the block does. Returns the aliased value and
    ``{data_ptr: alias storage}``. Empty tensors, and those ``which`` rejects, are
    returned as they are.
    """
    storages: dict[int, torch.UntypedStorage] = {}

    def alias(t: torch.Tensor) -> torch.Tensor:
        owner = t.untyped_storage()
        if owner.nbytes() == 0 or (which is not None and not which(t)):
            return t
        ptr = owner.data_ptr()
        weak = storages.get(ptr)
        if weak is None:
            weak = storages[ptr] = torch._C._construct_storage_from_data_pointer(
                ptr, t.device, owner.nbytes()
            )
        return _on_storage(weak, t)

    return map_tensors(value, alias), storages


class OutputArena:
    """The CPU stand-in's memory for weak outputs: one block that every weak graph shares.

    Each weak graph's outputs are laid out from offset 0 of the same buffer, so the replay
    (or capture) of any weak graph of the pool overwrites the outputs of every other one:
    on a GPU a freed output block *may* be reused by the next graph; here it always is, so
    that a caller who holds a result too long sees wrong numbers on the CPU too. The buffer
    grows to the largest weak output; a growth moves every bound graph to the new buffer.
    """

    def __init__(self) -> None:
        self.buffer: torch.Tensor | None = None  # uint8 [capacity]
        self._bound: list[Any] = []  # the graphs whose ``output`` lives here

    @property
    def nbytes(self) -> int:
        return 0 if self.buffer is None else self.buffer.numel()

    def bind(self, graph: Any, result: Any) -> Any:
        """Outputs for ``graph`` in the arena, holding ``result``'s values; kept in ``graph.output``."""
        need = _layout_bytes(result)
        if self.buffer is None or need > self.nbytes:
            self._grow(need, next(iter(_tensors(result)), None))
        graph.output = self._views(result)
        copy_into(graph.output, result)
        self._bound.append(graph)
        return graph.output

    def release(self) -> None:
        """Drop the buffer and forget the bound graphs (their outputs keep the old memory)."""
        self.buffer = None
        self._bound.clear()

    def _grow(self, need: int, example: torch.Tensor | None) -> None:
        device = example.device if example is not None else torch.device("cpu")
        self.buffer = torch.empty(need, dtype=torch.uint8, device=device)
        for graph in self._bound:  # rebind: every weak graph keeps sharing one block
            old = graph.output
            graph.output = self._views(old)
            copy_into(graph.output, old)

    def _views(self, like: Any) -> Any:
        assert self.buffer is not None
        storage, offset = self.buffer.untyped_storage(), [0]

        def view(t: torch.Tensor) -> torch.Tensor:
            start = offset[0]
            offset[0] += _aligned(t)
            # contiguous at an aligned offset: the byte offset is a multiple of the itemsize
            return torch.empty(0, dtype=t.dtype, device=t.device).set_(
                storage, start // t.element_size(), t.shape
            )

        return map_tensors(like, view)


def _aligned(t: torch.Tensor) -> int:
    return round_up(t.numel() * t.element_size(), ALIGN_BYTES)


def _tensors(value: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    map_tensors(value, found.append)
    return found


def _layout_bytes(value: Any) -> int:
    return sum(_aligned(t) for t in _tensors(value))
