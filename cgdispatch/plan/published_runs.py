"""Published ``vllm bench serve`` runs (``cgdispatch/data/published_serving_runs.csv``), read
and checked, and the scheduler settings each ran under.

Each row is one run as its source printed it, with the source's URL; a figure the source
does not give is empty, and the ``note`` column says what was assumed. This module reads
and checks the table and fills in vLLM's defaults for the limits a run did not set; it does
not simulate (:mod:`cgdispatch.plan.published_serving` does).
"""

from __future__ import annotations

import math
from importlib import resources

import pandas as pd

from ..estimate.devices import DEVICE_PRESETS
from ..estimate.kv_bytes import kv_bytes_per_token

__all__ = [
    "RUN_COLUMNS",
    "RESULT_COLUMNS",
    "BACKEND_ENDPOINTS",
    "DATASETS",
    "published_serving_runs",
    "check_serving_runs",
    "serve_default_limits",
    "is_open_loop",
    "offered_rate",
]

# what describes a run (the workload and the engine), then what it measured
RUN_COLUMNS = (
    "run_id", "url", "model", "gpu", "tensor_parallel_size", "vllm_version", "dataset",
    "input_len", "output_len", "range_ratio", "num_prompts", "request_rate", "burstiness",
    "max_concurrency", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
    "gpu_memory_utilization", "kv_cache_tokens", "prefix_caching", "backend",
)  # fmt: skip
# `vllm bench serve --backend` -> the API endpoint it sends to (vllm/benchmarks/lib/
# endpoint_request_func.py, 0.10.1.1 and 0.11.0: "vllm" and "openai" post to
# /v1/completions, "openai-chat" to /v1/chat/completions, where the server applies the
# model's chat template before tokenizing); empty: not stated
BACKEND_ENDPOINTS = {
    "vllm": "/v1/completions",
    "openai": "/v1/completions",
    "openai-chat": "/v1/chat/completions",
}
RESULT_COLUMNS = (
    "completed", "duration_s", "total_input_tokens", "total_output_tokens",
    "request_throughput", "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms",
    "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
)  # fmt: skip
DATASETS = ("random", "sharegpt")  # what the traffic builder can draw
_REQUIRED = ("run_id", "url", "model", "gpu", "tensor_parallel_size", "vllm_version", "dataset",
             "num_prompts", "request_rate")  # fmt: skip
_POSITIVE = ("tensor_parallel_size", "input_len", "output_len", "num_prompts", "max_concurrency",
             "max_num_seqs", "max_num_batched_tokens", "max_model_len", "burstiness", "completed",
             "gpu_memory_utilization", "kv_cache_tokens",
             "duration_s", "request_throughput", "output_throughput",
             "total_token_throughput")  # fmt: skip
# vLLM's `vllm serve` defaults on a GPU with at least this much memory that is not an A100
# (EngineArgs' batch defaults, vllm/engine/arg_utils.py; checked by vLLM's
# tests/engine/test_arg_utils.py::test_defaults_with_usage_context): large GPUs since
# vllm-project/vllm#17073 (0.8.5), A100 back to the small budget since #17885 (0.9.0)
_LARGE_GPU_BYTES = 70 * 2**30


def published_serving_runs() -> pd.DataFrame:
    """The shipped table of published runs, checked (:func:`check_serving_runs`)."""
    path = resources.files("cgdispatch.data").joinpath("published_serving_runs.csv")
    with path.open() as f:
        return check_serving_runs(pd.read_csv(f, dtype={"vllm_version": str}))


def check_serving_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with its columns in order, or ValueError naming the first bad run and field:
    every run needs a URL, a model and GPU cgdispatch can price, a dataset it can draw,
    positive counts, and a request rate (``inf`` allowed)."""
    missing = [c for c in (*RUN_COLUMNS, *RESULT_COLUMNS, "note") if c not in runs.columns]
    if missing:
        raise ValueError(f"published serving runs lack columns {missing}: add them (empty is fine)")
    if runs["run_id"].duplicated().any():
        dup = runs.loc[runs["run_id"].duplicated(), "run_id"].iloc[0]
        raise ValueError(f"run_id {dup!r} appears twice: give each run its own id")
    for _, row in runs.iterrows():
        rid = row["run_id"]
        for col in _REQUIRED:
            if pd.isna(row[col]) or str(row[col]).strip() == "":
                raise ValueError(f"run {rid!r}: {col} is empty: every run needs it")
        if not str(row["url"]).startswith("https://"):
            raise ValueError(
                f"run {rid!r}: url={row['url']!r} is not an https URL: cite the source"
            )
        if kv_bytes_per_token(str(row["model"])) is None:  # no published config to price
            raise ValueError(
                f"run {rid!r}: model {row['model']!r} has no published config: add it to "
                "cgdispatch/data/model_architectures.csv or drop the run"
            )
        if row["gpu"] not in DEVICE_PRESETS:
            raise ValueError(
                f"run {rid!r}: gpu {row['gpu']!r} is not a device preset: use one of "
                f"{sorted(DEVICE_PRESETS)}"
            )
        if row["dataset"] not in DATASETS:
            raise ValueError(
                f"run {rid!r}: dataset {row['dataset']!r} cannot be drawn: use one of {DATASETS}"
            )
        if row["dataset"] == "random" and (pd.isna(row["input_len"]) or pd.isna(row["output_len"])):
            raise ValueError(f"run {rid!r}: a random-dataset run needs input_len and output_len")
        for col in _POSITIVE:
            value = row[col]
            if not pd.isna(value) and not float(value) > 0:
                raise ValueError(f"run {rid!r}: {col}={value!r} is invalid: it must be > 0")
        rate = float(row["request_rate"])
        if not rate > 0:
            raise ValueError(
                f"run {rid!r}: request_rate={row['request_rate']!r} is invalid: give a rate > 0 "
                "requests/s or inf"
            )
        gmu = row["gpu_memory_utilization"]
        if not pd.isna(gmu) and not 0.0 < float(gmu) <= 1.0:
            raise ValueError(
                f"run {rid!r}: gpu_memory_utilization={gmu!r} is invalid: it must be in (0, 1]"
            )
        backend = row["backend"]
        if not pd.isna(backend) and str(backend) not in BACKEND_ENDPOINTS:
            raise ValueError(
                f"run {rid!r}: backend={backend!r} is invalid: write the run's `vllm bench "
                f"serve --backend` ({', '.join(BACKEND_ENDPOINTS)}), or leave it empty"
            )
        ratio = row["range_ratio"]
        if not pd.isna(ratio) and not 0.0 <= float(ratio) < 1.0:
            raise ValueError(f"run {rid!r}: range_ratio={ratio!r} is invalid: it must be in [0, 1)")
    return runs[[*RUN_COLUMNS, *RESULT_COLUMNS, "note"]].reset_index(drop=True)


def serve_default_limits(gpu: str) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) that ``vllm serve`` picks on ``gpu`` when the
    run sets neither: 1024 and 8192 on a GPU of >= 70 GiB that is not an A100 (H100, H200),
    else 256 and 2048 (the rule of vLLM 0.9.0 on; older releases differ)."""
    if gpu not in DEVICE_PRESETS:
        raise ValueError(f"gpu {gpu!r} is not a device preset: use one of {sorted(DEVICE_PRESETS)}")
    spec = DEVICE_PRESETS[gpu]
    large = spec.memory_bytes >= _LARGE_GPU_BYTES and "a100" not in spec.name.lower()
    return (1024, 8192) if large else (256, 2048)


def is_open_loop(row: pd.Series) -> bool:
    """Whether a run's client sends on a clock (no ``--max-concurrency``)."""
    return pd.isna(row["max_concurrency"])


def offered_rate(row: pd.Series) -> float:
    """The run's ``--request-rate`` (inf: everything at once)."""
    return math.inf if str(row["request_rate"]).strip() == "inf" else float(row["request_rate"])
