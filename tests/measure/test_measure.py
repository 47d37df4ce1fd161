"""Step timing statistics (checked with a fake clock), capture timing and memory hooks."""

from __future__ import annotations

import contextlib
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

        def record(self, stream: object = None) -> None:
            self.t_ms = clock.now / 1e6 + (device_lag_ms if self.is_end else 0.0)

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, end: Event) -> float:
            return end.t_ms - self.t_ms

    counters = {"reserved": 10 << 20, "allocated": 4 << 20, "peak_alloc": 0, "peak_res": 0}
    counters["free"] = 40 << 30
    fake_cuda = {
        "Event": Event, "synchronize": lambda *a: None, "reset_peak_memory_stats": lambda *a: None,
        "memory_reserved": lambda *a: counters["reserved"], "memory_allocated": lambda *a: counters["allocated"],
        "max_memory_allocated": lambda *a: counters["peak_alloc"], "max_memory_reserved": lambda *a: counters["peak_res"],
        "mem_get_info": lambda *a: (counters["free"], 80 << 30), "current_stream": lambda *a: None,
        "device": lambda *a: contextlib.nullcontext(),
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
        counters["free"] -= (6 << 20) + (3 << 20)  # the pool's segment + graph executables
        return "graph"

    result, memory = measure_capture_memory(capture, "cuda")
    assert result == "graph"
    assert (memory.pool_bytes, memory.allocated_bytes) == (6 << 20, 1 << 20)
    # peaks above what was held before the capture (4 MiB allocated, 10 MiB reserved)
    assert (memory.peak_allocated_bytes, memory.peak_reserved_bytes) == (5 << 20, 6 << 20)
    assert memory.device_bytes == 9 << 20


def test_capture_memory_is_the_free_memory_drop_with_peaks_above_the_start(monkeypatch):
    """On a fake GPU holding weights before the capture: the free-memory drop counts the
    driver's graph memory the allocator cannot see, and the peaks exclude the weights."""
    from fake_cuda import install

    cuda = install(monkeypatch)
    rng = np.random.default_rng()
    mib = 1 << 20
    weights, kv = (int(x) * mib for x in rng.integers(100, 1000, 2))
    cuda.allocate(1, reserved=weights + kv, allocated=weights + kv)
    segments = [int(x) * 2 * mib for x in rng.integers(1, 10, rng.integers(2, 6))]
    driver = [int(x) * mib for x in rng.integers(1, 8, len(segments))]
    transient = int(rng.integers(1, 50)) * mib  # a warm-up's activations, freed after

    def capture() -> int:
        cuda.allocate(1, reserved=0, allocated=transient)
        cuda.allocate(1, reserved=0, allocated=-transient)
        for seg, exe in zip(segments, driver):
            cuda.allocate(1, reserved=seg, allocated=seg // 2, driver=exe)
        return len(segments)

    free_on_0 = cuda.free_bytes[0]
    result, memory = measure_capture_memory(capture, "cuda:1")
    assert result == len(segments) and cuda.free_bytes[0] == free_on_0
    assert memory.device_bytes == sum(segments) + sum(driver)
    assert memory.pool_bytes == sum(segments)
    assert memory.allocated_bytes == sum(s // 2 for s in segments)
    assert memory.peak_reserved_bytes == sum(segments)
    assert memory.peak_allocated_bytes == max(transient, sum(s // 2 for s in segments))
    reads = {i for name, i in cuda.calls if name in ("mem_get_info", "synchronize")}
    assert reads == {1}  # the model's device, not the current one (0)


def test_cuda_step_events_are_recorded_on_the_steps_device(monkeypatch):
    from fake_cuda import install

    cuda = install(monkeypatch)
    made = []
    event_class = torch.cuda.Event

    def event(enable_timing: bool = False):
        made.append(event_class(enable_timing))
        return made[-1]

    monkeypatch.setattr(torch.cuda, "Event", event)
    launched = []
    timing = time_step(
        lambda x: launched.append(cuda.on_thread()), [1, 2], warmup=1, repeats=3, device="cuda:1"
    )
    assert timing.device == "cuda:1" and len(made) == 6
    assert {e.recorded for e in made} == {(1, cuda.default[1])}
    assert launched[1:] == [(1, cuda.default[1])] * 3
