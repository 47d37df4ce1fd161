"""The sweep result store: an SQLite database that several processes may write at once,
with CSV (or Parquet) exports that pandas, ``report`` and the notebooks read.

A store is a folder holding ``store.sqlite`` and its exports ``results.csv`` and
``captures.csv``; given a ``.csv`` or ``.parquet`` file name, the database sits next to it
(``NAME.sqlite``) and the file is the export. Each append is one SQLite transaction
(WAL journal): concurrent writers wait their turn instead of overwriting each other, and a
process killed at any moment leaves every committed row. The exports are rewritten inside
the same transaction, to a randomly named temporary file renamed over the old one.

The database identifies itself (``PRAGMA application_id`` and a ``meta`` table), and the
store refuses to write into a file or folder that is not one of its stores, and through a
symlink. A CSV store of an older cgdispatch (``results.csv`` without a database) is
migrated on first open, so no results are stranded. Rows are keyed by their point identity
(:data:`~cgdispatch.sweep.rows.POINT_COLUMNS`); appending a row with a stored identity
replaces it (a rerun turns a ``failed`` point into an ``ok`` one). It stores and loads;
it runs nothing.

Writers should share one machine: SQLite's WAL needs shared memory, which network file
systems do not give. A dask or process-pool sweep does: only the process that called
``run_sweep`` writes.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path
from typing import Any

import pandas as pd

from .database import (
    DB_NAME,
    add_new_columns,
    check_ours,
    create,
    create_file,
    insert,
    layout,
    legacy_rows,
    refuse_foreign_folder,
    refuse_symlink,
    select_captures,
    select_rows,
)
from .exports import read_table, write_export
from .rows import CAPTURE_COLUMNS, POINT_COLUMNS, SWEEP_COLUMNS, CaptureRecord, SweepRow
from .schema import V1_VERSION, normalise, point_ids

__all__ = [
    "SWEEP_COLUMNS",
    "KEY_COLUMNS",
    "CAPTURE_COLUMNS",
    "row_key",
    "ResultStore",
    "load_results",
    "load_captures",
    "load_reference",
]

KEY_COLUMNS = POINT_COLUMNS  # the old name of the row key
_UNIT_COLUMNS = ("sweep", "model", "dtype", "device", "mode", "ladder", "capture_sizes")


def _unit_id(record: dict[str, Any]) -> str:
    """A unit's capture-report id; generation 2 units add their version (V1 ids as before)."""
    values = [str(record[c]) for c in _UNIT_COLUMNS]
    version = record.get("vllm_version")
    if version not in (None, V1_VERSION) and version == version:
        values.append(str(version))
    return json.dumps(values)


def row_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(str(v) for v in values)  # CSV round trips turn types into text


class ResultStore:
    """Sweep rows in an SQLite database (in memory when ``path`` is None), keyed by point
    identity, exported as CSV or Parquet after every write."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path: Path | None = None  # the rows' export (results.csv / NAME.parquet)
        self.db_path: Path | None = None
        self._memory: sqlite3.Connection | None = None
        if path is None:
            self._memory = sqlite3.connect(":memory:", isolation_level=None)
            create(self._memory)
            return
        self.path, self.db_path = layout(Path(path))
        folder = self.db_path.parent
        for target in (self.db_path, self.path, self.captures_path):
            refuse_symlink(target)
        if self.db_path.exists():
            check_ours(self.db_path)
            with closing(self._connect()) as con:
                add_new_columns(con)
        else:
            legacy = legacy_rows(self.path)  # ValueError when the file is not a store
            if self.path.suffix == "" or not self.path.exists():
                refuse_foreign_folder(folder)
            folder.mkdir(parents=True, exist_ok=True)
            if create_file(self.db_path) and legacy is not None:
                self._migrate(legacy)  # only the process that created the database migrates

    # ---- connections ----
    def _connect(self) -> sqlite3.Connection:
        if self._memory is not None:
            return self._memory
        # timeout: a writer waits up to a minute for another's transaction instead of failing
        con = sqlite3.connect(self.db_path, timeout=60.0, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        return con

    def _transaction(self, work: Any) -> None:
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")  # take the write lock now: writers queue here
            try:
                work(con)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            # exports show committed rows only (a kill between the two leaves them a write
            # behind, never ahead of the database), and under the lock so they come in order
            con.execute("BEGIN IMMEDIATE")
            try:
                self._remove_stale_temporaries()
                self._export(con)
            finally:
                con.execute("COMMIT")
        finally:
            if self._memory is None:
                con.close()

    # ---- rows ----
    def load(self) -> pd.DataFrame:
        """Every stored row, with every column of :data:`SWEEP_COLUMNS`."""
        con = self._connect()
        try:
            return select_rows(con)
        finally:
            if self._memory is None:
                con.close()

    def done_keys(self) -> set[str]:
        """Point identities of the rows whose status is ``ok``."""
        con = self._connect()
        try:
            found = con.execute("SELECT point_id FROM rows WHERE status = 'ok'").fetchall()
        finally:
            if self._memory is None:
                con.close()
        return {r[0] for r in found}

    def append(self, rows: Iterable[SweepRow | dict[str, Any]]) -> None:
        """Add rows (replacing rows with the same point identity) in one transaction."""
        dicts = [r.as_dict() if isinstance(r, SweepRow) else dict(r) for r in rows]
        if not dicts:
            return
        frame = normalise(pd.DataFrame(dicts))
        frame.insert(0, "point_id", point_ids(frame))
        frame = frame.drop_duplicates("point_id", keep="last")
        self._transaction(lambda con: insert(con, "rows", frame, replace=True))

    @property
    def captures_path(self) -> Path | None:
        return None if self.path is None else self.path.with_name(f"captures{self.path.suffix}")

    def append_captures(self, records: list[CaptureRecord] | list[dict[str, Any]]) -> None:
        """Store one unit's capture report (replacing that unit's earlier report)."""
        if not records:
            return
        dicts = [r.as_dict() if isinstance(r, CaptureRecord) else r for r in records]
        frame = pd.DataFrame(dicts).reindex(columns=list(CAPTURE_COLUMNS))
        unit = _unit_id(dicts[0])
        frame.insert(0, "unit_id", unit)

        def work(con: sqlite3.Connection) -> None:
            con.execute("DELETE FROM captures WHERE unit_id = ?", (unit,))
            insert(con, "captures", frame, replace=False)

        self._transaction(work)

    def load_captures(self) -> pd.DataFrame:
        con = self._connect()
        try:
            return select_captures(con)
        finally:
            if self._memory is None:
                con.close()

    def save_spec(self, spec: dict[str, Any]) -> None:
        """Keep the sweep spec (one per sweep name), exported as ``spec.json``."""
        self._transaction(
            lambda con: con.execute(
                "INSERT OR REPLACE INTO specs VALUES (?, ?)", (spec["name"], json.dumps(spec))
            )
        )

    def export(self, path: str | os.PathLike[str]) -> Path:
        """Write every row to ``path`` (``.csv`` or ``.parquet``); refuses a symlink."""
        path = Path(path)
        write_export(self.load(), path)
        return path

    def _remove_stale_temporaries(self) -> None:
        """Temporary exports of a writer killed mid-write. Only called under the write lock:
        no other writer has one in flight then."""
        if self.path is None:
            return
        for name in (self.path.name, self.captures_path.name, "spec.json"):
            for stale in self.path.parent.glob(f".{name}.*.tmp"):
                stale.unlink(missing_ok=True)

    def _export(self, con: sqlite3.Connection) -> None:
        if self.path is None:
            return
        write_export(select_rows(con), self.path)
        captures = select_captures(con)
        if len(captures) or self.captures_path.exists():
            write_export(captures, self.captures_path)
        specs = {n: json.loads(s) for n, s in con.execute("SELECT name, spec FROM specs")}
        write_export(specs, self.path.parent / "spec.json")

    def _migrate(self, legacy: pd.DataFrame) -> None:
        """Rows of an older CSV store: timing settings it did not record come from its
        spec.json when the sweep is there (so a resume still reuses them), else stay empty."""
        spec_path = self.path.parent / "spec.json"
        specs = json.loads(spec_path.read_text()) if spec_path.is_file() else {}
        for name in ("warmup", "input_sets", "cpu_threads"):
            if name not in legacy:
                legacy[name] = [specs.get(str(s), {}).get(name) for s in legacy["sweep"]]
        captures = read_table(self.captures_path) if self.captures_path.is_file() else None
        self.append(legacy.to_dict("records"))
        for spec in specs.values():
            self.save_spec(spec)
        if captures is not None and len(captures):
            for _, unit in captures.groupby(list(_UNIT_COLUMNS), dropna=False, sort=False):
                self.append_captures(unit.to_dict("records"))


def load_captures(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Per-key capture rows (:data:`CAPTURE_COLUMNS`) of a store folder or captures file;
    empty when the sweep wrote none."""
    path = Path(path)
    if path.is_dir() and (path / DB_NAME).is_file():
        found = _read_db(path / DB_NAME, select_captures)
        if found is not None:
            return found
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
    return read_table(path).reindex(columns=list(CAPTURE_COLUMNS))


def load_results(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Rows of a store: its folder, its database, or a results export (CSV or Parquet)."""
    path = Path(path)
    if path.is_dir():
        if (path / DB_NAME).is_file():
            found = _read_db(path / DB_NAME, select_rows)
            if found is not None:
                return found
        for name in ("results.csv", "results.parquet"):
            if (path / name).exists():
                return normalise(read_table(path / name))
        raise ValueError(
            f"{path} holds no {DB_NAME}, results.csv or results.parquet: run a sweep with "
            f"--out {path}"
        )
    if not path.exists():
        raise ValueError(
            f"results file {path} does not exist: give a sweep's --out directory or file"
        )
    if path.suffix == ".sqlite":
        found = _read_db(path, select_rows)
        if found is not None:
            return found
        path = path.with_name("results.csv")
    frame = read_table(path)
    missing = [c for c in ("model", "mode", "num_tokens", "status") if c not in frame]
    if missing:
        raise ValueError(f"{path} is not a sweep's results (it lacks columns {missing})")
    return normalise(frame)


def _read_db(db: Path, select: Any) -> pd.DataFrame | None:
    """Read a store without writing to it (a co-worker's store may be read-only to us); None
    when SQLite cannot open it so, and the caller reads the exports instead."""
    check_ours(db)
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60.0)) as con:
            return select(con)
    except sqlite3.OperationalError:  # read-only WAL without its -shm file: use the export
        return None


def load_reference(
    gpu: str | None = None, data_dir: str | os.PathLike[str] | None = None
) -> pd.DataFrame | None:
    """GPU reference rows shipped in ``cgdispatch/data/reference_*.csv``, or None if none.

    Each file holds sweep rows measured on a GPU plus a ``reference_date`` column; the
    ``source`` becomes ``reference data (<device_name>, <date>)``. ``gpu`` keeps rows whose
    device name contains it (case-insensitive). No reference data is invented: when no
    file is shipped this returns None.
    """
    folder = Path(data_dir) if data_dir is not None else Path(__file__).parents[1] / "data"
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
        frames.append(normalise(frame))
    if not frames:
        return None
    rows = pd.concat(frames, ignore_index=True)
    if gpu is not None:
        rows = rows[rows["source"].str.contains(gpu, case=False, regex=False)]
    return rows.reset_index(drop=True) if len(rows) else None
