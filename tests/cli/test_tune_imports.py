"""``python -m cgdispatch tune`` on its warm path (cost model and start-up estimates read from
the disk cache) does not import torch: about 1.6 s of a trace switch on two cores
(benchmarks/bench_trace_switch.py). The first run, which builds the cache, may."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tune(cache: Path) -> tuple[str, set[str]]:
    """(stdout, modules imported) of one ``tune`` process with the cache in ``cache``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CGDISPATCH_CACHE_DIR": str(cache)}
    env.pop("CGDISPATCH_CACHE", None)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cgdispatch", "tune", "--trace", "sharegpt",
         "--num-requests", "60", "--vllm-version", "0.34", "--json"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    return proc.stdout, modules


@pytest.mark.slow
def test_the_warm_path_does_not_import_torch(tmp_path: Path) -> None:
    cold_out, cold = _tune(tmp_path)
    assert "cgdispatch.workload.vllm_engine" in cold  # the parse sees the imports
    # the simulated steps and latencies dropped, the cost model and stage profile kept: the
    # whole simulation and replay run again, only the expensive models are read
    kept = {p.name.split("-")[0] for p in tmp_path.iterdir()}
    assert {"cost", "stage"} <= kept, kept
    for path in tmp_path.iterdir():
        if not path.name.startswith(("cost-model-", "stage-profile-")):
            path.unlink()
    warm_out, warm = _tune(tmp_path)
    assert warm_out == cold_out
    assert "cgdispatch.workload.vllm_engine" in warm
    assert not {m for m in warm if m == "torch" or m.startswith("torch.")}, (
        "tune imported torch with its cost model and start-up estimates cached"
    )
