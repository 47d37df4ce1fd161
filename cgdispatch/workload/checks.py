"""Reading user files and checking them cell by cell for the loaders of
:mod:`cgdispatch.workload.files`: every error is one line naming the file, the row (from 1
after the header) and column, the value found and what is expected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.validate import MAX_STEPS

__all__ = [
    "existing_file",
    "parse_csv",
    "read_text",
    "int_column",
    "bool_column",
    "check_total_steps",
]


STDIN = Path("-")  # a trace read from standard input (`--trace -`)
_PIPED: dict[str, str] = {}  # text of each non-regular source read so far (stdin, pipes)


def existing_file(source: str | Path) -> Path:
    """``source`` as a path to read: ``-`` (standard input), a file, or a pipe or character
    device such as ``/dev/stdin``; ValueError for a missing path or a directory."""
    path = Path(source)
    if path == STDIN:
        return STDIN
    if not path.exists():
        raise ValueError(f"trace file {str(path)!r} does not exist")
    if path.is_dir():
        raise ValueError(
            f"trace file {str(path)!r} is a directory, not a file: give the CSV or log inside it"
        )
    return path


def parse_csv(path: Path, source: Any, **kwargs: Any) -> pd.DataFrame:
    """``pd.read_csv`` whose parse errors name the file and the expected format."""
    try:
        return pd.read_csv(source, **kwargs)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        reason = " ".join(str(err).split())  # pandas' messages span lines: the CLI prints one
        raise ValueError(
            f"trace file {str(path)!r} is not a readable CSV ({reason}): give a CSV "
            "with a header row (requests: arrival, prompt and output tokens; steps: "
            "num_tokens) or a vLLM --cudagraph-metrics log"
        ) from None


def source_name(frame: pd.DataFrame) -> str:
    """How errors name the table: the file it came from, or 'the table'."""
    return f"trace file {frame.attrs['path']!r}" if "path" in frame.attrs else "the table"


def int_column(frame: pd.DataFrame, column: str, low: int, high: int, what: str = "") -> np.ndarray:
    """Column ``column`` as int64, or ValueError naming the file, row, column, the value found
    and what is expected. Rows count from 1 after the header, as a spreadsheet shows them."""
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (values != np.round(values)) | (values < low) | (values > high)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{source_name(frame)}, row {row + 1}, column {column!r}: found {cell(frame[column].iloc[row])}, "
            f"expected an integer from {low} to {high:_}{what}"
        )
    return values.astype(np.int64)


def bool_column(frame: pd.DataFrame, column: str) -> np.ndarray:
    """true/false, 1/0, yes/no (any case) as bool; anything else names its row."""
    words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
    text = frame[column].map(lambda v: str(v).strip().lower().removesuffix(".0"))
    values = text.map(words)
    bad = values.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{source_name(frame)}, row {row + 1}, column {column!r}: found {cell(frame[column].iloc[row])}, "
            "expected true/false, 1/0 or yes/no"
        )
    return values.to_numpy(dtype=bool)


def cell(value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "a blank"
    return repr(value.item() if isinstance(value, np.generic) else value)


def check_total_steps(total: int, where: str) -> None:
    if total > MAX_STEPS:
        raise ValueError(
            f"{where} holds {total:_} steps in all: more than the {MAX_STEPS:_} a trace may "
            "have (MAX_STEPS); check the count column, or sample the trace"
        )


def read_text(path: Path, *, progress: bool = False) -> str:
    """The text of ``path``, read in 8 MiB chunks (a progress bar on stderr when
    ``progress`` and the file is large). Standard input and pipes are read once and kept, so
    that a second reader (latency after planning) sees the same text."""
    import sys

    from tqdm.auto import tqdm

    key = str(path)
    if key in _PIPED:
        return _PIPED[key]
    regular = path != STDIN and path.is_file()
    size = path.stat().st_size if regular else None
    chunks: list[bytes] = []
    try:
        handle = sys.stdin.buffer if path == STDIN else open(path, "rb")  # noqa: SIM115
        with tqdm(
            total=size, desc=f"read {'stdin' if path == STDIN else path.name}", unit="B", unit_scale=True,
            disable=not progress or (size is not None and size < _PROGRESS_BYTES),
            file=sys.stderr, leave=False,
        ) as bar:  # fmt: skip
            while chunk := handle.read(_CHUNK_BYTES):
                chunks.append(chunk)
                bar.update(len(chunk))
        if handle is not sys.stdin.buffer:
            handle.close()
        text = b"".join(chunks).decode()
    except UnicodeDecodeError:
        raise ValueError(
            f"trace file {str(path)!r} is not text: give a CSV of requests or steps, or a "
            "vLLM --cudagraph-metrics log"
        ) from None
    if not regular:
        _PIPED[key] = text
    return text


_CHUNK_BYTES = 8 << 20
_PROGRESS_BYTES = 32 << 20  # files smaller than this read in well under a second


def columns_shown(frame: pd.DataFrame) -> str:
    """The frame's column names for an error line: at most 8, each cut to 30 characters."""
    names = [str(c) if len(str(c)) <= 30 else str(c)[:27] + "..." for c in frame.columns[:8]]
    return str(names) + (f" and {len(frame.columns) - 8} more" if len(frame.columns) > 8 else "")
