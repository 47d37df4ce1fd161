"""A fake ``torch.cuda`` for CPU tests of the CUDA code paths.

It patches the few ``torch.cuda`` functions the backend, the runner and the timing code
call, and records which device and stream each one ran on, so that device plumbing (a
model on ``cuda:1``), stream sharing and memory counters are checked without a GPU.
Tensors stay on the CPU: a fake graph's capture runs the callable (its outputs hold
values) and a replay does nothing, which is enough for the bookkeeping these tests check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import torch


@dataclass(eq=False)
class FakeStream:
    """A stream on one device; ``wait_stream`` is recorded, nothing else happens."""

    device: torch.device
    waits: list[FakeStream] = field(default_factory=list)

    def wait_stream(self, other: FakeStream) -> None:
        self.waits.append(other)


class FakeCuda:
    """Installs the fake on ``monkeypatch``; ``calls`` lists ``(name, device index)``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, num_devices: int = 2) -> None:
        self.num_devices = num_devices
        self.device_index = 0  # torch.cuda.current_device()
        self.default = {i: FakeStream(torch.device("cuda", i)) for i in range(num_devices)}
        self.current = dict(self.default)  # device index -> current stream
        self.streams_made: list[FakeStream] = []
        self.calls: list[tuple[str, int]] = []
        self.free_bytes = {i: 80 << 30 for i in range(num_devices)}
        self.counters = {i: dict.fromkeys(_COUNTERS, 0) for i in range(num_devices)}
        self.capturing = False  # between a fake graph's capture_begin and capture_end
        fake = self

        class Graph:
            """Capture records the device and stream it began on; replay does nothing."""

            def __init__(self) -> None:
                self.began_on: tuple[int, FakeStream] | None = None
                self.replays = 0

            def capture_begin(self, pool: object = None) -> None:
                i = fake.device_index
                self.began_on = (i, fake.current[i])
                fake.capturing = True

            def capture_end(self) -> None:
                fake.capturing = False

            def replay(self) -> None:
                self.replays += 1

            def reset(self) -> None:
                pass

        class Event:
            """Records the device and stream of each ``record``."""

            def __init__(self, enable_timing: bool = False) -> None:
                self.recorded: tuple[int, FakeStream] | None = None

            def record(self, stream: FakeStream | None = None) -> None:
                i = fake.device_index
                self.recorded = (i, stream if stream is not None else fake.current[i])

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, end: Event) -> float:
                return 1.0

        self.Graph = Graph
        patches = {
            "is_available": lambda: True,
            "device_count": lambda: num_devices,
            "current_device": lambda: self.device_index,
            "device": self._device,
            "Stream": self._make_stream,
            "stream": self._stream,
            "current_stream": lambda device=None: self.current[self._index(device)],
            "synchronize": lambda device=None: self._log("synchronize", device),
            "graph_pool_handle": lambda: (0, self.device_index + 1),
            "CUDAGraph": Graph,
            "Event": Event,
            "empty_cache": lambda: self._log("empty_cache", None),
            "mem_get_info": self._mem_get_info,
            "reset_peak_memory_stats": lambda device=None: self._reset_peaks(device),
            "memory_reserved": lambda device=None: self._counter("reserved", device),
            "memory_allocated": lambda device=None: self._counter("allocated", device),
            "max_memory_reserved": lambda device=None: self._counter("peak_reserved", device),
            "max_memory_allocated": lambda device=None: self._counter("peak_allocated", device),
            "memory_snapshot": lambda: [],
        }
        for name, value in patches.items():
            monkeypatch.setattr(torch.cuda, name, value)

    # ----- the patched functions ---------------------------------------------------------
    def _index(self, device: object) -> int:
        if device is None:
            return self.device_index
        if isinstance(device, int):
            return device
        dev = torch.device(device)
        return self.device_index if dev.index is None else dev.index

    def _log(self, name: str, device: object) -> None:
        self.calls.append((name, self._index(device)))

    @contextlib.contextmanager
    def _device(self, device: object) -> Iterator[None]:
        before, self.device_index = self.device_index, self._index(device)
        try:
            yield
        finally:
            self.device_index = before

    def _make_stream(self, device: object = None, priority: int = 0) -> FakeStream:
        stream = FakeStream(torch.device("cuda", self._index(device)))
        self.streams_made.append(stream)
        return stream

    @contextlib.contextmanager
    def _stream(self, stream: FakeStream) -> Iterator[None]:
        # as torch.cuda.stream: the stream's device becomes current while it is set
        i = stream.device.index
        before_device, before_stream = self.device_index, self.current[i]
        self.device_index, self.current[i] = i, stream
        try:
            yield
        finally:
            self.device_index, self.current[i] = before_device, before_stream

    def _mem_get_info(self, device: object = None) -> tuple[int, int]:
        self._log("mem_get_info", device)
        return self.free_bytes[self._index(device)], 80 << 30

    def _counter(self, name: str, device: object) -> int:
        self._log(name, device)
        return self.counters[self._index(device)][name]

    def _reset_peaks(self, device: object) -> None:
        c = self.counters[self._index(device)]
        c["peak_reserved"], c["peak_allocated"] = c["reserved"], c["allocated"]

    # ----- what a test does to the device --------------------------------------------------
    def on_thread(self) -> tuple[int, FakeStream]:
        """(current device, its current stream): where a kernel launched now would run."""
        return self.device_index, self.current[self.device_index]

    def allocate(self, device: int, reserved: int, allocated: int, driver: int = 0) -> None:
        """The allocator reserves/allocates more on ``device``; the driver takes ``driver`` more."""
        c = self.counters[device]
        c["reserved"] += reserved
        c["allocated"] += allocated
        c["peak_reserved"] = max(c["peak_reserved"], c["reserved"])
        c["peak_allocated"] = max(c["peak_allocated"], c["allocated"])
        self.free_bytes[device] -= reserved + driver


_COUNTERS = ("reserved", "allocated", "peak_reserved", "peak_allocated")


def install(monkeypatch: pytest.MonkeyPatch, num_devices: int = 2) -> FakeCuda:
    """A fake ``torch.cuda`` with ``num_devices`` GPUs; the process-wide capture streams
    start empty (restored after the test)."""
    from cgdispatch.capture import cuda_backend

    monkeypatch.setattr(cuda_backend, "_CAPTURE_STREAMS", {})
    return FakeCuda(monkeypatch, num_devices)
