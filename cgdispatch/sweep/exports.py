"""Files a store writes for people and other tools (CSV, Parquet, JSON), atomically: each goes
to a randomly named temporary file in the same folder, flushed and renamed over the old one,
so a reader sees the old file or the new one, and nothing is written through a symlink."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd

from ..core.jsonout import strict_json

__all__ = ["write_export", "write_text_file", "read_table", "shared_mode"]


def write_export(data: pd.DataFrame | dict[str, Any], path: Path) -> None:
    """``data`` as ``path`` (.csv, .parquet, or .json for a dict), replaced atomically."""
    if path.is_symlink():  # os.replace would swap the link, but say so rather than surprise
        raise ValueError(f"{path} is a symlink: cgdispatch does not write through links; remove it")

    def write(fh: BinaryIO) -> None:
        if isinstance(data, dict):
            fh.write(strict_json(data, indent=1).encode())
        elif path.suffix == ".parquet":
            data.to_parquet(fh, index=False)
        else:
            fh.write(data.to_csv(index=False).encode())

    _replace(path, write)


def write_text_file(path: Path, text: str) -> None:
    """``text`` as UTF-8 at ``path``, replaced atomically: a name that is not UTF-8 (a
    Latin-1 folder's ``caf\\xe9``, read by Python as a surrogate) is written escaped, so
    the file is never left empty by an encoding error half-way."""
    _replace(path, lambda fh: fh.write(text.encode("utf-8", errors="backslashreplace")))


def _replace(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """``write`` into a randomly named temporary file beside ``path`` (mode as a plain
    ``open`` would give), flushed to disk and renamed over ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, shared_mode())
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def shared_mode() -> int:
    """The mode a plain ``open`` would give (0666 less the umask): mkstemp's 0600 would hide
    a shared store's files from co-workers."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def read_table(path: Path) -> pd.DataFrame:
    """A CSV or Parquet file; ValueError (naming the file) when it is neither."""
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        # a release name is text: read as a number, "0.30" would come back as 0.3
        return pd.read_csv(path, dtype={"vllm_version": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not a readable table: {' '.join(str(err).split())}") from None
    except Exception as err:  # pyarrow's errors share no base class with pandas'
        if type(err).__module__.startswith("pyarrow"):
            raise ValueError(f"{path} is not a readable Parquet file: {err}") from None
        raise
