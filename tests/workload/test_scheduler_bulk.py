"""The bulk path of vLLM's scheduler (steady decodes advanced implicitly, one token a step)
gives exactly the steps and request times of the per-request path that the oracle checks
(``record_calls=True``), on random traces across the limits that change scheduling: KV
pressure and preemption, async and sync, chunked prefill, long-prefill threshold,
max_model_len, LoRA limits. A mutant that ends steady decodes one step late must fail."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pandas as pd
import pytest

from cgdispatch.workload import vllm_scheduler
from cgdispatch.workload.scheduler import SchedulerLimits, SchedulerSimulator


def random_case(seed: int) -> tuple[pd.DataFrame, SchedulerLimits] | None:
    rng, r = np.random.default_rng(seed), random.Random(seed)
    n = r.randint(1, 80)
    req = pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, r.choice([0, 0.5, 3.0]), n)),
            "prompt_tokens": rng.integers(1, r.choice([20, 300, 1500]), n),
            "output_tokens": rng.integers(1, r.choice([5, 60, 400]), n),
        }
    )
    lora = r.random() < 0.3
    if lora:
        req["lora_id"] = rng.integers(-1, 4, n)
    block_size = r.choice([16, 32])
    mml = r.choice([None, None, 2048, 600])
    longest = int((req.prompt_tokens + req.output_tokens).max())
    if mml is not None:
        req = req[req.prompt_tokens < mml].reset_index(drop=True)
        longest = min(longest, mml)
    if not len(req):
        return None
    need = -(-longest // block_size) + 1
    seqs = r.choice([2, 8, 32, 256])
    tokens = max(r.choice([seqs, 64, 512, 2048, 8192]), seqs)
    chunked = r.random() < 0.8
    if not chunked and int(req.prompt_tokens.max()) > tokens:
        return None
    limits = SchedulerLimits(
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        vllm_version=r.choice(["0.33", "0.34"]),
        block_size=block_size,
        num_gpu_blocks=r.choice([None, None, need, need + 5, need * 3, need * 20]),
        max_model_len=mml,
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=r.choice([0, 0, 64]),
        async_scheduling=r.choice([True, False]),
        max_loras=r.choice([None, 1, 2]) if lora else None,
    )
    return req, limits


def both_paths(req: pd.DataFrame, limits: SchedulerLimits):
    """(per-request, bulk) results: step frame and request times, or the RuntimeError text."""

    def step_time(num_tokens: int, num_reqs: int) -> float:
        return 1.0 + 0.01 * num_tokens + 0.1 * num_reqs

    out = []
    for record in (True, False):
        sim = SchedulerSimulator(req, limits, step_time_ms=step_time, record_calls=record)
        try:
            out.append((sim.run(), sim.exact.request_times()))
        except RuntimeError as err:  # vLLM's own thrash under a tiny KV cache: both must agree
            out.append(str(err))
    return out


def same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return a[0].equals(b[0]) and a[1].equals(b[1])


@pytest.mark.parametrize("chunk", range(4))
def test_the_bulk_path_gives_the_per_request_paths_steps_and_times(chunk: int) -> None:
    seeds = range(1000 + 40 * chunk, 1000 + 40 * (chunk + 1))
    bad, ran = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in seeds:
            case = random_case(seed)
            if case is None:
                continue
            ran += 1
            slow, fast = both_paths(*case)
            if not same(slow, fast):
                bad.append(seed)
    assert ran >= 30
    assert not bad, f"seeds {bad} differ between the bulk and the per-request path"


def test_the_bulk_path_runs_steady_decodes_in_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a long decode almost every call takes the bulk path, and every request leaves it."""
    slow_calls = []
    original = vllm_scheduler.VllmSchedulerCore.schedule

    def counted(self, clock_s: float):
        slow_calls.append(clock_s)
        return original(self, clock_s)

    monkeypatch.setattr(vllm_scheduler.VllmSchedulerCore, "schedule", counted)
    req = pd.DataFrame(
        {"arrival_s": [0.0] * 50, "prompt_tokens": [30] * 50, "output_tokens": [300] * 50}
    )
    for version in ("0.33", "0.34"):
        slow_calls.clear()
        sim = SchedulerSimulator(req, SchedulerLimits(vllm_version=version))
        frame = sim.run()
        core = sim.exact.core
        assert len(frame) == 300 and frame["num_reqs"].max() == 50
        assert len(slow_calls) == 0, slow_calls
        assert core.d_count == 0 and not core.d_members  # every request finished and left


def test_a_mutant_that_ends_steady_decodes_late_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    original = vllm_scheduler.VllmSchedulerCore._limit

    def one_more(self, i: int) -> int:
        return original(self, i) + 1

    monkeypatch.setattr(vllm_scheduler.VllmSchedulerCore, "_limit", one_more)
    req = pd.DataFrame({"arrival_s": [0.0, 0.0], "prompt_tokens": [5, 9], "output_tokens": [20, 7]})
    slow, fast = both_paths(req, SchedulerLimits(vllm_version="0.33", async_scheduling=False))
    assert not same(slow, fast)
