"""Capture every key of a runner's dispatcher, largest first, and report what each cost.

``GraphRunner.capture_all`` calls this; it runs one dummy step per key under the key's
forward context, so the wrappers inside capture. It does not choose keys (the dispatcher
does: V1's ``get_capture_descs`` or generation 2's ``capture_descs``, in their capture
order, through ``core.generation.capture_keys``) and does not time replays (``measure/`` does).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from ..core.generation import GraphKey, capture_keys
from ..core.modes import CUDAGraphMode
from .context import set_forward_context
from .graph_key import is_uniform_key, uniform_query_len
from .runner_state import RunnerState

if TYPE_CHECKING:
    import pandas as pd


__all__ = ["capture_every_key", "REPORT_COLUMNS"]

REPORT_COLUMNS = [
    "mode",
    "num_tokens",
    "num_reqs",
    "uniform",
    "num_graphs",
    "capture_s",
    "step_s",
    "pool_bytes",
    "device_bytes",
]


def capture_every_key(runner: RunnerState, *, progress: bool, lock: bool) -> pd.DataFrame:
    """The capture report of ``runner.capture_all`` (see there), one row per key."""
    import pandas as pd
    from tqdm.auto import tqdm

    todo = [(k.runtime_mode, k.key) for k in capture_keys(runner.dispatcher)]
    rows = []
    runner.capture_enabled = True
    with runner.backend.capture_session():
        for mode, desc in tqdm(todo, desc="capture", unit="graph", disable=not progress):
            rows.append(_capture_one(runner, mode, desc))
    runner.capture_enabled = not lock
    frame = pd.DataFrame(rows, columns=REPORT_COLUMNS)
    frame.attrs["backend"] = runner.backend.name
    frame.attrs["total_pool_bytes"] = (
        runner.backend.pool_bytes_total if runner.backend.name == "cuda" else None
    )
    return frame


def _capture_one(runner: RunnerState, mode: CUDAGraphMode, desc: GraphKey) -> dict[str, Any]:
    backend = runner.backend
    n = desc.num_tokens
    graphs0, capture_s0, pool0, device0 = (
        backend.num_graphs,
        backend.capture_s_total,
        backend.pool_bytes_total,
        backend.device_bytes_total,
    )
    ids, pos, slots = runner.input_ids[:n], runner.positions[:n], runner.slots[:n]
    slots.fill_(runner.model.dummy_slot)  # capture writes K/V into the dummy slot only
    q = uniform_query_len(desc, runner.config) or 1
    pos.copy_(torch.arange(n, device=runner.device) % q)
    start = time.perf_counter()
    with set_forward_context(mode, desc, allow_capture=True):
        runner.model_callable(ids, pos, slots)  # the result is dropped: weak outputs go back
    backend.synchronize()
    step_s = time.perf_counter() - start
    return {
        "mode": str(mode),
        "num_tokens": n,
        "num_reqs": desc.num_reqs,
        "uniform": is_uniform_key(desc),
        "num_graphs": backend.num_graphs - graphs0,
        "capture_s": backend.capture_s_total - capture_s0,
        "step_s": step_s,
        "pool_bytes": backend.pool_bytes_total - pool0 if backend.name == "cuda" else float("nan"),
        # the drop in free device memory over the key's graph captures (CUDA; NaN on CPU)
        "device_bytes": (
            backend.device_bytes_total - device0 if backend.name == "cuda" else float("nan")
        ),
    }
