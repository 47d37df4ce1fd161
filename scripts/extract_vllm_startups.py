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

_NUM = r"([0-9][0-9.,]*)"


def _first(pattern: str, text: str) -> str | None:
    match = re.search(pattern, text)
    return match.group(1) if match else None


def _all(pattern: str, text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in re.findall(pattern, text)]


def parse_log(run: str, text: str) -> dict[str, Any]:
    """One row from one start-up log (the fields vLLM 0.19 prints; None where absent)."""
    engine = _first(r"Initializing a V1 LLM engine \(v([0-9.]+)\) with config: (.*)", text)
    config_line = next(
        (line for line in text.splitlines() if "Initializing a V1 LLM engine" in line), ""
    )
    args_line = next((line for line in text.splitlines() if "non-default args:" in line), "")
    profile = re.search(
        r"Profiling CUDA graph memory: (?:PIECEWISE=(\d+) \(largest=(\d+)\))?(?:, )?"
        r"(?:FULL=(\d+) \(largest=(\d+)\))?",
        text,
    )
    sizes = _first(r"'cudagraph_capture_sizes': \[([0-9, ]*)\]", config_line)
    pools = re.findall(
        rf"CUDA graph pool memory: {_NUM} GiB \(actual\), {_NUM} GiB \(estimated\)", text
    )
    capture = _all(rf"Graph capturing finished in {_NUM} secs", text)
    device = re.search(r"--(h100|h200|a100|b200)-(\d+)gb--", run)
    utilization = _first(r"'gpu_memory_utilization': ([0-9.]+)", args_line)
    kv_gib = _all(rf"Available KV cache memory: {_NUM} GiB", text)
    # per rank: torch peak increase and non-torch increase of the profile run; keep the rank
    # with the most non-KV memory (the one that bounds the KV cache)
    ranks = re.findall(
        rf"Total non KV cache memory: {_NUM}GiB; torch peak memory increase: {_NUM}GiB; "
        rf"non-torch forward increase memory: {_NUM}GiB",
        text,
    )
    binding = max(ranks, key=lambda r: float(r[0])) if ranks else None

    def num(pattern: str, where: str = text) -> float | None:
        value = _first(pattern, where)
        return float(value.replace(",", "")) if value is not None else None

    return {
        "run": run,
        "model": _first(r"'model': '([^']+)'", args_line),
        "device": device.group(1).upper() if device else None,
        "device_name": f"{device.group(1).upper()} {device.group(2)}GB" if device else None,
        "vllm_version": engine,
        "tensor_parallel_size": num(r"tensor_parallel_size=(\d+)", config_line),
        "pipeline_parallel_size": num(r"pipeline_parallel_size=(\d+)", config_line),
        "dtype": _first(r"dtype=torch\.(\w+)", config_line),
        "quantization": _first(r"quantization=(\w+)", config_line),
        "kv_cache_dtype": _first(r"kv_cache_dtype=(\w+)", config_line),
        "max_model_len": num(r"max_seq_len=(\d+)", config_line),
        "gpu_memory_utilization": float(utilization) if utilization else 0.9,  # vLLM's default
        "cudagraph_mode": _first(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)", config_line),
        "piecewise_graphs": int(profile.group(1)) if profile and profile.group(1) else 0,
        "piecewise_largest": int(profile.group(2)) if profile and profile.group(2) else 0,
        "full_graphs": int(profile.group(3)) if profile and profile.group(3) else 0,
        "full_largest": int(profile.group(4)) if profile and profile.group(4) else 0,
        "cudagraph_capture_sizes": " ".join(sizes.replace(",", " ").split()) if sizes else "",
        "capture_s": max(capture) if capture else None,
        "graph_memory_gib": max(float(a) for a, _ in pools) if pools else None,
        "graph_memory_gib_vllm_estimate": max(float(e) for _, e in pools) if pools else None,
        "weights_gib": num(rf"Model loading took {_NUM} GiB memory"),
        # the engine sizes the cache for the rank with the least room: the smallest figure
        "kv_cache_gib": min(kv_gib) if kv_gib else None,
        "kv_cache_tokens": num(rf"GPU KV cache size: {_NUM} tokens"),
        "compile_s": num(rf"torch\.compile took {_NUM} s in total"),
        "total_memory_gib": num(r"total_memory=([0-9.]+)GiB"),
        "activation_peak_gib": float(binding[1]) if binding else None,
        "non_torch_increase_gib": float(binding[2]) if binding else None,
        "max_num_batched_tokens": num(r"max_num_batched_tokens=(\d+)"),
        "max_num_seqs": num(r"Defaulting max_num_seqs to (\d+)") or num(r"'max_num_seqs': (\d+)"),
        "num_gpu_blocks": num(r"num_gpu_blocks is: (\d+)"),
    }


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
