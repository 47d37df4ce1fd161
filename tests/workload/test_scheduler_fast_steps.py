"""The simulator's fast step (no adapters, no prompt mid-way) gives exactly the general path's
steps and draws, and both agree with the reference (the function the class replaced), on
fresh random traffic of every shape: chunked and whole prompts, one-token outputs, decodes
truncated by a small budget, speculative decoding at every acceptance rate."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch.workload import scheduler
from cgdispatch.workload.scheduler import SchedulerLimits, SchedulerSimulator
from cgdispatch.workload.trace import check_trace
from tests.workload.test_scheduler import old_simulate_steps


def _requests(rng: np.random.Generator, n: int) -> pd.DataFrame:
    gaps = rng.exponential(rng.choice([0.001, 0.02, 0.5]), n)
    gaps[rng.random(n) < rng.random()] = 0.0  # bursts of simultaneous arrivals
    return pd.DataFrame(
        {
            "arrival_s": np.cumsum(gaps),
            "prompt_tokens": rng.integers(1, rng.choice([8, 200, 3000]), n),
            "output_tokens": rng.integers(1, rng.choice([2, 30, 400]), n),  # 1: ends at admission
        }
    )


def _limits(rng: np.random.Generator, chunked: bool) -> SchedulerLimits:
    spec = int(rng.choice([0, 0, 1, 3]))
    return SchedulerLimits(
        max_num_seqs=int(rng.choice([1, 3, 16, 256])),
        # below max_num_seqs * q: not every running request decodes in a step
        max_num_batched_tokens=int(rng.choice([8, 24, 512, 8192])) if chunked else 3000,
        num_speculative_tokens=spec,
        spec_acceptance_rate=float(rng.choice([0.0, 0.6, 1.0])),
        enable_chunked_prefill=chunked,
    )


def _frame(requests, limits, monkeypatch, *, fast: bool, bulk: bool, seed: int) -> pd.DataFrame:
    monkeypatch.setattr(scheduler, "FAST_STEPS", fast)
    monkeypatch.setattr(scheduler, "BULK_DECODES", bulk)
    return SchedulerSimulator(requests, limits, seed=seed).run()


@pytest.mark.parametrize("case", range(16))
def test_fast_steps_equal_the_general_path_and_the_reference(case, monkeypatch):
    rng = np.random.default_rng()  # fresh traffic every run
    chunked = case % 4 != 3
    requests = _requests(rng, int(rng.integers(1, 250)))
    limits = _limits(rng, chunked)
    seed = int(rng.integers(1 << 30))
    calls = []
    fast_step = SchedulerSimulator._decode_first_step

    def counted(self):
        calls.append(1)
        return fast_step(self)

    monkeypatch.setattr(SchedulerSimulator, "_decode_first_step", counted)
    fast = _frame(requests, limits, monkeypatch, fast=True, bulk=case % 2 == 0, seed=seed)
    assert calls, "the fast path never ran"
    general = _frame(requests, limits, monkeypatch, fast=False, bulk=False, seed=seed)
    pd.testing.assert_frame_equal(fast, general, check_exact=True)
    want = old_simulate_steps(
        requests,
        max_num_seqs=limits.max_num_seqs,
        max_num_batched_tokens=limits.max_num_batched_tokens,
        num_speculative_tokens=limits.num_speculative_tokens,
        spec_acceptance_rate=limits.spec_acceptance_rate,
        enable_chunked_prefill=chunked,
        seed=seed,
    )
    pd.testing.assert_frame_equal(check_trace(fast)[list(want.columns)], want, check_exact=True)


def test_adapters_take_the_general_path(monkeypatch):
    rng = np.random.default_rng()
    requests = _requests(rng, 120).assign(lora_id=rng.integers(-1, 3, 120))
    limits = SchedulerLimits(max_num_seqs=8, max_num_batched_tokens=256, max_loras=1)
    fast = _frame(requests, limits, monkeypatch, fast=True, bulk=True, seed=1)
    pd.testing.assert_frame_equal(
        fast, _frame(requests, limits, monkeypatch, fast=False, bulk=False, seed=1)
    )
