"""Step timing statistics (checked with a fake clock), capture timing and memory hooks."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from cgdispatch.measure import timing as measure
from cgdispatch.measure.timing import measure_capture_memory, source_label, time_call, time_step


class FakeClock:
    """perf_counter_ns that advances only when a step runs, by a chosen duration."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_time_step_statistics_rotation_and_warmup(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    clock = FakeClock()
    monkeypatch.setattr(measure.time, "perf_counter_ns", clock)
    warmup, repeats = 3, 11
    durations_ns = [rng.randint(1_000, 9_000_000) for _ in range(warmup + repeats)]
    input_sets = [torch.randn(4) for _ in range(3)]
    seen = []

    def step(inputs: torch.Tensor) -> None:
        seen.append(inputs)
        clock.now += durations_ns[len(seen) - 1]

    timing = time_step(step, input_sets, warmup=warmup, repeats=repeats)
    assert len(seen) == warmup + repeats
    assert all(s is input_sets[i % 3] for i, s in enumerate(seen))  # rotated, none skipped
    timed_ms = np.array(durations_ns[warmup:]) / 1e6  # warm-up runs discarded
    assert timing.median_ms == pytest.approx(np.median(timed_ms))
    assert timing.p10_ms == pytest.approx(np.percentile(timed_ms, 10))
    assert timing.p90_ms == pytest.approx(np.percentile(timed_ms, 90))
    assert timing.min_ms == pytest.approx(timed_ms.min())
    assert timing.host_median_ms == pytest.approx(np.median(timed_ms))  # CPU: host == step
    assert timing.spread_ms == pytest.approx(timing.p90_ms - timing.p10_ms)
    assert (timing.repeats, timing.warmup, timing.device) == (repeats, warmup, "cpu")


def test_time_step_on_a_real_step_runs_and_is_positive() -> None:
    weight = torch.randn(32, 32)
    sets = [torch.randn(8, 32) for _ in range(2)]
    outs = []
    timing = time_step(lambda x: outs.append(x @ weight), sets, warmup=1, repeats=5)
    assert len(outs) == 6 and torch.allclose(outs[-1], sets[5 % 2] @ weight)
    assert 0 < timing.min_ms <= timing.median_ms <= timing.p90_ms


def test_time_call_and_capture_memory_off_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(measure.time, "perf_counter_ns", clock)

    def capture() -> str:
        clock.now += 2_500_000_000
        return "graph"

    assert time_call(capture) == ("graph", pytest.approx(2.5))
    assert measure_capture_memory(lambda: 42, "cpu") == (42, None)
    assert source_label("cpu") == "measured (CPU)"


@pytest.mark.parametrize("kwargs", [{"warmup": -1}, {"repeats": 0}, {"repeats": 2.5}])
def test_bad_counts_raise_value_error(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        time_step(lambda x: x, [torch.randn(2)], **kwargs)
    with pytest.raises(ValueError, match="input_sets"):
        time_step(lambda x: x, [])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_timing_and_graph_pool_memory() -> None:
    x = torch.randn(256, 256, device="cuda")
    timing = time_step(lambda a: a @ a, [x, x.clone()], warmup=2, repeats=5, device="cuda")
    assert timing.median_ms > 0 and timing.device.startswith("cuda")
    graph = torch.cuda.CUDAGraph()
    static = torch.randn(1024, 1024, device="cuda")

    def capture() -> torch.Tensor:
        with torch.cuda.graph(graph):
            return static @ static

    out, memory = measure_capture_memory(capture, "cuda")
    graph.replay()
    torch.testing.assert_close(out, static @ static)
    assert memory.allocated_bytes >= 1024 * 1024 * 4  # the output stays in the pool
    assert memory.peak_allocated_bytes >= memory.allocated_bytes
    assert source_label("cuda").startswith("measured (") and "CPU" not in source_label("cuda")


def test_cuda_branch_with_stand_in_events_and_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA code path, run with stand-ins: device time from events, host time from the
    clock, pool bytes from allocator counters the capture changes."""
    clock = FakeClock()
    monkeypatch.setattr(measure.time, "perf_counter_ns", clock)
    device_lag_ms = 0.75  # the GPU finishes this long after the host call returns

    class Event:
        created = 0

        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing
            self.is_end = Event.created % 2 == 1  # time_step makes (start, end) pairs
            Event.created += 1

        def record(self) -> None:
            self.t_ms = clock.now / 1e6 + (device_lag_ms if self.is_end else 0.0)

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, end: Event) -> float:
            return end.t_ms - self.t_ms

    counters = {"reserved": 10 << 20, "allocated": 4 << 20, "peak_alloc": 0, "peak_res": 0}
    fake_cuda = {
        "Event": Event, "synchronize": lambda *a: None, "reset_peak_memory_stats": lambda *a: None,
        "memory_reserved": lambda *a: counters["reserved"], "memory_allocated": lambda *a: counters["allocated"],
        "max_memory_allocated": lambda *a: counters["peak_alloc"], "max_memory_reserved": lambda *a: counters["peak_res"],
    }  # fmt: skip
    for name, value in fake_cuda.items():
        monkeypatch.setattr(torch.cuda, name, value)
    host_ns = [2_000_000, 1_000_000, 3_000_000, 1_500_000, 2_500_000]
    calls = []

    def step(x: torch.Tensor) -> None:
        clock.now += host_ns[len(calls)]
        calls.append(x)

    timing = time_step(step, [torch.randn(2), torch.randn(2)], warmup=1, repeats=4, device="cuda")
    host = np.array(host_ns[1:]) / 1e6  # the warm-up run is not timed
    assert timing.host_median_ms == pytest.approx(np.median(host))
    assert timing.median_ms == pytest.approx(np.median(host + device_lag_ms))
    assert timing.device == "cuda" and len(calls) == 5

    def capture() -> str:
        counters["reserved"] += 6 << 20  # a new 6 MiB segment for the graph pool
        counters["allocated"] += 1 << 20  # the graph's outputs stay allocated
        counters["peak_alloc"], counters["peak_res"] = 9 << 20, 16 << 20
        return "graph"

    result, memory = measure_capture_memory(capture, "cuda")
    assert result == "graph"
    assert (memory.pool_bytes, memory.allocated_bytes) == (6 << 20, 1 << 20)
    assert (memory.peak_allocated_bytes, memory.peak_reserved_bytes) == (9 << 20, 16 << 20)
