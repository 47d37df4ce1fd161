"""A 1M-request trace through ``python -m cgdispatch plan --json``: time and peak memory.

Target (issue 21): 1M requests in under 30 s and under 1 GB (peak resident set of the
command), on this machine. The baseline measured in the same run is the same command on
the first 100k requests of the same trace: the ratio of the two shows how the cost grows
(10x the requests should cost about 10x the time, and far less than 10x the memory).

The trace is synthetic (Azure-like columns ``TIMESTAMP, ContextTokens, GeneratedTokens``;
Poisson arrivals at 20/s, uniform lengths), written to a temporary folder. Each command runs
in its own process with a temporary cache folder (``CGDISPATCH_CACHE_DIR``) whose cost
model a small warm-up run builds first, and whose simulated results are deleted before each
timed run (``CGDISPATCH_CACHE=0`` would rebuild the cost model in every run too); peak
memory is that process's ``ru_maxrss``.

Run: ``PYTHONPATH=. python benchmarks/bench_large_trace.py [NUM_REQUESTS]`` (about a
minute on 2 cores).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from targets import Targets  # beside this script

TARGET_S = 30.0
TARGET_BYTES = 1 << 30


def write_trace(path: Path, num_requests: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1 / 20.0, num_requests))
    pd.DataFrame(
        {
            "TIMESTAMP": arrival.round(4),
            "ContextTokens": rng.integers(20, 2000, num_requests),
            "GeneratedTokens": rng.integers(1, 300, num_requests),
        }
    ).to_csv(path, index=False)


def run_plan(trace: Path, cache: Path) -> tuple[float, int]:
    """(wall seconds, peak resident bytes) of one ``plan --json`` process on ``trace``, its
    simulated results not in the ``cache`` folder."""
    for path in [*cache.glob("steps-*"), *cache.glob("latency-*")]:
        path.unlink()
    code = (
        "import resource, sys\n"
        "from cgdispatch.__main__ import main\n"
        "rc = main(sys.argv[1:])\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    argv = ["plan", "--trace", str(trace), "--max-graphs", "8", "--json"]
    # results deleted above: a trace simulated before (same content, same code) would be
    # read back from the cache, and the figure would time a cache read, not the simulation
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "CGDISPATCH_CACHE_DIR": str(cache),
    }
    env.pop("CGDISPATCH_CACHE", None)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"plan failed on {trace}:\n{proc.stderr[-2000:]}")
    peak_kib = int(proc.stderr.strip().splitlines()[-1])
    return seconds, peak_kib * 1024


def main() -> int:
    num_requests = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    small = num_requests // 10
    with tempfile.TemporaryDirectory() as tmp:
        big_path, small_path = Path(tmp) / "big.csv", Path(tmp) / "small.csv"
        write_trace(big_path, num_requests)
        pd.read_csv(big_path, nrows=small).to_csv(small_path, index=False)
        warm_up = Path(tmp) / "warm_up.csv"
        pd.read_csv(big_path, nrows=100).to_csv(warm_up, index=False)
        print(f"trace: {num_requests:_} requests, {big_path.stat().st_size / 2**20:.1f} MiB CSV")
        cache = Path(tmp) / "cache"
        run_plan(warm_up, cache)  # builds the cost model, outside the timed runs
        base_s, base_bytes = run_plan(small_path, cache)
        big_s, big_bytes = run_plan(big_path, cache)
    print("figures: measured (CPU), this machine")
    print(f"baseline ({small:_} requests): {base_s:6.1f} s, peak {base_bytes / 2**20:6.0f} MiB")
    print(f"full ({num_requests:_} requests):  {big_s:6.1f} s, peak {big_bytes / 2**20:6.0f} MiB")
    print(
        f"ratio full/baseline: time {big_s / base_s:.1f}x, memory {big_bytes / base_bytes:.1f}x "
        f"for {num_requests / small:.0f}x the requests"
    )
    print(
        f"target < {TARGET_S:.0f} s: {big_s:.1f} s = {big_s / TARGET_S:.2f} of the target "
        f"({'met' if big_s < TARGET_S else 'MISSED'}); target < 1 GiB: "
        f"{big_bytes / TARGET_BYTES:.2f} of it ({'met' if big_bytes < TARGET_BYTES else 'MISSED'})"
    )
    targets = Targets()
    targets.check(f"large trace < {TARGET_S:.0f} s", big_s < TARGET_S)
    targets.check("large trace < 1 GiB", big_bytes < TARGET_BYTES)
    return targets.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
