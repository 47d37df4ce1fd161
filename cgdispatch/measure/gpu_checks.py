"""The pass/fail rules of the GPU check (``scripts/gpu_check.py``), on its result tables.

One function, :func:`gpu_check_table`, takes the three tables the script writes and
returns one row per rule and subject, so that every rule can be shown to fail on rows
broken on purpose (``tests/measure/test_gpu_checks.py``) before a GPU run relies on it.
It judges what it is given; it does not run models or measure anything.

Rules (``check`` column):

- ``replay``: no replay differs from eager beyond tolerance (per mode);
- ``checked``: every mode asked for ran at least one replay check;
- ``memory``: the measured memory columns are finite and not negative (GPU only);
- ``weak<strong``: weak outputs (vLLM's) hold fewer bytes after capture than strong
  ones, ``allocated_MiB`` being the bytes still allocated after capture (GPU only);
- ``decode@1``: a replayed decode step of one token is not slower than eager (GPU only);
- ``prediction``: the graph memory measured as vLLM does (free-memory drop around the
  whole capture, ``device_MiB``, weak outputs) is within ``max_ratio`` of the model's
  prediction (``predicted_MiB``) either way (GPU only).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

__all__ = ["gpu_check_table", "MEMORY_COLUMNS", "CHECK_COLUMNS"]

# measured memory columns of the pools table (MiB): free-memory drop, allocator counters,
# graph pools' own segments
MEMORY_COLUMNS = ("device_MiB", "reserved_MiB", "allocated_MiB", "graph_pool_MiB")
CHECK_COLUMNS = ["check", "subject", "value", "limit", "ok", "detail"]


def gpu_check_table(
    summary: pd.DataFrame,
    steps: pd.DataFrame,
    pools: pd.DataFrame,
    *,
    modes: Sequence[str],
    on_gpu: bool,
    max_ratio: float = 2.0,
) -> pd.DataFrame:
    """One row per rule and subject (columns :data:`CHECK_COLUMNS`); ``ok`` False fails.

    ``summary``: one row per mode with ``mode``, ``replay_checks``, ``failed``;
    ``steps``: ``mode``, ``batch`` (decode/mixed), ``num_tokens``, ``runtime_mode``,
    ``eager_ms``, ``graph_ms``; ``pools``: ``mode``, ``outputs`` (weak/strong), the
    :data:`MEMORY_COLUMNS` and ``predicted_MiB``. ``modes``: the modes asked for (their
    resolved names, as the tables hold them). Off the GPU (``on_gpu=False``) only the
    replay rules apply: CPU timings and the stand-in's pool say nothing of a GPU.
    """
    if not (isinstance(max_ratio, (int, float)) and max_ratio > 1):
        raise ValueError(f"max_ratio={max_ratio!r} is invalid: give a factor > 1, e.g. 2.0")
    rows = list(_replay_rows(summary, modes))
    if on_gpu:
        rows += _memory_rows(pools)
        rows += _weak_strong_rows(pools)
        rows += _decode_rows(steps, modes)
        rows += _prediction_rows(pools, max_ratio)
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)


def _row(check: str, subject: str, value: Any, limit: Any, ok: bool, detail: str) -> dict:
    return dict(zip(CHECK_COLUMNS, (check, subject, value, limit, bool(ok), detail)))


def _replay_rows(summary: pd.DataFrame, modes: Sequence[str]) -> Iterable[dict]:
    by_mode = {str(r["mode"]): r for _, r in summary.iterrows()}
    for mode in modes:
        r = by_mode.get(mode)
        checks = 0 if r is None else int(r["replay_checks"])
        yield _row("checked", mode, checks, ">= 1", checks >= 1, "replay checks run in this mode")
        failed = 0 if r is None else int(r["failed"])
        yield _row("replay", mode, failed, "== 0", failed == 0, "replays that differ from eager")


def _memory_rows(pools: pd.DataFrame) -> Iterable[dict]:
    if pools.empty:
        yield _row("memory", "all", 0, ">= 1 row", False, "no graph memory was measured")
    for _, r in pools.iterrows():
        for column in MEMORY_COLUMNS:
            value = float(r.get(column, math.nan))
            ok = math.isfinite(value) and value >= 0
            subject = f"{r['mode']} {r['outputs']} {column}"
            yield _row("memory", subject, value, "finite, >= 0", ok, "measured around capture")


def _weak_strong_rows(pools: pd.DataFrame) -> Iterable[dict]:
    for mode, rows in pools.groupby("mode", sort=False):
        kinds = dict(zip(rows["outputs"], rows["allocated_MiB"]))
        if set(kinds) != {"weak", "strong"}:
            yield _row(
                "weak<strong", str(mode), math.nan, "weak < strong", False, "a policy is missing"
            )
            continue
        weak, strong = float(kinds["weak"]), float(kinds["strong"])
        yield _row(
            "weak<strong",
            str(mode),
            weak - strong,
            "< 0",
            weak < strong,
            f"allocated after capture: weak {weak:.3f} MiB, strong {strong:.3f} MiB",
        )


def _decode_rows(steps: pd.DataFrame, modes: Sequence[str]) -> Iterable[dict]:
    for mode in modes:
        one = steps[
            (steps["mode"] == mode)
            & (steps["batch"] == "decode")
            & (steps["num_tokens"] == 1)
            & (steps["runtime_mode"].astype(str).str.split(".").str[-1] != "NONE")
        ]
        if one.empty:
            yield _row(
                "decode@1", mode, math.nan, "graph <= eager", False, "no replayed decode at 1"
            )
            continue
        graph, eager = float(one["graph_ms"].iloc[0]), float(one["eager_ms"].iloc[0])
        ok = math.isfinite(graph) and math.isfinite(eager) and graph <= eager
        detail = f"graph {graph:.4g} ms, eager {eager:.4g} ms"
        yield _row("decode@1", mode, eager / graph if graph > 0 else math.nan, ">= 1x", ok, detail)


def _prediction_rows(pools: pd.DataFrame, max_ratio: float) -> Iterable[dict]:
    for _, r in pools[pools["outputs"] == "weak"].iterrows():
        measured, predicted = float(r["device_MiB"]), float(r.get("predicted_MiB", math.nan))
        ratio = measured / predicted if predicted > 0 else math.nan
        ok = math.isfinite(ratio) and 1 / max_ratio <= ratio <= max_ratio
        detail = f"measured {measured:.2f} MiB (free-memory drop), predicted {predicted:.2f} MiB"
        yield _row(
            "prediction", str(r["mode"]), ratio, f"1/{max_ratio:g}..{max_ratio:g}x", ok, detail
        )
