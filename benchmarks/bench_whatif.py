"""What-if engine speed: 10 M steps through the dispatcher, against a plain dispatch() loop.

Prints, for V1 (vLLM 0.33, ``CudagraphDispatcher``) and generation 2 (vLLM 0.34,
``CudaGraphManager``, which also reads each step's request count), the absolute time of
``evaluate`` on 10 M random steps (measured (CPU)), the time of a plain Python loop over
``dispatch()`` on a 200 k-step sample scaled to 10 M, their ratio, and checks that both give
the same answers on the sample. Target: under 2 s for 10 M steps (V1; generation 2 is
reported against the same target).
"""

from __future__ import annotations

import platform
import time

import numpy as np
from targets import Targets  # beside this script

from cgdispatch import CudagraphDispatcher, CudaGraphManager, GraphConfig
from cgdispatch.plan.whatif import MODE_CODES, evaluate
from cgdispatch.workload.trace import make_trace

STEPS, SAMPLE, REPEATS = 10_000_000, 200_000, 3


def _timed(config: GraphConfig, trace) -> tuple[float, list[float], object]:
    evaluate(config, trace.iloc[:1000])  # warm-up
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        result = evaluate(config, trace)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), times, result


def _report(name: str, fast_s: float, times: list[float], loop_s: float, same: bool) -> bool:
    """Print one generation's figures; returns whether it met the 2 s target."""
    print(f"  {name}:")
    print(
        f"    evaluate():              {fast_s:7.3f} s  (median of {REPEATS}; "
        f"spread {min(times):.3f}-{max(times):.3f} s)"
    )
    print(f"    dispatch() loop (scaled from {SAMPLE:,} steps): {loop_s:7.3f} s")
    print(f"    speed-up: {loop_s / fast_s:.1f}x; answers identical on the sample: {same}")
    print(f"    target < 2 s: {'met' if fast_s < 2.0 else 'NOT met'}")
    if not same:
        raise SystemExit(f"{name}: evaluate() and the dispatch() loop disagree")
    return fast_s < 2.0


def main() -> int:
    targets = Targets()
    rng = np.random.default_rng(0)
    num_tokens = rng.integers(1, 1024, STEPS)
    uniform = rng.random(STEPS) < 0.8
    # decodes have one request per token (q = 1); other steps 1..min(n, 256) requests
    num_reqs = np.where(uniform, num_tokens, rng.integers(1, 257, STEPS) % num_tokens + 1)
    trace = make_trace(num_tokens, uniform, num_reqs)
    sample = trace.iloc[:SAMPLE]
    n_list, u_list = sample["num_tokens"].tolist(), sample["uniform_decode"].tolist()
    r_list = sample["num_reqs"].tolist()
    print(
        f"what-if on {STEPS:,} steps, measured (CPU, {platform.processor() or platform.machine()}):"
    )

    config = GraphConfig(vllm_version="0.33")  # V1 defaults: FULL_AND_PIECEWISE, 51 sizes to 512
    fast_s, times, result = _timed(config, trace)
    dispatcher = CudagraphDispatcher(config, record_stats=False)
    dispatcher.initialize_cudagraph_keys()
    t0 = time.perf_counter()
    answers = [dispatcher.dispatch(n, uniform_decode=u) for n, u in zip(n_list, u_list)]
    loop_s = (time.perf_counter() - t0) * STEPS / SAMPLE
    modes = np.array([MODE_CODES[m] for m, _ in answers])
    padded = np.array([d.num_tokens for _, d in answers])
    same = np.array_equal(modes, result.runtime_mode[:SAMPLE]) and np.array_equal(
        padded, result.padded_tokens[:SAMPLE]
    )
    name = "V1 (vLLM 0.33, CudagraphDispatcher)"
    targets.check(f"{name} < 2 s", _report(name, fast_s, times, loop_s, same))

    config = GraphConfig(vllm_version="0.34").resolve()  # vLLM 0.34 defaults on SM90
    fast_s, times, result = _timed(config, trace)
    manager = CudaGraphManager(config)
    t0 = time.perf_counter()
    descs = [manager.dispatch(r, n, 1 if u else None, 0) for n, u, r in zip(n_list, u_list, r_list)]
    loop_s = (time.perf_counter() - t0) * STEPS / SAMPLE
    modes = np.array([MODE_CODES[d.cg_mode] for d in descs])
    padded = np.array([d.num_tokens for d in descs])
    same = np.array_equal(modes, result.runtime_mode[:SAMPLE]) and np.array_equal(
        padded, result.padded_tokens[:SAMPLE]
    )
    name = "generation 2 (vLLM 0.34, CudaGraphManager)"
    targets.check(f"{name} < 2 s", _report(name, fast_s, times, loop_s, same))
    return targets.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
