"""Workloads: synthetic requests, a continuous-batching simulator, step traces, histograms.

A *request table* has one row per request: ``arrival_s`` (float, seconds from the start),
``prompt_tokens`` and ``output_tokens`` (int >= 1). A *step trace* has one row per engine
step (see :data:`TRACE_COLUMNS`). The simulator turns the first into the second the way a
vLLM-style scheduler does; it models scheduling only (no KV-cache capacity, no preemption)
and its clock is a crude step-time model, so its ``time_s`` column is ``model``, not measured.
Loaders for files an engine wrote live in :mod:`cgdispatch.tracefiles`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "TRACE_COLUMNS",
    "REQUEST_COLUMNS",
    "LengthPreset",
    "LENGTH_PRESETS",
    "make_trace",
    "check_trace",
    "synthetic_requests",
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
    return trace


@dataclass(frozen=True)
class LengthPreset:
    """Synthetic prompt/output length distribution: lognormal with a given mean, clipped.

    Only the means are published figures; the spreads (sigma of log length) and the clips
    are our choice, so traces made from a preset are synthetic, not the dataset itself.
    """

    prompt_mean: float
    output_mean: float
    prompt_sigma: float = 1.0
    output_sigma: float = 1.0
    max_prompt_tokens: int = 4096
    max_output_tokens: int = 2048


LENGTH_PRESETS: dict[str, LengthPreset] = {
    # ShareGPT: mean input 161, mean output 338 tokens (vLLM paper, SOSP 2023)
    "sharegpt": LengthPreset(161.0, 338.0, prompt_sigma=1.0, output_sigma=0.9),
    # Alpaca: mean input 19, mean output 58 tokens (vLLM paper, SOSP 2023)
    "alpaca": LengthPreset(
        19.0, 58.0, prompt_sigma=0.6, output_sigma=0.8, max_prompt_tokens=512, max_output_tokens=512
    ),
}


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, n: int, hi: int) -> np.ndarray:
    mu = np.log(mean) - sigma**2 / 2  # E[lognormal] = exp(mu + sigma^2 / 2)
    return np.clip(np.rint(rng.lognormal(mu, sigma, n)), 1, hi).astype(np.int64)


def synthetic_requests(
    num_requests: int,
    preset: str | LengthPreset = "sharegpt",
    *,
    rate_per_s: float = 10.0,
    burstiness: float = 1.0,
    seed: int = 0,
) -> pd.DataFrame:
    """A request table with gamma inter-arrival times and lognormal lengths (synthetic).

    ``burstiness`` is the gamma shape (as in vLLM's serving benchmark): 1 gives Poisson
    arrivals, below 1 bursts, above 1 more regular arrivals; the mean rate is ``rate_per_s``
    either way. ``rate_per_s=inf`` puts every arrival at 0.
    """
    if isinstance(num_requests, bool) or not isinstance(num_requests, int) or num_requests < 1:
        raise ValueError(f"num_requests={num_requests!r} is invalid: it must be an integer >= 1")
    if isinstance(preset, str):
        if preset not in LENGTH_PRESETS:
            raise ValueError(
                f"length preset {preset!r} is unknown: use one of {sorted(LENGTH_PRESETS)}"
            )
        preset = LENGTH_PRESETS[preset]
    if not rate_per_s > 0:
        raise ValueError(
            f"rate_per_s={rate_per_s!r} is invalid: it must be > 0 (inf for all at once)"
        )
    if not burstiness > 0:
        raise ValueError(f"burstiness={burstiness!r} is invalid: it must be > 0 (1 = Poisson)")
    rng = np.random.default_rng(seed)
    if np.isinf(rate_per_s):
        arrival = np.zeros(num_requests)
    else:
        gaps = rng.gamma(burstiness, 1.0 / (rate_per_s * burstiness), num_requests)
        arrival = np.cumsum(gaps) - gaps[0]
    p = preset
    return pd.DataFrame(
        {
            "arrival_s": arrival,
            "prompt_tokens": _lognormal(
                rng, p.prompt_mean, p.prompt_sigma, num_requests, p.max_prompt_tokens
            ),
            "output_tokens": _lognormal(
                rng, p.output_mean, p.output_sigma, num_requests, p.max_output_tokens
            ),
        }
    )


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
    KV-cache capacity, preemption, priorities. Returns a step trace with extra columns
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
    rng = np.random.default_rng(seed)
    total = len(arrival)
    waiting: deque[int] = deque()
    run = np.empty(0, dtype=np.int64)  # running request indices, admission order
    rows: list[tuple[int, int, bool, int, float]] = []
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
        new, new_take = [], []
        while waiting and len(run) + len(new) < max_num_seqs and budget > 0:
            i = waiting[0]
            t = min(int(prompt_left[i]), budget)
            if t < prompt_left[i] and not enable_chunked_prefill:
                break
            waiting.popleft()
            new.append(i)
            new_take.append(t)
            budget -= t
        sched = np.concatenate([pre, np.asarray(new, dtype=np.int64)])
        chunks = np.concatenate([take, np.asarray(new_take, dtype=np.int64)])
        sched, chunks = sched[chunks > 0], chunks[chunks > 0]
        prefill_tokens = int(chunks.sum())
        num_tokens = len(dec) * q + prefill_tokens
        uniform = num_tokens > 0 and bool(np.all(chunks == q))  # vLLM: every query is q long
        rows.append((num_tokens, len(dec) + len(sched), uniform, prefill_tokens, now))
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
        now += step_time_ms(num_tokens, rows[-1][1]) / 1e3
    bar.close()
    cols = ["num_tokens", "num_reqs", "uniform_decode", "num_prefill_tokens", "time_s"]
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
            "(cgdispatch.tracefiles.load_requests maps common CSV column names)"
        )
    frame = requests[list(REQUEST_COLUMNS)].astype({c: t for c, (t, _) in REQUEST_COLUMNS.items()})
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
