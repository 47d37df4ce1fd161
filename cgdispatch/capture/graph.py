"""The graph a backend records, and the interface every graph backend implements.

A :class:`GraphBackend` records callables into :class:`CapturedGraph` objects, all in one
memory pool per backend instance. Two implement it: ``CudaGraphBackend``
(``cuda_backend.py``, ``torch.cuda.CUDAGraph``) and ``CpuReplayBackend`` (``standin.py``, the
CPU stand-in); ``backends.get_backend`` picks one. Output lifetimes follow vLLM
(``OutputLifetime`` in ``pool.py``): WEAK outputs go back to the pool when the capture ends,
CALLER outputs when the caller drops them, GRAPH outputs when the graph is released.

A backend does not decide when to capture or replay (that is ``CUDAGraphWrapper``'s job)
and does no warm-up runs of its own. Prefer the wrapper; use a backend directly only to
graph a closure by hand.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from .outputs import map_tensors
from .pool import GraphMemory, OutputLifetime

__all__ = ["CaptureCall", "CapturedGraph", "GraphBackend", "live_graph_count", "released_replay"]

_LIVE_GRAPHS: weakref.WeakSet[CapturedGraph] = weakref.WeakSet()


def live_graph_count() -> int:
    """Captured graphs still alive in this process (0 once every runner is released)."""
    return len(_LIVE_GRAPHS)


@dataclass(eq=False)
class CapturedGraph:
    """One recorded graph: ``replay()`` reruns it and returns its output objects.

    ``output`` is what a replay returns: for WEAK outputs memory the graph does not own (the
    pool may give it to another graph), otherwise the graph's own. ``capture_s`` is the
    wall time of the capture itself (no warm-ups); ``pool_bytes`` is what the capture added
    to the backend's memory pool (CUDA: reserved bytes of the caching allocator; None on
    CPU, where ``memory`` holds the stand-in ledger's record instead). ``device_bytes``
    (CUDA): the drop in free device memory across the capture, which also counts what the
    allocator cannot see (the driver's memory for the instantiated graph); None on CPU.
    """

    output: Any
    replay_fn: Callable[[], Any]
    capture_s: float
    pool_bytes: int | None
    lifetime: OutputLifetime = OutputLifetime.GRAPH
    memory: GraphMemory | None = None
    # what replays need alive: the CUDA graph, the inputs it reads by address
    keepalive: list[Any] = field(default_factory=list, repr=False)
    # what the capture call returns, handed over once by take_capture_output(): CALLER
    # outputs must not stay referenced here, or their blocks would never go back
    capture_output: Any = field(default=None, repr=False)
    device_bytes: int | None = None

    def __post_init__(self) -> None:
        _LIVE_GRAPHS.add(self)

    def take_capture_output(self) -> Any:
        """The capture call's result, once (later calls return None)."""
        out, self.capture_output = self.capture_output, None
        return out

    def replay(self) -> Any:
        """Rerun the graph. The replay overwrites ``output``: copy it if you keep it."""
        return self.replay_fn()


@dataclass(frozen=True)
class CaptureCall:
    """One capture asked of a backend: the callable, its arguments, and its outputs' lifetime."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    lifetime: OutputLifetime
    label: Any = None  # names the capture in the stand-in's pool ledger

    def run(self) -> Any:
        return self.fn(*self.args, **self.kwargs)


def released_replay() -> Any:
    raise RuntimeError(
        "this graph was released (release_graphs()): capture it again before replaying"
    )


class GraphBackend:
    """Records callables into graphs; one instance = one memory pool for all its graphs."""

    name = "abstract"
    # the fewest warm-ups a capture needs (CUDA: 1, see cuda_backend.MIN_CUDA_WARMUPS);
    # wrappers refuse fewer when they are built
    min_warmups = 0

    def __init__(self) -> None:
        self.num_graphs = 0
        self.pool_bytes_total = 0  # 0 on CPU
        self.device_bytes_total = 0  # free device memory the captures took; 0 on CPU
        self.capture_s_total = 0.0
        self.graphs: list[CapturedGraph] = []

    def capture(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        lifetime: OutputLifetime = OutputLifetime.GRAPH,
        label: Any = None,
    ) -> CapturedGraph:
        """Record ``fn(*args, **kwargs)`` into a new graph of this backend's pool, its outputs
        living as ``lifetime`` says; ``label`` names the capture in the pool's records."""
        call = CaptureCall(fn, args, kwargs or {}, lifetime, label)
        return self._record(self._capture(call))

    def _capture(self, call: CaptureCall) -> CapturedGraph:  # pragma: no cover - abstract
        """The backend's own recording of ``call`` (``capture`` counts the graph)."""
        raise NotImplementedError

    def _record(self, graph: CapturedGraph) -> CapturedGraph:
        self.num_graphs += 1
        self.capture_s_total += graph.capture_s
        self.pool_bytes_total += graph.pool_bytes or 0
        self.device_bytes_total += graph.device_bytes or 0
        self.graphs.append(graph)
        return graph

    def release(self) -> None:
        """Free every graph of this backend and its pool; their replays raise afterwards."""
        for graph in self.graphs:
            graph.replay_fn = released_replay
            graph.output = None
            graph.keepalive.clear()
        self.graphs.clear()
        self.num_graphs = 0
        self.pool_bytes_total = 0
        self.device_bytes_total = 0

    @contextlib.contextmanager
    def capture_session(self) -> Iterator[None]:
        """Around capture-all: collect once, then freeze and pause the garbage collector.

        A collection during capture walks every live object per graph; SGLang measured a
        2.3-3.7x faster capture with it frozen (docs/references.md, "SGLang capture").

        A heap the caller froze already stays frozen: a server freezes its start-up heap
        (vLLM 0.34's ``EngineCore.__init__`` calls ``freeze_gc_heap``,
        ``vllm/utils/gc_utils.py``). The collection then walks only what came after, and
        the session neither freezes nor thaws: ``gc.unfreeze`` thaws every frozen object,
        so thawing here would undo the caller's freeze.
        """
        was_enabled = gc.isenabled()
        caller_froze = gc.get_freeze_count() > 0
        gc.collect()
        if not caller_froze:
            gc.freeze()
        gc.disable()
        try:
            yield
        finally:
            if not caller_froze:
                gc.unfreeze()
            if was_enabled:
                gc.enable()

    def synchronize(self) -> None:
        """Wait for the device (no-op on CPU)."""

    def warmup(self, fn: Callable[[], Any], num_warmups: int) -> None:
        """Run ``fn`` eagerly ``num_warmups`` times before its capture (CUDA: on the capture stream)."""
        for _ in range(num_warmups):
            fn()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(graphs={self.num_graphs}, pool_bytes={self.pool_bytes_total})"
        )


def tensor_list(value: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    map_tensors(value, found.append)
    return found
