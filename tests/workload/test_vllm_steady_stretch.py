"""Steady stretches (runs of identical steady-decode steps made at once by vLLM's scheduler
replay) give exactly the step loop's steps and request times, bit for bit, on fresh random
traffic of every shape the replay models: KV pressure with preemption, tiny blocks, async
and sync, chunked prefill, the long-prefill threshold, max_model_len, LoRA limits, drafts
(which keep the step loop). ``vllm_engine.STEADY_STRETCHES = False`` is the step loop."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pandas as pd
import pytest

from cgdispatch.workload import vllm_engine
from cgdispatch.workload.scheduler import SchedulerLimits, SchedulerSimulator


def random_case(seed: int) -> tuple[pd.DataFrame, SchedulerLimits]:
    rng, r = np.random.default_rng(seed), random.Random(seed)
    n = r.randint(1, 150)
    gaps = rng.exponential(r.choice([0.001, 0.02, 0.3, 3.0]), n)
    if r.random() < 0.5:
        gaps[rng.random(n) < 0.6] = 0.0  # bursts of simultaneous arrivals
    req = pd.DataFrame(
        {
            "arrival_s": np.cumsum(gaps),
            "prompt_tokens": rng.integers(1, r.choice([8, 200, 1500]), n),
            "output_tokens": rng.integers(1, r.choice([3, 80, 600]), n),
        }
    )
    lora = r.random() < 0.25
    if lora:
        req["lora_id"] = rng.integers(-1, 4, n)
    block_size = r.choice([1, 4, 16, 32])
    mml = r.choice([None, None, None, 1024, 400])
    if mml is not None:
        req = req[req.prompt_tokens < mml].reset_index(drop=True)
        if not len(req):
            req = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [5], "output_tokens": [9]})
    longest = int((req.prompt_tokens + req.output_tokens).max())
    longest = min(longest, mml) if mml is not None else longest
    need = -(-longest // block_size) + 1  # blocks for the longest request, null block too
    seqs = r.choice([1, 3, 8, 32, 256])
    chunked = r.random() < 0.8
    tokens = max(r.choice([seqs, 64, 512, 2048, 8192]), seqs, 3)
    if not chunked:
        tokens = max(tokens, int(req.prompt_tokens.max()))
    limits = SchedulerLimits(
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        vllm_version=r.choice(["0.33", "0.34"]),
        block_size=block_size,
        num_gpu_blocks=r.choice([None, need, need + 3, need * 2, need * 6, need * 40]),
        max_model_len=mml,
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=r.choice([0, 0, 48]),
        async_scheduling=r.choice([True, False]),
        max_loras=r.choice([None, 1, 2]) if lora else None,
        num_speculative_tokens=r.choice([0] * 7 + [2]),
    )
    return req, limits


def run(req: pd.DataFrame, limits: SchedulerLimits, stretches: bool, monkeypatch):
    """(steps, request times, stretches made), or the RuntimeError's text (a thrashing KV
    cache: both loops must give up at the same call)."""
    monkeypatch.setattr(vllm_engine, "STEADY_STRETCHES", stretches)

    def step_time(num_tokens: int, num_reqs: int) -> float:
        return 0.7 + 0.013 * num_tokens + 0.1 * num_reqs  # inexact in binary: sums drift

    sim = SchedulerSimulator(req, limits, step_time_ms=step_time)
    made = []
    on_stretch = sim.exact._on_stretch
    sim.exact._on_stretch = lambda run: (made.append(len(run.clock_s)), on_stretch(run))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return sim.run(), sim.exact.request_times(), made
        except RuntimeError as err:
            return str(err)


def check(seed: int, monkeypatch) -> int:
    """Steps made in stretches for ``seed``'s case, after checking both loops agree."""
    req, limits = random_case(seed)
    fast = run(req, limits, True, monkeypatch)
    slow = run(req, limits, False, monkeypatch)
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow, f"seed {seed}: {limits}"
        return 0
    pd.testing.assert_frame_equal(fast[0], slow[0], check_exact=True, obj=f"seed {seed} steps")
    pd.testing.assert_frame_equal(fast[1], slow[1], check_exact=True, obj=f"seed {seed} times")
    assert not slow[2]
    if limits.num_speculative_tokens:
        assert not fast[2], "drafts keep the step loop"
    return sum(fast[2])


# seeded shapes that make stretches under each limit (preemptions: 50, 51, 130, 114, 108,
# 2, 33, 88, 4; LoRA limits: 4, 88, 103, 12; no chunked prefill: 103, 53; max_model_len:
# 51, 33, 114; long-prefill threshold: 51, 130, 2; async: 50, 130, 108, 33, 103, 53, 12),
# and 9 with drafts, which keeps the step loop
@pytest.mark.parametrize("seed", [50, 51, 130, 114, 108, 2, 33, 88, 4, 103, 53, 12, 9])
def test_seeded_shapes_give_the_step_loops_results(seed: int, monkeypatch) -> None:
    made = check(seed, monkeypatch)
    assert made > 0 or seed == 9


@pytest.mark.parametrize("chunk", range(3))
def test_fresh_random_shapes_give_the_step_loops_results(chunk: int, monkeypatch) -> None:
    seeds = [random.randrange(1 << 30) for _ in range(25)]
    made = [check(seed, monkeypatch) for seed in seeds]  # a failure names its seed
    assert sum(made) > 0, f"no stretch in seeds {seeds}: the test checks nothing"


def test_kv_pressure_ends_stretches_where_a_block_would_not_fit(monkeypatch) -> None:
    """Decodes that outgrow a small cache: stretches stop before each call that would
    preempt, and the steps, preemptions and KV use still match the step loop's."""
    n = 12
    req = pd.DataFrame(
        {"arrival_s": [0.0] * n, "prompt_tokens": [40] * n, "output_tokens": [300] * n}
    )
    for is_async in (False, True):
        limits = SchedulerLimits(
            vllm_version="0.34", block_size=16, num_gpu_blocks=150, async_scheduling=is_async
        )
        fast = run(req, limits, True, monkeypatch)
        slow = run(req, limits, False, monkeypatch)
        pd.testing.assert_frame_equal(fast[0], slow[0], check_exact=True)
        pd.testing.assert_frame_equal(fast[1], slow[1], check_exact=True)
        assert fast[0]["num_preempted"].sum() > 0 and sum(fast[2]) > len(fast[0]) // 2
