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
