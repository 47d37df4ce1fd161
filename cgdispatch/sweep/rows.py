"""What a sweep produces: one :class:`SweepRow` per (mode, ladder, shape) point and one
:class:`CaptureRecord` per captured key. Both are plain records; the store
(:mod:`cgdispatch.sweep.store`) keeps them, the runner (:mod:`cgdispatch.sweep.run`) makes them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..core.v1 import RELEASE as V1_RELEASE

# rows stored before sweeps knew generation 2 were measured under V1 (vLLM 0.33): read, they
# name that release (new sweeps default to the newest, SweepSpec.vllm_version)
LEGACY_VERSION = V1_RELEASE

__all__ = ["SweepRow", "CaptureRecord", "SWEEP_COLUMNS", "CAPTURE_COLUMNS", "POINT_COLUMNS"]

# The stable row schema of sweeps (column -> meaning); plots and notebooks rely on it.
SWEEP_COLUMNS: dict[str, str] = {
    "sweep": "sweep spec name (smoke, gpu-small, ...)",
    "model": "model name from the registry (toy-tiny, hf-llama-tiny, ...)",
    "dtype": "weights and activations dtype",
    "device": "torch device type the point ran on (cpu, cuda)",
    "device_name": "CPU or the GPU's name (NVIDIA H200)",
    "torch_version": "torch.__version__ of the run",
    "mode": "cudagraph_mode asked for (config level)",
    "vllm_version": "vLLM release whose graph dispatch the runner followed: 0.33 (V1, "
    "CudagraphDispatcher) or 0.34 (generation 2, CudaGraphManager); rows stored before "
    "generation 2 read as 0.33",
    "resolved_mode": "mode after GraphConfig.resolve() for the model's attention support",
    "runtime_mode": "runtime mode this shape dispatched to (FULL, PIECEWISE, NONE)",
    "ladder": "capture-size ladder name",
    "capture_sizes": "the ladder's sizes, comma-separated",
    "max_num_seqs": "scheduler limit the config was built with",
    "num_capture_sizes": "number of capture sizes",
    "num_tokens": "real tokens in the step",
    "uniform_decode": "True: uniform decode batch; False: mixed decodes + prefill chunks",
    "padded_size": "tokens after padding to a capture size (= num_tokens when eager)",
    "eager_ms": "median step time, eager (no graphs)",
    "eager_p10_ms": "10th percentile, eager",
    "eager_p90_ms": "90th percentile, eager",
    "graph_ms": "median step time through the runner with graphs",
    "graph_p10_ms": "10th percentile, graphs",
    "graph_p90_ms": "90th percentile, graphs",
    "eager_host_ms": "median host time to issue an eager step (equals eager_ms on CPU)",
    "graph_host_ms": "median host time to issue a graph step (equals graph_ms on CPU)",
    "speedup_x": "eager_ms / graph_ms",
    "num_graphs": "graphs captured for this (mode, ladder): one per FULL key, one per piece per PIECEWISE key",
    "capture_s": "wall time of capturing every key, warm-ups included",
    "graph_capture_s": "time inside graph capture only (sum over keys)",
    "pool_bytes": "graph-pool bytes: sum of what each graph capture reserved (CUDA; empty on CPU)",
    "peak_allocated_bytes": "peak allocated bytes during the capture above those allocated "
    "before it (weights and KV cache excluded; CUDA; empty on CPU)",
    "peak_reserved_bytes": "peak reserved bytes during the capture above those reserved "
    "before it (CUDA; empty on CPU)",
    "repeats": "timed runs per median",
    "warmup": "discarded runs before the timed ones",
    "input_sets": "random batches rotated through the timed runs",
    "cpu_threads": "torch intra-op threads on CPU",
    "status": "ok or failed",
    "error": "the error of a failed point ('' when ok)",
    "source": "measured (CPU) or measured (<GPU name>)",
    "timestamp": "Unix time the row was written",
}

# A point's identity: a stored row is reused (a resumed sweep skips it) only when every one
# of these equals the new point's. Sweep name and timing settings are in it, so a store shared
# by two specs never passes one spec's rows off as the other's.
POINT_COLUMNS: tuple[str, ...] = (
    "sweep",
    "model",
    "dtype",
    "device",
    "mode",
    "vllm_version",  # hashed only when not V1's release (schema.point_ids): older ids stay valid
    "ladder",
    "capture_sizes",
    "max_num_seqs",
    "repeats",
    "warmup",
    "input_sets",
    "cpu_threads",
    "num_tokens",
    "uniform_decode",
)


@dataclass
class SweepRow:
    """One measured (or failed) point; field meanings in :data:`SWEEP_COLUMNS`. ``None`` is
    "not measured" (a failed point, or pool bytes on CPU)."""

    sweep: str
    model: str
    dtype: str
    device: str
    device_name: str
    torch_version: str
    mode: str
    ladder: str
    capture_sizes: str
    max_num_seqs: int
    num_capture_sizes: int
    num_tokens: int
    uniform_decode: bool
    repeats: int
    warmup: int
    input_sets: int
    cpu_threads: int
    source: str
    status: str
    error: str = ""
    timestamp: float = 0.0
    vllm_version: str = LEGACY_VERSION
    resolved_mode: str | None = None
    runtime_mode: str | None = None
    padded_size: int | None = None
    eager_ms: float | None = None
    eager_p10_ms: float | None = None
    eager_p90_ms: float | None = None
    graph_ms: float | None = None
    graph_p10_ms: float | None = None
    graph_p90_ms: float | None = None
    eager_host_ms: float | None = None
    graph_host_ms: float | None = None
    speedup_x: float | None = None
    num_graphs: int | None = None
    capture_s: float | None = None
    graph_capture_s: float | None = None
    pool_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The row in :data:`SWEEP_COLUMNS` order."""
        return {name: getattr(self, name) for name in SWEEP_COLUMNS}


@dataclass(kw_only=True)
class CaptureRecord:
    """One captured key of a unit: what it cost (field meanings: the runner's capture report).
    Its fields, in order, are the columns of ``captures.csv`` (:data:`CAPTURE_COLUMNS`)."""

    sweep: str
    model: str
    dtype: str
    device: str
    device_name: str
    mode: str  # the unit's mode (config level)
    vllm_version: str = LEGACY_VERSION  # the unit's generation (its keys are its descriptors)
    ladder: str
    capture_sizes: str
    max_num_seqs: int
    runtime_mode: str  # the key's mode: FULL or PIECEWISE
    num_tokens: int
    num_reqs: int | None
    uniform: bool
    num_graphs: int
    capture_s: float
    step_s: float | None
    pool_bytes: int | None
    source: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# One row per captured key (the runner's capture report), in ``captures.csv`` next to the rows.
CAPTURE_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(CaptureRecord))
