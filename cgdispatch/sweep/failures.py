"""What a store failure means to its user, in one line: SQLite's and the OS's errors raised
while a store is opened, read or written become a :class:`StoreError` that names the store,
the cause and what to do. The CLI prints it as one line (``error: ...``)."""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["StoreError", "store_errors", "explain"]


class StoreError(ValueError):
    """A store could not be used; the message names the store, the cause and the fix."""


def _export_note(export: Path | None) -> str:
    if export is None or not export.is_file():
        return ""
    try:
        with open(export, "rb") as fh:
            rows = max(sum(1 for _ in fh) - 1, 0)
    except OSError:
        return ""
    return f"; its export {export} is intact ({rows} rows) and `report` reads it"


def explain(err: BaseException, db: Path, export: Path | None) -> str:
    """One line for ``err``, raised while using the store database ``db``."""
    text = " ".join(str(err).split()) or type(err).__name__
    lower = text.lower()
    folder = db.parent
    code = getattr(err, "errno", None)
    if not folder.exists():
        return (
            f"the store folder {folder} is gone (deleted, moved or unmounted while in use: "
            f"{text}); the rows written before are lost with it unless it comes back. "
            "Restore the folder, or rerun with a new --out"
        )
    if "not a database" in lower or "malformed" in lower or "corrupt" in lower:
        return (
            f"the store database {db} is damaged ({text}){_export_note(export)}. To rebuild "
            f"the store from its export, move {db} aside (with any {db.name}-wal/-shm files) "
            "and rerun the sweep with --resume: the export is migrated into a new database"
        )
    if code == errno.ENOSPC or "disk is full" in lower or "database or disk is full" in lower:
        return (
            f"the disk holding {folder} is full ({text}); every row committed before is "
            "safe. Free some space and rerun with --resume"
        )
    if "locked" in lower or "busy" in lower:
        return (
            f"the store {db} stayed locked by another process for over a minute ({text}); "
            "wait for the other sweep to finish (or stop it) and rerun with --resume"
        )
    if (
        "readonly" in lower
        or "read-only" in lower
        or code in (errno.EACCES, errno.EPERM, errno.EROFS)
    ):
        return (
            f"the store {db} cannot be written by you ({text}); reading it (`report`) still "
            "works. Ask its owner for write access, or copy the folder and give the copy as "
            "--out"
        )
    if "disk i/o error" in lower or code == errno.EIO:
        return (
            f"the disk holding {folder} failed while writing the store ({text}); committed "
            "rows are safe. Check the disk (is it full or unmounted?) and rerun with --resume"
        )
    if "unable to open" in lower:
        return (
            f"the store {db} cannot be opened ({text}): check that {folder} exists and that "
            "you may write there"
        )
    return f"the store {db} failed: {text}"


@contextmanager
def store_errors(db: Path | None, export: Path | None) -> Iterator[None]:
    """Turn SQLite and OS errors raised inside into a one-line :class:`StoreError`."""
    try:
        yield
    except StoreError:
        raise
    except (sqlite3.Error, OSError) as err:
        if db is None:
            raise
        raise StoreError(explain(err, db, export)) from err
