"""Workloads: step traces, the steps vLLM's scheduler forms for requests, histograms.

A *request table* has one row per request: ``arrival_s`` (float, seconds from the start),
``prompt_tokens`` and ``output_tokens`` (int >= 1). A *step trace* has one row per engine
step (see :data:`TRACE_COLUMNS`). :func:`simulate_steps` turns the first into the second
with the replay of vLLM's own scheduler (:func:`~cgdispatch.workload.replay.replay_scheduler`,
the newest release unless the limits name one); its clock is a step-time model, so its
``time_s`` column is ``model``, not measured.
Synthetic request tables come from :mod:`cgdispatch.workload.synthetic`, tables and traces an
engine logged from :mod:`cgdispatch.workload.files`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd

from ..core import cache
from ..core.validate import MAX_STEP_TOKENS
from .limits import SchedulerLimits, scheduler_limits
from .replay import default_step_time_ms, start_replay
from .request_table import check_cells, check_requests
from .steps import LORA_COLUMN

__all__ = [
    "TRACE_COLUMNS",
    "REQUEST_COLUMNS",
    "LORA_COLUMN",
    "make_trace",
    "check_trace",
    "simulate_steps",
    "step_histogram",
    "check_step_budget",
    "check_requests_fit",
]

# Step-trace schema: column -> (dtype, meaning). Extra columns are allowed and kept.
TRACE_COLUMNS: dict[str, tuple[str, str]] = {
    "num_tokens": ("int64", "tokens scheduled in the step (unpadded)"),
    "num_reqs": ("int64", "requests in the step"),
    "uniform_decode": ("bool", "every request has exactly q = 1 + spec tokens tokens"),
    "has_lora": ("bool", "some request uses a LoRA adapter"),
    "num_active_loras": ("int64", "distinct LoRA adapters in the step (0 without LoRA)"),
}
REQUEST_COLUMNS: dict[str, tuple[str, str]] = {
    "arrival_s": ("float64", "arrival time in seconds from the start of the trace"),
    "prompt_tokens": ("int64", "prompt (context) tokens"),
    "output_tokens": ("int64", "generated tokens, the first one included"),
}


def make_trace(
    num_tokens: np.ndarray | list[int],
    uniform_decode: np.ndarray | list[bool] | bool = False,
    num_reqs: np.ndarray | list[int] | None = None,
    has_lora: np.ndarray | bool = False,
    num_active_loras: np.ndarray | int = 0,
) -> pd.DataFrame:
    """A step trace from arrays; ``num_reqs`` defaults to ``num_tokens`` (one token each)."""
    n = np.asarray(num_tokens, dtype=np.int64)
    size = n.shape[0]
    frame = pd.DataFrame(
        {
            "num_tokens": n,
            "num_reqs": n if num_reqs is None else np.asarray(num_reqs, dtype=np.int64),
            "uniform_decode": np.broadcast_to(np.asarray(uniform_decode, dtype=bool), (size,)),
            "has_lora": np.broadcast_to(np.asarray(has_lora, dtype=bool), (size,)),
            "num_active_loras": np.broadcast_to(
                np.asarray(num_active_loras, dtype=np.int64), (size,)
            ),
        }
    )
    return check_trace(frame)


def check_trace(trace: pd.DataFrame) -> pd.DataFrame:
    """Validate a step trace; fill optional columns; return it with the schema's dtypes."""
    if not isinstance(trace, pd.DataFrame):
        raise ValueError(f"a step trace must be a pandas DataFrame, got {type(trace).__name__}")
    if "num_tokens" not in trace.columns:
        raise ValueError(
            f"step trace has no 'num_tokens' column (columns: {list(trace.columns)}): "
            "a trace needs one row per step with at least num_tokens"
        )
    _check_trace_cells(trace)
    trace = trace.copy()
    defaults = {"num_reqs": trace["num_tokens"], "uniform_decode": False, "has_lora": False}
    for col, value in defaults.items():
        if col not in trace.columns:
            trace[col] = value
    if "num_active_loras" not in trace.columns:
        trace["num_active_loras"] = trace["has_lora"].astype(np.int64)
    trace = trace.astype({c: t for c, (t, _) in TRACE_COLUMNS.items()})
    if len(trace) and int(trace["num_tokens"].min()) < 1:
        raise ValueError("step trace has num_tokens < 1: every step schedules at least one token")
    for col in ("num_reqs", "num_active_loras"):
        if len(trace) and int(trace[col].min()) < 0:
            raise ValueError(f"step trace has {col} < 0: counts must be >= 0")
    return trace


def _check_trace_cells(trace: pd.DataFrame) -> None:
    """ValueError naming the first bad cell of the columns the planners read: text, NaN,
    infinity, a fraction in a count, a count out of range, a flag other than 0/1/True/False
    (rows by the frame's index label)."""
    counts = {"num_tokens": (1, MAX_STEP_TOKENS, True), "num_reqs": (0, MAX_STEP_TOKENS, True),
              "num_active_loras": (0, MAX_STEP_TOKENS, True),
              "num_prefill_tokens": (0, MAX_STEP_TOKENS, True),
              "uniform_decode": (0, 1, True), "has_lora": (0, 1, True),
              "time_s": (-np.inf, np.inf, False)}  # fmt: skip
    check_cells(trace, "step trace", {c: r for c, r in counts.items() if c in trace.columns})


def check_step_budget(
    trace: pd.DataFrame, max_num_batched_tokens: int, what: str = "trace"
) -> None:
    """ValueError when a step of ``trace`` holds more tokens than ``max_num_batched_tokens``:
    vLLM's scheduler never forms such a step, so planning for it answers a question about
    another engine. The message names the largest step, how many exceed, and the fix."""
    sizes = trace["num_tokens"].to_numpy()
    over = sizes > max_num_batched_tokens
    if len(sizes) and over.any():
        row = int(np.argmax(sizes))
        raise ValueError(
            f"{what} has {int(over.sum()):,} steps over max_num_batched_tokens="
            f"{max_num_batched_tokens:,} (the largest, step {row + 1}, has {int(sizes[row]):,} "
            "tokens): vLLM never schedules a step above its token budget; set "
            f"--max-num-batched-tokens {int(sizes[row])} (or more) if the engine ran with it, "
            "or check the trace's num_tokens column"
        )


def check_requests_fit(requests: pd.DataFrame, kv_cache_tokens: int, where: str) -> None:
    """ValueError when a request needs more KV-cache tokens (prompt + output) than the cache
    holds: vLLM refuses to start with a max_model_len its KV cache cannot hold, so no engine
    would finish such a request, and simulating its millions of steps only looks like a
    hang. ``where`` names the estimate (model, device)."""
    need = requests["prompt_tokens"].to_numpy(np.int64) + requests["output_tokens"].to_numpy(
        np.int64
    )
    if len(need) and int(need.max()) > kv_cache_tokens:
        row = int(np.argmax(need))
        raise ValueError(
            f"request {row + 1} needs {int(need[row]):,} tokens of KV cache (prompt + output), "
            f"more than the {int(kv_cache_tokens):,} the KV cache holds ({where}): vLLM could "
            "not serve it (its max_model_len must fit in the KV cache); drop or shorten it, "
            "or model a larger device"
        )


def simulate_steps(
    requests: pd.DataFrame,
    limits: SchedulerLimits | None = None,
    *,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    num_speculative_tokens: int | None = None,
    spec_acceptance_rate: float | None = None,
    enable_chunked_prefill: bool | None = None,
    max_loras: int | None = None,
    step_time_ms: Callable[[int, int], float] = default_step_time_ms,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """Steps vLLM's scheduler runs for ``requests`` (the replay of its own scheduler).

    ``limits``: the scheduler limits (default: vLLM's defaults for the newest release); the
    keyword settings, when given, replace those fields. Returns a step trace with extra
    columns ``num_prefill_tokens`` and ``time_s`` (step start on the model clock).
    ``progress`` is accepted for older callers (the replay runs in one go).
    """
    given = {
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "num_speculative_tokens": num_speculative_tokens,
        "spec_acceptance_rate": spec_acceptance_rate,
        "enable_chunked_prefill": enable_chunked_prefill,
        "max_loras": max_loras,
    }
    given = {k: v for k, v in given.items() if v is not None}
    if limits is None:
        limits = scheduler_limits(**given)
    elif given:
        limits = replace(limits, **given)
    columns = [*TRACE_COLUMNS, "num_prefill_tokens", "time_s"]

    def build() -> dict[str, np.ndarray]:
        run = start_replay(requests, limits, step_time_ms=step_time_ms, seed=seed)
        trace = check_trace(run.frame())
        return {c: trace[c].to_numpy() for c in columns}

    if step_time_ms is not default_step_time_ms:  # another clock has no key: always replay
        return pd.DataFrame(build(), columns=columns)
    # a long trace takes seconds to replay; its steps are a pure function of this key
    key = cache.digest(*cache.frame_parts(check_requests(requests)), repr(limits), str(seed))
    return pd.DataFrame(cache.cached_arrays("steps", key, build), columns=columns)


def step_histogram(trace: pd.DataFrame) -> pd.DataFrame:
    """Steps per ``num_tokens``, split by kind: columns ``uniform_decode``, ``mixed``, ``total``.

    Indexed by ``num_tokens`` (sorted, only sizes that occur). This is the planner's input.
    """
    trace = check_trace(trace)
    table = pd.crosstab(trace["num_tokens"], trace["uniform_decode"])
    hist = pd.DataFrame(
        {
            "uniform_decode": table[True] if True in table.columns else 0,
            "mixed": table[False] if False in table.columns else 0,
        },
        index=table.index,
    ).astype("int64")
    hist["total"] = hist["uniform_decode"] + hist["mixed"]
    hist.index.name = "num_tokens"
    return hist
