"""What-if engine speed: 10 M steps through the dispatcher, against a plain dispatch() loop.

Prints the absolute time of ``evaluate`` on 10 M random steps (measured (CPU)), the time of
a plain Python loop over ``dispatch()`` on a 200 k-step sample scaled to 10 M, their ratio,
and checks that both give the same answers on the sample. Target: under 2 s for 10 M steps.
"""

from __future__ import annotations

import platform
import time

import numpy as np

from cgdispatch import CudagraphDispatcher, GraphConfig
from cgdispatch.plan.whatif import MODE_CODES, evaluate
from cgdispatch.workload.trace import make_trace

STEPS, SAMPLE, REPEATS = 10_000_000, 200_000, 3


def main() -> None:
    rng = np.random.default_rng(0)
    trace = make_trace(rng.integers(1, 1024, STEPS), rng.random(STEPS) < 0.8)
    config = GraphConfig()  # vLLM defaults: FULL_AND_PIECEWISE, 51 sizes up to 512
    evaluate(config, trace.iloc[:1000])  # warm-up
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        result = evaluate(config, trace)
        times.append(time.perf_counter() - t0)
    fast_s = float(np.median(times))

    sample = trace.iloc[:SAMPLE]
    dispatcher = CudagraphDispatcher(config, record_stats=False)
    dispatcher.initialize_cudagraph_keys()
    n_list, u_list = sample["num_tokens"].tolist(), sample["uniform_decode"].tolist()
    t0 = time.perf_counter()
    answers = [dispatcher.dispatch(n, uniform_decode=u) for n, u in zip(n_list, u_list)]
    loop_s = (time.perf_counter() - t0) * STEPS / SAMPLE
    modes = np.array([MODE_CODES[m] for m, _ in answers])
    padded = np.array([d.num_tokens for _, d in answers])
    same = np.array_equal(modes, result.runtime_mode[:SAMPLE]) and np.array_equal(
        padded, result.padded_tokens[:SAMPLE]
    )

    print(
        f"what-if on {STEPS:,} steps, measured (CPU, {platform.processor() or platform.machine()}):"
    )
    print(
        f"  evaluate():              {fast_s:7.3f} s  (median of {REPEATS}; spread {min(times):.3f}-{max(times):.3f} s)"
    )
    print(f"  dispatch() loop (scaled from {SAMPLE:,} steps): {loop_s:7.3f} s")
    print(f"  speed-up: {loop_s / fast_s:.1f}x; answers identical on the sample: {same}")
    print(f"  target < 2 s: {'met' if fast_s < 2.0 else 'NOT met'}")
    if not same:
        raise SystemExit("evaluate() and the dispatch() loop disagree")


if __name__ == "__main__":
    main()
