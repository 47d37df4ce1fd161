"""``torch.cuda.CUDAGraph`` capture into one shared pool: the GPU graph backend.

Thin on purpose: what it shares with the CPU stand-in (output lifetimes, aliases,
replay bookkeeping) lives in ``graph.py``, ``outputs.py`` and ``pool.py``, which the CPU
tests exercise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from .graph import CapturedGraph, GraphBackend, released_replay, tensor_list
from .outputs import alias_tensors
from .pool import OutputLifetime

__all__ = ["CudaGraphBackend"]


class CudaGraphBackend(GraphBackend):
    """``torch.cuda.CUDAGraph`` capture on a side stream into one shared memory pool.

    The device is synchronised before and after each capture; the graph is replayed once
    right after capture so that the returned output holds this step's values (during
    capture kernels are recorded, not run). WEAK outputs become weak references inside the
    capture, as in vLLM, so their blocks are free for the next graph. Needs a CUDA device.
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
        self._pool_ptrs: set[int] = set()  # storages of CALLER outputs: pool memory

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

    def capture(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        lifetime: OutputLifetime = OutputLifetime.GRAPH,
        label: Any = None,
    ) -> CapturedGraph:
        kwargs = kwargs or {}
        cuda_graph = torch.cuda.CUDAGraph()
        self.synchronize()
        reserved_before = torch.cuda.memory_reserved(self.device)
        start = time.perf_counter()
        # capture_begin/end rather than torch.cuda.graph(): the context manager runs
        # gc.collect() and empty_cache() before every graph, which capture_session avoids.
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            cuda_graph.capture_begin(pool=self.pool)
            try:
                output = fn(*args, **kwargs)
                if lifetime is OutputLifetime.WEAK:
                    # vLLM: weak inside the capture, so the blocks return to the pool now
                    output = alias_tensors(output)[0]
            finally:
                cuda_graph.capture_end()
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        self.synchronize()
        capture_s = time.perf_counter() - start
        pool_bytes = torch.cuda.memory_reserved(self.device) - reserved_before
        cuda_graph.replay()  # fill the outputs with this step's values
        kept = output if lifetime is OutputLifetime.GRAPH else alias_tensors(output)[0]
        if lifetime is OutputLifetime.CALLER:
            self._pool_ptrs.update(t.untyped_storage().data_ptr() for t in tensor_list(output))
        # the inputs it reads by address must outlive the graph, unless they are pool memory
        inputs = [
            t
            for t in tensor_list((args, kwargs))
            if t.untyped_storage().data_ptr() not in self._pool_ptrs
        ]
        graph = CapturedGraph(
            kept, released_replay, capture_s, pool_bytes, lifetime, keepalive=[cuda_graph, *inputs]
        )
        graph.capture_output = output

        def replay() -> Any:
            cuda_graph.replay()
            return graph.output

        graph.replay_fn = replay
        return self._record(graph)

    def release(self) -> None:
        for graph in self.graphs:
            if graph.keepalive:
                graph.keepalive[0].reset()  # the CUDAGraph frees its graph exec now
        super().release()
        self._pool_ptrs.clear()
        self.synchronize()
        torch.cuda.empty_cache()
