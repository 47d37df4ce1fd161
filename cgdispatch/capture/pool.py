"""Graph-pool bookkeeping: which bytes a graph pool holds, from when, and until when.

A CUDA graph pool keeps every block allocated while one of its graphs is captured until
that block is freed; later captures into the pool reuse freed blocks. `PoolLedger` models
one pool with perfect block reuse (no fragmentation): the pool's size is the high-water
mark of the bytes it holds. `AllocationTracker` is the ``TorchDispatchMode`` that feeds a
ledger: it sees every allocation made by an aten op during a capture and, through a
finalizer on the storage, its free.

How long a graph's outputs hold their blocks is vLLM's rule (vLLM 0.33,
``vllm/compilation/cuda_graph.py`` and ``backends.py``; docs/graph_memory.md):

- ``WEAK``: released when the capture ends. vLLM turns the outputs of FULL graphs and of the
  last piecewise graph into weak references (``CUDAGraphOptions.weak_ref_output``), so the
  next, smaller graph reuses their blocks. A caller may read such an output until the next
  replay of any graph of the pool.
- ``CALLER``: held while the caller holds them, then released. The other piecewise graphs:
  the next piece reads their outputs, so vLLM returns them strongly during capture (the
  graph itself keeps only a weak reference).
- ``GRAPH``: held by the graph until it is released (cgdispatch's strong-output option).

The CPU stand-in (real tensors, the real capture path) and the graph-memory estimate (fake
tensors, the plain model) both feed a ledger, so comparing the two checks that the estimate
runs what the capture runs. Neither models fragmentation, cuBLAS workspaces or memory the
kernels allocate internally.
"""

from __future__ import annotations

import enum
import itertools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..core.arith import round_up

__all__ = [
    "OutputLifetime",
    "GraphMemory",
    "PoolLedger",
    "AllocationTracker",
    "BLOCK_BYTES",
    "round_up",
    "tensors_in",
]

BLOCK_BYTES = 512  # the CUDA caching allocator rounds every block to 512 B


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors of an op's arguments or results (nested tuples, lists and dict values)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


class OutputLifetime(enum.Enum):
    """How long a captured graph's outputs hold their pool blocks (see the module docstring)."""

    WEAK = "weak"
    CALLER = "caller"
    GRAPH = "graph"


@dataclass(frozen=True)
class GraphMemory:
    """What one capture did to its pool, in bytes (rounded to the ledger's block size)."""

    label: Any  # what the capture was called (a batch descriptor, a piece index)
    lifetime: OutputLifetime
    peak_bytes: int  # high-water mark of this capture's own live allocations
    output_bytes: int  # of those, what was still live when the capture ended
    pool_increment_bytes: int  # how much the pool grew during this capture


class PoolLedger:
    """One graph pool with perfect block reuse: bytes held now, high-water mark, per graph.

    ``begin(label)`` / ``allocate`` / ``free`` / ``end(lifetime)`` are called by an
    :class:`AllocationTracker`; frees of unknown or already released keys are ignored, so
    a finalizer may fire late. It holds no memory itself.
    """

    def __init__(self, round_bytes: int = BLOCK_BYTES) -> None:
        if isinstance(round_bytes, bool) or not isinstance(round_bytes, int) or round_bytes < 1:
            raise ValueError(
                f"round_bytes={round_bytes!r} is invalid: it must be an integer >= 1 (512 on CUDA)"
            )
        self.round_bytes = round_bytes
        self.held_bytes = 0  # blocks of finished captures that are still held
        self.pool_bytes = 0  # high-water mark of held + the open capture's live bytes
        self.graphs: list[GraphMemory] = []
        self._held: dict[int, int] = {}  # key -> bytes, held after their capture (CALLER)
        self._pinned: dict[int, int] = {}  # key -> bytes, held until release (GRAPH)
        self._open: dict[int, int] | None = None  # key -> bytes of the open capture
        self._open_live = self._open_peak = self._pool_before = 0
        self._label: Any = None

    @property
    def live_bytes(self) -> int:
        """Bytes the pool holds now (finished captures' blocks plus the open capture's)."""
        return self.held_bytes + self._open_live

    def begin(self, label: Any) -> None:
        if self._open is not None:
            raise RuntimeError(
                f"capture {label!r} began inside capture {self._label!r}: one pool captures one "
                "graph at a time; end the first capture before beginning the next"
            )
        self._open, self._label = {}, label
        self._open_live = self._open_peak = 0
        self._pool_before = self.pool_bytes

    def allocate(self, key: int, nbytes: int) -> None:
        if self._open is None:
            return  # outside a capture: not graph memory
        nbytes = round_up(nbytes, self.round_bytes)
        self._open[key] = nbytes
        self._open_live += nbytes
        self._open_peak = max(self._open_peak, self._open_live)
        self.pool_bytes = max(self.pool_bytes, self.held_bytes + self._open_live)

    def free(self, key: int) -> None:
        if self._open is not None and key in self._open:
            self._open_live -= self._open.pop(key)
        elif key in self._held:
            self.held_bytes -= self._held.pop(key)
        # pinned blocks stay until release(); unknown keys were released already

    def end(self, lifetime: OutputLifetime) -> GraphMemory:
        """Close the open capture; what is live now are its outputs, kept per ``lifetime``."""
        if self._open is None:
            raise RuntimeError("end() without begin(): no capture is open")
        outputs, self._open = self._open, None
        output_bytes, self._open_live = self._open_live, 0
        if lifetime is OutputLifetime.CALLER:
            self._held.update(outputs)
            self.held_bytes += output_bytes
        elif lifetime is OutputLifetime.GRAPH:
            self._pinned.update(outputs)
            self.held_bytes += output_bytes
        record = GraphMemory(
            self._label,
            lifetime,
            self._open_peak,
            output_bytes,
            self.pool_bytes - self._pool_before,
        )
        self.graphs.append(record)
        return record

    def release(self) -> None:
        """Forget every held block and graph record: the pool is empty again."""
        self._held.clear()
        self._pinned.clear()
        self._open = None
        self.held_bytes = self.pool_bytes = self._open_live = 0
        self.graphs.clear()


class AllocationTracker(TorchDispatchMode):
    """Feeds allocations and frees made by aten ops to one or more :class:`PoolLedger`.

    Only outputs that do not alias an input are allocations; a storage is freed when its
    last reference goes (CPython reference counting makes this exact and deterministic).
    Allocations outside ``begin``/``end`` are not counted. With ``split_at(func) -> bool``
    the open capture ends (``CALLER``) before each op it accepts, which then runs outside
    any capture, and a new one opens after it with label ``(label, piece + 1)``: the
    estimate's model of piecewise graphs split at attention.
    """

    def __init__(
        self,
        ledgers: Sequence[PoolLedger],
        split_at: Callable[[Any], bool] | None = None,
    ) -> None:
        super().__init__()
        self.ledgers = list(ledgers)
        self.split_at = split_at
        self._label: Any = None
        self._piece = 0
        self._keys: dict[int, int] = {}  # id(storage) -> key, while the storage lives
        self._next_key = itertools.count()

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # Lets a capture run a torch.compile'd model (FULL graphs around a piecewise
        # compile) under this mode: dynamo skips frames under modes that return False.
        # The split graph runs eagerly, so the mode still sees every op.
        return True

    def begin(self, label: Any) -> None:
        """Open a capture named ``label`` (``(label, 0)`` when splitting) in every ledger."""
        self._label, self._piece = label, 0
        for ledger in self.ledgers:
            ledger.begin(self._piece_label())

    def end(self, *lifetimes: OutputLifetime) -> list[GraphMemory]:
        """Close the open capture; ``lifetimes``: one per ledger, or one for all."""
        if len(lifetimes) == 1:
            lifetimes = lifetimes * len(self.ledgers)
        self._label = None
        return [ledger.end(lt) for ledger, lt in zip(self.ledgers, lifetimes)]

    def key_of(self, t: torch.Tensor) -> int | None:
        """The ledger key of ``t``'s storage, or None when no capture allocated it."""
        return self._keys.get(id(t.untyped_storage()))

    def follow(self, storage: torch.UntypedStorage, key: int) -> None:
        """Free ``key`` when ``storage`` dies too (an alias that stands for the block)."""
        weakref.finalize(storage, self._free, key, None)

    def _piece_label(self) -> Any:
        return (self._label, self._piece) if self.split_at is not None else self._label

    def _free(self, key: int, storage_id: int | None) -> None:
        if storage_id is not None:
            self._keys.pop(storage_id, None)
        for ledger in self.ledgers:
            ledger.free(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        splitting = self._label is not None and self.split_at is not None and self.split_at(func)
        if splitting:  # the splitting op runs eagerly, outside any graph
            for ledger in self.ledgers:
                ledger.end(OutputLifetime.CALLER)
        out = func(*args, **kwargs)
        if splitting:
            self._piece += 1
            for ledger in self.ledgers:
                ledger.begin(self._piece_label())
            return out
        if self._label is None:
            return out
        returns = func._schema.returns
        for i, t in enumerate(tensors_in(out)):
            if i < len(returns) and returns[i].alias_info is not None:
                continue  # a view or an in-place / out= result: no new memory
            storage = t.untyped_storage()
            if id(storage) in self._keys:
                continue
            key = next(self._next_key)
            self._keys[id(storage)] = key
            for ledger in self.ledgers:
                ledger.allocate(key, storage.nbytes())
            weakref.finalize(storage, self._free, key, id(storage))
        return out
