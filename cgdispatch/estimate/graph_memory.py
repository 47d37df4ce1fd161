"""Graph memory without a GPU: fake-tensor execution, allocation tracking and a pool model.

`estimate_graph_memory(model, config)` runs the model once per graph key on fake tensors
(shapes and dtypes only, no real memory, any device) under a ``TorchDispatchMode`` that
sees every allocation made by an aten op and, through a weakref finalizer on the storage,
every free. Per graph it records the high-water mark of its own live allocations
(``peak_bytes``: intermediates plus outputs at the worst moment) and what is still live
when the region ends (``output_bytes``: the graph's static outputs).

Pool model (documented assumptions, checked by tests against hand sizes):

- Each allocation is rounded up to ``round_bytes`` (512 B: the CUDA caching allocator's
  block granularity). Segment rounding (2 MiB segments for requests up to 1 MiB, 20 MiB
  segments or 2 MiB multiples above) is applied only to the totals, as
  ``*_segment_bytes``, since block packing inside segments depends on history.
- Separate pools: each graph keeps its own peak, so the total is the sum of peaks.
- One shared pool captured in the dispatcher's order (PIECEWISE keys, then FULL keys, each
  largest first), every freed block reused perfectly (no fragmentation). With
  ``keep_outputs=True`` (cgdispatch's backends hold each graph's outputs) those stay
  allocated, so the pool grows to ``max_i(sum of outputs of graphs before i + peak_i)``;
  with ``keep_outputs=False`` (vLLM keeps only weak references to graph outputs, so their
  blocks go back to the pool) it is ``max_i(peak_i)``.
- PIECEWISE keys are split at the splitting ops (attention): each piece is its own graph;
  the splitting op runs eagerly and its allocations are outside the pool.

It does not model allocator fragmentation, cuBLAS workspaces or memory the kernels
allocate internally; parameters, persistent inputs and in-place writes (KV cache) are not
graph memory and are not counted.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..core.batch import BatchDescriptor
from ..core.config import GraphConfig
from ..core.dispatcher import ready_dispatcher
from ..core.modes import CUDAGraphMode
from .fake import fake_mode_for, is_splitting_op, tensors_in, toy_inputs

__all__ = [
    "AllocationTracker",
    "MemoryEstimate",
    "estimate_graph_memory",
    "shared_pool_bytes",
    "round_up",
    "is_splitting_op",
    "toy_inputs",
    "fake_mode_for",
]

BLOCK_BYTES = 512  # CUDA caching allocator rounds every block to 512 B
SEGMENT_BYTES = 2 << 20  # 2 MiB segments (small pool; large requests round to 2 MiB)

InputsFn = Callable[[BatchDescriptor], tuple[tuple[Any, ...], dict[str, Any]]]


def round_up(nbytes: int, granularity: int) -> int:
    """``nbytes`` rounded up to a multiple of ``granularity`` (>= 1)."""
    return -(-int(nbytes) // granularity) * granularity


class AllocationTracker(TorchDispatchMode):
    """Counts bytes allocated and freed by aten ops, per labelled region ("graph").

    Only outputs that do not alias an input are allocations; a storage is freed when its
    last Python reference goes (CPython reference counting makes this exact and
    deterministic for eager code). Allocations outside a region are not counted. With
    ``splitting_ops`` and ``split=True`` the current region is closed before each
    splitting op and a new one (label + piece index) opened after it.
    """

    def __init__(self, round_bytes: int = BLOCK_BYTES, splitting_ops: Sequence[str] = ()) -> None:
        super().__init__()
        self.round_bytes = round_bytes
        self.splitting_ops = tuple(splitting_ops)
        self.split = False
        self.current: tuple[Any, int] | None = None
        self.live: dict[tuple[Any, int], int] = {}
        self.peak: dict[tuple[Any, int], int] = {}
        self.outputs: dict[tuple[Any, int], int] = {}
        self.allocs: dict[tuple[Any, int], int] = {}
        self._tracked: set[int] = set()

    def begin(self, label: Any, split: bool = False) -> None:
        """Open region ``(label, 0)``; with ``split`` each splitting op starts a new piece."""
        self.split = split
        self._open((label, 0))

    def _open(self, region: tuple[Any, int]) -> None:
        self.current = region
        for table in (self.live, self.peak, self.allocs):
            table.setdefault(region, 0)

    def end(self) -> None:
        """Close the current region; what is live now are its outputs."""
        if self.current is not None:
            self.outputs[self.current] = self.live[self.current]
        self.current = None

    def regions(self, label: Any) -> list[tuple[int, int, int, int]]:
        """``(piece, peak_bytes, output_bytes, num_allocs)`` for each piece of ``label``."""
        return sorted(
            (r[1], self.peak[r], self.outputs.get(r, self.live[r]), self.allocs[r])
            for r in self.peak
            if r[0] == label
        )

    def _free(self, region: tuple[Any, int], nbytes: int, key: int) -> None:
        self.live[region] -= nbytes
        self._tracked.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        splitting = (
            self.split and self.current is not None and is_splitting_op(func, self.splitting_ops)
        )
        if splitting:
            label, piece = self.current
            self.end()  # the splitting op runs eagerly, outside any graph
        out = func(*args, **kwargs)
        if splitting:
            self._open((label, piece + 1))
            return out
        region = self.current
        if region is None:
            return out
        returns = func._schema.returns
        for i, t in enumerate(tensors_in(out)):
            alias = returns[i].alias_info if i < len(returns) else None
            if alias is not None:
                continue  # a view or an in-place / out= result: no new memory
            storage = t.untyped_storage()
            key = id(storage)
            if key in self._tracked:
                continue
            nbytes = round_up(storage.nbytes(), self.round_bytes) if storage.nbytes() else 0
            self._tracked.add(key)
            self.live[region] += nbytes
            self.allocs[region] += 1
            self.peak[region] = max(self.peak[region], self.live[region])
            weakref.finalize(storage, self._free, region, nbytes, key)
        return out


def shared_pool_bytes(
    peaks: Sequence[int], outputs: Sequence[int], keep_outputs: bool = True
) -> tuple[int, list[int]]:
    """Pool size for graphs captured in this order into one pool, and each one's increment.

    Freed blocks are reused perfectly. With ``keep_outputs`` the outputs of earlier graphs
    stay allocated: ``pool = max_i(sum(outputs[:i]) + peaks[i])``; without, ``max(peaks)``.
    """
    retained, pool, increments = 0, 0, []
    for peak, output in zip(peaks, outputs):
        new_pool = max(pool, retained + peak)
        increments.append(new_pool - pool)
        pool = new_pool
        if keep_outputs:
            retained += output
    return pool, increments


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated graph memory of one config (source: ``model``).

    ``graphs``: one row per graph (a FULL key, or one piece of a PIECEWISE key) in capture
    order with ``peak_bytes``, ``output_bytes``, ``pool_increment_bytes``.
    ``per_key``: the same summed per key (``kept_bytes`` = sum of its pieces' peaks).
    """

    graphs: pd.DataFrame
    per_key: pd.DataFrame
    shared_pool_bytes: int
    separate_pools_bytes: int
    keep_outputs: bool = True
    source: str = "model"

    @property
    def shared_pool_segment_bytes(self) -> int:
        return round_up(self.shared_pool_bytes, SEGMENT_BYTES)

    @property
    def reuse_saving_x(self) -> float:
        """How many times smaller one shared pool is than separate pools."""
        return self.separate_pools_bytes / self.shared_pool_bytes if self.shared_pool_bytes else 1.0

    def pool_bytes(self, keep_outputs: bool) -> int:
        """The shared pool under the other output policy too (see the module docstring)."""
        peaks, outputs = self.graphs["peak_bytes"].tolist(), self.graphs["output_bytes"].tolist()
        return shared_pool_bytes(peaks, outputs, keep_outputs)[0]

    def summary(self) -> str:
        mib = 1 << 20
        other = "weak (vLLM)" if self.keep_outputs else "kept"
        return (
            f"{len(self.per_key)} keys, {len(self.graphs)} graphs: shared pool "
            f"{self.shared_pool_bytes / mib:.2f} MiB ({self.shared_pool_segment_bytes / mib:.0f} MiB "
            f"in 2 MiB segments; {self.pool_bytes(not self.keep_outputs) / mib:.2f} MiB with "
            f"{other} outputs), separate pools {self.separate_pools_bytes / mib:.2f} MiB "
            f"({self.reuse_saving_x:.1f}x more) [{self.source}]"
        )


def estimate_graph_memory(
    model: torch.nn.Module,
    config: GraphConfig,
    inputs_fn: InputsFn | None = None,
    *,
    round_bytes: int = BLOCK_BYTES,
    keep_outputs: bool = True,
    progress: bool = False,
) -> MemoryEstimate:
    """Graph memory of every key ``config`` captures, estimated on fake tensors.

    ``inputs_fn(descriptor) -> (args, kwargs)`` builds the model inputs for a padded batch
    (called under the fake mode, so it allocates nothing real); by default the toy
    models' dummy step (:func:`toy_inputs`). A model on the ``meta`` device runs on meta
    tensors directly (fastest: build it with ``device="meta"``); any other model runs
    under ``FakeTensorMode``, its real parameters converted to fake on use, never copied
    or written. Runs one forward per key. ``keep_outputs``: see the module docstring.
    """
    if not isinstance(config, GraphConfig):
        raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig")
    if not isinstance(round_bytes, int) or round_bytes < 1:
        raise ValueError(
            f"round_bytes={round_bytes!r} is invalid: it must be an integer >= 1 (512 on CUDA)"
        )
    if inputs_fn is None:
        inputs_fn = _default_inputs_fn(model, config.uniform_decode_query_len)
    dispatcher = ready_dispatcher(config, record_stats=False)
    order = [(mode, d) for mode, descs in dispatcher.get_capture_descs() for d in descs]
    tracker = AllocationTracker(round_bytes, config.effective_splitting_ops)
    rows = []
    fake = fake_mode_for(model)
    iterator = order
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(order, desc="estimate graph memory", unit="key")
    with torch.no_grad(), fake:
        for index, (mode, desc) in enumerate(iterator):
            args, kwargs = inputs_fn(desc)
            with _forward_context(mode, desc), tracker:
                tracker.begin(index, split=mode is CUDAGraphMode.PIECEWISE)
                out = model(*args, **kwargs)
                tracker.end()
            del out, args, kwargs
            for piece, peak, output, allocs in tracker.regions(index):
                rows.append(
                    (
                        index,
                        str(mode),
                        desc.num_tokens,
                        desc.num_reqs,
                        desc.uniform,
                        desc.has_lora,
                        desc.num_active_loras,
                        piece,
                        peak,
                        output,
                        allocs,
                    )
                )
    cols = [
        "capture_index",
        "runtime_mode",
        "num_tokens",
        "num_reqs",
        "uniform",
        "has_lora",
        "num_active_loras",
        "piece",
        "peak_bytes",
        "output_bytes",
        "num_allocs",
    ]
    graphs = pd.DataFrame(rows, columns=cols).astype({"num_reqs": "Int64"})
    pool, increments = shared_pool_bytes(
        graphs["peak_bytes"].tolist(), graphs["output_bytes"].tolist(), keep_outputs
    )
    graphs["pool_increment_bytes"] = increments
    key_cols = cols[:7]
    per_key = graphs.groupby(key_cols, as_index=False, sort=False, dropna=False).agg(
        pieces=("piece", "count"),
        kept_bytes=("peak_bytes", "sum"),
        output_bytes=("output_bytes", "sum"),
        pool_increment_bytes=("pool_increment_bytes", "sum"),
    )
    return MemoryEstimate(graphs, per_key, pool, int(graphs["peak_bytes"].sum()), keep_outputs)


def _forward_context(mode: CUDAGraphMode, desc: BatchDescriptor) -> Any:
    """The runner's forward context when it exists (the toy attention reads it)."""
    try:
        from ..capture.context import set_forward_context
    except ImportError:
        return contextlib.nullcontext()
    return set_forward_context(mode, desc)


def _default_inputs_fn(model: torch.nn.Module, q: int) -> InputsFn:
    if not hasattr(model, "dummy_slot"):
        raise ValueError(
            f"no inputs_fn given and {type(model).__name__} is not a toy LM (no dummy_slot): "
            "pass inputs_fn=lambda desc: ((tensor_args...), {kwargs})"
        )
    return lambda desc: (toy_inputs(model, desc, q), {})
