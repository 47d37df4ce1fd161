"""The replay of vLLM's scheduler hands each step's content (decodes with their contexts,
prompt chunks) to a step-time function that can price it; checked against contents rebuilt
independently from the recorded schedule calls, and the bulk path against the per-call one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch.core.step_content import StepContent
from cgdispatch.workload.scheduler import SchedulerLimits, SchedulerSimulator


class Recorder:
    """A step-time function that records what it is asked to price (a constant clock)."""

    def __init__(self) -> None:
        self.contents: list[StepContent] = []

    def __call__(self, num_tokens: int, num_reqs: int) -> float:
        raise AssertionError("a content-aware function is priced by content_ms")

    def content_ms(self, content: StepContent) -> float:
        if content.num_tokens == 0:
            return 0.0  # an empty schedule call runs nothing
        self.contents.append(content)
        # a clock that depends on the content, so that a wrong content changes the run
        return 5.0 + 0.001 * content.decode_kv_tokens + 0.01 * content.num_tokens


def _requests(rng: np.random.Generator, n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 2.0, n)),
            "prompt_tokens": rng.integers(1, 700, n),
            "output_tokens": rng.integers(1, 90, n),
        }
    )


def _expand(contents: list[StepContent]) -> list[tuple]:
    return [(c.decode_reqs, c.decode_tokens, c.decode_kv_tokens, c.chunks) for c in contents]


@pytest.mark.parametrize("version", ["0.33", "0.34"])
@pytest.mark.parametrize("blocks", [None, 90])
def test_contents_match_the_recorded_calls_and_the_bulk_path(version, blocks):
    rng = np.random.default_rng()
    seed = int(rng.integers(1 << 30))
    reqs = _requests(np.random.default_rng(seed), 60)
    limits = SchedulerLimits(
        max_num_seqs=16,
        max_num_batched_tokens=512,
        vllm_version=version,
        num_gpu_blocks=blocks,
        block_size=16,
        # off: the count below restarts a preempted request from 0, where prefix caching
        # resumes it from its own cached blocks (test_prefix_cache.py covers that)
        enable_prefix_caching=False,
    )
    per_call = Recorder()
    sim = SchedulerSimulator(reqs, limits, step_time_ms=per_call, record_calls=True)
    sim.run()
    calls = [c for c in sim.exact.calls if c.num_reqs]
    assert len(calls) == len(per_call.contents), f"seed {seed}"
    # independent: each request's computed tokens from the calls' scheduled tokens alone
    computed: dict[int, int] = {}
    preempted_at: dict[int, int] = {}
    expected = []
    for call in sim.exact.calls:
        for i in call.preempted:
            computed[i] = 0
            preempted_at[i] = call.tick
        if not call.num_reqs:
            continue
        d_reqs = d_tokens = d_kv = 0
        chunks = []
        for i, n, decode in zip(call.reqs, call.tokens, call.decode):
            before = computed.get(i, 0)
            computed[i] = before + n
            if decode:
                d_reqs, d_tokens, d_kv = d_reqs + 1, d_tokens + n, d_kv + before + n
            else:
                chunks.append((before, n))
        expected.append((d_reqs, d_tokens, d_kv, tuple(chunks)))
    assert _expand(per_call.contents) == expected, f"seed {seed}"
    # the bulk path (steady decodes kept implicitly, stretches) prices the same contents
    bulk = Recorder()
    SchedulerSimulator(reqs, limits, step_time_ms=bulk).run()
    assert _expand(bulk.contents) == expected, f"seed {seed}"


def test_a_prefill_heavy_step_reads_its_own_chunks():
    reqs = pd.DataFrame(
        {"arrival_s": [0.0, 0.0], "prompt_tokens": [300, 50], "output_tokens": [3, 2]}
    )
    limits = SchedulerLimits(max_num_seqs=4, max_num_batched_tokens=200, vllm_version="0.33")
    rec = Recorder()
    SchedulerSimulator(reqs, limits, step_time_ms=rec).run()
    first, second = rec.contents[0], rec.contents[1]
    assert first.chunks == ((0, 200),)  # the budget cuts the first prompt
    assert second.chunks == ((200, 100), (0, 50))  # its rest, then the second prompt whole
    assert second.decode_reqs == 0
