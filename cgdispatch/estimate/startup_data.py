"""The reference vLLM start-ups the start-up model is fitted on and scored against, and the
:class:`~cgdispatch.core.config.GraphConfig` that reproduces each run's capture.

The fitted runs are the 59 vLLM start-ups of ``cgdispatch/data/reference_vllm_startups.csv``
(H100 80GB, vLLM 0.19.0, llm-d-planner's logs); runs from other sources are kept out of the
fit (``reference_startups(split="held_out")``) and scored by
:mod:`cgdispatch.estimate.held_out`; the ``"device_fit"`` runs fit only the graph-pool
factors (:mod:`cgdispatch.estimate.pool_factors`). Which GPUs have logged start-ups is
read here too (the estimate's ``source`` says whether its GPU has). This module reads the
runs; it estimates nothing (:mod:`cgdispatch.estimate.startup`) and fits nothing
(:mod:`cgdispatch.estimate.startup_fit`).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

import pandas as pd

from ..core import cache
from ..core.config import GraphConfig
from ..core.modes import AttentionCGSupport
from .devices import DEVICE_PRESETS, device_spec

__all__ = [
    "FLASHINFER_SAMPLER_RUNS",
    "fitted_devices",
    "logged_devices",
    "reference_config",
    "reference_startups",
    "run_args",
]

# the runs of vLLM 0.9 to 0.11 whose log prints "[topk_topp_sampler.py:50] Using FlashInfer for
# top-p & top-k sampling." (FlashInfer installed: its sampler warm-up needs less memory than
# the sort, estimate_startup(flashinfer_installed=True)); the other runs of those releases
# print "FlashInfer is not available" or nothing (the release's default, the sort)
FLASHINFER_SAMPLER_RUNS = frozenset(
    {
        "dennislee22-qwen2-7b--a100-80gb--gmu0.25--v0.10.1.1",
        "dennislee22-qwen2-7b--a100-80gb--gmu0.5--v0.10.1.1",
        "dennislee22-qwen2-7b--a100-80gb--tp2--gmu0.25--v0.10.1.1",
        "dennislee22-qwen2-7b--a100-80gb--tp2--gmu0.5--v0.10.1.1",
        "dennislee22-gpt-oss-120b--a100-80gb--tp4-4nodes-ray--v0.10.1.1",
    }
)

# the fitted runs (llm-d-planner's logs, rebuilt by scripts/extract_vllm_startups.py) and the
# runs kept out of every fit (other sources, transcribed by hand, each with its URL)
_REFERENCE_FILES = {
    "fit": "reference_vllm_startups.csv",
    "held_out": "reference_vllm_startups_held_out.csv",
    "device_fit": "reference_vllm_startups_device_fit.csv",
}


@cache.memo(maxsize=1)
def _reference_frame() -> pd.DataFrame:
    frames = []
    for split, name in _REFERENCE_FILES.items():
        with resources.files("cgdispatch.data").joinpath(name).open() as f:
            frames.append(pd.read_csv(f).assign(split=split))
    return pd.concat(frames, ignore_index=True)


def reference_startups(*, covered_only: bool = True, split: str | None = "fit") -> pd.DataFrame:
    """The reference start-ups (a copy), with ``family`` and ``split`` added.

    ``split``: ``"fit"`` (default; the runs every constant is fitted on), ``"device_fit"``
    (runs from other sources that only the graph-pool factor of
    :mod:`cgdispatch.estimate.pool_factors` is fitted on), ``"held_out"`` (runs from other
    sources, never fitted: :mod:`cgdispatch.estimate.held_out` reports the model's errors
    on them) or None for all. ``covered_only``: those whose model has
    a published config here.
    """
    from ..models.published import PUBLISHED_MODELS

    if split not in (None, *_REFERENCE_FILES):
        raise ValueError(
            f"split={split!r} is invalid: use one of {sorted(_REFERENCE_FILES)} or None (all)"
        )
    frame = _reference_frame().copy()
    if split is not None:
        frame = frame[frame["split"] == split].reset_index(drop=True)
    frame["covered"] = [m in PUBLISHED_MODELS for m in frame["model"]]
    frame["family"] = [
        PUBLISHED_MODELS[m].family if m in PUBLISHED_MODELS else None for m in frame["model"]
    ]
    return frame[frame["covered"]].reset_index(drop=True) if covered_only else frame


def _field(row: Mapping[str, Any] | pd.Series, name: str) -> Any:
    try:
        return row[name]
    except (KeyError, IndexError) as exc:
        raise ValueError(
            f"row has no {name!r}: pass a row of cgdispatch.reference_startups()"
        ) from exc


def reference_config(row: Mapping[str, Any] | pd.Series) -> GraphConfig:
    """The :class:`GraphConfig` that reproduces a reference run's capture under its own
    release's generation: its mode, sizes, ``max_num_seqs`` and ``max_num_batched_tokens``; a run that logged no FULL graph had an
    attention backend without graph support, so its mode is lowered as vLLM lowered it."""
    if not isinstance(row, (Mapping, pd.Series)):
        raise ValueError(
            f"row={row!r} is invalid: pass a row of cgdispatch.reference_startups() (a pandas "
            "Series, e.g. reference_startups().iloc[0], or a dict with its columns)"
        )
    sizes = [int(s) for s in str(_field(row, "cudagraph_capture_sizes")).split()]
    config = GraphConfig(
        cudagraph_mode=str(_field(row, "cudagraph_mode")),
        cudagraph_capture_sizes=sizes,
        max_num_seqs=int(_field(row, "max_num_seqs")),
        max_num_batched_tokens=int(_field(row, "max_num_batched_tokens")),
        tensor_parallel_size=int(_field(row, "tensor_parallel_size")),
        # the run's own release (0.9.2 to 0.26.1): its generation's dispatch, from the
        # release table (cgdispatch.core.release_table)
        vllm_version=str(_field(row, "vllm_version")),
    )
    no_full = int(_field(row, "full_graphs")) == 0 and int(_field(row, "piecewise_graphs")) > 0
    support = AttentionCGSupport.NEVER if no_full else AttentionCGSupport.ALWAYS
    return config.resolve(support)


def run_args(row: pd.Series) -> dict[str, Any]:
    """The keyword arguments of :func:`~cgdispatch.estimate.startup.estimate_startup` that
    one reference run's row logs (release, parallel sizes, dtype, quantization, KV dtype,
    memory share)."""
    quant = row["quantization"]
    return {
        "vllm_version": str(row["vllm_version"]),
        "tensor_parallel_size": int(row["tensor_parallel_size"]),
        "pipeline_parallel_size": int(row["pipeline_parallel_size"]),
        "dtype": str(row["dtype"]),
        "quantization": None if pd.isna(quant) else str(quant),
        "kv_cache_dtype": str(row["kv_cache_dtype"]),
        "gpu_memory_utilization": float(row["gpu_memory_utilization"]),
    }


@cache.memo(maxsize=1)
def logged_devices() -> frozenset[str]:
    """Names (``DeviceSpec.name``) of the GPUs whose logged start-ups enter a fit: the
    fitted runs' and the runs behind the graph-pool factors (issue 28: no other GPU may
    say "calibrated")."""
    frame = _reference_frame()
    fitted = frame.loc[frame["split"].isin(["fit", "device_fit"]), "device"]
    return frozenset(device_spec(d).name for d in set(fitted) if d in DEVICE_PRESETS)


def fitted_devices() -> set[str]:
    """The devices of the runs the constants are fitted on (held-out runs do not count)."""
    frame = _reference_frame()
    return set(frame.loc[frame["split"] == "fit", "device"])
