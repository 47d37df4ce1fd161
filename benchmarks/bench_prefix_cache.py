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
minutes on 2 cores). The target is judged on wall seconds (what a person waits); the CPU
seconds are printed beside them, since on a loaded machine the wall figure runs 2-4x over.

Figures, measured (CPU) on this 2-core machine shared with other sessions, 2026-12-05: the
replay's CPU seconds (``time.process_time``; wall was 2-4x higher under load), each pair of
codes run back to back under the same load. First round: the code before the speed work on
the replay (commit b8d0600) against after it. Second round: commit 327c06a against branch
stretch (commit f672645; steady stretches through finishes and admissions, async early
joins), 19:05-19:09 UTC on a lightly loaded machine:

=========================  ===========  ===========  ==================  ========
requests                   off          on           on, unique prompts  on/off
=========================  ===========  ===========  ==================  ========
200k, b8d0600              4.1 s        17.1 s                           4.20x
200k, after round 1        4.0 s        15.5 s                           3.87x
1M, b8d0600                23.2 s       97.1 s                           4.18x
1M, after round 1          22.8 s       89.8 s                           3.94x
200k, 327c06a              4.2 s        13.1 s       6.8 s               3.16x
200k, stretch              3.2 s        9.2 s        5.7 s               2.89x
1M, 327c06a                20.5 s       63.1 s       33.6 s              3.08x
1M, stretch                16.6 s       47.7 s       28.2 s              2.87x
=========================  ===========  ===========  ==================  ========

The 60 s target for 1M requests with prefix caching on is met: 47.7 CPU s and 47.7 s wall
for the replay (327c06a: 63.1 and 63.1, same session; CPU seconds of one code vary by about
20% with the machine's load: 70.7 for 327c06a's code earlier the same day).

What the second round changed (the same steps, bit for bit): the engine loop's per-step
calls. Per 50k requests, 327c06a made 40,425 calls that admit, 47,212 follow-up calls that
admit nothing (23,743 async first decodes after a prefill, 23,469 calls at a steady decode's
end) and 58,916 steps in 25,815 stretches. Now: 2 calls outside stretches, and 1,141
stretches holding the 40,425 admitting calls and 106,126 steady steps (most end at the cap of
128 calls, ``vllm_steady.MAX_STRETCH_CALLS``). Async, a request joins the steady set at the
loop top after its prefill's call (the update in flight is then a decode's but for the first
token's time, set at the join). A stretch runs through steady decodes' ends (sync: the due
call and its update, which finishes; async: the leave at the due top, the call that
schedules the others, then the update of the call before, which finishes) and through the
calls that admit arrivals (``schedule_bulk``'s call, made, priced and listed in the stretch;
it goes on when the admitted join at the next top), while no one waiting could be admitted.
Hash keys of prompt blocks are made for 2048 requests at once (numpy) instead of per request.
The follow-up calls in stretches and the keys by chunk (commit 7de8e54) took 1M from 62.9
to 50.0 CPU s in an earlier pair the same session; the admitting calls in stretches gave
about 4% more (their cost is the admission's own work, not the call around it).

Where the time goes now (py-spy at 400 Hz over 200k requests with prefix caching on, code of
f672645, shares of the replay's CPU): the admitting calls 37% (``_admit`` 27%: hit lookups
with their hashes 7%, the new prompt blocks taken and cached 12%, touching hits and counting
evictable ones 3%, the rest its own logic; the steady decodes' blocks of that call 4.5%; the
call's record 3%); finishes inside stretches 17% (freeing blocks 9%, the update's and the
finish's bookkeeping the rest); the steady decodes' new blocks taken between calls 9%; rows
9%; the stretch loop itself 8%; joins 4%; leaves 3%; loading the trace 5%. Block work in all
(taking, evicting, freeing, caching, looking up) is about 37%, no line above 3%. What is left
is per-request work (an admission, a join, a leave, a finish each) and per-block work; no
per-step call remains to take.
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
        shown = f"{on_s:.1f} s wall ({'met' if met else 'MISSED'}; {on_cpu:.1f} CPU s)"
    else:
        shown = f"{scaled:.0f} s wall if linear from {num_requests:_} (run with 1000000 to measure)"
    # judged on wall seconds, what a person waits; on a loaded machine they exceed the CPU
    # seconds printed above (2-4x on these shared 2-core machines)
    print(f"target < {TARGET_1M_S:.0f} s wall for 1M requests with prefix caching on: {shown}")
    return targets.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
