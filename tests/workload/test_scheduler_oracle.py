"""The simulator with ``vllm_version`` against vLLM's own Scheduler / AsyncScheduler: every case
of the scheduler oracle (tests/data/vllm_oracle/scheduler-*.json, README there) replayed step
for step: scheduled tokens per request, preemptions, KV blocks held and the step each request
finished. A mutant that preempts the first running request instead of the last must fail."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cgdispatch.workload import vllm_scheduler
from cgdispatch.workload.scheduler import SchedulerLimits, SchedulerSimulator

# settings below 1 + num_speculative_tokens here are vLLM's own recorded runs, which did not
# stop, or cases refused on purpose: the warning SchedulerLimits gives on them is expected
pytestmark = pytest.mark.filterwarnings(
    "ignore:long_prefill_token_threshold=.* is below:UserWarning"
)

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_oracle"
VERSIONS = ("0.33.0", "0.34.0")


@cache
def fixture(version: str) -> dict[str, Any]:
    return json.loads((DATA / f"scheduler-{version}.json").read_text())


def simulator(case: dict[str, Any], version: str, record_calls: bool) -> SchedulerSimulator:
    """The simulator for a fixture case: its requests, limits, clock and draft acceptance."""
    inp, cfg = case["inputs"], case["config"]
    reqs = inp["requests"]
    requests = pd.DataFrame(
        {
            "arrival_s": [float(r[0]) for r in reqs],
            "prompt_tokens": [r[1] for r in reqs],
            "output_tokens": [r[2] for r in reqs],
            "lora_id": [r[3] if r[3] else -1 for r in reqs],  # the oracle's 0 is "no adapter"
        }
    )
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
        enable_prefix_caching=False,
    )
    mod = inp["accept_mod"]
    return SchedulerSimulator(
        requests,
        limits,
        step_time_ms=lambda num_tokens, num_reqs: 1000.0,  # the oracle's clock: one per call
        accept_drafts=lambda clock_s, row, drafts: drafts if (int(clock_s) + row) % mod else 0,
        record_calls=record_calls,
    )


def replay(case: dict[str, Any], version: str) -> tuple[list[list[Any]], list[int]]:
    """The simulator's answer in the fixture's shape (steps, finish clock per request)."""
    inp = case["inputs"]
    sim = simulator(case, version, record_calls=True)
    frame = sim.run()
    run = sim.exact
    rows = run.rows
    steps = []
    for call in run.calls:
        if call.reqs or call.preempted:
            flat = [int(x) for i, n in zip(call.reqs, call.tokens) for x in (rows[i], n)]
            used = call.kv_blocks_used if inp["num_gpu_blocks"] is not None else None
            steps.append(
                [int(call.clock_s), flat, sorted(int(rows[i]) for i in call.preempted), used]
            )
    # the step frame agrees with the calls it came from
    ran = [c for c in run.calls if c.reqs]
    assert frame["num_tokens"].tolist() == [c.num_tokens for c in ran]
    assert int(frame["num_preempted"].sum()) == sum(len(c.preempted) for c in run.calls)
    times = run.request_times()
    finished = [int(round(t)) - 1 for t in times["finish_s"]]  # the step ends one clock later
    return steps, finished


def expected(case: dict[str, Any]) -> tuple[list[list[Any]], list[int]]:
    steps = case["steps"]
    if case["inputs"]["num_gpu_blocks"] is None:  # "unlimited": the oracle's count is its own
        steps = [[*s[:3], None] for s in steps]
    return steps, case["finished"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_oracle_case_matches_step_for_step(version: str, mode: str) -> None:
    doc = fixture(version)
    cases = [c for c in doc["cases"] if c["config"]["async_scheduling"] == (mode == "async")]
    assert len(cases) >= 100  # both modes are well covered in both files
    bad = [c["id"] for c in cases if replay(c, version[:4]) != expected(c)]
    assert not bad, (
        f"{len(bad)} of {len(cases)} {mode} cases differ from vLLM {version}: {bad[:10]}"
    )


def test_the_fixtures_cover_what_the_issue_lists() -> None:
    for version in VERSIONS:
        cases = fixture(version)["cases"]
        cfg = [c["config"] for c in cases]
        assert {c["block_size"] for c in cfg} == {16, 32}
        assert {c["enable_chunked_prefill"] for c in cfg} == {True, False}
        assert {c["num_speculative_tokens"] for c in cfg} == {0, 1, 2, 3, 4}
        assert any(c["long_prefill_token_threshold"] for c in cfg)
        assert any(c["max_loras"] for c in cfg)
        assert any(c["inputs"]["num_gpu_blocks"] is None for c in cases)
        assert sum(any(s[2] for s in c["steps"]) for c in cases) >= 20  # preemptions
        assert any(len({r[0] for r in c["inputs"]["requests"]}) > 3 for c in cases)  # arrivals


def test_a_mutant_preempting_the_first_request_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [c for c in fixture("0.34.0")["cases"] if any(s[2] for s in c["steps"])]
    original = vllm_scheduler.VllmSchedulerCore._preempt

    def preempt_first(self, victim: int) -> None:  # put the popped last one back, take the first
        self.running.append(victim)
        original(self, self.running.pop(0))

    monkeypatch.setattr(vllm_scheduler.VllmSchedulerCore, "_preempt", preempt_first)
    differ = 0
    for case in cases[:40]:
        try:
            differ += replay(case, "0.34") != expected(case)
        except (RuntimeError, ValueError, IndexError):
            differ += 1
    assert differ >= 5, "the replay cannot tell which request is preempted"


def test_requests_arriving_in_seconds_follow_the_step_clock() -> None:
    rng = np.random.default_rng(3)
    n = 60
    req = pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 2.0, n)),
            "prompt_tokens": rng.integers(1, 400, n),
            "output_tokens": rng.integers(1, 50, n),
        }
    )
    lim = SchedulerLimits(max_num_batched_tokens=512, vllm_version="0.34", num_gpu_blocks=60)
    sim = SchedulerSimulator(req, lim)
    steps = sim.run()
    times = sim.exact.request_times()
    assert (times["first_token_s"] > times["arrival_s"]).all()
    assert (times["finish_s"] >= times["first_token_s"]).all()
    assert steps["time_s"].is_monotonic_increasing
    assert steps["kv_blocks_used"].max() <= 59
    assert int(times["output_tokens"].sum()) == int(req["output_tokens"].sum())


@pytest.mark.parametrize("version", VERSIONS)
def test_the_bulk_path_agrees_with_the_replayed_path_on_every_oracle_input(version: str) -> None:
    """The fast path (record_calls=False) on the oracle's own inputs: the same step frame and
    request times as the per-request path that matched vLLM above."""
    differ = []
    for case in fixture(version)["cases"]:
        out = []
        for record in (True, False):
            sim = simulator(case, version[:4], record_calls=record)
            out.append((sim.run(), sim.exact.request_times()))
        (a, ta), (b, tb) = out
        if not (a.equals(b) and ta.equals(tb)):
            differ.append(case["id"])
    assert not differ, differ[:10]
