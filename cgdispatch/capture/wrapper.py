"""`CUDAGraphWrapper`: capture a callable per graph key on first use, replay it after.

The wrapper obeys the forward context and nothing else (vLLM V1's contract): it never
looks at input shapes to choose. With no context, runtime mode NONE, or a mode other than
its own, it calls the wrapped callable directly, so a FULL wrapper can contain PIECEWISE
ones and each level acts only in its own mode. It does not store persistent input
buffers: the caller (the runner) must pass the same tensors, refilled in place, at every
replay of a key.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..core.generation import GraphKey
from ..core.modes import CUDAGraphMode
from ..core.validate import check_int
from . import context as _context
from .backends import CapturedGraph, GraphBackend, get_backend
from .graph_key import is_uniform_key
from .pool import OutputLifetime

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CUDAGraphWrapper", "GraphEntry"]

_NONE = CUDAGraphMode.NONE


@dataclass(eq=False)
class GraphEntry:
    """One captured key of one wrapper: the graph, its cost and its use count."""

    batch_descriptor: GraphKey  # V1 BatchDescriptor or gen-2 BatchExecutionDescriptor
    graph: CapturedGraph
    input_addresses: tuple[int, ...]  # data_ptr of each tensor argument at capture
    capture_s: float  # the capture alone; warm-ups excluded
    warmup_s: float  # the eager warm-up runs before the capture
    pool_bytes: int | None  # bytes the capture added to the pool (None on CPU)
    replays: int = 0
    order: int = field(default=0)  # capture order within the wrapper, 0 first


def _tensor_addresses(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, ...]:
    values = [*args, *kwargs.values()]
    return tuple(v.data_ptr() for v in values if isinstance(v, torch.Tensor))


class CUDAGraphWrapper:
    """Captures ``runnable`` once per batch descriptor in ``runtime_mode``; replays after.

    Per call, from the forward context: no context, NONE, or a mode other than
    ``runtime_mode`` -> ``runnable(*args, **kwargs)`` (a bypass); a captured descriptor ->
    replay; a new descriptor -> ``num_warmups`` eager runs, then capture, unless the
    context says ``allow_capture=False``, which raises ``RuntimeError`` naming the key.

    Outputs (``output_lifetime``, vLLM's rule, ``pool.py``): ``WEAK`` (the default, as
    vLLM's ``weak_ref_output``) hands them back to the pool when the capture ends, so the
    result of a call stays valid only until the next capture or replay of any graph on the
    same backend: copy it if you keep it. ``GRAPH`` (the strong-output option) keeps them
    in the graph's own blocks: only the next replay of the same key overwrites them.
    ``CALLER`` (piecewise graphs before the last) keeps them while the caller holds the
    capture's result. Arguments of a replay call are not read: the graph reads the
    tensors given at capture, so the caller refills those in place. ``debug=True`` checks
    that the tensor arguments have the capture's addresses and raises ``RuntimeError``.

    Counters: ``num_replays``, ``num_bypasses`` and per key ``entries[key].replays``. On the
    CPU stand-in a replay reruns the callable, so wrappers nested inside count a bypass
    per outer replay; under CUDA they are not called during a replay.

    Pass one backend instance to every wrapper of a model so that all graphs share one
    memory pool (``backend=None`` creates a private one, CUDA when available).
    """

    def __init__(
        self,
        runnable: Callable[..., Any],
        runtime_mode: CUDAGraphMode,
        backend: GraphBackend | str | None = None,
        *,
        num_warmups: int = 1,
        debug: bool = False,
        name: str | None = None,
        output_lifetime: OutputLifetime = OutputLifetime.WEAK,
    ) -> None:
        if not callable(runnable):
            raise ValueError(f"runnable={runnable!r} is not callable: wrap a module or a function")
        if runtime_mode not in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL):
            raise ValueError(
                f"runtime_mode={runtime_mode!r} is invalid for a graph wrapper: use "
                "CUDAGraphMode.FULL or CUDAGraphMode.PIECEWISE (NONE needs no wrapper)"
            )
        check_int("num_warmups", num_warmups, 0)
        if not isinstance(output_lifetime, OutputLifetime):
            raise ValueError(
                f"output_lifetime={output_lifetime!r} is invalid: pass an OutputLifetime "
                "(WEAK as vLLM, GRAPH to keep outputs across other graphs' replays)"
            )
        self.output_lifetime = output_lifetime
        self.runnable = runnable
        self.runtime_mode = runtime_mode
        self.backend = get_backend(backend)
        check_warmups(num_warmups, self.backend)
        self.num_warmups = num_warmups
        self.debug = debug
        self.name = name or getattr(runnable, "__name__", type(runnable).__name__)
        self.entries: dict[GraphKey, GraphEntry] = {}
        self.num_replays = 0
        self.num_bypasses = 0

    # ----- the hot path -------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        ctx = _context._current
        if ctx is None or ctx.runtime_mode is not self.runtime_mode:
            self.num_bypasses += 1
            return self.runnable(*args, **kwargs)
        desc = ctx.batch_descriptor
        entry = self.entries.get(desc)
        if entry is None:
            return self._capture(desc, ctx.allow_capture, args, kwargs)
        if self.debug:
            self._check_addresses(entry, args, kwargs)
        self.num_replays += 1
        entry.replays += 1
        return entry.graph.replay_fn()

    # ----- capture --------------------------------------------------------------------------
    def _capture(
        self,
        desc: GraphKey | None,
        allowed: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        if desc is None:
            raise RuntimeError(
                f"{self.name}: forward context has runtime mode {self.runtime_mode} but no "
                "batch descriptor: set one with set_forward_context(mode, descriptor)"
            )
        if not allowed:
            raise RuntimeError(
                f"{self.name}: no {self.runtime_mode} graph is captured for {desc} and capturing "
                "is switched off: capture this key first (runner.capture_all()), or dispatch "
                "with a key that was captured"
            )
        start = time.perf_counter()
        self.backend.warmup(lambda: self.runnable(*args, **kwargs), self.num_warmups)
        self.backend.synchronize()
        warmup_s = time.perf_counter() - start
        graph = self.backend.capture(
            self.runnable,
            args,
            kwargs,
            lifetime=self.output_lifetime,
            label=(self.name, desc),
        )
        self.entries[desc] = GraphEntry(
            desc,
            graph,
            _tensor_addresses(args, kwargs),
            graph.capture_s,
            warmup_s,
            graph.pool_bytes,
            order=len(self.entries),
        )
        return graph.take_capture_output()

    def _check_addresses(
        self, entry: GraphEntry, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        now = _tensor_addresses(args, kwargs)
        if now != entry.input_addresses:
            bad = [i for i, (a, b) in enumerate(zip(now, entry.input_addresses)) if a != b]
            raise RuntimeError(
                f"{self.name}: replay of {entry.batch_descriptor} got tensor arguments at other "
                f"addresses than at capture (tensor argument(s) {bad or 'count differs'}): the "
                "graph would read stale inputs; copy new inputs into the captured tensors"
            )

    # ----- inspection -----------------------------------------------------------------------
    @property
    def captured_keys(self) -> list[GraphKey]:
        """Descriptors with a graph, in capture order."""
        return list(self.entries)

    @property
    def num_captures(self) -> int:
        return len(self.entries)

    def stats_frame(self) -> pd.DataFrame:
        """One row per captured key: the key fields, capture_s, warmup_s, pool_bytes, replays."""
        import pandas as pd

        rows = [
            {
                "wrapper": self.name,
                "runtime_mode": str(self.runtime_mode),
                "num_tokens": e.batch_descriptor.num_tokens,
                "num_reqs": e.batch_descriptor.num_reqs,
                "uniform": is_uniform_key(e.batch_descriptor),
                "capture_order": e.order,
                "capture_s": e.capture_s,
                "warmup_s": e.warmup_s,
                "pool_bytes": e.pool_bytes,
                "replays": e.replays,
            }
            for e in self.entries.values()
        ]
        return pd.DataFrame(rows)

    def reset_graphs(self) -> None:
        """Drop every captured graph and zero the counters (the pool keeps its memory;
        ``backend.release()`` frees it)."""
        self.entries.clear()
        self.num_replays = 0
        self.num_bypasses = 0

    def __repr__(self) -> str:
        return (
            f"CUDAGraphWrapper({self.name}, mode={self.runtime_mode}, backend={self.backend.name}, "
            f"captured={len(self.entries)}, replays={self.num_replays}, bypasses={self.num_bypasses})"
        )


def check_warmups(num_warmups: int, backend: GraphBackend) -> None:
    """ValueError when ``num_warmups`` is below what ``backend`` needs before a capture.

    On CUDA at least one warm-up runs on the capture stream: the cuBLAS workspace of that
    stream, and Triton's compiles of compiled pieces, are made lazily by the first run; made
    inside the capture, the workspace would stay in the graph pool and a compile would fail.
    Refused rather than silently raised, so that a config says what actually runs (the
    capture-time model counts ``cudagraph_num_of_warmups + 1`` runs per key)."""
    if num_warmups < backend.min_warmups:
        raise ValueError(
            f"cudagraph_num_of_warmups={num_warmups} is invalid with the '{backend.name}' "
            f"graph backend: it needs at least {backend.min_warmups} warm-up on its capture "
            "stream before each capture, so that cuBLAS workspaces and Triton compiles are "
            f"made outside the graph; set cudagraph_num_of_warmups >= {backend.min_warmups}"
        )
