"""Workloads: step traces, a continuous-batching simulator, histograms.

A *request table* has one row per request: ``arrival_s`` (float, seconds from the start),
``prompt_tokens`` and ``output_tokens`` (int >= 1). A *step trace* has one row per engine
step (see :data:`TRACE_COLUMNS`). The simulator turns the first into the second the way a
vLLM-style scheduler does; it models scheduling only (no KV-cache capacity, no preemption)
and its clock is a crude step-time model, so its ``time_s`` column is ``model``, not measured.
Synthetic request tables come from :mod:`cgdispatch.workload.synthetic`, tables and traces an
engine logged from :mod:`cgdispatch.workload.files`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import pandas as pd

__all__ = [
    "TRACE_COLUMNS",
    "REQUEST_COLUMNS",
    "make_trace",
    "check_trace",
    "simulate_steps",
    "step_histogram",
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
# optional request column: LoRA adapter id, -1 for none (counted into has_lora / num_active_loras)
LORA_COLUMN = "lora_id"


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


def default_step_time_ms(num_tokens: int, num_reqs: int) -> float:
    """Model (not measured): 8 ms per step plus 0.05 ms per token, roughly an 8B model on one
    H100-class GPU; it only orders steps against arrivals in the simulator."""
    return 8.0 + 0.05 * num_tokens


def simulate_steps(
    requests: pd.DataFrame,
    *,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
    num_speculative_tokens: int = 0,
    spec_acceptance_rate: float = 0.7,
    enable_chunked_prefill: bool = True,
    max_loras: int | None = None,
    step_time_ms: Callable[[int, int], float] = default_step_time_ms,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """Steps a vLLM-style continuous-batching scheduler would run for ``requests``.

    Each step has a budget of ``max_num_batched_tokens`` tokens and ``max_num_seqs``
    requests. Running decodes go first (q = 1 + ``num_speculative_tokens`` tokens each),
    then running partial prefills, then waiting requests in arrival order (FIFO), their
    prompts chunked to fit the budget when ``enable_chunked_prefill``. A decode emits 1 +
    the accepted draft tokens (each accepted with ``spec_acceptance_rate`` until the first
    rejection); the step that ends a prompt emits the first output token. Not modelled:
    KV-cache capacity, preemption, priorities. With a ``lora_id`` column (-1 = none) a step's
    ``num_active_loras`` counts the distinct adapters scheduled, and with ``max_loras`` a
    waiting request whose adapter would exceed that many in the running batch is skipped
    for the step, as vLLM's scheduler does. Returns a step trace with extra columns
    ``num_prefill_tokens`` and ``time_s`` (step start on the model clock).
    """
    from tqdm.auto import tqdm

    for name, value in (
        ("max_num_seqs", max_num_seqs),
        ("max_num_batched_tokens", max_num_batched_tokens),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} is invalid: it must be an integer >= 1")
    q = 1 + num_speculative_tokens
    if q > max_num_batched_tokens:
        raise ValueError(
            f"1 + num_speculative_tokens = {q} exceeds max_num_batched_tokens={max_num_batched_tokens}"
        )
    if not 0.0 <= spec_acceptance_rate <= 1.0:
        raise ValueError(
            f"spec_acceptance_rate={spec_acceptance_rate} is invalid: it must be in [0, 1]"
        )
    req = _check_requests(requests).sort_values("arrival_s", kind="stable")
    arrival = req["arrival_s"].to_numpy(dtype=np.float64)
    prompt_left = req["prompt_tokens"].to_numpy(dtype=np.int64).copy()
    out_left = req["output_tokens"].to_numpy(dtype=np.int64).copy()
    if not enable_chunked_prefill and int(prompt_left.max(initial=0)) > max_num_batched_tokens:
        raise ValueError(
            f"a prompt of {int(prompt_left.max())} tokens exceeds max_num_batched_tokens="
            f"{max_num_batched_tokens} without chunked prefill: enable it or raise the budget"
        )
    lora = req[LORA_COLUMN].to_numpy(dtype=np.int64) if LORA_COLUMN in req else None
    if max_loras is not None and (
        isinstance(max_loras, bool) or not isinstance(max_loras, int) or max_loras < 1
    ):
        raise ValueError(f"max_loras={max_loras!r} is invalid: it must be an integer >= 1, or None")
    limit_loras = lora is not None and max_loras is not None
    rng = np.random.default_rng(seed)
    total = len(arrival)
    waiting: deque[int] = deque()
    run = np.empty(0, dtype=np.int64)  # running request indices, admission order
    rows: list[tuple[int, int, bool, bool, int, int, float]] = []
    now, nxt, done = 0.0, 0, 0
    bar = tqdm(total=total, desc="simulate", unit="req", disable=not progress)
    while done < total:
        while nxt < total and arrival[nxt] <= now:
            waiting.append(nxt)
            nxt += 1
        if not len(run) and not waiting:
            now = arrival[nxt]
            continue
        budget = max_num_batched_tokens
        in_prefill = prompt_left[run] > 0
        dec = run[~in_prefill][: budget // q]
        budget -= len(dec) * q
        pre = run[in_prefill]
        need = prompt_left[pre]
        take = np.minimum(need, np.clip(budget - (np.cumsum(need) - need), 0, None))
        budget -= int(take.sum())
        new, new_take, skipped = [], [], []
        adapters = set(lora[run][lora[run] >= 0].tolist()) if limit_loras else set()
        while waiting and len(run) + len(new) < max_num_seqs and budget > 0:
            i = waiting[0]
            t = min(int(prompt_left[i]), budget)
            if t < prompt_left[i] and not enable_chunked_prefill:
                break
            waiting.popleft()
            if limit_loras and lora[i] >= 0 and lora[i] not in adapters:
                if len(adapters) >= max_loras:
                    skipped.append(i)  # its adapter does not fit this step: try again next step
                    continue
                adapters.add(int(lora[i]))
            new.append(i)
            new_take.append(t)
            budget -= t
        waiting.extendleft(reversed(skipped))
        sched = np.concatenate([pre, np.asarray(new, dtype=np.int64)])
        chunks = np.concatenate([take, np.asarray(new_take, dtype=np.int64)])
        sched, chunks = sched[chunks > 0], chunks[chunks > 0]
        prefill_tokens = int(chunks.sum())
        num_tokens = len(dec) * q + prefill_tokens
        uniform = num_tokens > 0 and bool(np.all(chunks == q))  # vLLM: every query is q long
        active = 0
        if lora is not None:
            ids = lora[np.concatenate([dec, sched])]
            active = len(np.unique(ids[ids >= 0]))
        num_reqs = len(dec) + len(sched)
        rows.append((num_tokens, num_reqs, uniform, active > 0, active, prefill_tokens, now))
        prompt_left[sched] -= chunks
        out_left[sched[prompt_left[sched] == 0]] -= 1  # the step ending a prompt emits a token
        if len(dec):
            out_left[dec] -= 1 + _accepted(
                rng, num_speculative_tokens, spec_acceptance_rate, len(dec)
            )
        run = np.concatenate([run, np.asarray(new, dtype=np.int64)])
        finished = (out_left[run] <= 0) & (prompt_left[run] == 0)
        if finished.any():
            done += int(finished.sum())
            bar.update(int(finished.sum()))
            run = run[~finished]
        now += step_time_ms(num_tokens, num_reqs) / 1e3
    bar.close()
    cols = [*TRACE_COLUMNS, "num_prefill_tokens", "time_s"]
    frame = pd.DataFrame.from_records(rows, columns=cols)
    return check_trace(frame)[[*TRACE_COLUMNS, "num_prefill_tokens", "time_s"]]


def _accepted(rng: np.random.Generator, k: int, rate: float, n: int) -> np.ndarray:
    """Accepted draft tokens per decode: leading successes of k Bernoulli(rate) trials."""
    if k == 0 or rate == 0.0:
        return np.zeros(n, dtype=np.int64)
    if rate == 1.0:
        return np.full(n, k, dtype=np.int64)
    return np.minimum(rng.geometric(1.0 - rate, n) - 1, k)


def _check_requests(requests: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in REQUEST_COLUMNS if c not in getattr(requests, "columns", ())]
    if missing:
        raise ValueError(
            f"request table lacks columns {missing}: it needs {list(REQUEST_COLUMNS)} "
            "(cgdispatch.workload.files.load_requests maps common CSV column names)"
        )
    cols = [*REQUEST_COLUMNS, *([LORA_COLUMN] if LORA_COLUMN in requests.columns else [])]
    frame = requests[cols].astype({c: t for c, (t, _) in REQUEST_COLUMNS.items()})
    for col in ("prompt_tokens", "output_tokens"):
        if len(frame) and int(frame[col].min()) < 1:
            raise ValueError(f"request table has {col} < 1: every request needs at least one token")
    if len(frame) == 0:
        raise ValueError("request table is empty: give at least one request")
    return frame


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
