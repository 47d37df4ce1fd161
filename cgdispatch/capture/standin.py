"""The CPU stand-in for CUDA graphs (docs/architecture.md, "Running without a GPU").

Capture runs the callable once; replay runs it again on the capture's arguments and
copies the results into the output storage the capture handed out. It models the graph
pool as well: a :class:`PoolLedger` counts what each capture allocates and holds, with
vLLM's output lifetimes, and WEAK outputs live in one shared :class:`OutputArena`, so a
result held across another graph's replay is overwritten as a reused pool block would be
on a GPU. Static-buffer and aliasing behaviour are those of a GPU; only the speed-up is
absent.
"""

from __future__ import annotations

import functools
import time
import weakref
from typing import Any

import torch

from .graph import CaptureCall, CapturedGraph, GraphBackend, released_replay, tensor_list
from .outputs import OutputArena, alias_tensors, copy_into, map_tensors
from .pool import BLOCK_BYTES, AllocationTracker, OutputLifetime, PoolLedger

__all__ = ["CpuReplayBackend", "stand_in_pool_bytes"]


_LIVE_STAND_INS: weakref.WeakSet[CpuReplayBackend] = weakref.WeakSet()


def stand_in_pool_bytes() -> int:
    """Bytes every live CPU stand-in pool holds now: ledger blocks plus weak-output arenas."""
    return sum(b.ledger.held_bytes + b.arena.nbytes for b in _LIVE_STAND_INS)


class CpuReplayBackend(GraphBackend):
    """CPU stand-in for CUDA graphs: replay = run again, write into the captured outputs.

    The callable is rerun on the arguments given at capture (a CUDA graph reads the
    capture's addresses); arguments of a later call are not seen, exactly as on a GPU.
    Outputs may be a tensor or nested tuples/lists/dicts of tensors. Each capture runs
    under an :class:`AllocationTracker` feeding ``ledger``; WEAK outputs live in ``arena``.
    """

    name = "cpu"

    def __init__(self, round_bytes: int = BLOCK_BYTES) -> None:
        super().__init__()
        self.ledger = PoolLedger(round_bytes)
        self.tracker = AllocationTracker([self.ledger])
        self.arena = OutputArena()
        # data_ptr -> the storage a graph owns, for CALLER outputs handed out as aliases: a
        # later graph reads the owner at replay, so that the alias dies with the caller
        self._owners: dict[int, torch.UntypedStorage] = {}
        _LIVE_STAND_INS.add(self)

    def _capture(self, call: CaptureCall) -> CapturedGraph:
        lifetime = call.lifetime
        start = time.perf_counter()
        # capture_s includes the ledger's op-by-op tracking: CPU capture times are not a
        # GPU's, and the stand-in's are slower still; replays are not tracked
        with self.tracker:
            self.tracker.begin(call.label)
            try:
                result = call.run()
            finally:
                (memory,) = self.tracker.end(lifetime)
        capture_s = time.perf_counter() - start
        graph = CapturedGraph(result, released_replay, capture_s, None, lifetime, memory)
        if lifetime is OutputLifetime.WEAK:
            graph.capture_output = self.arena.bind(graph, result)  # sets graph.output
        elif lifetime is OutputLifetime.CALLER:
            graph.capture_output = self._hand_out(result)
        else:
            graph.capture_output = result
        del result
        # a replay reruns ``fn`` on the capture's tensors (partial: the C call path is the
        # cheapest here; benchmarks/bench_replay_overhead.py times it)
        rerun = functools.partial(
            call.fn,
            *map_tensors(call.args, self._owner_view),
            **map_tensors(call.kwargs, self._owner_view),
        )
        if isinstance(graph.output, torch.Tensor):  # the common case, without the tree walk

            def replay() -> Any:
                out = graph.output  # read per replay: an arena growth rebinds it
                out.copy_(rerun())
                return out

        else:

            def replay() -> Any:
                out = graph.output
                copy_into(out, rerun())
                return out

        graph.replay_fn = replay
        return graph

    def _hand_out(self, result: Any) -> Any:
        """Aliases of the outputs this capture allocated, followed by the ledger."""
        tracked = {}
        for t in tensor_list(result):
            key = self.tracker.key_of(t)
            if key is not None:
                tracked[t.untyped_storage().data_ptr()] = (key, t.untyped_storage())
        aliased, storages = alias_tensors(
            result, lambda t: t.untyped_storage().data_ptr() in tracked
        )
        for ptr, weak in storages.items():
            key, owner = tracked[ptr]
            self.tracker.follow(weak, key)
            self._owners[ptr] = owner
        return aliased

    def _owner_view(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        owner = self._owners.get(storage.data_ptr())
        if owner is None or owner is storage:
            return t
        return torch.empty(0, dtype=t.dtype, device=t.device).set_(
            owner, t.storage_offset(), t.shape, t.stride()
        )

    def release(self) -> None:
        super().release()
        self.arena.release()
        self.ledger.release()
        self._owners.clear()
