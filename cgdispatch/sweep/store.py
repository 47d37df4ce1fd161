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
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable
from contextlib import closing, suppress
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.warn import warn_user
from .database import (
    BACKUP_SUFFIX,
    DB_NAME,
    SCHEMA_VERSION,
    add_new_columns,
    check_ours,
    create,
    create_file,
    insert,
    is_complete,
    layout,
    legacy_rows,
    mark_complete,
    other_databases,
    refuse_foreign_folder,
    refuse_symlink,
    select_captures,
    select_rows,
    store_version,
)
from .exports import read_table, write_export
from .failures import StoreError, explain, store_errors
from .rows import (
    CAPTURE_COLUMNS,
    LEGACY_VERSION,
    POINT_COLUMNS,
    SWEEP_COLUMNS,
    CaptureRecord,
    SweepRow,
)
from .schema import normalise, point_ids

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
    if version not in (None, LEGACY_VERSION) and version == version:
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
        for target in (self.db_path, self.path, self.captures_path, self.backup_path):
            refuse_symlink(target)
        with self._errors():
            if self.db_path.exists():
                check_ours(self.db_path)
                self._open_existing()
                return
            legacy = legacy_rows(self.path)  # ValueError when the file is not a store
            if legacy is None:  # an interrupted migration whose export went missing since
                legacy = legacy_rows(self.backup_path)
            others = other_databases(folder, self.db_path)
            if others:
                raise StoreError(
                    f"{folder} already holds the store database {others[0].name}: a folder "
                    f"holds one store; give --out {others[0].with_suffix('.csv')} for that "
                    "store, or another folder"
                )
            if self.path.suffix == "" or not self.path.exists():
                refuse_foreign_folder(folder)
            folder.mkdir(parents=True, exist_ok=True)
            if legacy is None:
                create_file(self.db_path)
            else:
                self._migrate(legacy)

    @property
    def backup_path(self) -> Path | None:
        """Where an older CSV store's rows are kept until their migration is verified."""
        return None if self.path is None else self.path.with_name(self.path.name + BACKUP_SUFFIX)

    def _errors(self) -> Any:
        return store_errors(self.db_path, self.path)

    def _open_existing(self) -> None:
        """Check the version of an existing store, add columns an older one lacks, and
        rebuild a store an interrupted migration left half-made (never trusted as it is)."""
        with closing(self._connect()) as con:
            version = store_version(con)
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"the store {self.db_path} was written by a newer cgdispatch (store schema "
                    f"version {version}; this cgdispatch knows versions up to "
                    f"{SCHEMA_VERSION}): upgrade cgdispatch to add to it, or give another "
                    "--out; `report` can still read it"
                )
            add_new_columns(con)
            if is_complete(con):  # linked in only once verified: a kept copy is done with
                if self.backup_path is not None:
                    self.backup_path.unlink(missing_ok=True)
                return
        # made by an older cgdispatch, or half-made by its interrupted migration: the rows of
        # the export (and of a kept copy) that the database lacks go back in
        have = self.done_keys(status=None)
        missing = []
        for source in (self.path, self.backup_path):
            rows = legacy_rows(source) if source is not None else None
            if rows is not None and len(rows):
                frame = self._row_frame(rows.to_dict("records"))
                missing.append(frame[~frame["point_id"].isin(have)])
        lost = pd.concat(missing, ignore_index=True) if missing else None

        def work(con: sqlite3.Connection) -> None:
            if lost is not None and len(lost):
                insert(con, "rows", lost.drop_duplicates("point_id"), replace=False)
            mark_complete(con)

        self._transaction(work)
        if self.backup_path is not None:
            self.backup_path.unlink(missing_ok=True)

    # ---- connections ----
    def _connect(self) -> sqlite3.Connection:
        if self._memory is not None:
            return self._memory
        # timeout: a writer waits up to a minute for another's transaction instead of failing
        con = sqlite3.connect(self.db_path, timeout=60.0, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        return con

    def _transaction(self, work: Any) -> None:
        with self._errors():
            self._write(work)

    def _write(self, work: Any) -> None:
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")  # take the write lock now: writers queue here
            try:
                work(con)
                con.execute("COMMIT")
            except BaseException:
                # SQLite may have rolled back already (disk full): keep the real error
                with suppress(sqlite3.Error):
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
        return self._read(select_rows)

    def done_keys(self, status: str | None = "ok") -> set[str]:
        """Point identities of the rows whose status is ``status`` (every row for None)."""
        where = "" if status is None else " WHERE status = ?"
        args = () if status is None else (status,)
        found = self._read(
            lambda con: con.execute(f"SELECT point_id FROM rows{where}", args).fetchall()
        )
        return {r[0] for r in found}

    def _read(self, select: Any) -> Any:
        with self._errors():
            con = self._connect()
            try:
                return select(con)
            finally:
                if self._memory is None:
                    con.close()

    def append(self, rows: Iterable[SweepRow | dict[str, Any]]) -> None:
        """Add rows (replacing rows with the same point identity) in one transaction."""
        dicts = [r.as_dict() if isinstance(r, SweepRow) else dict(r) for r in rows]
        if not dicts:
            return
        frame = self._row_frame(dicts)
        self._transaction(lambda con: insert(con, "rows", frame, replace=True))

    @staticmethod
    def _row_frame(dicts: list[dict[str, Any]]) -> pd.DataFrame:
        """Rows as the database holds them: normalised, keyed, one per point (the last)."""
        frame = normalise(pd.DataFrame(dicts))
        frame.insert(0, "point_id", point_ids(frame))
        return frame.drop_duplicates("point_id", keep="last")

    @property
    def captures_path(self) -> Path | None:
        return None if self.path is None else self.path.with_name(f"captures{self.path.suffix}")

    def append_captures(self, records: list[CaptureRecord] | list[dict[str, Any]]) -> None:
        """Store one unit's capture report (replacing that unit's earlier report)."""
        if not records:
            return
        self._transaction(lambda con: _put_captures(con, records))

    def load_captures(self) -> pd.DataFrame:
        return self._read(select_captures)

    def save_spec(self, spec: dict[str, Any]) -> None:
        """Keep the sweep spec (one per sweep name), exported as ``spec.json``. A spec stored
        already is not written again, so resuming a finished sweep needs no write access."""
        text = json.dumps(spec)
        stored = self._read(
            lambda con: con.execute(
                "SELECT spec FROM specs WHERE name = ?", (spec["name"],)
            ).fetchone()
        )
        if stored is not None and stored[0] == text:
            return
        self._transaction(
            lambda con: con.execute(
                "INSERT OR REPLACE INTO specs VALUES (?, ?)", (spec["name"], text)
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
        for name in (self.path.name, self.captures_path.name, "spec.json", self.db_path.name):
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
        """Rows of an older CSV store, moved into a new database that cannot lose them.

        A copy of the old export is kept as ``results.csv.pre-sqlite`` first; the database
        is filled under a temporary name, its row count checked against the source, and
        only then linked into place; the copy goes once the new exports are written. A
        process killed at any point leaves the old export or the verified store (the next
        open migrates again or goes on). Timing settings the old store did not record come
        from its spec.json when the sweep is there (a resume still reuses them)."""
        backup = self.backup_path
        if not backup.exists() and self.path.is_file():
            fd, tmp = tempfile.mkstemp(prefix=f".{backup.name}.", suffix=".tmp", dir=backup.parent)
            os.close(fd)
            shutil.copyfile(self.path, tmp)
            os.replace(tmp, backup)
        spec_path = self.path.parent / "spec.json"
        specs = json.loads(spec_path.read_text()) if spec_path.is_file() else {}
        for name in ("warmup", "input_sets", "cpu_threads"):
            if name not in legacy:
                legacy[name] = [specs.get(str(s), {}).get(name) for s in legacy["sweep"]]
        frame = self._row_frame(legacy.to_dict("records"))
        captures = read_table(self.captures_path) if self.captures_path.is_file() else None

        def fill(con: sqlite3.Connection) -> None:
            insert(con, "rows", frame, replace=True)
            for spec in specs.values():
                con.execute(
                    "INSERT OR REPLACE INTO specs VALUES (?, ?)", (spec["name"], json.dumps(spec))
                )
            if captures is not None and len(captures):
                for _, unit in captures.groupby(list(_UNIT_COLUMNS), dropna=False, sort=False):
                    _put_captures(con, unit.to_dict("records"))
            stored = con.execute("SELECT COUNT(*) FROM rows").fetchone()[0]
            if stored != len(frame):
                raise StoreError(
                    f"migrating {self.path} into {self.db_path} stored {stored} of "
                    f"{len(frame)} rows; the old store is left as it was (and copied to "
                    f"{backup}): report this as a bug"
                )

        if create_file(self.db_path, fill):
            self._transaction(lambda con: None)  # the exports, from the verified database
        backup.unlink(missing_ok=True)


def _put_captures(con: sqlite3.Connection, records: list[Any]) -> None:
    """One unit's capture report, replacing that unit's earlier report."""
    dicts = [r.as_dict() if isinstance(r, CaptureRecord) else r for r in records]
    frame = pd.DataFrame(dicts).reindex(columns=list(CAPTURE_COLUMNS))
    unit = _unit_id(dicts[0])
    frame.insert(0, "unit_id", unit)
    con.execute("DELETE FROM captures WHERE unit_id = ?", (unit,))
    insert(con, "captures", frame, replace=False)


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
    when SQLite cannot open it so, or the database is damaged and its export is there, and
    the caller reads the exports instead (with a warning when the database is damaged)."""
    export = layout(db)[0] if db.name != DB_NAME else db.with_name("results.csv")
    try:
        check_ours(db)
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60.0)) as con:
            version = store_version(con)
            if version > SCHEMA_VERSION:
                warn_user(
                    f"the store {db} was written by a newer cgdispatch (store schema version "
                    f"{version}; this one knows up to {SCHEMA_VERSION}): reading the columns "
                    "it knows; upgrade cgdispatch to see the rest"
                )
            return select(con)
    except sqlite3.OperationalError as err:
        if "malformed" not in str(err) and "not a database" not in str(err):
            return None  # read-only WAL without its -shm file: use the export
        damage: BaseException = err
    except (sqlite3.DatabaseError, ValueError) as err:
        damage = err
    if not export.is_file():
        raise StoreError(explain(damage, db, None)) from damage
    warn_user(explain(damage, db, export))
    return None


def load_reference(
    gpu: str | None = None, data_dir: str | os.PathLike[str] | None = None
) -> pd.DataFrame | None:
    """GPU reference rows shipped in ``cgdispatch/data/reference_*.csv``, or None if none.

    Each file of sweep rows (with a ``mode`` column; other reference files are left alone) holds rows measured on a GPU plus a ``reference_date`` column; the
    ``source`` becomes ``reference data (<device_name>, <date>)``. ``gpu`` keeps rows whose
    device name contains it (case-insensitive). No reference data is invented: when no
    file is shipped this returns None.
    """
    folder = Path(data_dir) if data_dir is not None else Path(__file__).parents[1] / "data"
    files = sorted(folder.glob("reference_*.csv")) if folder.is_dir() else []
    frames = []
    for file in files:
        frame = pd.read_csv(file)
        if "mode" not in frame.columns:
            continue  # reference data of another shape (e.g. vLLM start-ups), not sweep rows
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
