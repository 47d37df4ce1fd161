"""Switching ``tune`` to the azure-conv trace: wall time against the 10 s target (issue 30).

Each figure is one ``python -m cgdispatch tune --trace azure-conv --vllm-version V --json``
process (imports included, as a user waits for it), for vLLM 0.33 and 0.34:

* ``cold (baseline)``: the trace's simulated steps and latencies deleted from the cache
  first: every run simulates the trace and replays vLLM's scheduler per ladder, as before
  the result cache, and stores them;
* ``warm``: the same switch again, served from the cache.

Also ``in-process warm``: the dashboard's path on a switch (``tune_for``: the trace
replayed through vLLM's scheduler, the requests, ``tune``) timed inside one process whose
imports are done, as the dashboard's kernel is. Every JSON answer must equal the cold one
(checked). The cache folder (``CGDISPATCH_CACHE_DIR``) is a temporary one whose cost model
and stage profile are built by a small warm-up run first, so only the simulated results
differ between the rows (``CGDISPATCH_CACHE=0`` would rebuild those models too on every run).

Run: ``PYTHONPATH=. python benchmarks/bench_trace_switch.py [WARM_RUNS [SLOW_RUNS]]``: warm
and in-process rows WARM_RUNS times (default 3), the cold row SLOW_RUNS times (default 1;
each is 20-40 s on 2 busy cores). Prints min and median.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from targets import Targets  # beside this script

TARGET_S = 10.0
VERSIONS = ("0.33", "0.34")
ROOT = Path(__file__).resolve().parents[1]

IN_PROCESS = """
import sys, time
from cgdispatch.estimate.device_model import device_cost_model
from cgdispatch.estimate.startup import startup_for
from cgdispatch.plan.tune_run import TuneSettings, tune_for
version = sys.argv[1]
device_cost_model("llama-3.1-8b", "H200")
startup_for("llama-3.1-8b", "H200")
start = time.perf_counter()
tune_for(TuneSettings(trace="azure-conv", vllm_version=version))  # the dashboard's call
print(time.perf_counter() - start)
"""


def run(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    """(wall seconds, stdout) of one process."""
    start = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{args} failed:\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout


def tune_cmd(version: str) -> list[str]:
    return [sys.executable, "-m", "cgdispatch", "tune", "--trace", "azure-conv",
            "--vllm-version", version, "--json"]  # fmt: skip


def clear_results(folder: Path) -> None:
    for path in [*folder.glob("steps-*.npz"), *folder.glob("latency-*.npz")]:
        path.unlink()


def summary(name: str, times: list[float], targets: Targets) -> str:
    best, median = min(times), statistics.median(times)
    met = name.startswith("off") or targets.check(f"{name} <= {TARGET_S:.0f} s", median <= TARGET_S)
    verdict = "met" if met else "MISSED"
    return (
        f"  {name:<17} min {best:5.1f} s  median {median:5.1f} s  ({len(times)} runs)  "
        f"median/target {median / TARGET_S:4.2f} ({verdict})"
    )


def main() -> int:
    targets = Targets()
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    slow_repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    with tempfile.TemporaryDirectory() as folder:
        cache = Path(folder)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "CGDISPATCH_CACHE_DIR": folder}
        env.pop("CGDISPATCH_CACHE", None)
        # build the cost model and stage profile once, outside every timed row
        run([*tune_cmd(VERSIONS[0])[:4], "--trace", "sharegpt", "--num-requests", "50"], env)
        load = os.getloadavg()[0]
        print(f"figures: measured (CPU wall time), {os.cpu_count()} cores, load {load:.1f}")
        for version in VERSIONS:
            rows: dict[str, list[float]] = {"cold (baseline)": [], "warm": []}
            answers = set()
            for _ in range(slow_repeats):
                clear_results(cache)
                seconds, out = run(tune_cmd(version), env)
                rows["cold (baseline)"].append(seconds)
                answers.add(out)
            for _ in range(repeats):
                seconds, out = run(tune_cmd(version), env)
                rows["warm"].append(seconds)
                answers.add(out)
            inproc = [
                float(run([sys.executable, "-c", IN_PROCESS, version], env)[1])
                for _ in range(repeats)
            ]
            print(f"tune --trace azure-conv --vllm-version {version} --json:")
            for name, times in rows.items():
                print(summary(name, times, targets))
            print(summary("in-process warm", inproc, targets))
            base, warm = statistics.median(rows["cold (baseline)"]), statistics.median(rows["warm"])
            print(
                f"  warm/baseline {warm / base:.2f} (median); answers identical: {len(answers) == 1}"
            )
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return targets.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
