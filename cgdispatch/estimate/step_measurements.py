"""Measured step times a user brings: a ``vllm bench serve`` result JSON, or the step-time
CSV of ``scripts/gpu_check.py``. Each becomes :class:`StepPoint` s (a mode, a batch, the
measured milliseconds) that ``calibrate`` sets beside the cost model's step at the same
batch (:mod:`~cgdispatch.estimate.setup_fit`). Nothing here models anything.

``vllm bench serve --save-result`` writes one JSON object (``vllm/benchmarks/serve.py``):
``model_id``, ``num_prompts``, ``request_rate``, ``max_concurrency``,
``request_throughput``, and ``mean_/median_/p99_`` ``ttft_ms``, ``tpot_ms``, ``itl_ms``,
``e2el_ms``. Its step point is one decode step:

- the measured time is the **median ITL** (the time between two tokens of one request:
  one engine step while it decodes, prefill chunks that share the step included), else
  the median TPOT;
- the batch is the mean number of requests in flight by Little's law,
  ``request_throughput x mean E2E latency``, capped by ``max_concurrency`` and
  ``num_prompts`` (else ``max_concurrency``, else ``num_prompts``); the fit caps it by
  the server's ``max_num_seqs`` too.

Both are simple on purpose: the scale they give absorbs the prefill work that interleaves
with decodes, so it is a scale on every step, not a decode-only correction.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "StepPoint",
    "BenchResult",
    "read_bench_json",
    "read_step_csv",
    "is_bench_json",
    "decode_mode",
]

_STEP_CSV_COLUMNS = {"runtime_mode", "num_tokens", "padded_size", "eager_ms", "graph_ms"}


@dataclass(frozen=True)
class StepPoint:
    """One measured step: ``runtime_mode`` (FULL, PIECEWISE or NONE) at ``num_tokens``."""

    runtime_mode: str
    num_tokens: int
    measured_ms: float
    what: str  # where it comes from, for the printed table


@dataclass(frozen=True)
class BenchResult:
    """The figures of one ``vllm bench serve`` result JSON that ``calibrate`` reads."""

    model_id: str | None
    num_prompts: int | None
    request_rate: float | None  # inf: all at once
    max_concurrency: int | None
    request_throughput: float | None  # requests/s
    mean_e2el_ms: float | None
    mean_ttft_ms: float | None
    median_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_tpot_ms: float | None
    median_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_itl_ms: float | None
    median_itl_ms: float | None
    p99_itl_ms: float | None

    def decode_batch(self) -> int:
        """Requests in flight (Little's law; see the module docstring), at least 1."""
        caps = [c for c in (self.max_concurrency, self.num_prompts) if c]
        if self.request_throughput and self.mean_e2el_ms:
            batch = self.request_throughput * self.mean_e2el_ms / 1e3
            return max(1, round(min([batch, *caps])))
        return max(1, int(caps[0])) if caps else 1

    def step_point(self, max_num_seqs: int | None = None, runtime_mode: str = "FULL") -> StepPoint:
        """The decode step this result measures (median ITL, else median TPOT), run in
        ``runtime_mode`` (the server's decode mode: FULL under vLLM's default)."""
        measured, what = self.median_itl_ms, "median ITL"
        if measured is None:
            measured, what = self.median_tpot_ms, "median TPOT"
        if measured is None or not measured > 0:
            raise ValueError(
                "the bench result has no median_itl_ms or median_tpot_ms > 0: give the JSON "
                "that `vllm bench serve --save-result` writes, from a run that completed"
            )
        batch = self.decode_batch()
        if max_num_seqs:
            batch = min(batch, max_num_seqs)
        return StepPoint(runtime_mode, batch, float(measured), f"bench {what} at batch {batch}")


def decode_mode(cudagraph_mode: str | None) -> str:
    """The runtime mode a uniform decode step runs in under a server's ``cudagraph_mode``
    (vLLM's default FULL_AND_PIECEWISE, and None: FULL)."""
    if cudagraph_mode in ("PIECEWISE", "NONE"):
        return cudagraph_mode
    return "FULL"


def _number(data: dict[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, str):  # request_rate "inf"
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def is_bench_json(data: object) -> bool:
    """Whether ``data`` (a parsed JSON value) looks like a ``vllm bench serve`` result."""
    return isinstance(data, dict) and any(
        k in data for k in ("median_itl_ms", "median_tpot_ms", "mean_tpot_ms")
    )


def read_bench_json(path: str | Path) -> BenchResult:
    """The :class:`BenchResult` in ``path``; ValueError naming the file when it is not
    one."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not is_bench_json(data):
        raise ValueError(
            f"{path} is not a `vllm bench serve` result: it has no median_itl_ms or "
            "median_tpot_ms; give the JSON --save-result writes"
        )

    def integer(key: str) -> int | None:
        value = _number(data, key)
        return None if value is None or not math.isfinite(value) else int(value)

    return BenchResult(
        model_id=data.get("model_id") if isinstance(data.get("model_id"), str) else None,
        num_prompts=integer("num_prompts"),
        request_rate=_number(data, "request_rate"),
        max_concurrency=integer("max_concurrency"),
        request_throughput=_number(data, "request_throughput"),
        **{
            f"{stat}_{what}_ms": _number(data, f"{stat}_{what}_ms")
            for stat in ("mean", "median", "p99")
            for what in ("ttft", "tpot", "itl")
        },
        mean_e2el_ms=_number(data, "mean_e2el_ms"),
    )


def read_step_csv(path: str | Path) -> tuple[list[StepPoint], str | None]:
    """The measured steps of a ``scripts/gpu_check.py`` step-time CSV (each row's graph
    replay at its padded size in its runtime mode, and its eager step at its size), and
    the GPU its ``source`` column names (``measured (NVIDIA H100 80GB HBM3)``), or None."""
    table = pd.read_csv(path)
    missing = _STEP_CSV_COLUMNS - set(table.columns)
    if missing:
        raise ValueError(
            f"{path} is not a gpu_check.py step-time CSV: it lacks {sorted(missing)}; give "
            "the CSV named by --out (not its _captures.csv or _pools.csv)"
        )
    points = []
    for r in table.dropna(subset=["graph_ms", "eager_ms"]).itertuples():
        mode = str(r.runtime_mode).split(".")[-1]
        points.append(StepPoint(mode, int(r.padded_size), float(r.graph_ms), "gpu_check graph"))
        points.append(StepPoint("NONE", int(r.num_tokens), float(r.eager_ms), "gpu_check eager"))
    gpu = None
    if "source" in table.columns and len(table):
        match = re.search(r"measured \((.+)\)", str(table["source"].iloc[0]))
        gpu = match.group(1) if match and match.group(1) != "CPU" else None
    return points, gpu
