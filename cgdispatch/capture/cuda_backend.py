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

from .graph import CaptureCall, CapturedGraph, GraphBackend, released_replay, tensor_list
from .outputs import alias_tensors
from .pool import OutputLifetime

__all__ = ["CudaGraphBackend", "capture_stream", "MIN_CUDA_WARMUPS"]

# Warm-ups a CUDA capture needs: lazily made per-stream state (the cuBLAS workspace,
# Triton's compile and autotuning of compiled pieces) must exist before capture_begin, or it
# is made inside the capture (in the graph pool) or fails there.
MIN_CUDA_WARMUPS = 1

# One capture stream per device for the whole process, as vLLM's ``graph_capture`` context
# (vllm/distributed/parallel_state.py) makes one stream that every warm-up and capture runs
# on: the caching allocator reuses a block only on the stream that freed it, and each new
# stream gets its own cuBLAS workspace, so a stream per backend would grow the pool.
_CAPTURE_STREAMS: dict[int, torch.cuda.Stream] = {}


def capture_stream(device: torch.device | str | int | None = None) -> torch.cuda.Stream:
    """The process's capture stream on ``device`` (``cuda:N``; None: the current device),
    made on first use. Warm up on it (``with torch.cuda.stream(capture_stream(dev))``) to
    keep a warm-up's blocks and workspaces where the next capture can reuse them."""
    if isinstance(device, int):
        dev = torch.device("cuda", device)
    else:
        dev = torch.device("cuda" if device is None else device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    stream = _CAPTURE_STREAMS.get(index)
    if stream is None:
        stream = _CAPTURE_STREAMS[index] = torch.cuda.Stream(device=torch.device("cuda", index))
    return stream


class CudaGraphBackend(GraphBackend):
    """``torch.cuda.CUDAGraph`` capture on the process's capture stream into one shared pool.

    ``device`` (``cuda:N``; default the current device) is where the model runs: warm-ups,
    capture, synchronisation and memory counters all use it. Warm-ups and captures run on
    :func:`capture_stream` of that device, shared by every backend of the process (vLLM
    makes one); at least :data:`MIN_CUDA_WARMUPS` warm-up precedes each capture (the wrapper
    refuses fewer). The device is synchronised before and after each capture; the graph
    is replayed once right after capture so that the returned output holds this step's
    values (during capture kernels are recorded, not run). WEAK outputs become weak
    references inside the capture, as in vLLM, so their blocks are free for the next graph.
    Needs a CUDA device.
    """

    name = "cuda"
    min_warmups = MIN_CUDA_WARMUPS

    def __init__(self, device: torch.device | str | None = None) -> None:
        super().__init__()
        if not torch.cuda.is_available():
            raise RuntimeError(
                "the 'cuda' graph backend needs a CUDA device and none is available: "
                "use backend='cpu' (the replay stand-in) or backend=None to choose automatically"
            )
        dev = torch.device("cuda" if device is None else device)
        if dev.type != "cuda":
            raise ValueError(
                f"device={dev} is invalid for the 'cuda' graph backend: give a CUDA device "
                "(cuda or cuda:N, the model's own)"
            )
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        self.device = dev
        with torch.cuda.device(dev):
            self.pool = torch.cuda.graph_pool_handle()
        self.stream = capture_stream(dev)
        self._pool_ptrs: set[int] = set()  # storages of CALLER outputs: pool memory

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def warmup(self, fn: Callable[[], Any], num_warmups: int) -> None:
        # Warm up on the stream that captures (torch.cuda.graphs docs): state created lazily
        # per stream (cuBLAS workspaces, Triton autotuning, which synchronises) must exist
        # before capture_begin, or it is made inside the capture, in the graph pool.
        if num_warmups < self.min_warmups:
            raise ValueError(
                f"num_warmups={num_warmups} is invalid on CUDA: at least {self.min_warmups} "
                "warm-up must run on the capture stream before a capture (else cuBLAS "
                "workspaces and Triton compiles happen inside it); set "
                "cudagraph_num_of_warmups >= 1"
            )
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            for _ in range(num_warmups):
                fn()
        torch.cuda.current_stream(self.device).wait_stream(self.stream)

    def _capture(self, call: CaptureCall) -> CapturedGraph:
        lifetime = call.lifetime
        cuda_graph = torch.cuda.CUDAGraph()
        self.synchronize()
        reserved_before = torch.cuda.memory_reserved(self.device)
        free_before, _ = torch.cuda.mem_get_info(self.device)
        start = time.perf_counter()
        # capture_begin/end rather than torch.cuda.graph(): the context manager runs
        # gc.collect() and empty_cache() before every graph, which capture_session avoids.
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            cuda_graph.capture_begin(pool=self.pool)
            try:
                output = call.run()
                if lifetime is OutputLifetime.WEAK:
                    # vLLM: weak inside the capture, so the blocks return to the pool now
                    output = alias_tensors(output)[0]
            finally:
                cuda_graph.capture_end()
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        self.synchronize()
        capture_s = time.perf_counter() - start
        pool_bytes = torch.cuda.memory_reserved(self.device) - reserved_before
        # as vLLM measures graph memory (free memory, after a synchronise), per graph: it
        # counts the instantiated graph's driver memory, which memory_reserved cannot see
        device_bytes = free_before - torch.cuda.mem_get_info(self.device)[0]
        cuda_graph.replay()  # fill the outputs with this step's values
        kept = output if lifetime is OutputLifetime.GRAPH else alias_tensors(output)[0]
        if lifetime is OutputLifetime.CALLER:
            self._pool_ptrs.update(t.untyped_storage().data_ptr() for t in tensor_list(output))
        # the inputs it reads by address must outlive the graph, unless they are pool memory
        inputs = [
            t
            for t in tensor_list((call.args, call.kwargs))
            if t.untyped_storage().data_ptr() not in self._pool_ptrs
        ]
        graph = CapturedGraph(
            kept, released_replay, capture_s, pool_bytes, lifetime, keepalive=[cuda_graph, *inputs]
        )
        graph.capture_output = output
        graph.device_bytes = int(device_bytes)

        def replay() -> Any:
            cuda_graph.replay()
            return graph.output

        graph.replay_fn = replay
        return graph

    def release(self) -> None:
        for graph in self.graphs:
            if graph.keepalive:
                graph.keepalive[0].reset()  # the CUDAGraph frees its graph exec now
        super().release()
        self._pool_ptrs.clear()
        self.synchronize()
        with torch.cuda.device(self.device):
            torch.cuda.empty_cache()
