"""Graph memory without a GPU: the capture path's pool bookkeeping, run on fake tensors.

`estimate_graph_memory(model, config)` runs the model once per graph key on fake tensors
(shapes and dtypes only, no real memory, any device) under the
:class:`~cgdispatch.capture.pool.AllocationTracker` that the CPU stand-in captures under,
feeding the same :class:`~cgdispatch.capture.pool.PoolLedger`: every allocation an aten op
makes and, through a finalizer on the storage, every free. Per graph it records
``peak_bytes`` (the high-water mark of its own live allocations) and ``output_bytes``
(what is still live when the graph ends: its outputs).

Pool model (documented assumptions, checked by tests against hand sizes and against the
CPU stand-in's ledger on the real capture path):

- Each allocation is rounded up to ``round_bytes`` (512 B: the CUDA caching allocator's
  block granularity). Segment rounding (2 MiB) is applied only to totals, as
  ``shared_pool_segment_bytes``, since block packing inside segments depends on history.
- One shared pool captured in the dispatcher's order (PIECEWISE keys, then FULL keys, each
  largest first), every freed block reused perfectly (no fragmentation). The pool is the
  high-water mark of the bytes it holds. The keys and their order are the generation's
  (``core.generation.capture_keys``): V1's ``BatchDescriptor`` s, or under
  vLLM 0.34 the ``CudaGraphManager``'s ``BatchExecutionDescriptor`` s
  (FULL uniform-decode graphs sized by request count, token-keyed graphs on the prefill
  grid), exactly what ``GraphRunner.capture_all`` captures.
- Outputs as vLLM (``capture/pool.py``): with weak outputs (the default) the outputs of a
  FULL graph and of a key's last piece go back to the pool when the graph ends, so the
  pool is about the largest graph; with ``keep_outputs=True`` (the strong-output option)
  every graph keeps them, so the pool grows by each graph's outputs. The outputs of the
  other pieces stay until the forward drops them, in both cases.
- PIECEWISE keys are split at the splitting ops (attention): each piece is its own graph;
  the splitting op runs eagerly and its allocations are outside the pool.
- Separate pools (one per graph) would cost the sum of the peaks.

It does not model allocator fragmentation, cuBLAS workspaces or memory the kernels
allocate internally; parameters, persistent inputs and in-place writes (KV cache) are not
graph memory and are not counted. The model runs eagerly, so a tensor lives as long as
the model's Python code holds it; the capture path runs dynamo's split graph, which frees
each value after its last use (the test against the stand-in bounds the difference).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from ..capture.context import set_forward_context
from ..capture.graph_key import GraphKey, is_uniform_key
from ..capture.pool import (
    BLOCK_BYTES,
    AllocationTracker,
    OutputLifetime,
    PoolLedger,
    round_up,
)
from ..core.config import GraphConfig
from ..core.generation import capture_keys
from ..core.modes import CUDAGraphMode
from .fake import fake_mode_for, is_splitting_op, split_step, toy_inputs

__all__ = [
    "MemoryEstimate",
    "estimate_graph_memory",
    "shared_pool_bytes",
    "round_up",
    "is_splitting_op",
    "toy_inputs",
    "fake_mode_for",
]

SEGMENT_BYTES = 2 << 20  # 2 MiB segments (small pool; large requests round to 2 MiB)
_WEAK, _GRAPH, _CALLER = OutputLifetime.WEAK, OutputLifetime.GRAPH, OutputLifetime.CALLER

# either generation's key (V1 BatchDescriptor, generation 2 BatchExecutionDescriptor)
InputsFn = Callable[[GraphKey], tuple[tuple[Any, ...], dict[str, Any]]]


def shared_pool_bytes(
    peaks: Sequence[int], outputs: Sequence[int], keep_outputs: bool = True
) -> tuple[int, list[int]]:
    """Pool size for single graphs captured in this order into one pool, and each increment.

    The closed form of the ledger for graphs whose outputs are all WEAK or all GRAPH (no
    pieces): with ``keep_outputs`` ``pool = max_i(sum(outputs[:i]) + peaks[i])``, without
    ``max(peaks)``.
    """
    ledger = PoolLedger(1)
    for i, (peak, output) in enumerate(zip(peaks, outputs)):
        ledger.begin(i)
        ledger.allocate(2 * i, output)
        ledger.allocate(2 * i + 1, peak - output)
        ledger.free(2 * i + 1)
        ledger.end(_GRAPH if keep_outputs else _WEAK)
    return ledger.pool_bytes, [g.pool_increment_bytes for g in ledger.graphs]


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated graph memory of one config (source: ``model``).

    ``graphs``: one row per graph (a FULL key, or one piece of a PIECEWISE key) in capture
    order with ``peak_bytes``, ``output_bytes``, ``pool_increment_bytes``.
    ``per_key``: the same summed per key (``kept_bytes`` = sum of its pieces' peaks).
    ``shared_pool_bytes`` follows ``keep_outputs``; ``weak_pool_bytes`` and
    ``strong_pool_bytes`` give both output policies from the same run.
    """

    graphs: pd.DataFrame
    per_key: pd.DataFrame
    shared_pool_bytes: int
    separate_pools_bytes: int
    keep_outputs: bool = False
    source: str = "model"
    weak_pool_bytes: int = 0
    strong_pool_bytes: int = 0

    @property
    def shared_pool_segment_bytes(self) -> int:
        return round_up(self.shared_pool_bytes, SEGMENT_BYTES)

    @property
    def largest_graph_bytes(self) -> int:
        """The largest single key's pool increment alone: the peak of its worst piece or graph."""
        return int(self.graphs["peak_bytes"].max()) if len(self.graphs) else 0

    @property
    def reuse_saving_x(self) -> float:
        """How many times smaller one shared pool is than separate pools."""
        return self.separate_pools_bytes / self.shared_pool_bytes if self.shared_pool_bytes else 1.0

    def pool_bytes(self, keep_outputs: bool) -> int:
        """The shared pool under either output policy (see the module docstring)."""
        return self.strong_pool_bytes if keep_outputs else self.weak_pool_bytes

    def summary(self) -> str:
        mib = 1 << 20
        mine, other = ("strong", "weak (vLLM)") if self.keep_outputs else ("weak", "strong")
        return (
            f"{len(self.per_key)} keys, {len(self.graphs)} graphs: shared pool "
            f"{self.shared_pool_bytes / mib:.2f} MiB with {mine} outputs "
            f"({self.shared_pool_segment_bytes / mib:.0f} MiB in 2 MiB segments; "
            f"{self.pool_bytes(not self.keep_outputs) / mib:.2f} MiB with {other} outputs), "
            f"separate pools {self.separate_pools_bytes / mib:.2f} MiB "
            f"({self.reuse_saving_x:.1f}x more) [{self.source}]"
        )


_KEY_COLUMNS = [
    "capture_index",
    "runtime_mode",
    "num_tokens",
    "num_reqs",
    "uniform",
    "has_lora",
    "num_active_loras",
]


def estimate_graph_memory(
    model: torch.nn.Module,
    config: GraphConfig,
    inputs_fn: InputsFn | None = None,
    *,
    round_bytes: int = BLOCK_BYTES,
    keep_outputs: bool = False,
    progress: bool = False,
) -> MemoryEstimate:
    """Graph memory of every key ``config`` captures, estimated on fake tensors.

    Either generation: the keys are those ``GraphRunner(model, config).capture_all`` would
    capture (``config.vllm_version``), in its order.
    ``inputs_fn(descriptor) -> (args, kwargs)`` builds the model inputs for a padded batch
    (called under the fake mode, so it allocates nothing real); by default the toy
    models' dummy step (:func:`toy_inputs`). A model on the ``meta`` device runs on meta
    tensors directly (fastest: build it with ``device="meta"``); any other model runs
    under ``FakeTensorMode``, its real parameters converted to fake on use, never copied
    or written. Runs one forward per key. ``keep_outputs``: False for vLLM's weak outputs
    (the capture default), True for ``GraphRunner(weak_outputs=False)``.
    """
    if not isinstance(config, GraphConfig):
        raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig")
    if isinstance(round_bytes, bool) or not isinstance(round_bytes, int) or round_bytes < 1:
        raise ValueError(
            f"round_bytes={round_bytes!r} is invalid: it must be an integer >= 1 (512 on CUDA)"
        )
    if inputs_fn is None:
        inputs_fn = _default_inputs_fn(model, config.uniform_decode_query_len)
    order = [(k.runtime_mode, k.key) for k in capture_keys(config)]
    # the runner's persistent inputs and the split graph's static outputs are sized for the
    # widest key (V1: the largest capture size, which every PIECEWISE key list holds)
    largest = max((desc.num_tokens for _, desc in order), default=0)
    weak, strong = PoolLedger(round_bytes), PoolLedger(round_bytes)
    ops = tuple(config.effective_splitting_ops)
    splitting = AllocationTracker([weak, strong], split_at=lambda f: is_splitting_op(f, ops))
    whole = AllocationTracker([weak, strong])
    fake = fake_mode_for(model)
    step: Callable[..., Any] = model
    # a meta model runs the runner's own split graph (see fake.split_step); others run
    # eagerly, split at the splitting ops as they are met
    compiled = (
        config.cudagraph_mode.requires_piecewise_compilation()
        and isinstance(fake, contextlib.nullcontext)
        and bool(order)
    )
    if compiled:
        example, example_kwargs = inputs_fn(order[0][1])
        if example_kwargs:
            raise ValueError(
                f"inputs_fn returned keyword arguments {sorted(example_kwargs)} for a piecewise "
                "mode: the split graph takes positional inputs only; return ((args...), {})"
            )
        step = split_step(model, config, largest, whole, (_WEAK, _GRAPH), example)
    iterator: Any = order
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(order, desc="estimate graph memory", unit="key")
    keys = []
    with torch.no_grad(), fake:
        for index, (mode, desc) in enumerate(iterator):
            piecewise = mode is CUDAGraphMode.PIECEWISE
            tracker = splitting if piecewise and not compiled else whole
            args, kwargs = inputs_fn(desc)
            before = len(weak.graphs)
            with _forward_context(mode, desc), tracker:
                if piecewise and compiled:  # the pieces open and close their own regions
                    out = step(*args, **kwargs)
                else:
                    tracker.begin(index)
                    out = step(*args, **kwargs)
                    tracker.end(_WEAK, _GRAPH)  # the step's outputs: weak, or kept by the graph
            del out, args, kwargs  # the forward's pieces release what they held
            keys.append((index, mode, desc, len(weak.graphs) - before))
    return _estimate_frame(keys, weak, strong, keep_outputs)


def _estimate_frame(
    keys: list[tuple[int, CUDAGraphMode, GraphKey, int]],
    weak: PoolLedger,
    strong: PoolLedger,
    keep_outputs: bool,
) -> MemoryEstimate:
    chosen = strong if keep_outputs else weak
    rows, graph_index = [], 0
    for index, mode, desc, num_graphs in keys:
        key = [
            index,
            str(mode),
            desc.num_tokens,
            desc.num_reqs,
            is_uniform_key(desc),
            desc.lora_active,
            desc.num_active_loras,
        ]
        for piece in range(num_graphs):
            g = chosen.graphs[graph_index]
            rows.append([*key, piece, g.peak_bytes, g.output_bytes, g.pool_increment_bytes])
            graph_index += 1
    cols = [*_KEY_COLUMNS, "piece", "peak_bytes", "output_bytes", "pool_increment_bytes"]
    graphs = pd.DataFrame(rows, columns=cols).astype({"num_reqs": "Int64"})
    per_key = graphs.groupby(_KEY_COLUMNS, as_index=False, sort=False, dropna=False).agg(
        pieces=("piece", "count"),
        kept_bytes=("peak_bytes", "sum"),
        output_bytes=("output_bytes", "sum"),
        pool_increment_bytes=("pool_increment_bytes", "sum"),
    )
    return MemoryEstimate(
        graphs,
        per_key,
        chosen.pool_bytes,
        int(graphs["peak_bytes"].sum()),
        keep_outputs,
        weak_pool_bytes=weak.pool_bytes,
        strong_pool_bytes=strong.pool_bytes,
    )


def _forward_context(mode: CUDAGraphMode, desc: GraphKey) -> Any:
    """The runner's forward context (the toy attention reads it)."""
    return set_forward_context(mode, desc)


def _default_inputs_fn(model: torch.nn.Module, q: int) -> InputsFn:
    if not hasattr(model, "dummy_slot"):
        raise ValueError(
            f"no inputs_fn given and {type(model).__name__} is not a toy LM (no dummy_slot): "
            "pass inputs_fn=lambda desc: ((tensor_args...), {kwargs})"
        )
    return lambda desc: (toy_inputs(model, desc, q), {})
