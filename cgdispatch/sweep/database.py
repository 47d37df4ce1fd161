"""The store's database file: where it lives, how it is created (exclusively, never half-made),
how it identifies itself, what it refuses (foreign files and folders, symlinks), and its
tables. :class:`~cgdispatch.sweep.store.ResultStore` uses it; nothing else should."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

import pandas as pd

from .exports import read_table, shared_mode
from .rows import CAPTURE_COLUMNS, SWEEP_COLUMNS
from .schema import empty_rows, normalise

__all__ = [
    "APPLICATION_ID", "DB_NAME", "layout", "create_file", "create", "check_ours",
    "refuse_symlink", "refuse_foreign_folder", "legacy_rows", "insert", "select_rows",
    "select_captures", "SCHEMA_VERSION", "BACKUP_SUFFIX", "store_version", "is_complete",
    "mark_complete", "other_databases",
]  # fmt: skip

APPLICATION_ID = 0x43474453  # "CGDS": `file store.sqlite` and sqlite3 tell it is ours
FORMAT = "cgdispatch sweep store"
# the store's schema version, recorded in its ``meta`` table. 1: the first SQLite store;
# 2: a store is marked complete once made (a migration marks it only after verifying it),
# so that a half-made store of an interrupted migration is told apart and rebuilt
SCHEMA_VERSION = 2
DB_NAME = "store.sqlite"
# the copy of an older CSV store's rows kept until its migration is verified
BACKUP_SUFFIX = ".pre-sqlite"
# a legacy folder may hold these besides results.csv; anything else means it is not a store
LEGACY_NAMES = {
    "results.csv", "results.parquet", "captures.csv", "captures.parquet", "spec.json",
    "results.csv" + BACKUP_SUFFIX, "results.parquet" + BACKUP_SUFFIX,
}  # fmt: skip


def layout(path: Path) -> tuple[Path, Path]:
    """(rows export, database) for a store path.

    A folder store's own export (``DIR/results.csv``) means that store, so that pointing
    ``--out`` at the file a sweep printed never makes a second database beside the first;
    its captures export is refused, naming the folder.
    """
    if path.suffix in (".csv", ".parquet") and (path.parent / DB_NAME).is_file():
        if path.name == f"results{path.suffix}":
            return path, path.parent / DB_NAME
        raise ValueError(
            f"{path} lies in the store folder {path.parent} (it holds {DB_NAME}): a folder "
            f"holds one store; give --out {path.parent} for that store, or another folder"
        )
    if path.suffix in (".csv", ".parquet"):
        return path, path.with_suffix(".sqlite")
    if path.suffix == ".sqlite":
        return path.with_name("results.csv"), path
    return path / "results.csv", path / DB_NAME


def refuse_symlink(path: Path | None) -> None:
    if path is not None and path.is_symlink():
        raise ValueError(
            f"{path} is a symlink: cgdispatch does not write through links (it would overwrite "
            f"the file it points to); remove the link or choose another --out"
        )


def check_ours(db: Path) -> None:
    if not db.is_file():
        raise ValueError(f"{db} is not a file: a store's database is a file; choose another --out")
    # the file header says it (SQLite's file format: magic string, application id at byte
    # 68); reading bytes needs no write access and cannot create or change anything
    with open(db, "rb") as fh:
        header = fh.read(100)
    ok = len(header) == 100 and header.startswith(b"SQLite format 3\x00")
    app = int.from_bytes(header[68:72], "big") if ok else None
    if app != APPLICATION_ID:
        raise ValueError(
            f"{db} is not a cgdispatch store (not its database format): cgdispatch will not "
            "write into it; choose another --out"
        )


def other_databases(folder: Path, db: Path) -> list[Path]:
    """cgdispatch databases in ``folder`` other than ``db`` (one store per folder)."""
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.sqlite")):
        if path.name == db.name or not path.is_file():
            continue
        try:
            check_ours(path)
        except ValueError:
            continue
        found.append(path)
    return found


def store_version(con: sqlite3.Connection) -> int:
    """The schema version a store records (1 for stores made before it was checked)."""
    found = con.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
    try:
        return int(found[0]) if found else 1
    except (TypeError, ValueError):
        return 1


def is_complete(con: sqlite3.Connection) -> bool:
    """True when the store was marked complete (made whole, or migrated and verified)."""
    found = con.execute("SELECT value FROM meta WHERE key = 'complete'").fetchone()
    return bool(found) and found[0] == "1"


def mark_complete(con: sqlite3.Connection) -> None:
    con.execute(
        "INSERT OR REPLACE INTO meta VALUES ('complete', '1'), ('version', ?)",
        (str(SCHEMA_VERSION),),
    )


def _in_progress(name: str) -> bool:
    """A store file another cgdispatch process is making right now (``create_file``'s and the
    exports' temporaries, ``.store.sqlite.<random>.tmp``, and SQLite's journal beside one):
    two sweeps started at once on one new folder see each other's, and neither makes the
    folder foreign."""
    ends = (".tmp", ".tmp-journal", ".tmp-wal", ".tmp-shm")
    return name.endswith(ends) and any(
        name.startswith(f".{known}.") for known in (DB_NAME, *LEGACY_NAMES)
    )


def refuse_foreign_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder: give a new folder or a .csv file")
    if folder.is_dir():
        foreign = sorted(
            p.name
            for p in folder.iterdir()
            if p.name not in LEGACY_NAMES and not _in_progress(p.name)
        )
        if foreign and not (folder / "results.csv").exists():
            raise ValueError(
                f"{folder} holds {foreign[:3]} and is not a cgdispatch store (no {DB_NAME}): "
                "cgdispatch will not write into it; give a new or empty folder as --out"
            )


def legacy_rows(path: Path) -> pd.DataFrame | None:
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


COLUMNS = {"rows": ["point_id", *SWEEP_COLUMNS], "captures": ["unit_id", *CAPTURE_COLUMNS]}


def create_file(db: Path, fill: Any = None) -> bool:
    """Create the database under a random name, then link it into place, so that no other
    process ever opens a half-made store; False when another process made it first.

    ``fill`` (given a connection to the new file) adds rows before it goes into place; it
    returns whether the result is verified, and only a verified store is linked in."""
    fd, tmp = tempfile.mkstemp(prefix=f".{db.name}.", suffix=".tmp", dir=db.parent)
    os.close(fd)
    try:
        try:
            os.chmod(tmp, shared_mode())  # co-workers sharing the store must open it
            with closing(sqlite3.connect(tmp, isolation_level=None)) as con:
                create(con)
                if fill is not None:
                    con.execute("BEGIN")
                    fill(con)
                    con.execute("COMMIT")
                mark_complete(con)
        except (sqlite3.Error, OSError):
            if Path(tmp).exists() or not db.exists():
                raise
            # another process made the store first and, writing to it, swept our temporary
            # as a killed writer's while we still wrote it (SQLite then calls the unlinked
            # file read-only): the store is theirs, as when the link below finds it
            check_ours(db)
            return False
        try:
            os.link(tmp, db)  # fails when the name exists: creation is exclusive
        except (FileExistsError, FileNotFoundError):
            # made by another process first (which may have swept our temporary away)
            check_ours(db)
            return False
        return True
    finally:
        Path(tmp).unlink(missing_ok=True)


def create(con: sqlite3.Connection) -> None:
    con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    con.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
    con.execute(
        "INSERT OR REPLACE INTO meta VALUES ('format', ?), ('version', ?)",
        (FORMAT, str(SCHEMA_VERSION)),
    )
    rows = ", ".join(f'"{c}"' for c in COLUMNS["rows"][1:])
    con.execute(f"CREATE TABLE IF NOT EXISTS rows (point_id TEXT PRIMARY KEY, {rows})")
    captures = ", ".join(f'"{c}"' for c in COLUMNS["captures"])
    con.execute(f"CREATE TABLE IF NOT EXISTS captures (seq INTEGER PRIMARY KEY, {captures})")
    con.execute("CREATE TABLE IF NOT EXISTS specs (name TEXT PRIMARY KEY, spec TEXT)")


def add_new_columns(con: sqlite3.Connection) -> None:
    """Add the columns a database made by an older cgdispatch lacks (``vllm_version``).

    Old rows read NULL there, which ``normalise`` turns into their generation, V1.
    Two processes may race here: the loser's duplicate column is simply there already.
    """
    for table, cols in COLUMNS.items():
        have = {row[1] for row in con.execute(f"PRAGMA table_info({table})")}
        for col in cols:
            if col not in have and col not in ("point_id", "unit_id"):
                try:
                    con.execute(f'ALTER TABLE {table} ADD COLUMN "{col}"')
                except sqlite3.OperationalError as err:
                    if "duplicate column" not in str(err):
                        raise


def insert(con: sqlite3.Connection, table: str, frame: pd.DataFrame, replace: bool) -> None:
    cols = COLUMNS[table]
    values = frame.reindex(columns=cols).astype(object).where(frame.reindex(columns=cols).notna())
    records = [tuple(plain(v) for v in row) for row in values.itertuples(index=False)]
    names = ", ".join(f'"{c}"' for c in cols)
    verb = "INSERT OR REPLACE" if replace else "INSERT"
    marks = ", ".join("?" * len(cols))
    con.executemany(f"{verb} INTO {table} ({names}) VALUES ({marks})", records)


def plain(value: Any) -> Any:
    """A value SQLite stores: numpy scalars as Python ones, NA as NULL."""
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return None
    return value.item() if hasattr(value, "item") else value


def select_rows(con: sqlite3.Connection) -> pd.DataFrame:
    cols = ", ".join(f'"{c}"' for c in SWEEP_COLUMNS)
    found = con.execute(f"SELECT {cols} FROM rows ORDER BY rowid").fetchall()
    if not found:
        return empty_rows()
    return normalise(pd.DataFrame.from_records(found, columns=list(SWEEP_COLUMNS)))


def select_captures(con: sqlite3.Connection) -> pd.DataFrame:
    cols = ", ".join(f'"{c}"' for c in CAPTURE_COLUMNS)
    found = con.execute(f"SELECT {cols} FROM captures ORDER BY seq").fetchall()
    return pd.DataFrame.from_records(found, columns=list(CAPTURE_COLUMNS))
