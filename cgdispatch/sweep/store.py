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
import tempfile
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path
from typing import Any

import pandas as pd

from .exports import read_table, write_export
from .rows import CAPTURE_COLUMNS, POINT_COLUMNS, SWEEP_COLUMNS, CaptureRecord, SweepRow
from .schema import empty_rows, normalise, point_ids

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
APPLICATION_ID = 0x43474453  # "CGDS": `file store.sqlite` and sqlite3 tell it is ours
FORMAT = "cgdispatch sweep store"
VERSION = 1
DB_NAME = "store.sqlite"
_UNIT_COLUMNS = ("sweep", "model", "dtype", "device", "mode", "ladder", "capture_sizes")
# a legacy folder may hold these besides results.csv; anything else means it is not a store
_LEGACY_NAMES = {"results.csv", "results.parquet", "captures.csv", "captures.parquet", "spec.json"}


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
            _create(self._memory)
            return
        self.path, self.db_path = _layout(Path(path))
        folder = self.db_path.parent
        for target in (self.db_path, self.path, self.captures_path):
            _refuse_symlink(target)
        if self.db_path.exists():
            _check_ours(self.db_path)
        else:
            legacy = _legacy_rows(self.path)  # ValueError when the file is not a store
            if self.path.suffix == "" or not self.path.exists():
                _refuse_foreign_folder(folder)
            folder.mkdir(parents=True, exist_ok=True)
            if _create_file(self.db_path) and legacy is not None:
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
            return _select_rows(con)
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
        self._transaction(lambda con: _insert(con, "rows", frame, replace=True))

    @property
    def captures_path(self) -> Path | None:
        return None if self.path is None else self.path.with_name(f"captures{self.path.suffix}")

    def append_captures(self, records: list[CaptureRecord] | list[dict[str, Any]]) -> None:
        """Store one unit's capture report (replacing that unit's earlier report)."""
        if not records:
            return
        dicts = [r.as_dict() if isinstance(r, CaptureRecord) else r for r in records]
        frame = pd.DataFrame(dicts).reindex(columns=list(CAPTURE_COLUMNS))
        unit = json.dumps([str(dicts[0][c]) for c in _UNIT_COLUMNS])
        frame.insert(0, "unit_id", unit)

        def work(con: sqlite3.Connection) -> None:
            con.execute("DELETE FROM captures WHERE unit_id = ?", (unit,))
            _insert(con, "captures", frame, replace=False)

        self._transaction(work)

    def load_captures(self) -> pd.DataFrame:
        con = self._connect()
        try:
            return _select_captures(con)
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
        write_export(_select_rows(con), self.path)
        captures = _select_captures(con)
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


def _layout(path: Path) -> tuple[Path, Path]:
    """(rows export, database) for a store path."""
    if path.suffix in (".csv", ".parquet"):
        return path, path.with_suffix(".sqlite")
    if path.suffix == ".sqlite":
        return path.with_name("results.csv"), path
    return path / "results.csv", path / DB_NAME


def _refuse_symlink(path: Path | None) -> None:
    if path is not None and path.is_symlink():
        raise ValueError(
            f"{path} is a symlink: cgdispatch does not write through links (it would overwrite "
            f"the file it points to); remove the link or choose another --out"
        )


def _check_ours(db: Path) -> None:
    if not db.is_file():
        raise ValueError(f"{db} is not a file: a store's database is a file; choose another --out")
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            app = con.execute("PRAGMA application_id").fetchone()[0]
    except sqlite3.DatabaseError:
        app = None
    if app != APPLICATION_ID:
        raise ValueError(
            f"{db} is not a cgdispatch store (not its database format): cgdispatch will not "
            "write into it; choose another --out"
        )


def _refuse_foreign_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder: give a new folder or a .csv file")
    if folder.is_dir():
        foreign = sorted(p.name for p in folder.iterdir() if p.name not in _LEGACY_NAMES)
        if foreign and not (folder / "results.csv").exists():
            raise ValueError(
                f"{folder} holds {foreign[:3]} and is not a cgdispatch store (no {DB_NAME}): "
                "cgdispatch will not write into it; give a new or empty folder as --out"
            )


def _legacy_rows(path: Path) -> pd.DataFrame | None:
    """Rows of an older CSV/Parquet store at ``path``; None when there is none; ValueError
    when the file exists but is not a store (never overwritten)."""
    if not path.is_file():
        return None
    try:
        frame = read_table(path)
    except ValueError as err:
        raise ValueError(
            f"{path} is not a cgdispatch store ({err}); choose another --out"
        ) from None
    missing = [c for c in ("model", "mode", "num_tokens", "status") if c not in frame]
    if missing:
        raise ValueError(
            f"{path} is not a cgdispatch store (it lacks columns {missing}): cgdispatch will "
            "not overwrite it; choose another --out"
        )
    return frame


_COLUMNS = {"rows": ["point_id", *SWEEP_COLUMNS], "captures": ["unit_id", *CAPTURE_COLUMNS]}


def _create_file(db: Path) -> bool:
    """Create the database under a random name, then link it into place, so that no other
    process ever opens a half-made store; False when another process made it first."""
    fd, tmp = tempfile.mkstemp(prefix=f".{db.name}.", suffix=".tmp", dir=db.parent)
    os.close(fd)
    try:
        with closing(sqlite3.connect(tmp, isolation_level=None)) as con:
            _create(con)
        try:
            os.link(tmp, db)  # fails when the name exists: creation is exclusive
        except FileExistsError:
            _check_ours(db)
            return False
        return True
    finally:
        Path(tmp).unlink(missing_ok=True)


def _create(con: sqlite3.Connection) -> None:
    con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    con.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
    con.execute(
        "INSERT OR REPLACE INTO meta VALUES ('format', ?), ('version', ?)", (FORMAT, VERSION)
    )
    rows = ", ".join(f'"{c}"' for c in _COLUMNS["rows"][1:])
    con.execute(f"CREATE TABLE IF NOT EXISTS rows (point_id TEXT PRIMARY KEY, {rows})")
    captures = ", ".join(f'"{c}"' for c in _COLUMNS["captures"])
    con.execute(f"CREATE TABLE IF NOT EXISTS captures (seq INTEGER PRIMARY KEY, {captures})")
    con.execute("CREATE TABLE IF NOT EXISTS specs (name TEXT PRIMARY KEY, spec TEXT)")


def _insert(con: sqlite3.Connection, table: str, frame: pd.DataFrame, replace: bool) -> None:
    cols = _COLUMNS[table]
    values = frame.reindex(columns=cols).astype(object).where(frame.reindex(columns=cols).notna())
    records = [tuple(_plain(v) for v in row) for row in values.itertuples(index=False)]
    names = ", ".join(f'"{c}"' for c in cols)
    verb = "INSERT OR REPLACE" if replace else "INSERT"
    marks = ", ".join("?" * len(cols))
    con.executemany(f"{verb} INTO {table} ({names}) VALUES ({marks})", records)


def _plain(value: Any) -> Any:
    """A value SQLite stores: numpy scalars as Python ones, NA as NULL."""
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return None
    return value.item() if hasattr(value, "item") else value


def _select_rows(con: sqlite3.Connection) -> pd.DataFrame:
    cols = ", ".join(f'"{c}"' for c in SWEEP_COLUMNS)
    found = con.execute(f"SELECT {cols} FROM rows ORDER BY rowid").fetchall()
    if not found:
        return empty_rows()
    return normalise(pd.DataFrame.from_records(found, columns=list(SWEEP_COLUMNS)))


def _select_captures(con: sqlite3.Connection) -> pd.DataFrame:
    cols = ", ".join(f'"{c}"' for c in CAPTURE_COLUMNS)
    found = con.execute(f"SELECT {cols} FROM captures ORDER BY seq").fetchall()
    return pd.DataFrame.from_records(found, columns=list(CAPTURE_COLUMNS))


def load_captures(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Per-key capture rows (:data:`CAPTURE_COLUMNS`) of a store folder or captures file;
    empty when the sweep wrote none."""
    path = Path(path)
    if path.is_dir() and (path / DB_NAME).is_file():
        _check_ours(path / DB_NAME)
        return ResultStore(path).load_captures()
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
            _check_ours(path / DB_NAME)
            return ResultStore(path).load()
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
        _check_ours(path)
        return ResultStore(path).load()
    frame = read_table(path)
    missing = [c for c in ("model", "mode", "num_tokens", "status") if c not in frame]
    if missing:
        raise ValueError(f"{path} is not a sweep's results (it lacks columns {missing})")
    return normalise(frame)


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
