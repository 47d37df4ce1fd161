"""The sweep result store: one table on disk, appended row by row, written atomically.

A store is a CSV or Parquet file (a directory means ``DIR/results.csv``) plus the sweep
spec next to it (``spec.json``). Every append rewrites the whole table to a temporary file
in the same directory, flushes it to disk and renames it over the old one, so a process
killed at any moment leaves either the old table or the new one, never half a row. Rows
are keyed by :data:`KEY_COLUMNS`; appending a row whose key exists replaces the old row
(so a rerun turns a ``failed`` point into an ``ok`` one without duplicates).
It stores and loads; it does not run anything.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "SWEEP_COLUMNS",
    "KEY_COLUMNS",
    "row_key",
    "ResultStore",
    "load_results",
    "load_reference",
]

# The stable row schema of sweeps (column -> meaning); plots and notebooks rely on it.
SWEEP_COLUMNS: dict[str, str] = {
    "sweep": "sweep spec name (smoke, gpu-small, ...)",
    "model": "model name from the registry (toy-tiny, hf-llama-tiny, ...)",
    "dtype": "weights and activations dtype",
    "device": "torch device type the point ran on (cpu, cuda)",
    "device_name": "CPU or the GPU's name (NVIDIA H200)",
    "torch_version": "torch.__version__ of the run",
    "mode": "cudagraph_mode asked for (config level)",
    "resolved_mode": "mode after GraphConfig.resolve() for the model's attention support",
    "runtime_mode": "runtime mode this shape dispatched to (FULL, PIECEWISE, NONE)",
    "ladder": "capture-size ladder name",
    "capture_sizes": "the ladder's sizes, comma-separated",
    "max_num_seqs": "scheduler limit the config was built with",
    "num_capture_sizes": "number of capture sizes",
    "num_tokens": "real tokens in the step",
    "uniform_decode": "True: uniform decode batch; False: mixed decodes + prefill chunks",
    "padded_size": "tokens after padding to a capture size (= num_tokens when eager)",
    "eager_ms": "median step time, eager (no graphs)",
    "eager_p10_ms": "10th percentile, eager",
    "eager_p90_ms": "90th percentile, eager",
    "graph_ms": "median step time through the runner with graphs",
    "graph_p10_ms": "10th percentile, graphs",
    "graph_p90_ms": "90th percentile, graphs",
    "eager_host_ms": "median host time to issue an eager step (equals eager_ms on CPU)",
    "graph_host_ms": "median host time to issue a graph step (equals graph_ms on CPU)",
    "speedup_x": "eager_ms / graph_ms",
    "num_graphs": "graphs captured for this (mode, ladder): one per FULL key, one per piece per PIECEWISE key",
    "capture_s": "wall time of capturing every key, warm-ups included",
    "graph_capture_s": "time inside graph capture only (sum over keys)",
    "pool_bytes": "graph-pool bytes: sum of what each graph capture reserved (CUDA; empty on CPU)",
    "peak_allocated_bytes": "peak allocated bytes during the capture (CUDA; empty on CPU)",
    "peak_reserved_bytes": "peak reserved bytes during the capture (CUDA; empty on CPU)",
    "repeats": "timed runs per median",
    "status": "ok or failed",
    "error": "the error of a failed point ('' when ok)",
    "source": "measured (CPU) or measured (<GPU name>)",
    "timestamp": "Unix time the row was written",
}
_TEXT = {
    "sweep",
    "model",
    "dtype",
    "device",
    "device_name",
    "torch_version",
    "mode",
    "resolved_mode",
    "runtime_mode",
    "ladder",
    "capture_sizes",
    "uniform_decode",
    "status",
    "error",
    "source",
}
_NUMERIC = [c for c in SWEEP_COLUMNS if c not in _TEXT]  # NaN / <NA> mark "not measured"
_INTEGER = {
    "max_num_seqs",
    "num_capture_sizes",
    "num_tokens",
    "padded_size",
    "num_graphs",
    "pool_bytes",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "repeats",
}
KEY_COLUMNS: tuple[str, ...] = (
    "model",
    "dtype",
    "device",
    "mode",
    "ladder",
    "capture_sizes",
    "num_tokens",
    "uniform_decode",
)


# One row per captured key (the runner's capture report), in ``captures.csv`` next to the rows.
CAPTURE_COLUMNS: tuple[str, ...] = (
    "sweep",
    "model",
    "dtype",
    "device",
    "device_name",
    "mode",
    "ladder",
    "capture_sizes",
    "max_num_seqs",
    "runtime_mode",
    "num_tokens",
    "num_reqs",
    "uniform",
    "num_graphs",
    "capture_s",
    "step_s",
    "pool_bytes",
    "source",
)
_UNIT_COLUMNS = ("model", "dtype", "device", "mode", "ladder", "capture_sizes")


class ResultStore:
    """Sweep rows on disk (or in memory when ``path`` is None), keyed by :data:`KEY_COLUMNS`.

    One writer at a time: opening a store deletes temporary files a killed writer left."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        if path is not None:
            path = Path(path)
            if path.suffix not in (".csv", ".parquet"):
                path = path / "results.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            for name in (path.name, f"captures{path.suffix}"):  # a writer killed mid-write
                for stale in path.parent.glob(f".{name}.*"):
                    stale.unlink(missing_ok=True)
        self.path: Path | None = path
        self._frame: pd.DataFrame | None = None

    def load(self) -> pd.DataFrame:
        """Every stored row, with every column of :data:`SWEEP_COLUMNS`."""
        if self._frame is None:
            self._frame = (
                _read(self.path) if self.path is not None and self.path.exists() else _empty()
            )
        return self._frame.copy()

    def done_keys(self) -> set[tuple[Any, ...]]:
        """Keys of the rows whose status is ``ok``."""
        frame = self.load()
        ok = frame[frame["status"] == "ok"]
        return {row_key(r) for r in ok[list(KEY_COLUMNS)].itertuples(index=False)}

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        """Add rows (replacing rows with the same key) and write the table atomically."""
        new = pd.DataFrame(list(rows))
        if new.empty:
            return
        frame = _normalise(pd.concat([self.load(), _normalise(new)], ignore_index=True))
        keys = frame[list(KEY_COLUMNS)].apply(lambda r: row_key(tuple(r)), axis=1)
        frame = frame[~keys.duplicated(keep="last")].reset_index(drop=True)
        self._frame = frame
        if self.path is not None:
            _write_atomic(frame, self.path)

    @property
    def captures_path(self) -> Path | None:
        return None if self.path is None else self.path.with_name(f"captures{self.path.suffix}")

    def append_captures(self, rows: list[dict[str, Any]]) -> None:
        """Store one unit's capture report (replacing that unit's earlier report)."""
        if not rows or self.captures_path is None:
            return
        new = pd.DataFrame(rows).reindex(columns=list(CAPTURE_COLUMNS))
        old = load_captures(self.captures_path)
        unit = row_key(tuple(rows[0][c] for c in _UNIT_COLUMNS))
        if len(old):
            keys = old[list(_UNIT_COLUMNS)].apply(lambda r: row_key(tuple(r)), axis=1)
            old = old[keys != unit]
        frame = new if old.empty else pd.concat([old, new], ignore_index=True)
        _write_atomic(frame, self.captures_path)

    def save_spec(self, spec: dict[str, Any]) -> None:
        """Write the sweep spec next to the table (``spec.json``; one per sweep name)."""
        if self.path is None:
            return
        spec_path = self.path.parent / "spec.json"
        specs = json.loads(spec_path.read_text()) if spec_path.exists() else {}
        specs[spec["name"]] = spec
        tmp = spec_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(specs, indent=1))
        os.replace(tmp, spec_path)


def row_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(str(v) for v in values)  # CSV round trips turn types into text


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in SWEEP_COLUMNS})


def _normalise(frame: pd.DataFrame) -> pd.DataFrame:
    for col in SWEEP_COLUMNS:
        if col not in frame:
            frame[col] = None
    frame = frame[list(SWEEP_COLUMNS)]
    frame["uniform_decode"] = frame["uniform_decode"].map(
        lambda v: v if isinstance(v, bool) else str(v).lower() == "true"
    )
    frame["error"] = frame["error"].map(
        lambda v: "" if v is None or v != v else str(v)
    )  # NaN -> ""
    for col in _NUMERIC:
        values = pd.to_numeric(frame[col], errors="coerce").astype("float64")
        frame[col] = values.astype("Int64") if col in _INTEGER else values
    return frame


def _read(path: Path) -> pd.DataFrame:
    frame = (
        pd.read_parquet(path)
        if path.suffix == ".parquet"
        else pd.read_csv(path, keep_default_na=True)
    )
    return _normalise(frame)


def _write_atomic(frame: pd.DataFrame, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if path.suffix == ".parquet":
                frame.to_parquet(fh, index=False)
            else:
                fh.write(frame.to_csv(index=False).encode())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_captures(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Per-key capture rows (:data:`CAPTURE_COLUMNS`) of a store directory or captures file;
    empty when the sweep wrote none."""
    path = Path(path)
    if path.is_dir():
        path = next(
            (
                path / f"captures{s}"
                for s in (".csv", ".parquet")
                if (path / f"captures{s}").exists()
            ),
            path / "captures.csv",
        )
    if not path.exists():
        return pd.DataFrame(columns=list(CAPTURE_COLUMNS))
    frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    return frame.reindex(columns=list(CAPTURE_COLUMNS))


def load_results(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Rows of a store: a results file or a directory holding ``results.csv``/``.parquet``."""
    path = Path(path)
    if path.is_dir():
        for name in ("results.csv", "results.parquet"):
            if (path / name).exists():
                return _read(path / name)
        raise ValueError(
            f"{path} holds no results.csv or results.parquet: run a sweep with --out {path}"
        )
    if not path.exists():
        raise ValueError(
            f"results file {path} does not exist: give a sweep's --out directory or file"
        )
    return _read(path)


def load_reference(
    gpu: str | None = None, data_dir: str | os.PathLike[str] | None = None
) -> pd.DataFrame | None:
    """GPU reference rows shipped in ``cgdispatch/data/reference_*.csv``, or None if none.

    Each file holds sweep rows measured on a GPU plus a ``reference_date`` column; the
    ``source`` becomes ``reference data (<device_name>, <date>)``. ``gpu`` keeps rows whose
    device name contains it (case-insensitive). No reference data is invented: when no
    file is shipped this returns None.
    """
    folder = Path(data_dir) if data_dir is not None else Path(__file__).parent / "data"
    files = sorted(folder.glob("reference_*.csv")) if folder.is_dir() else []
    frames = []
    for file in files:
        frame = pd.read_csv(file)
        if "reference_date" not in frame or "device_name" not in frame:
            raise ValueError(
                f"reference file {file} lacks reference_date or device_name columns: "
                "label every reference row with the GPU and the date it was measured"
            )
        frame["source"] = [
            f"reference data ({name}, {date})"
            for name, date in zip(frame["device_name"], frame["reference_date"])
        ]
        frames.append(_normalise(frame))
    if not frames:
        return None
    rows = pd.concat(frames, ignore_index=True)
    if gpu is not None:
        rows = rows[rows["source"].str.contains(gpu, case=False, regex=False)]
    return rows.reset_index(drop=True) if len(rows) else None
