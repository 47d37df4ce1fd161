"""The simulator's bulk pure-decode stretches give exactly the step-by-step run: the same
steps, the same start times (bit for bit), on fresh random traffic of every shape."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch.workload import scheduler
from cgdispatch.workload.scheduler import SchedulerLimits, SchedulerSimulator


def _requests(rng: np.random.Generator, n: int) -> pd.DataFrame:
    bursty = rng.random() < 0.5
    gaps = rng.exponential(rng.choice([0.005, 0.05, 2.0]), n)
    if bursty:
        gaps[rng.random(n) < 0.7] = 0.0  # bursts of simultaneous arrivals
    return pd.DataFrame(
        {
            "arrival_s": np.cumsum(gaps),
            "prompt_tokens": rng.integers(1, 3000, n),
            "output_tokens": rng.integers(1, rng.choice([4, 60, 700]), n),
        }
    )


def _run(requests: pd.DataFrame, limits: SchedulerLimits, bulk: bool, monkeypatch) -> pd.DataFrame:
    monkeypatch.setattr(scheduler, "BULK_DECODES", bulk)
    return SchedulerSimulator(requests, limits, seed=3).run()


@pytest.mark.parametrize("case", range(12))
def test_bulk_decodes_equal_the_step_by_step_run(case, monkeypatch):
    rng = np.random.default_rng()
    requests = _requests(rng, int(rng.integers(5, 300)))
    limits = SchedulerLimits(
        max_num_seqs=int(rng.choice([1, 3, 16, 256])),
        max_num_batched_tokens=int(rng.choice([8, 64, 512, 8192])),
        enable_chunked_prefill=True,
    )
    fast = _run(requests, limits, True, monkeypatch)
    slow = _run(requests, limits, False, monkeypatch)
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)
    assert len(fast) >= int(requests["output_tokens"].max())


def test_speculative_decoding_keeps_the_step_by_step_path(monkeypatch):
    rng = np.random.default_rng()
    requests = _requests(rng, 80)
    limits = SchedulerLimits(num_speculative_tokens=2, spec_acceptance_rate=0.6)
    pd.testing.assert_frame_equal(
        _run(requests, limits, True, monkeypatch), _run(requests, limits, False, monkeypatch)
    )
