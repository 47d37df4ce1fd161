"""Generation-2 dispatch speed: cgdispatch's CudaGraphManager vs straightforward versions.

Baseline (the target): tests/core/reference_manager.py, the rules of docs/semantics_v2.md
written plainly (scan every descriptor for the smallest fitting decode graph and the
smallest FULL / PIECEWISE token-keyed group, then check compatibility). Also printed, for
scale: the same manager with its answer memo off, i.e. vLLM 0.34's own dict tables.
All see the same random batches of a vLLM 0.34 default config on SM100 (54 prefill sizes,
64 decode sizes, max_num_seqs 256); answers are checked equal before timing.
Target: ours >= 5x faster per call than the reference. Run:
``PYTHONPATH=. python benchmarks/bench_dispatch_v2.py``
"""

from __future__ import annotations

import random
import statistics
import time

from reference_dispatchers import ReferenceManager  # beside this script

from cgdispatch import AttentionCGSupport, CudaGraphManager, GraphConfig


def make_batches(n: int, max_num_seqs: int, max_tokens: int, seed: int) -> list[tuple]:
    """70% uniform decodes (1..max_num_seqs requests), 30% mixed steps up to max_tokens."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if rng.random() < 0.7:
            r = rng.randint(1, max_num_seqs)
            out.append((r, r, 1, 0))
        else:
            t = rng.randint(1, max_tokens)
            out.append((rng.randint(1, min(t, max_num_seqs)), t, None, 0))
    return out


def main(n_batches: int = 50_000, repeats: int = 3, seed: int = 0) -> float:
    config = GraphConfig(
        vllm_version="0.34",
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        device_capability=(10, 0),
    ).resolve(AttentionCGSupport.ALWAYS)
    ours = CudaGraphManager(config)
    tables = CudaGraphManager(config)
    ref = ReferenceManager(config)
    batches = make_batches(n_batches, config.max_num_seqs, config.max_num_batched_tokens, seed)
    for b in batches[:3000]:  # same answers before timing anything
        assert ours.dispatch(*b) == ref.dispatch(*b) == tables._dispatch(*b, None, 1), b

    def run(dispatch, extra=()) -> float:
        t0 = time.perf_counter_ns()
        for b in batches:
            dispatch(*b, *extra)
        return (time.perf_counter_ns() - t0) / n_batches

    ref_ns, tab_ns, ours_ns = [], [], []
    for _ in range(repeats):  # interleaved so that machine noise hits all alike
        ref_ns.append(run(ref.dispatch))
        tab_ns.append(run(tables._dispatch, (None, 1)))
        ours_ns.append(run(ours.dispatch))
    r, t, o = (statistics.median(x) for x in (ref_ns, tab_ns, ours_ns))
    n_graphs = len(ours.capture_order())
    print(
        f"batches: {n_batches:,} x {repeats} repeats, FULL_AND_PIECEWISE, vLLM 0.34 SM100 "
        f"defaults, {n_graphs} descriptors (measured (CPU))"
    )
    print(f"reference (plain rules):        median {r:9.1f} ns/call")
    print(f"vLLM's dict tables, no memo:    median {t:9.1f} ns/call")
    print(f"cgdispatch CudaGraphManager:    median {o:9.1f} ns/call")
    ratio = r / o
    print(f"speed-up vs vLLM's tables: {t / o:.1f}x")
    print(f"speed-up vs reference: {ratio:.1f}x (target >= 5x): {'PASS' if ratio >= 5 else 'FAIL'}")
    return ratio


if __name__ == "__main__":
    main()
