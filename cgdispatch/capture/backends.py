"""Graph backends by name: ``get_backend("cuda" | "cpu" | "auto" | instance)``.

The backends live in ``cuda_backend.py`` (``torch.cuda.CUDAGraph``) and ``standin.py``
(the CPU stand-in); their shared interface and the recorded graph in ``graph.py``. This
module is the one place that maps names to them, and re-exports them for
``from cgdispatch.capture.backends import ...``.
"""

from __future__ import annotations

import torch

from .cuda_backend import CudaGraphBackend
from .graph import CapturedGraph, GraphBackend, live_graph_count
from .standin import CpuReplayBackend, stand_in_pool_bytes

__all__ = [
    "CapturedGraph",
    "GraphBackend",
    "CudaGraphBackend",
    "CpuReplayBackend",
    "get_backend",
    "live_graph_count",
    "stand_in_pool_bytes",
    "BACKENDS",
]


BACKENDS: dict[str, type[GraphBackend]] = {"cuda": CudaGraphBackend, "cpu": CpuReplayBackend}


def get_backend(
    backend: GraphBackend | str | None = None, device: torch.device | str | None = None
) -> GraphBackend:
    """A backend instance: given, by name (``"cuda"``, ``"cpu"``), or automatic (None/"auto").

    Automatic picks CUDA when ``torch.cuda.is_available()``, else the CPU stand-in. Each
    call by name creates a new backend, hence a new memory pool: pass one instance to
    every wrapper that should share a pool. ``device``: the model's device; a CUDA backend
    is made on it (``cuda:N`` captures on device N's stream), and a CUDA backend instance
    on another device is a ValueError (its graphs would record nothing of the model).
    """
    dev = None if device is None else torch.device(device)
    if isinstance(backend, GraphBackend):
        own = getattr(backend, "device", None)
        if dev is not None and dev.type == "cuda" and own is not None and not _same(own, dev):
            raise ValueError(
                f"graph backend on {own} with a model on {dev} is invalid: a graph captured "
                f"on {own} records none of the model's kernels; build the backend on {dev} "
                f"(CudaGraphBackend(device='{dev}')) or pass backend='cuda'"
            )
        return backend
    if backend is None or backend == "auto":
        backend = "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(backend, str) or backend.lower() not in BACKENDS:
        raise ValueError(
            f"graph backend {backend!r} is unknown: use one of {sorted(BACKENDS)}, 'auto' "
            "or a GraphBackend instance"
        )
    if backend.lower() == "cuda" and dev is not None and dev.type == "cuda":
        return CudaGraphBackend(dev)
    return BACKENDS[backend.lower()]()


def _same(a: torch.device, b: torch.device) -> bool:
    """Whether two CUDA devices are one (an index-less ``cuda`` is the current device)."""

    def index(d: torch.device) -> int:
        return d.index if d.index is not None else torch.cuda.current_device()

    return a.type == b.type and index(a) == index(b)
