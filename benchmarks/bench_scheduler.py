"""vLLM's own scheduler (``replay_scheduler(requests, SchedulerLimits(vllm_version=...))``): speed.

Targets (issue 19): the Azure-sized trace (about 20k requests) in < 5 s; 1M requests in
< 60 s on this machine; memory that grows linearly with the requests.

- The Azure LLM inference 2023 conversation trace (19,366 requests, its real arrivals and
  lengths; shipped in cgdispatch/data, CC-BY 4.0) under vLLM 0.34 (async scheduling, its
  default) and 0.33 (sync), vLLM's default limits (256 sequences, 8192 tokens, unlimited
  KV). The baseline measured in the same run is the per-request path
  (``record_calls=True``: every schedule call listed request by request, as the oracle
  replay needs), which gives the same steps; the ratio is the bulk path's speed-up.
- 200k and 1M synthetic requests (ShareGPT-like lengths, Poisson arrivals at 20/s), each in
  its own process: wall time of the simulation and the process's peak resident memory.

Run: ``PYTHONPATH=. python benchmarks/bench_scheduler.py`` (about two minutes on 2 cores).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from targets import Targets  # beside this script

ROOT = Path(__file__).resolve().parents[1]
TARGET_AZURE_S = 5.0
TARGET_1M_S = 60.0

_CHILD = """
import resource, sys, time
from cgdispatch import SchedulerLimits, replay_scheduler, synthetic_requests
n = int(sys.argv[1])
requests = synthetic_requests(n, "sharegpt", rate_per_s=20.0, seed=0)
start = time.perf_counter()
steps = replay_scheduler(requests, SchedulerLimits(vllm_version="0.34"))
seconds = time.perf_counter() - start
print(len(steps), seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def azure(version: str) -> tuple[int, float, float]:
    """(steps, bulk seconds, per-request seconds) on the Azure conversation trace."""
    from cgdispatch import SchedulerLimits, replay_scheduler
    from cgdispatch.workload.files import load_requests
    from cgdispatch.workload.replay import start_replay
    from cgdispatch.workload.sources import trace_path

    requests = load_requests(trace_path("azure-conv"))
    limits = SchedulerLimits(vllm_version=version)
    start = time.perf_counter()
    fast = replay_scheduler(requests, limits)
    bulk_s = time.perf_counter() - start
    start = time.perf_counter()
    slow = start_replay(requests, limits, record_calls=True).frame()
    slow_s = time.perf_counter() - start
    if not fast.equals(slow):
        raise SystemExit(f"the bulk path's steps differ from the per-request path's ({version})")
    return len(fast), bulk_s, slow_s


def synthetic(num_requests: int) -> tuple[int, float, int]:
    """(steps, seconds, peak bytes) of one process simulating ``num_requests``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(num_requests)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    steps, seconds, peak = proc.stdout.split()
    return int(steps), float(seconds), int(peak)


def main() -> int:
    targets = Targets()
    print("figures: measured (CPU), this machine; vLLM's scheduler, default limits")
    for version in ("0.34", "0.33"):
        steps, bulk_s, slow_s = azure(version)
        met = targets.check(
            f"Azure trace vLLM {version} < {TARGET_AZURE_S:.0f} s", bulk_s < TARGET_AZURE_S
        )
        verdict = "met" if met else "MISSED"
        print(
            f"Azure conversation trace, vLLM {version}: {steps:_} steps in {bulk_s:.2f} s "
            f"(per-request path {slow_s:.2f} s: {slow_s / bulk_s:.1f}x faster; same steps); "
            f"target < {TARGET_AZURE_S:.0f} s: {bulk_s / TARGET_AZURE_S:.2f} of it ({verdict})"
        )
    rows = {}
    for n in (200_000, 1_000_000):
        rows[n] = synthetic(n)
        steps, seconds, peak = rows[n]
        print(
            f"{n:>9_} synthetic requests (vLLM 0.34): {steps:_} steps in {seconds:.1f} s, "
            f"peak {peak / 2**20:.0f} MiB ({peak / n:.0f} bytes a request)"
        )
    _, big_s, big_peak = rows[1_000_000]
    _, small_s, small_peak = rows[200_000]
    met = targets.check(f"1M requests < {TARGET_1M_S:.0f} s", big_s < TARGET_1M_S)
    verdict = "met" if met else "MISSED"
    print(
        f"1M requests: {big_s:.1f} s, target < {TARGET_1M_S:.0f} s: "
        f"{big_s / TARGET_1M_S:.2f} of it ({verdict}); 5x the requests cost "
        f"{big_s / small_s:.1f}x the time and {big_peak / small_peak:.1f}x the memory"
    )
    return targets.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
