"""The step-by-step view of the replay of vLLM's scheduler (``SchedulerSimulator.step``) on a
hand-worked example, and the inputs that used to hang a scheduler run end in a clear error
within a time limit. (The rows against the per-call replay on random traces:
tests/workload/test_replay_scheduler.py.)"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch.workload.scheduler import (
    SchedulerLimits,
    SchedulerSimulator,
    Step,
    default_step_time_ms,
)
from cgdispatch.workload.trace import simulate_steps
from tests.time_limit import time_limit


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_step_returns_one_step_at_a_time_then_none(version: str) -> None:
    req = pd.DataFrame({"arrival_s": [0.0, 5.0], "prompt_tokens": [3, 2], "output_tokens": [2, 1]})
    limits = SchedulerLimits(max_num_batched_tokens=4, vllm_version=version, async_scheduling=False)
    sim = SchedulerSimulator(req, limits)
    first = sim.step()  # r0's whole prompt: 3 tokens in ceil(3 / 16) = 1 KV block
    assert first == Step(3, 1, False, False, 0, 3, 0.0, max_query_len=3, kv_blocks_used=1)
    assert not sim.done
    second = sim.step()  # r0 decodes its second token; r1 has not arrived
    assert (second.num_tokens, second.uniform_decode, second.num_decode_reqs) == (1, True, 1)
    assert second.time_s == pytest.approx(default_step_time_ms(3, 1) / 1e3)
    third = sim.step()  # idle until r1 arrives at 5 s: the clock jumps there
    assert third.time_s == 5.0 and third.num_prefill_tokens == 2
    assert sim.step() is None and sim.done


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
