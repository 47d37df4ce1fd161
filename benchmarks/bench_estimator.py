"""Graph memory and speed of the estimate: toy-small, vLLM's default ladder (51 sizes).

Memory (issue 12): per mode (FULL and FULL_AND_PIECEWISE by default), the shared-pool
estimate with weak outputs (vLLM's rule, the capture default) and with strong ones, the
largest single graph (the peak of the worst graph captured alone), and the ratio of the
weak pool to it. Target: ratio <= 1.2 (one pool captured largest first costs little more
than its largest graph).

Speed (issue 5): the estimate takes under 10 s, and with ``--baseline`` under a third of
the time of running the model eagerly on the CPU once for every size (measured in the
same run; slow on a loaded machine, hence opt-in).

    PYTHONPATH=. python benchmarks/bench_estimator.py [--modes FULL,FULL_AND_PIECEWISE] [--baseline]

Every figure is ``model`` (the estimate), except the eager baseline: ``measured (CPU)``.
"""

from __future__ import annotations

import argparse
import time

import torch

from cgdispatch import BatchDescriptor, GraphConfig
from cgdispatch.estimate.graph_memory import estimate_graph_memory, toy_inputs
from cgdispatch.models.toy import build_toy_model

MIB = 1 << 20
RATIO_TARGET = 1.2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="toy-small")
    parser.add_argument("--modes", default="FULL,FULL_AND_PIECEWISE")
    parser.add_argument("--baseline", action="store_true", help="also time the eager baseline")
    args = parser.parse_args()
    meta_model = build_toy_model(args.model, device="meta")
    failed = False
    print(f"{args.model}, vLLM's default ladder; figures: model (the estimate)")
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        config = GraphConfig(vllm_version="0.33", cudagraph_mode=mode)  # V1: 51 sizes to 512
        start = time.perf_counter()
        est = estimate_graph_memory(meta_model, config)
        estimate_s = time.perf_counter() - start
        ratio = est.weak_pool_bytes / est.largest_graph_bytes
        ok = ratio <= RATIO_TARGET
        failed |= not ok
        print(
            f"\n{mode}: {len(config.cudagraph_capture_sizes)} sizes, {len(est.per_key)} keys, "
            f"{len(est.graphs)} graphs; estimate {estimate_s:.2f} s (target < 10 s)"
        )
        print(f"  shared pool, weak outputs (vLLM):  {est.weak_pool_bytes / MIB:9.2f} MiB")
        print(f"  shared pool, strong outputs:       {est.strong_pool_bytes / MIB:9.2f} MiB")
        print(f"  largest single graph:              {est.largest_graph_bytes / MIB:9.2f} MiB")
        print(
            f"  ratio weak pool / largest graph:   {ratio:9.2f}     target <= {RATIO_TARGET}"
            f" -> {'PASS' if ok else 'FAIL'}"
        )
        if args.baseline:
            print(
                f"  eager baseline: {_eager_s(args.model, config) / estimate_s:.1f}x the estimate"
            )
    return 1 if failed else 0


def _eager_s(preset: str, config: GraphConfig) -> float:
    """Seconds to run the model eagerly on the CPU once per capture size (measured (CPU))."""
    model = build_toy_model(preset)  # real weights on the CPU
    with torch.no_grad():
        model(*toy_inputs(model, BatchDescriptor(1)))  # warm-up, not timed
        start = time.perf_counter()
        for n in config.cudagraph_capture_sizes:
            model(*toy_inputs(model, BatchDescriptor(n)))
        return time.perf_counter() - start


if __name__ == "__main__":
    raise SystemExit(main())
