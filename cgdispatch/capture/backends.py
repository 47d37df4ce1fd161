"""Graph backends: record a callable once, replay it on the same (persistent) tensors.

Two backends share one small interface (``capture(fn) -> CapturedGraph``):

* ``CudaGraphBackend`` - ``torch.cuda.CUDAGraph`` captured on a side stream, every graph of
  the backend in one memory pool (``torch.cuda.graph_pool_handle()``), so that smaller
  graphs captured after larger ones reuse their blocks.
* ``CpuReplayBackend`` - the stand-in used without a GPU (docs/architecture.md, "Running without a
  GPU"): capture runs the callable once and keeps its outputs; replay runs it again and
  copies the new results into the kept output storage. Static-buffer and aliasing
  behaviour are the same as on a GPU; only the speed-up is absent.

A backend does not decide when to capture or replay (that is :class:`CUDAGraphWrapper`'s
job) and does no warm-up runs. Prefer the wrapper; use a backend directly only to graph a
closure by hand.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "CapturedGraph",
    "GraphBackend",
    "CudaGraphBackend",
    "CpuReplayBackend",
    "get_backend",
    "BACKENDS",
]


@dataclass(eq=False)
class CapturedGraph:
    """One recorded graph: ``replay()`` reruns it and returns the same output objects.

    ``capture_s`` is the wall time of the capture itself (no warm-ups); ``pool_bytes``
    is what the capture added to the backend's memory pool (CUDA: reserved bytes of the
    caching allocator; None on CPU, where nothing is pooled).
    """

    output: Any
    replay_fn: Callable[[], Any]
    capture_s: float
    pool_bytes: int | None

    def replay(self) -> Any:
        """Rerun the graph. The replay overwrites ``output``: copy it if you keep it."""
        return self.replay_fn()


class GraphBackend:
    """Records callables into graphs; one instance = one memory pool for all its graphs."""

    name = "abstract"

    def __init__(self) -> None:
        self.num_graphs = 0
        self.pool_bytes_total = 0  # 0 on CPU
        self.capture_s_total = 0.0

    def capture(self, fn: Callable[[], Any]) -> CapturedGraph:  # pragma: no cover - abstract
        raise NotImplementedError

    def _record(self, graph: CapturedGraph) -> CapturedGraph:
        self.num_graphs += 1
        self.capture_s_total += graph.capture_s
        self.pool_bytes_total += graph.pool_bytes or 0
        return graph

    @contextlib.contextmanager
    def capture_session(self) -> Iterator[None]:
        """Around capture-all: collect once, then freeze and pause the garbage collector.

        A collection during capture walks every live object per graph; SGLang measured a
        2.3-3.7x faster capture with it frozen (docs/references.md, "SGLang capture").
        """
        was_enabled = gc.isenabled()
        gc.collect()
        gc.freeze()
        gc.disable()
        try:
            yield
        finally:
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


def _copy_into(kept: Any, new: Any) -> None:
    """Copy every tensor of ``new`` into the tensor at the same place in ``kept``."""
    if isinstance(kept, torch.Tensor):
        if kept is not new:
            kept.copy_(new)
    elif isinstance(kept, (tuple, list)):
        for k, n in zip(kept, new):
            _copy_into(k, n)
    elif isinstance(kept, dict):
        for key, k in kept.items():
            _copy_into(k, new[key])


class CpuReplayBackend(GraphBackend):
    """CPU stand-in for CUDA graphs: replay = run again, write into the captured outputs.

    The callable must read its inputs from the same persistent tensors at every replay
    (as a CUDA graph does); arguments given to a later call are not seen, exactly as on
    a GPU. Outputs may be a tensor or nested tuples/lists/dicts of tensors.
    """

    name = "cpu"

    def capture(self, fn: Callable[[], Any]) -> CapturedGraph:
        start = time.perf_counter()
        output = fn()
        capture_s = time.perf_counter() - start

        if isinstance(output, torch.Tensor):  # the common case, without the tree walk

            def replay() -> Any:
                output.copy_(fn())
                return output

        else:

            def replay() -> Any:
                _copy_into(output, fn())
                return output

        return self._record(CapturedGraph(output, replay, capture_s, None))


class CudaGraphBackend(GraphBackend):
    """``torch.cuda.CUDAGraph`` capture on a side stream into one shared memory pool.

    The device is synchronised before and after each capture; the graph is replayed once
    right after capture so that the returned output holds this step's values (during
    capture kernels are recorded, not run). Needs a CUDA device.
    """

    name = "cuda"

    def __init__(self, device: torch.device | str | None = None) -> None:
        super().__init__()
        if not torch.cuda.is_available():
            raise RuntimeError(
                "the 'cuda' graph backend needs a CUDA device and none is available: "
                "use backend='cpu' (the replay stand-in) or backend=None to choose automatically"
            )
        self.device = torch.device("cuda" if device is None else device)
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream(device=self.device)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def warmup(self, fn: Callable[[], Any], num_warmups: int) -> None:
        # Warm up on the stream that captures (torch.cuda.graphs docs): state created lazily
        # per stream (cuBLAS workspaces, Triton autotuning, which synchronises) must exist
        # before capture_begin, or it is made inside the capture, in the graph pool.
        if num_warmups <= 0:
            return
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            for _ in range(num_warmups):
                fn()
        torch.cuda.current_stream(self.device).wait_stream(self.stream)

    def capture(self, fn: Callable[[], Any]) -> CapturedGraph:
        graph = torch.cuda.CUDAGraph()
        self.synchronize()
        reserved_before = torch.cuda.memory_reserved(self.device)
        start = time.perf_counter()
        # capture_begin/end rather than torch.cuda.graph(): the context manager runs
        # gc.collect() and empty_cache() before every graph, which capture_session avoids.
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            graph.capture_begin(pool=self.pool)
            try:
                output = fn()
            finally:
                graph.capture_end()
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        self.synchronize()
        capture_s = time.perf_counter() - start
        pool_bytes = torch.cuda.memory_reserved(self.device) - reserved_before
        graph.replay()  # fill the outputs with this step's values

        def replay() -> Any:
            graph.replay()
            return output

        captured = CapturedGraph(output, replay, capture_s, pool_bytes)
        captured.cuda_graph = graph  # type: ignore[attr-defined]  # keeps the graph alive
        return self._record(captured)


BACKENDS: dict[str, type[GraphBackend]] = {"cuda": CudaGraphBackend, "cpu": CpuReplayBackend}


def get_backend(backend: GraphBackend | str | None = None) -> GraphBackend:
    """A backend instance: given, by name (``"cuda"``, ``"cpu"``), or automatic (None/"auto").

    Automatic picks CUDA when ``torch.cuda.is_available()``, else the CPU stand-in. Each
    call by name creates a new backend, hence a new memory pool: pass one instance to
    every wrapper that should share a pool.
    """
    if isinstance(backend, GraphBackend):
        return backend
    if backend is None or backend == "auto":
        backend = "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(backend, str) or backend.lower() not in BACKENDS:
        raise ValueError(
            f"graph backend {backend!r} is unknown: use one of {sorted(BACKENDS)}, 'auto' "
            "or a GraphBackend instance"
        )
    return BACKENDS[backend.lower()]()
