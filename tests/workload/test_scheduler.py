"""The scheduler simulator as a class with step(): the same traces as the long function it
replaced (kept below, verbatim but for its progress bar, as the reference) on random
requests; and the inputs that used to hang it end in a clear error within a time limit."""

from __future__ import annotations

from collections import deque

import numpy as np
import pandas as pd
import pytest

from cgdispatch.workload.scheduler import SchedulerLimits, SchedulerSimulator, Step
from cgdispatch.workload.trace import (
    LORA_COLUMN,
    REQUEST_COLUMNS,
    TRACE_COLUMNS,
    check_trace,
    default_step_time_ms,
    simulate_steps,
)
from tests.time_limit import time_limit


# ---- the reference: simulate_steps as it was before the class (one long function) ----
def old_simulate_steps(
    requests: pd.DataFrame,
    *,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
    num_speculative_tokens: int = 0,
    spec_acceptance_rate: float = 0.7,
    enable_chunked_prefill: bool = True,
    max_loras: int | None = None,
    step_time_ms=default_step_time_ms,
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
    req = _old_check_requests(requests).sort_values("arrival_s", kind="stable")
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
            out_left[dec] -= 1 + _old_accepted(
                rng, num_speculative_tokens, spec_acceptance_rate, len(dec)
            )
        run = np.concatenate([run, np.asarray(new, dtype=np.int64)])
        finished = (out_left[run] <= 0) & (prompt_left[run] == 0)
        if finished.any():
            done += int(finished.sum())
            run = run[~finished]
        now += step_time_ms(num_tokens, num_reqs) / 1e3
    cols = [*TRACE_COLUMNS, "num_prefill_tokens", "time_s"]
    frame = pd.DataFrame.from_records(rows, columns=cols)
    return check_trace(frame)[[*TRACE_COLUMNS, "num_prefill_tokens", "time_s"]]


def _old_accepted(rng: np.random.Generator, k: int, rate: float, n: int) -> np.ndarray:
    """Accepted draft tokens per decode: leading successes of k Bernoulli(rate) trials."""
    if k == 0 or rate == 0.0:
        return np.zeros(n, dtype=np.int64)
    if rate == 1.0:
        return np.full(n, k, dtype=np.int64)
    return np.minimum(rng.geometric(1.0 - rate, n) - 1, k)


def _old_check_requests(requests: pd.DataFrame) -> pd.DataFrame:
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


# ---- the class against the reference ----


def _random_requests(rng: np.random.Generator, n: int, lora: bool) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            # bursts: several requests share an arrival time, and idle gaps between bursts
            "arrival_s": np.round(rng.exponential(0.05, n).cumsum(), 1),
            "prompt_tokens": rng.integers(1, 700, n),
            "output_tokens": rng.integers(1, 80, n),
        }
    ).sample(frac=1.0, random_state=int(rng.integers(1 << 30)))  # unsorted on purpose
    if lora:
        frame[LORA_COLUMN] = rng.integers(-1, 4, n)
    return frame


@pytest.mark.parametrize("seed", range(6))
def test_class_gives_the_old_functions_trace_on_random_requests(seed: int) -> None:
    rng = np.random.default_rng(seed)
    req = _random_requests(rng, int(rng.integers(1, 120)), lora=seed % 2 == 1)
    kwargs = dict(
        max_num_seqs=int(rng.integers(1, 40)),
        max_num_batched_tokens=int(rng.integers(8, 600)),
        num_speculative_tokens=int(rng.integers(0, 4)),
        spec_acceptance_rate=float(rng.choice([0.0, 0.6, 1.0])),
        enable_chunked_prefill=bool(seed != 4),
        max_loras=int(rng.integers(1, 3)) if seed % 2 else None,
        seed=seed,
    )
    if not kwargs["enable_chunked_prefill"]:
        kwargs["max_num_batched_tokens"] = 800
    want = old_simulate_steps(req, **kwargs)
    got = simulate_steps(req, **kwargs)
    assert len(got) > 0
    pd.testing.assert_frame_equal(got, want)


def test_step_returns_one_step_at_a_time_then_none() -> None:
    req = pd.DataFrame({"arrival_s": [0.0, 5.0], "prompt_tokens": [3, 2], "output_tokens": [2, 1]})
    sim = SchedulerSimulator(req, SchedulerLimits(max_num_batched_tokens=4))
    first = sim.step()
    assert first == Step(3, 1, False, False, 0, 3, 0.0, max_query_len=3) and not sim.done
    second = sim.step()  # r0 decodes its second token; r1 has not arrived
    assert (second.num_tokens, second.uniform_decode, sim.finished) == (1, True, 1)
    third = sim.step()  # idle until r1 arrives at 5 s: the clock jumps there
    assert third.time_s == 5.0 and third.num_prefill_tokens == 2
    assert sim.done and sim.step() is None


# ---- inputs that used to hang the simulator ----


@pytest.mark.parametrize("blank", [np.nan, float("inf"), None, "soon"])
def test_request_with_a_blank_or_nan_timestamp_is_refused_not_looped_on(blank) -> None:
    req = pd.DataFrame(
        {"arrival_s": [0.0, blank, 2.0], "prompt_tokens": [5, 6, 7], "output_tokens": [2, 3, 4]}
    )
    with time_limit(5), pytest.raises(ValueError, match=r"row 1: arrival_s=.* is not a finite"):
        simulate_steps(req)


def test_request_with_10_to_the_12_tokens_is_refused_not_simulated_for_days() -> None:
    req = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [10**12], "output_tokens": [4]})
    with (
        time_limit(5),
        pytest.raises(
            ValueError,
            match=r"row 0: prompt_tokens=1000000000000 is invalid: it must be an integer from 1 to 100_000_000",
        ),
    ):
        simulate_steps(req)
    out = req.assign(prompt_tokens=4, output_tokens=10**12)
    with time_limit(5), pytest.raises(ValueError, match=r"output_tokens=1000000000000 is invalid"):
        simulate_steps(out)


def test_requests_needing_more_steps_than_the_bound_are_refused_up_front() -> None:
    n = 1000
    req = pd.DataFrame(
        {"arrival_s": np.zeros(n), "prompt_tokens": np.full(n, 90_000_000), "output_tokens": 1}
    )
    with (
        time_limit(5),
        pytest.raises(
            ValueError, match=r"need at least 10_986_329 steps with max_num_batched_tokens=8192"
        ),
    ):
        simulate_steps(req)  # 9e10 prompt tokens, 8192 a step: over MAX_STEPS


def test_fractional_token_counts_are_refused_with_their_row() -> None:
    req = pd.DataFrame(
        {"arrival_s": [0.0, 1.0], "prompt_tokens": [5, 6.5], "output_tokens": [2, 3]}
    )
    with pytest.raises(ValueError, match=r"row 1: prompt_tokens=6.5 is invalid"):
        simulate_steps(req)
