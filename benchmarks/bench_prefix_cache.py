"""vLLM's prefix caching in the replay of its scheduler: speed with prefix caching on against
off, on the same trace, in the same run.

Target (issue 40): 1M requests through the replay in under 60 s with prefix caching on. The
baseline measured in the same run is the same trace with ``enable_prefix_caching=False``
(KV blocks only counted); the ratio on/off is the cost of block identity (free-block queue,
reference counts, hash map, chained hashes).

The trace is synthetic, multi-turn with shared system prompts: 200 system prompts of 1-6
hash blocks, sessions of 1-8 turns whose prompt is the session's previous prompt plus 1-3 new
blocks (``hash_ids`` of ``hash_block_size=64`` tokens, mooncake_trace style), ShareGPT-like
output lengths, Poisson arrivals at 20/s; vLLM 0.34's defaults (async scheduling) and a KV
cache of 20,000 blocks of 16 tokens, small enough to evict cached blocks. Prefix caching on
also runs once with every prompt unique (no ``hash_ids``), which takes the counting path when
the KV cache is unlimited and the block path here.

Run: ``PYTHONPATH=. python benchmarks/bench_prefix_cache.py [NUM_REQUESTS]`` (1M: several
minutes on 2 cores).

Figures, measured (CPU) on this 2-core machine shared with other sessions, 2026-12-05: the
replay's CPU seconds (``time.process_time``; wall was 2-4x higher under the load), the
code before the round of speed work on the replay (commit b8d0600) and after it, each
pair run side by side under the same load:

====================  ===========  ===========  ========
requests              off          on           on/off
====================  ===========  ===========  ========
200k, before          4.1 s        17.1 s       4.20x
200k, after           4.0 s        15.5 s       3.87x
1M, before            23.2 s       97.1 s       4.18x
1M, after             22.8 s       89.8 s       3.94x
====================  ===========  ===========  ========

The 60 s target for 1M requests with prefix caching on is missed (89.8 CPU s, 342 s wall).
What the round bought: hash_ids chained for every request at load (numpy) instead of a
dict of tuples (peak memory at 1M 2.02 -> 1.84 GB) and fewer instructions per engine-loop
call. What it found: a third of the time is per-block work (taking blocks from the free
queue and evicting their hashes, freeing, caching), spread over five loops, and the rest
is spread over the per-call path; C-level ``map`` calls over ``list.__setitem__`` were
slower than the loops they replaced (callgrind), and the cyclic collector costs 1%.

Where the time goes now (measured (CPU), same machine, 2026-12-05, code of commit e569455;
shares from py-spy sampling at 500 Hz over 100k requests, step counts from the runs). The
same code rerun at 1M: off 22.9, on 70.7, unique prompts on 35.5 CPU s (on: 2,698,810
steps, 101.5 s wall, the target missed; off: 1,346,150 steps): against 89.8 above, CPU
seconds of one code vary by about 20% with the machine's load.

- Prefix caching on makes twice the steps: at 200k, 544,121 steps against 268,224 off (mean
  step 17.4 ms against 34.6 ms at 50k: the default clock prices computed tokens, and cached
  ones are not computed). Per step the replay costs about 26 us on and 15 us off; with every
  prompt unique (same 268,224 steps as off) 26.5 us. So of the 3.5x on/off, about 2x is the
  step count and 1.7x the block identity per step.
- The calls a steady stretch cannot take: per 50k requests, 40,425 calls that admit and
  47,212 follow-up calls that admit nothing but run a request outside the steady set (by the join
  and leave rules: a request's first decode after its prefill, its last as it leaves),
  against 58,916 steps made in 25,815 stretches (off: 32,797, 25,937 and 14,944). A
  per-step call costs about 7x a stretch's step.
- Shares of the replay's CPU with prefix caching on: the per-call path without block work
  43%; block work 43% (taking and caching a prompt's new blocks 10%, freeing 10%, hit
  lookups with the block hashes they build 10%, the steady decodes' new output blocks 8%,
  touching hits 3%, caching at a steady decode's leave 2%); steady stretches 8%; loading the
  trace (request checks, hash chains) 6%. No line takes more than about 3%.

A round of micro-changes (hit lookups at C speed, a dups-free eviction loop, the publishing
check inlined) changed callgrind's instruction count of a 10k-request run by 0.1%, and was
dropped: the block loops leave little to take in CPython. A block pool at no cost would still
leave the other 57% (8.2 of 14.3 CPU s at 200k, about 40 s at 1M); what could reach the
target is fewer per-step calls (the follow-up calls taken into stretches) with less block
work, not a faster pool alone.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pandas as pd
from targets import Targets

TARGET_1M_S = 60.0
HASH_BLOCK = 64
CPU_S: list[float] = []  # each replay's CPU seconds, in run order


def shared_prefix_trace(num_requests: int, seed: int = 0) -> pd.DataFrame:
    """Sessions over shared system prompts, each turn extending the session's last prompt."""
    rng = np.random.default_rng(seed)
    systems = [list(rng.integers(0, 2**40, rng.integers(1, 7))) for _ in range(200)]
    hash_ids: list[list[int]] = []
    live: list[tuple[list[int], int]] = []  # (last prompt's ids, turns left)
    next_id = 2**41
    for _ in range(num_requests):
        if live and rng.random() < 0.6:
            k = int(rng.integers(len(live)))
            ids, left = live[k]
            ids = ids + list(range(next_id, next_id + int(rng.integers(1, 4))))
            if left <= 1 or len(ids) > 48:
                live[k] = live[-1]
                live.pop()
            else:
                live[k] = (ids, left - 1)
        else:
            ids = systems[int(rng.integers(len(systems)))] + list(
                range(next_id, next_id + int(rng.integers(1, 4)))
            )
            live.append((ids, int(rng.integers(1, 8))))
        next_id += 4
        hash_ids.append(ids)
    n_ids = np.array([len(x) for x in hash_ids])
    prompt = n_ids * HASH_BLOCK - rng.integers(0, HASH_BLOCK, num_requests)
    output = np.clip(rng.lognormal(np.log(200), 0.9, num_requests), 1, 2000).astype(np.int64)
    return pd.DataFrame(
        {
            "arrival_s": np.cumsum(rng.exponential(1 / 20.0, num_requests)),
            "prompt_tokens": prompt,
            "output_tokens": output,
            "hash_ids": hash_ids,
        }
    )


def run(requests: pd.DataFrame, prefix: bool) -> tuple[float, int, float, int]:
    """(seconds, steps, prefix hit rate, preemptions) of one replay; its CPU seconds (this
    process's, which other sessions on a shared machine inflate less than the wall's) in
    ``CPU_S``."""
    from cgdispatch import SchedulerLimits, SchedulerSimulator

    limits = SchedulerLimits(
        vllm_version="0.34",
        num_gpu_blocks=20_000,
        enable_prefix_caching=prefix,
        hash_block_size=HASH_BLOCK,
    )
    start, cpu = time.perf_counter(), time.process_time()
    sim = SchedulerSimulator(requests, limits)
    steps = sim.run()
    seconds = time.perf_counter() - start
    CPU_S.append(time.process_time() - cpu)
    return seconds, len(steps), sim.exact.prefix_hit_rate, int(steps["num_preempted"].sum())


def main() -> int:
    targets = Targets()
    num_requests = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    requests = shared_prefix_trace(num_requests)
    print(
        f"trace: {num_requests:_} requests, mean prompt {requests.prompt_tokens.mean():.0f} "
        f"tokens, mean output {requests.output_tokens.mean():.0f}"
    )
    print("figures: measured (CPU), this machine")
    off_s, off_steps, _, off_pre = run(requests, prefix=False)
    print(
        f"prefix caching off (baseline): {off_s:7.1f} s, {off_steps:_} steps, {off_pre} preempted"
    )
    on_s, on_steps, rate, on_pre = run(requests, prefix=True)
    print(
        f"prefix caching on:             {on_s:7.1f} s, {on_steps:_} steps, {on_pre} preempted, "
        f"hit rate {rate:.1%}"
    )
    uniq_s, uniq_steps, _, _ = run(requests.drop(columns="hash_ids"), prefix=True)
    print(f"prefix caching on, unique prompts: {uniq_s:7.1f} s, {uniq_steps:_} steps")
    print(f"ratio on/off: {on_s / off_s:.2f}x; unique prompts on/off: {uniq_s / off_s:.2f}x")
    off_cpu, on_cpu, uniq_cpu = CPU_S
    print(
        f"CPU seconds: off {off_cpu:.1f}, on {on_cpu:.1f}, unique prompts on {uniq_cpu:.1f} "
        f"(on/off {on_cpu / off_cpu:.2f}x)"
    )
    scaled = on_s * 1_000_000 / num_requests
    if num_requests >= 1_000_000:
        met = targets.check(f"1M requests under {TARGET_1M_S:.0f} s", on_s < TARGET_1M_S)
        shown = f"{on_s:.1f} s ({'met' if met else 'MISSED'})"
    else:
        shown = f"{scaled:.0f} s if linear from {num_requests:_} (run with 1000000 to measure)"
    print(f"target < {TARGET_1M_S:.0f} s for 1M requests with prefix caching on: {shown}")
    return targets.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
