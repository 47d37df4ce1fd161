"""vLLM's prefix caching in the replay against vLLM's own Scheduler / AsyncScheduler and
KVCacheManager with ``enable_prefix_caching=True`` (scripts/vllm_sched_oracle.py --prefix):
every case of tests/data/vllm_oracle/scheduler-prefix-*.json replayed step for step
(scheduled tokens per request, preemptions, KV blocks in use, tokens served from the cache to
the requests each step admitted, the step each request finished), and, with an oracle
virtualenv at hand (CGDISPATCH_ORACLE_VENV), freshly seeded traces run through vLLM live."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from cgdispatch.workload import vllm_prefix
from cgdispatch.workload.scheduler import SchedulerLimits, SchedulerSimulator

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "vllm_oracle"
VERSIONS = ("0.33.0", "0.34.0")


@cache
def fixture(version: str) -> dict[str, Any]:
    return json.loads((DATA / f"scheduler-prefix-{version}.json").read_text())


def prompt_token(hash_id: int, offset: int, hbs: int) -> int:
    return 1000 + hash_id * hbs + offset  # scripts/vllm_sched_oracle.py's prompt_token


def simulator(
    case: dict[str, Any], version: str, record_calls: bool = True, token_ids: bool = False
) -> SchedulerSimulator:
    """The replay of a fixture case: its requests (with hash_ids, or with the prompt token ids
    the oracle gave vLLM), limits, clock and draft acceptance."""
    inp, cfg = case["inputs"], case["config"]
    reqs, hbs = inp["requests"], inp["hash_block_size"]
    requests = pd.DataFrame(
        {
            "arrival_s": [float(r[0]) for r in reqs],
            "prompt_tokens": [r[1] for r in reqs],
            "output_tokens": [r[2] for r in reqs],
            "lora_id": [r[3] if r[3] else -1 for r in reqs],
        }
    )
    if token_ids:
        requests["prompt_token_ids"] = [
            [prompt_token(r[4][x // hbs], x % hbs, hbs) for x in range(r[1])] for r in reqs
        ]
    else:
        requests["hash_ids"] = [r[4] for r in reqs]
    limits = SchedulerLimits(
        max_num_seqs=cfg["max_num_seqs"],
        max_num_batched_tokens=cfg["max_num_batched_tokens"],
        num_speculative_tokens=cfg["num_speculative_tokens"],
        enable_chunked_prefill=cfg["enable_chunked_prefill"],
        max_loras=cfg["max_loras"],
        vllm_version=version,
        long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
        max_model_len=cfg["max_model_len"],
        block_size=cfg["block_size"],
        num_gpu_blocks=inp["num_gpu_blocks"],
        async_scheduling=cfg["async_scheduling"],
        enable_prefix_caching=True,
        hash_block_size=hbs,
    )
    mod = inp["accept_mod"]
    return SchedulerSimulator(
        requests,
        limits,
        step_time_ms=lambda num_tokens, num_reqs: 1000.0,  # the oracle's clock: one per call
        accept_drafts=lambda clock_s, row, drafts: drafts if (int(clock_s) + row) % mod else 0,
        record_calls=record_calls,
    )


def replay(
    case: dict[str, Any], version: str, token_ids: bool = False
) -> tuple[list[list[Any]], list[int]]:
    """The replay's answer in the fixture's shape (steps, finish clock per request)."""
    inp = case["inputs"]
    sim = simulator(case, version, token_ids=token_ids)
    frame = sim.run()
    run = sim.exact
    rows = run.rows
    steps = []
    for call in run.calls:
        if call.reqs or call.preempted:
            flat = [int(x) for i, n in zip(call.reqs, call.tokens) for x in (rows[i], n)]
            used = call.kv_blocks_used if inp["num_gpu_blocks"] is not None else None
            pre = sorted(int(rows[i]) for i in call.preempted)
            steps.append([int(call.clock_s), flat, pre, used, call.num_cached_tokens])
    ran = [c for c in run.calls if c.reqs]
    assert frame["num_cached_tokens"].tolist() == [c.num_cached_tokens for c in ran]
    times = run.request_times()
    finished = [int(round(t)) - 1 for t in times["finish_s"]]
    return steps, finished


def expected(case: dict[str, Any]) -> tuple[list[list[Any]], list[int]]:
    steps = case["steps"]
    if case["inputs"]["num_gpu_blocks"] is None:  # "unlimited": the oracle's count is its own
        steps = [[*s[:3], None, s[4]] for s in steps]
    return steps, case["finished"]


def differing(cases: list[dict[str, Any]], version: str, **kw: Any) -> list[Any]:
    return [c["id"] for c in cases if replay(c, version[:4], **kw) != expected(c)]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_prefix_oracle_case_matches_step_for_step(version: str, mode: str) -> None:
    cases = [
        c
        for c in fixture(version)["cases"]
        if c["config"]["async_scheduling"] == (mode == "async")
    ]
    assert len(cases) >= 100
    bad = differing(cases, version)
    assert not bad, f"{len(bad)} of {len(cases)} {mode} cases differ from vLLM {version}: {bad[:10]}"
