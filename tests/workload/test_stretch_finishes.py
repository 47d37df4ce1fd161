"""Steady stretches that run through finishes and through the calls that admit arrivals, and
async requests that join the steady set the loop top after their prefill, give exactly the
step loop's and the per-request path's
steps, request times and prefix hit rates, bit for bit, on fresh random traces: prefix
caching on and off, vLLM 0.33 and 0.34, sync and async, KV pressure, LoRA limits, closed
loop. The checks count the finishes and admitting calls made inside stretches and the early
joins, so a case set that reaches none of them fails instead of passing on nothing."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pandas as pd
import pytest

from cgdispatch.workload import vllm_engine
from cgdispatch.workload.scheduler import SchedulerLimits, SchedulerSimulator
from cgdispatch.workload.vllm_steady import SteadyDecodes


def random_case(seed: int) -> tuple[pd.DataFrame, SchedulerLimits]:
    """Multi-turn traffic over shared system prompts (``hash_ids``) or unique prompts."""
    rng, r = np.random.default_rng(seed), random.Random(seed)
    n = r.randint(20, 160)
    hbs = r.choice([16, 32])
    systems = [list(rng.integers(0, 10**6, rng.integers(1, 4))) for _ in range(3)]
    ids_all = []
    for k in range(n):
        base = list(ids_all[int(rng.integers(k))]) if k and rng.random() < 0.4 else []
        base = base or list(systems[int(rng.integers(3))])
        ids_all.append([int(x) for x in (base + list(rng.integers(0, 10**6, 2)))[:10]])
    req = pd.DataFrame(
        {
            "arrival_s": np.cumsum(rng.exponential(r.choice([0.01, 0.1, 0.4]), n)),
            "prompt_tokens": [len(ids) * hbs - int(rng.integers(0, hbs)) for ids in ids_all],
            "output_tokens": rng.integers(1, r.choice([40, 200]), n),
            "hash_ids": ids_all,
        }
    )
    req.attrs["hash_block_size"] = hbs
    if r.random() < 0.3:
        req["lora_id"] = rng.integers(-1, 3, n)
    if r.random() < 0.3:
        req.attrs["max_concurrency"] = r.choice([2, 8, 32])
    block_size = r.choice([4, 16])
    longest = int((req.prompt_tokens + req.output_tokens).max())
    need = -(-longest // block_size) + 1
    limits = SchedulerLimits(
        vllm_version=r.choice(["0.33", "0.34"]),
        max_num_seqs=r.choice([4, 32, 256]),
        block_size=block_size,
        num_gpu_blocks=r.choice([None, need * 2, need * 8, need * 40]),
        async_scheduling=r.choice([True, False]),
        enable_prefix_caching=r.random() < 0.7,
        hash_block_size=hbs,
        max_loras=r.choice([None, 1]) if "lora_id" in req else None,
    )
    return req, limits


class Counts:
    """Finishes and admitting calls made inside stretches, by async; async early joins."""

    def __init__(self) -> None:
        self.finishes = {False: 0, True: 0}  # by async
        self.admitting = {False: 0, True: 0}  # calls that admit, made inside stretches
        self.early_joins = 0


def run(req, limits, stretches: bool, record: bool, counts: Counts, monkeypatch):
    monkeypatch.setattr(vllm_engine, "STEADY_STRETCHES", stretches)
    join = SteadyDecodes._join

    def counted_join(self, i, in_flight):
        fresh = self.is_async and self.out[i] == 0
        joined = join(self, i, in_flight)
        counts.early_joins += joined and fresh
        return joined

    monkeypatch.setattr(SteadyDecodes, "_join", counted_join)
    stretch = SteadyDecodes.steady_stretch
    inside = []  # set while a stretch is being made

    def counted_stretch(self, *args, **kwargs):
        inside.append(True)
        try:
            return stretch(self, *args, **kwargs)
        finally:
            inside.pop()

    monkeypatch.setattr(SteadyDecodes, "steady_stretch", counted_stretch)

    def step_time(num_tokens: int, num_reqs: int) -> float:
        return 0.7 + 0.013 * num_tokens + 0.1 * num_reqs  # inexact in binary: sums drift

    sim = SchedulerSimulator(req, limits, step_time_ms=step_time, record_calls=record)
    on_stretch = sim.exact._on_stretch

    def seen(run) -> None:
        counts.admitting[limits.is_async] += len(run.calls)
        on_stretch(run)

    sim.exact._on_stretch = seen
    finish = sim.exact.core._finish  # the closed loop's, if any

    def counted_finish(i: int, when_s: float) -> None:
        counts.finishes[limits.is_async] += bool(inside)
        finish(i, when_s)

    sim.exact.core._finish = counted_finish
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sim.run(), sim.exact.request_times(), sim.exact.prefix_hit_rate


def _reached_every_path(counts: Counts) -> bool:
    return (
        counts.early_joins > 0 and all(counts.finishes.values()) and all(counts.admitting.values())
    )


@pytest.mark.parametrize("chunk", range(2))
def test_finishes_in_stretches_and_early_joins_keep_every_step(chunk: int, monkeypatch) -> None:
    counts = Counts()
    seeds: list[int] = []
    # 20 fresh cases, then more until the set reaches every new path (a third of the cases
    # make no admitting call inside a stretch): at most 100
    while len(seeds) < 20 or (len(seeds) < 100 and not _reached_every_path(counts)):
        seed = random.randrange(1 << 30)
        seeds.append(seed)
        req, limits = random_case(seed)
        fast = run(req, limits, True, False, counts, monkeypatch)
        slow = run(req, limits, False, False, Counts(), monkeypatch)
        exact = run(req, limits, False, True, Counts(), monkeypatch)
        for other, name in ((slow, "step loop"), (exact, "per-request path")):
            pd.testing.assert_frame_equal(
                fast[0], other[0], check_exact=True, obj=f"seed {seed} steps vs {name}"
            )
            pd.testing.assert_frame_equal(
                fast[1], other[1], check_exact=True, obj=f"seed {seed} times vs {name}"
            )
            assert fast[2] == other[2] or (np.isnan(fast[2]) and np.isnan(other[2])), seed
    # the case set reaches the new paths (else it checked nothing new)
    assert counts.early_joins > 0, f"no async request joined after its prefill: {seeds}"
    assert counts.finishes[True] > 0 and counts.finishes[False] > 0, f"{counts.finishes} {seeds}"
    assert counts.admitting[True] > 0 and counts.admitting[False] > 0, f"{counts.admitting} {seeds}"
