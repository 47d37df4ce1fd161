"""Rebuild cgdispatch/data/reference_vllm_startups.csv from the llm-d-planner start-up logs.

The logs are vLLM 0.19.0 engine start-ups on H100 80GB GPUs that the llm-d planner project
recorded (github.com/llm-d-incubation/llm-d-planner, ``accuracy/results/v0.19.0/logs``, commit
d3121e059da88662db39a926a3ead964be97359b). Each successful run (``*.FAILED.log`` are left out)
becomes one row: the run's settings as vLLM logged them, its CUDA-graph capture (mode, sizes
per mode, seconds, pool memory actual and vLLM's own estimate) and, where logged, weights,
KV-cache memory and tokens and torch.compile time. Multi-rank runs log one line per worker:
the row keeps the largest graph pool and capture time (the rank that bounds the KV cache).

    python scripts/extract_vllm_startups.py /path/to/llm-d-planner [--commit SHA] [--out CSV]

The checkout may be a bare git directory (what ``fetch`` gives) or a work tree; files are read
with ``git show COMMIT:PATH``, so the CSV is rebuilt from exactly the pinned commit.
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cgdispatch.estimate.vllm_logs import parse_startup_log  # noqa: E402

COMMIT = "d3121e059da88662db39a926a3ead964be97359b"
LOGS = "accuracy/results/v0.19.0/logs/"
OUT = Path(__file__).resolve().parents[1] / "cgdispatch" / "data" / "reference_vllm_startups.csv"
COLUMNS = [
    "run", "model", "device", "device_name", "reference_date", "vllm_version",
    "tensor_parallel_size", "pipeline_parallel_size", "dtype", "quantization",
    "kv_cache_dtype", "max_model_len", "gpu_memory_utilization", "cudagraph_mode",
    "piecewise_graphs", "piecewise_largest", "full_graphs", "full_largest",
    "cudagraph_capture_sizes", "capture_s", "graph_memory_gib",
    "graph_memory_gib_vllm_estimate", "weights_gib", "kv_cache_gib", "kv_cache_tokens",
    "compile_s", "total_memory_gib", "activation_peak_gib", "non_torch_increase_gib",
    "max_num_batched_tokens", "max_num_seqs", "num_gpu_blocks", "source",
]  # fmt: skip


def parse_log(run: str, text: str) -> dict[str, Any]:
    """One row from one start-up log: :func:`cgdispatch.estimate.vllm_logs.parse_startup_log`
    (the one parser of vLLM logs), the GPU read from the run's name (these logs print none)."""
    row = parse_startup_log(text).reference_row(run)
    device = re.search(r"--(h100|h200|a100|b200)-(\d+)gb--", run)
    row["device"] = device.group(1).upper() if device else None
    row["device_name"] = f"{device.group(1).upper()} {device.group(2)}GB" if device else None
    return row


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def extract(repo: Path, commit: str = COMMIT) -> list[dict[str, Any]]:
    """Every successful run's row, by run name."""
    date = _git(repo, "log", "-1", "--format=%cs", commit).strip()
    names = [
        n for n in _git(repo, "ls-tree", "-r", "--name-only", commit).splitlines()
        if n.startswith(LOGS) and n.endswith(".log") and not n.endswith(".FAILED.log")
    ]  # fmt: skip
    rows = []
    for name in sorted(names):
        run = name[len(LOGS) : -len(".log")]
        row = parse_log(run, _git(repo, "show", f"{commit}:{name}"))
        row["reference_date"] = date
        row["source"] = f"llm-d-incubation/llm-d-planner@{commit[:12]}:{name}"
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="a checkout (or bare git dir) of llm-d-planner")
    parser.add_argument("--commit", default=COMMIT)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    rows = extract(args.repo, args.commit)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    with_graphs = sum(r["graph_memory_gib"] is not None for r in rows)
    print(f"{len(rows)} runs ({with_graphs} with a CUDA graph pool) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
