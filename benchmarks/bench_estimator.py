"""Speed of the graph-memory estimate: toy-small, vLLM's default ladder (51 sizes).

Target (issue 5): under 10 s on this machine, and under a third of the time of running
the model eagerly on the CPU once for every size (the baseline, measured in the same run).
Run: ``PYTHONPATH=. python benchmarks/bench_estimator.py [--mode FULL_AND_PIECEWISE]``.
"""

from __future__ import annotations

import argparse
import time

import torch

from cgdispatch import BatchDescriptor, GraphConfig
from cgdispatch.estimate.graph_memory import estimate_graph_memory, toy_inputs
from cgdispatch.models.toy import build_toy_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="toy-small")
    parser.add_argument("--mode", default="FULL_AND_PIECEWISE", help="vLLM's default mode")
    args = parser.parse_args()
    config = GraphConfig(cudagraph_mode=args.mode)  # default ladder: 51 sizes up to 512
    sizes = config.cudagraph_capture_sizes

    meta_model = build_toy_model(args.model, device="meta")
    start = time.perf_counter()
    est = estimate_graph_memory(meta_model, config)
    estimate_s = time.perf_counter() - start

    model = build_toy_model(args.model)  # real weights on the CPU
    with torch.no_grad():
        model(*toy_inputs(model, BatchDescriptor(1)))  # warm-up, not timed
        start = time.perf_counter()
        for n in sizes:
            model(*toy_inputs(model, BatchDescriptor(n)))
        eager_s = time.perf_counter() - start

    print(
        f"{args.model}, {args.mode}, {len(sizes)} sizes ({len(est.per_key)} keys, {len(est.graphs)} graphs)"
    )
    print(f"  memory estimate (fake tensors):  {estimate_s:6.2f} s   target < 10 s")
    print(f"  eager CPU forward, every size:   {eager_s:6.2f} s   (baseline, same run)")
    print(f"  ratio estimate / eager:          {estimate_s / eager_s:6.2f}     target < 0.33")
    print(f"  {est.summary()}")


if __name__ == "__main__":
    main()
