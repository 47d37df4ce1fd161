"""Sweep rows as a typed frame: every column of :data:`~cgdispatch.sweep.rows.SWEEP_COLUMNS`
with its dtype, and each row's point identity (the store's key)."""

from __future__ import annotations

import hashlib
import json

import pandas as pd

from .rows import LEGACY_VERSION, POINT_COLUMNS, SWEEP_COLUMNS

__all__ = ["normalise", "point_ids", "empty_rows"]


_TEXT = {
    "sweep", "model", "dtype", "device", "device_name", "torch_version", "mode", "vllm_version",
    "resolved_mode", "runtime_mode", "ladder", "capture_sizes", "uniform_decode", "status",
    "error", "source",
}  # fmt: skip
_NUMERIC = [c for c in SWEEP_COLUMNS if c not in _TEXT]  # NaN / <NA> mark "not measured"
_INTEGER = {
    "max_num_seqs", "num_capture_sizes", "num_tokens", "padded_size", "num_graphs",
    "pool_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "repeats", "warmup",
    "input_sets", "cpu_threads",
}  # fmt: skip


def empty_rows() -> pd.DataFrame:
    return normalise(pd.DataFrame({c: pd.Series(dtype=object) for c in SWEEP_COLUMNS}))


def normalise(frame: pd.DataFrame) -> pd.DataFrame:
    """Every schema column, in order, with its dtype (extra columns are dropped)."""
    frame = frame.copy()
    for col in SWEEP_COLUMNS:
        if col not in frame:
            frame[col] = None
    frame = frame[list(SWEEP_COLUMNS)]
    frame["uniform_decode"] = frame["uniform_decode"].map(
        lambda v: v if isinstance(v, bool) else str(v).lower() in ("true", "1", "1.0")
    )
    frame["error"] = frame["error"].map(lambda v: "" if v is None or v != v else str(v))
    for col in _NUMERIC:
        values = pd.to_numeric(frame[col], errors="coerce").astype("float64")
        frame[col] = values.astype("Int64") if col in _INTEGER else values
    for col in _TEXT - {"uniform_decode", "error"}:
        frame[col] = frame[col].map(lambda v: None if v is None or v != v else str(v))
    # rows written before sweeps knew generation 2 ran V1's dispatcher
    frame["vllm_version"] = frame["vllm_version"].fillna(LEGACY_VERSION)
    return frame.reset_index(drop=True)


def point_ids(frame: pd.DataFrame) -> list[str]:
    """A digest of each normalised row's :data:`POINT_COLUMNS` (missing values as null), so
    that equal points get equal ids however the row was typed.

    ``vllm_version`` joins the digest only when it is not V1's release: ids of rows stored
    before the column existed (all V1) stay what they were, so such stores still resume.
    """
    out = []
    version_at = POINT_COLUMNS.index("vllm_version")
    for values in frame[list(POINT_COLUMNS)].itertuples(index=False):
        plain = [None if pd.isna(v) else (v if isinstance(v, (bool, str)) else int(v))
                 for v in values]  # fmt: skip
        if plain[version_at] in (None, LEGACY_VERSION):
            del plain[version_at]
        out.append(hashlib.sha256(json.dumps(plain).encode()).hexdigest()[:24])
    return out
