"""Measuring steps like a benchmark: step time, host time, capture time, graph-pool memory.

Timing discards warm-up runs, rotates the inputs among several random sets (so no run is
timed on the inputs of the run before, or on zeros) and reports the median and spread.
On CUDA the device time comes from CUDA events around each step; on CPU from
``perf_counter_ns`` after synchronisation (there is nothing to synchronise: the step has
returned). Host time is how long the Python call takes to return: on a GPU that is the
launch overhead that graphs remove; on CPU it equals the step time. Capture is timed
separately and never mixed into step time.

This module measures what it is given; it does not build models, capture graphs or choose
sizes (see ``runner.py`` and ``sweep.py``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import torch

from ..core.validate import check_int

__all__ = [
    "StepTiming",
    "CaptureMemory",
    "time_step",
    "time_call",
    "measure_capture_memory",
    "device_label",
    "source_label",
]

T = TypeVar("T")


@dataclass(frozen=True)
class StepTiming:
    """Step time statistics over ``repeats`` timed runs (warm-up excluded).

    ``median_ms``/``p10_ms``/``p90_ms``: device-inclusive step time. ``host_median_ms``:
    time for the call to return on the host (no synchronisation).
    """

    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    host_median_ms: float
    repeats: int
    warmup: int
    device: str

    @property
    def spread_ms(self) -> float:
        """p90 - p10: the width of the middle 80 % of runs."""
        return self.p90_ms - self.p10_ms

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CaptureMemory:
    """Device memory around one capture (CUDA only), in bytes.

    ``device_bytes``: the drop in free device memory (``torch.cuda.mem_get_info``) from
    before to after the whole capture, each read after a synchronise: what vLLM logs as
    "Graph capturing finished in N secs, took X GiB" (``vllm/v1/worker/gpu_model_runner.py``,
    ``capture_model``). It includes what the allocator's counters cannot see: the driver
    memory of instantiated graphs (their kernel nodes) and new cuBLAS workspaces. It is
    device-wide, so another process allocating meanwhile shows in it.
    ``pool_bytes``: reserved memory added by the capture (the graph pool grows by whole
    segments; warm-up runs may add to it unless the caller warmed the allocator up first);
    ``allocated_bytes``: allocated memory still held afterwards (the graphs' kept outputs
    and blocks); ``peak_allocated_bytes``/``peak_reserved_bytes``: the high-water marks
    during the capture above the allocated/reserved bytes before it (weights and KV cache
    excluded; the counters are reset first). ``private_pool_bytes``: bytes of the segments
    that belong to graph pools (private pools, from ``torch.cuda.memory_snapshot``) added
    by the capture, warm-ups excluded; None where the snapshot does not say which pool a
    segment belongs to.
    """

    pool_bytes: int
    allocated_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    private_pool_bytes: int | None = None
    device_bytes: int | None = None


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of an ascending list."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def time_step(
    step: Callable[[Any], Any],
    input_sets: Sequence[Any],
    *,
    warmup: int = 3,
    repeats: int = 20,
    device: str | torch.device = "cpu",
) -> StepTiming:
    """Time ``step(inputs)`` over ``repeats`` runs after ``warmup`` discarded ones.

    Run ``i`` uses ``input_sets[i % len(input_sets)]``: give at least two random sets.
    Each timed run is synchronised before the next starts, so runs do not overlap.
    """
    check_int("warmup", warmup, 0)
    check_int("repeats", repeats, 1)
    if len(input_sets) < 1:
        raise ValueError(
            "input_sets is empty: give at least one (better several) random input sets"
        )
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    n = len(input_sets)
    for i in range(warmup):
        step(input_sets[i % n])
    if cuda:
        torch.cuda.synchronize(dev)
    step_ms, host_ms = [], []
    for i in range(repeats):
        inputs = input_sets[(warmup + i) % n]
        if cuda:
            # events on the step's device and its current stream, not the current device's
            # (a model on cuda:1 would otherwise be timed by events on cuda:0)
            stream = torch.cuda.current_stream(dev)
            with torch.cuda.device(dev):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(stream)
                t0 = time.perf_counter_ns()
                step(inputs)
                t1 = time.perf_counter_ns()
                end.record(stream)
            end.synchronize()
            step_ms.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter_ns()
            step(inputs)
            t1 = time.perf_counter_ns()  # on CPU the step has finished when it returns
            step_ms.append((t1 - t0) / 1e6)
        host_ms.append((t1 - t0) / 1e6)
    ordered = sorted(step_ms)
    return StepTiming(
        median_ms=statistics.median(ordered),
        p10_ms=_quantile(ordered, 0.1),
        p90_ms=_quantile(ordered, 0.9),
        min_ms=ordered[0],
        host_median_ms=statistics.median(host_ms),
        repeats=repeats,
        warmup=warmup,
        device=str(dev),
    )


def time_call(fn: Callable[[], T], device: str | torch.device = "cpu") -> tuple[T, float]:
    """``(fn(), seconds)``, synchronised before and after on CUDA (for capture time)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t0 = time.perf_counter_ns()
    result = fn()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return result, (time.perf_counter_ns() - t0) / 1e9


def measure_capture_memory(
    capture: Callable[[], T], device: str | torch.device = "cuda"
) -> tuple[T, CaptureMemory | None]:
    """``(capture(), CaptureMemory)``: free device memory and allocator statistics around it.

    Synchronises, resets the peak counters and reads the free memory before, runs the
    capture, synchronises and reads again (vLLM's measure of graph memory, see
    :class:`CaptureMemory`). Returns ``None`` for the memory off CUDA, where there is no
    graph pool to measure (use :func:`cgdispatch.estimate.graph_memory.estimate_graph_memory`).
    """
    dev = torch.device(device)
    if dev.type != "cuda":
        return capture(), None
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    # memory_reserved/allocated and their max_ read torch.cuda.memory_stats(dev)
    reserved0 = torch.cuda.memory_reserved(dev)
    allocated0 = torch.cuda.memory_allocated(dev)
    private0 = _private_pool_bytes(dev)
    free0, _ = torch.cuda.mem_get_info(dev)
    result = capture()
    torch.cuda.synchronize(dev)
    free1, _ = torch.cuda.mem_get_info(dev)
    private = _private_pool_bytes(dev)
    memory = CaptureMemory(
        pool_bytes=torch.cuda.memory_reserved(dev) - reserved0,
        allocated_bytes=torch.cuda.memory_allocated(dev) - allocated0,
        peak_allocated_bytes=torch.cuda.max_memory_allocated(dev) - allocated0,
        peak_reserved_bytes=torch.cuda.max_memory_reserved(dev) - reserved0,
        private_pool_bytes=None if private is None or private0 is None else private - private0,
        device_bytes=int(free0 - free1),
    )
    return result, memory


def _private_pool_bytes(dev: torch.device) -> int | None:
    """Bytes in segments of graph (private) pools on ``dev``; None if the snapshot lacks pools."""
    try:
        segments = torch.cuda.memory_snapshot()
    except (AttributeError, RuntimeError):  # no CUDA build, or no snapshot support
        return None
    total, seen = 0, False
    for segment in segments:
        if segment.get("device") != dev.index and dev.index is not None:
            continue
        pool = segment.get("segment_pool_id")
        if pool is None:
            continue
        seen = True
        if tuple(pool) != (0, 0):  # (0, 0): the default pool; others belong to graph pools
            total += segment["total_size"]
    return total if seen else None


def device_label(device: str | torch.device) -> str:
    """A device's human name: ``"CPU"`` or the GPU's name (``"NVIDIA H200"``)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return dev.type.upper()


def source_label(device: str | torch.device) -> str:
    """``"measured (CPU)"`` or ``"measured (<GPU name>)"`` for numbers timed on ``device``."""
    return f"measured ({device_label(device)})"
