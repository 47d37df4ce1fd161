"""Dispatch speed: cgdispatch's table lookup vs a dispatcher written the straightforward way.

The baseline does per call what vLLM V1's `CudagraphDispatcher.dispatch` does (docs/semantics.md):
pad through a lookup table, build the BatchDescriptor, probe the FULL key set, relax the
descriptor, probe FULL and PIECEWISE again (the seed-style dispatcher). Ours has statistics
on. Both see the same stream of 100,000 steps (`mixed_steps`: sizes 1-600 tokens, 60%
uniform decode) on a FULL_AND_PIECEWISE config with vLLM's default ladder (up to 512), so
about 15% of the calls are above the largest graph and run eagerly; the share is printed.
Target: ours >= 5x faster per call. Run: python benchmarks/bench_dispatch.py
"""

from __future__ import annotations

import random
import statistics
import time

from targets import Targets  # beside this script

from cgdispatch import BatchDescriptor, CudagraphDispatcher, CUDAGraphMode, GraphConfig

M = CUDAGraphMode


class StraightforwardDispatcher:
    """vLLM's per-call algorithm (docs/semantics.md, Dispatch), with the keys of a real dispatcher."""

    def __init__(self, config: GraphConfig, keys: dict) -> None:
        self.keys = keys
        self.max_num_seqs = config.max_num_seqs
        self.q = config.uniform_decode_query_len
        self.separate = config.cudagraph_mode.separate_routine()
        sizes = config.cudagraph_capture_sizes
        self.max_size = sizes[-1]
        self.padded = [0] + [min(s for s in sizes if s >= n) for n in range(1, self.max_size + 1)]

    def dispatch(self, num_tokens: int, uniform_decode: bool = False):
        if num_tokens > self.max_size:
            return M.NONE, BatchDescriptor(num_tokens)
        padded = self.padded[num_tokens]
        if uniform_decode and self.separate:
            desc = BatchDescriptor(padded, padded // self.q, True)
        else:
            desc = BatchDescriptor(padded, min(padded, self.max_num_seqs), False)
        if desc in self.keys[M.FULL]:
            return M.FULL, desc
        relaxed = desc.relax_for_mixed_batch_cudagraphs()
        if relaxed in self.keys[M.FULL]:
            return M.FULL, relaxed
        if relaxed in self.keys[M.PIECEWISE]:
            return M.PIECEWISE, relaxed
        return M.NONE, BatchDescriptor(num_tokens)


def mixed_steps(
    n_steps: int = 100_000, max_tokens: int = 600, uniform_share: float = 0.6, seed: int = 0
) -> list[tuple[int, bool]]:
    """(num_tokens, uniform_decode) of ``n_steps`` random steps: sizes 1..``max_tokens``,
    a ``uniform_share`` of them uniform decodes (bench_dispatch_v2.py uses the same stream)."""
    rng = random.Random(seed)
    return [(rng.randint(1, max_tokens), rng.random() < uniform_share) for _ in range(n_steps)]


def main(n_batches: int = 100_000, repeats: int = 5, seed: int = 0) -> float:
    config = GraphConfig(vllm_version="0.33")  # V1: FULL_AND_PIECEWISE, 51 sizes up to 512
    ours = CudagraphDispatcher(config)  # statistics on (the default)
    ours.initialize_cudagraph_keys()
    base = StraightforwardDispatcher(config, ours.cudagraph_keys)
    batches = mixed_steps(n_batches, seed=seed)
    eager_share = sum(base.dispatch(n, u)[0] is M.NONE for n, u in batches) / n_batches
    for n, u in batches:  # same answers before timing anything
        assert ours.dispatch(n, u) == base.dispatch(n, u), (n, u)

    def run(dispatch) -> float:
        t0 = time.perf_counter_ns()
        for n, u in batches:
            dispatch(n, u)
        return (time.perf_counter_ns() - t0) / n_batches

    base_ns, ours_ns = [], []
    for _ in range(repeats):  # interleaved so that machine noise hits both alike
        base_ns.append(run(base.dispatch))
        ours_ns.append(run(ours.dispatch))
    b, o = statistics.median(base_ns), statistics.median(ours_ns)
    ratio = b / o
    print(
        f"batches: {n_batches:,} x {repeats} repeats, FULL_AND_PIECEWISE, 51-size ladder (measured (CPU))"
    )
    print(f"stream: sizes 1-600, 60% uniform decode; eager (no graph) calls: {eager_share:.1%}")
    print(
        f"straightforward dispatcher: median {b:7.1f} ns/call (spread {min(base_ns):.1f}-{max(base_ns):.1f})"
    )
    print(
        f"cgdispatch (stats on):      median {o:7.1f} ns/call (spread {min(ours_ns):.1f}-{max(ours_ns):.1f})"
    )
    print(f"speed-up: {ratio:.1f}x (target >= 5x): {'PASS' if ratio >= 5 else 'FAIL'}")
    return ratio


if __name__ == "__main__":
    targets = Targets()
    targets.check("dispatch speed-up >= 5x", main() >= 5)
    raise SystemExit(targets.exit_code())
