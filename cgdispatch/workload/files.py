"""Loaders for what a deployment logged: request CSVs, step-size CSVs, vLLM graph metrics.

Each loader returns the schemas of :mod:`cgdispatch.workload.trace` (a request table or a step
trace) and raises ``ValueError`` naming the missing columns and the names it accepts.
"""

from __future__ import annotations

import csv
import io
import os
import re
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from ..core.validate import MAX_REQUEST_TOKENS, MAX_REQUESTS, MAX_STEP_TOKENS, MAX_STEPS
from .mooncake import HASH_BLOCK_SIZE, HASH_IDS, check_hash_ids, load_mooncake, parse_hash_ids
from .trace import LORA_COLUMN, REQUEST_COLUMNS, check_trace, make_trace

__all__ = [
    "load_requests",
    "load_step_sizes",
    "load_cudagraph_metrics",
    "load_trace",
    "REQUEST_ALIASES",
]


# ----- reading user files and checking them cell by cell: every error is one line naming
# the file, the row (from 1 after the header) and column, the value found and what is expected
STDIN = Path("-")  # a trace read from standard input (`--trace -`)
# trace.attrs key: False for a histogram or a metrics table, whose rows carry no time order
TIME_ORDERED = "time_ordered"
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
    """``pd.read_csv`` whose parse errors name the file and the expected format.

    Rows with more fields than the header are an error naming the first of them: pandas
    would take the extra leading fields as an index and read every value one column off.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(source, index_col=False, **kwargs)
    except pd.errors.ParserWarning:
        row, fields, header = _first_long_row(source)
        raise ValueError(
            f"trace file {str(path)!r}: row {row} has {fields} fields but the header names "
            f"{header} columns, so every value would be read under the wrong column: add "
            "the missing names to the header or remove the extra fields"
        ) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        reason = " ".join(str(err).split())  # pandas' messages span lines: the CLI prints one
        raise ValueError(
            f"trace file {str(path)!r} is not a readable CSV ({reason}): give a CSV "
            "with a header row (requests: arrival, prompt and output tokens; steps: "
            "num_tokens) or a vLLM --cudagraph-metrics log"
        ) from None


def _first_long_row(source: Any) -> tuple[int, int, int]:
    """(row counted from 1 after the header, its fields, the header's) of the first row of
    a CSV with more fields than its header."""
    if isinstance(source, io.StringIO):
        source.seek(0)
        lines = iter(source)
    else:
        lines = open(source, encoding="utf-8", errors="replace", newline="")  # noqa: SIM115
    try:
        reader = csv.reader(lines)
        header = len(next(reader, []))
        for row, fields in enumerate(reader, start=1):
            if len(fields) > header:
                return row, len(fields), header
        return 0, header, header
    finally:
        if not isinstance(source, io.StringIO):
            lines.close()


def shown_name(name: str) -> str:
    """``name`` fit to print and write anywhere: bytes that are not UTF-8 (Python reads a
    Latin-1 ``caf\\xe9.csv`` as a lone surrogate) shown as ``\\xe9``."""
    return os.fsencode(name).decode("utf-8", errors="backslashreplace")


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


MAX_ROWS = max(MAX_REQUESTS, MAX_STEPS)  # data rows of a trace CSV (one request or step each)


def check_row_count(path: Path, text: str | None = None) -> None:
    """ValueError before parsing when the CSV at ``path`` (or ``text``) has more data rows
    than a trace may (:data:`MAX_ROWS`): a 10**7-row file parses for seconds and simulates
    for minutes before any other check could refuse it."""
    if text is not None:
        lines = text.count("\n") + (not text.endswith("\n"))
    else:
        lines, tail = 0, b"\n"
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK_BYTES):
                lines += chunk.count(b"\n")
                tail = chunk[-1:]
        lines += tail != b"\n"
    if lines - 1 > MAX_ROWS:
        raise ValueError(
            f"trace file {str(path)!r} has {lines - 1:_} rows after its header: more than the "
            f"{MAX_ROWS:_} requests or steps a trace may have (cgdispatch.core.validate."
            f"BOUNDS); sample it (e.g. head -n {MAX_ROWS + 1} FILE) or give a histogram "
            "(num_tokens,count)"
        )


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


# accepted column names (compared lower-case, without spaces, dashes and underscores);
# ``TIMESTAMP, ContextTokens, GeneratedTokens`` is the layout of public production traces
REQUEST_ALIASES: dict[str, tuple[str, ...]] = {
    "arrival_s": (
        "timestamp",
        "arrivals",
        "arrivaltime",
        "arrival",
        "time",
        "times",
        "starttime",
        "created",
    ),
    "prompt_tokens": (
        "prompttokens",
        "contexttokens",
        "inputtokens",
        "promptlen",
        "inputlen",
        "promptlength",
        "inputlength",
        "numprompttokens",
        "numinputtokens",
        "isl",
    ),
    "output_tokens": (
        "outputtokens",
        "generatedtokens",
        "completiontokens",
        "outputlen",
        "outputlength",
        "numoutputtokens",
        "numgeneratedtokens",
        "decodetokens",
        "osl",
    ),
}
LORA_ALIASES: dict[str, tuple[str, ...]] = {
    LORA_COLUMN: ("loraid", "lora", "loraname", "adapter", "adapterid", "loraadapter")
}
STEP_ALIASES: dict[str, tuple[str, ...]] = {
    "num_tokens": (
        "numtokens",
        "tokens",
        "numbatchedtokens",
        "batchedtokens",
        "steptokens",
        "batchsize",
        "size",
        "unpadded",
        "unpaddedtokens",
    ),
    "count": ("count", "steps", "numsteps", "frequency", "freq"),
    "uniform_decode": ("uniformdecode", "uniform", "isdecode", "decode"),
    "num_reqs": ("numreqs", "numrequests", "requests"),
}


def _norm(name: object) -> str:
    return re.sub(r"[\s_\-]", "", str(name)).lower()


def _match(columns: list[str], aliases: dict[str, tuple[str, ...]]) -> dict[str, str]:
    by_norm = {_norm(c): c for c in columns}
    found = {}
    for role, names in aliases.items():
        hit = next((by_norm[n] for n in names if n in by_norm), None)
        if hit is not None:
            found[role] = hit
    return found


def _read(source: str | Path | pd.DataFrame, **kwargs: object) -> pd.DataFrame:
    if isinstance(source, pd.DataFrame):
        return source
    path = existing_file(source)
    regular = path.is_file() and path != Path("-")
    text = None if regular else read_text(path)
    check_row_count(path, text)
    frame = parse_csv(path, path if regular else io.StringIO(text), **kwargs)
    frame.attrs["path"] = str(path)
    check_repeated_header(frame)
    return frame


def check_repeated_header(frame: pd.DataFrame) -> None:
    """ValueError naming the first row that repeats the header (files concatenated with
    ``cat``): without it, that row's text turns a number column into text and the error
    would name another row, or dates would be guessed."""
    text = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    if not text or not len(frame):
        return
    same = np.ones(len(frame), dtype=bool)
    for c in frame.columns:
        same &= frame[c].astype(str).str.strip().to_numpy() == str(c).strip()
    if same.any():
        row = int(np.flatnonzero(same)[0]) + 1
        raise ValueError(
            f"{source_name(frame)}, row {row} repeats the header "
            f"({', '.join(map(str, frame.columns))}): files joined with their headers? "
            "remove the repeated header rows (keep the first line only)"
        )


def _arrival_times(frame: pd.DataFrame, column: str, scale: float, time_unit: str) -> np.ndarray:
    """A request CSV's arrival column in seconds (numbers in ``time_unit``, or dates on one
    UTC time line), or ValueError naming the first row that has none."""
    stamps = frame[column]
    if pd.api.types.is_numeric_dtype(stamps):
        arrival = stamps.to_numpy(dtype=np.float64) * scale
    else:
        try:
            # UTC offsets (a clock change mid-trace: +01:00 then +02:00) on one time line
            times = pd.to_datetime(stamps, errors="coerce", format="mixed", utc=True)
        except (ValueError, TypeError, OverflowError):
            times = pd.Series(pd.NaT, index=stamps.index)
        arrival = (times - times.min()).dt.total_seconds().to_numpy(dtype=np.float64)
    bad = ~np.isfinite(arrival)
    if bad.any():  # a NaN arrival never comes due: the simulator would wait for it forever
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{source_name(frame)}, row {row + 1}, column {column!r}: found "
            f"{cell(stamps.iloc[row])}, expected an arrival time (a number in {time_unit}, "
            "or a date); fill or drop that request"
        )
    return arrival


def load_requests(
    source: str | Path | pd.DataFrame,
    *,
    time_unit: str = "s",
    hash_block_size: int = HASH_BLOCK_SIZE,
) -> pd.DataFrame:
    """A request table from a CSV (or DataFrame) with one request per row.

    Column names are matched loosely (see :data:`REQUEST_ALIASES`). Numeric timestamps are
    read in ``time_unit`` (``"s"``, ``"ms"``, ``"us"``); text timestamps are parsed as dates.
    Arrivals are shifted so that the first request arrives at 0. An optional adapter
    column (``lora_id``, ``lora``, ``adapter`` ...) becomes ``lora_id``: ids or names mapped
    to 0, 1, ... and blanks (or negative ids) to -1 (no LoRA). An optional ``hash_ids``
    column gives each request's prompt blocks as a JSON list (``"[3, 4, 9]"``, quoted in
    the CSV) or ids separated by spaces (``3 4 9``): one id per ``hash_block_size`` prompt
    tokens, the last block partial, equal ids for equal blocks (as mooncake_trace's).
    """
    frame = _read(source)
    found = _match(list(frame.columns), REQUEST_ALIASES)
    missing = [role for role in REQUEST_COLUMNS if role not in found]
    if missing:
        accepted = "; ".join(f"{r}: {', '.join(REQUEST_ALIASES[r][:4])}..." for r in missing)
        raise ValueError(
            f"request CSV lacks a column for {missing} (it has {columns_shown(frame)}); "
            f"accepted names: {accepted}"
        )
    scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6}.get(time_unit)
    if scale is None:
        raise ValueError(f"time_unit={time_unit!r} is unknown: use 's', 'ms' or 'us'")
    arrival = _arrival_times(frame, found["arrival_s"], scale, time_unit)
    too_big = " (MAX_REQUEST_TOKENS)"
    out = pd.DataFrame(
        {
            "arrival_s": arrival - (arrival.min() if len(arrival) else 0.0),
            "prompt_tokens": int_column(
                frame, found["prompt_tokens"], 1, MAX_REQUEST_TOKENS, too_big
            ),
            "output_tokens": int_column(
                frame, found["output_tokens"], 1, MAX_REQUEST_TOKENS, too_big
            ),
        }
    )
    lora_col = _match(list(frame.columns), LORA_ALIASES).get(LORA_COLUMN)
    if lora_col is not None:
        values = frame[lora_col]
        if pd.api.types.is_numeric_dtype(values):
            values = values.where(values >= 0)
        codes, _ = pd.factorize(values, sort=True)  # blanks -> -1
        out[LORA_COLUMN] = codes.astype(np.int64)
    ids_col = next((c for c in frame.columns if _norm(c) == "hashids"), None)
    if ids_col is not None:
        ids = []
        for row, (cell_, prompt) in enumerate(zip(frame[ids_col], out["prompt_tokens"])):
            where = f"{source_name(frame)}, row {row + 1}, column {ids_col!r}"
            ids.append(
                check_hash_ids(parse_hash_ids(cell_, where), int(prompt), hash_block_size, where)
            )
        out[HASH_IDS] = ids
        out.attrs["hash_block_size"] = hash_block_size
    attrs = dict(out.attrs)
    out = out.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    out.attrs = attrs
    return out


def load_step_sizes(source: str | Path | pd.DataFrame) -> pd.DataFrame:
    """A step trace from a CSV of step sizes: a ``num_tokens`` column (or a single column
    without header), optional ``count`` (steps of that size), ``uniform_decode``, ``num_reqs``."""
    if isinstance(source, pd.DataFrame):
        frame = source
    else:
        frame = _read(source)
        if len(frame.columns) == 1 and _is_int(frame.columns[0]):
            frame = _read(source, header=None, names=["num_tokens"])
    found = _match(list(frame.columns), STEP_ALIASES)
    if "num_tokens" not in found:
        raise ValueError(
            f"step CSV lacks a step-size column (it has {columns_shown(frame)}): name it "
            "num_tokens (or tokens, batch_size, size), or give one column of sizes without header"
        )
    sizes = int_column(frame, found["num_tokens"], 1, MAX_STEP_TOKENS)
    count = (
        int_column(frame, found["count"], 0, MAX_STEPS)
        if "count" in found
        else np.ones(len(frame), dtype=np.int64)
    )
    check_total_steps(int(count.sum()), source_name(frame))  # before np.repeat allocates them
    uniform = bool_column(frame, found["uniform_decode"]) if "uniform_decode" in found else False
    reqs = (
        int_column(frame, found["num_reqs"], 0, MAX_STEP_TOKENS) if "num_reqs" in found else sizes
    )
    rep = lambda a: np.repeat(np.broadcast_to(a, sizes.shape), count)  # noqa: E731
    trace = make_trace(rep(sizes), rep(uniform), num_reqs=rep(reqs))
    if "count" in found:  # a histogram: its rows are sizes, not steps in time order
        trace.attrs[TIME_ORDERED] = False
    return trace


def _is_int(text: object) -> bool:
    return str(text).strip().lstrip("-").isdigit()


def load_cudagraph_metrics(
    source: str | Path,
    *,
    tables: Literal["sum", "last"] = "sum",
    uniform_modes: tuple[str, ...] = ("FULL",),
) -> pd.DataFrame:
    """A step trace from the tables vLLM's ``--cudagraph-metrics`` writes to its log.

    Reads every table with columns Unpadded, Padded, Paddings, Mode, Count (log prefixes and
    ``|---|`` rules are skipped) and repeats each row Count times. ``tables="last"`` keeps
    only the last table (use it when the log's tables are cumulative). The log does not say
    which steps were uniform decodes: steps whose mode is in ``uniform_modes`` are marked so
    (right for FULL_AND_PIECEWISE, where only uniform decodes run FULL). The logged mode
    and padded size are kept as ``logged_mode`` and ``logged_padded_tokens``.
    """
    if isinstance(source, str) and "\n" in source:
        text, where = source, "the cudagraph metrics log"
    else:
        path = existing_file(source)
        text, where = read_text(path), f"cudagraph metrics log {str(path)!r}"
    found: list[list[tuple[int, int, str, int]]] = []
    current: list[tuple[int, int, str, int]] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if "|" not in line:
            current = None
            continue
        row = line[line.index("|") :].strip()
        cells = [c.strip() for c in row.strip("|").split("|")]
        if any("unpadded" in c.lower() for c in cells):
            current = []
            found.append(current)
        elif current is not None and _is_int(cells[0]):
            if len(cells) < 5 or not row.endswith("|"):  # a row's cells end with a bar
                raise ValueError(
                    f"{where}, line {number}: the table row {row!r} is cut short (5 cells "
                    "ending in '|' expected): was the log truncated? copy the whole table"
                )
            current.append(_metrics_row(cells, f"{where}, line {number}"))
    if not found:
        raise ValueError(
            f"no cudagraph metrics table found in {where}: expected a table with columns "
            "Unpadded Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count "
            "(vLLM --cudagraph-metrics)"
        )
    rows = found[-1] if tables == "last" else [r for t in found for r in t]
    if not rows:
        raise ValueError(f"the cudagraph metrics tables of {where} have no rows")
    unpadded, padded, mode, count = (np.array(c) for c in zip(*rows))
    check_total_steps(int(count.sum()), where)  # before np.repeat allocates them
    trace = make_trace(np.repeat(unpadded, count), np.repeat(np.isin(mode, uniform_modes), count))
    trace["logged_mode"] = np.repeat(mode, count)
    trace["logged_padded_tokens"] = np.repeat(padded, count).astype(np.int64)
    trace.attrs[TIME_ORDERED] = False  # a table of counts: no step order to split by
    return trace


_METRICS_CELLS = (("Unpadded Tokens", 0, 1, MAX_STEP_TOKENS), ("Padded Tokens", 1, 1, MAX_STEP_TOKENS),
                  ("Count", 4, 0, MAX_STEPS))  # fmt: skip


def _metrics_row(cells: list[str], where: str) -> tuple[int, int, str, int]:
    """(unpadded, padded, mode, count) of one table row, or ValueError naming line and column."""
    values = {}
    for name, index, low, high in _METRICS_CELLS:
        text = cells[index]
        if not _is_int(text) or not low <= int(text) <= high:
            raise ValueError(
                f"{where}, column {name!r}: found {text!r}, expected an integer from {low} "
                f"to {high:_}"
            )
        values[name] = int(text)
    return (values["Unpadded Tokens"], values["Padded Tokens"], cells[3].upper(), values["Count"])


_METRICS_HEADER = re.compile(r"\|[^\n]*unpadded|unpadded[^\n]*\|", re.IGNORECASE)


def load_trace(
    source: str | Path, *, progress: bool = False, hash_block_size: int = HASH_BLOCK_SIZE
) -> tuple[Literal["requests", "steps"], pd.DataFrame]:
    """Read a file of requests or of steps, telling which it holds.

    A vLLM metrics log or a step-size CSV gives ``("steps", trace)``; a CSV with arrival,
    prompt and output columns gives ``("requests", table)`` (simulate it into steps).
    ``source`` may be ``"-"`` (standard input) or a pipe; the file is read in chunks, with a
    progress bar on stderr for a large one when ``progress``. A ``.jsonl`` file (or text
    whose first line is a JSON object) is a mooncake_trace of requests
    (:func:`~cgdispatch.workload.mooncake.load_mooncake`, ``hash_block_size`` tokens per
    hash id); so is a CSV's ``hash_ids`` column read.
    """
    path = existing_file(source)
    text = read_text(path, progress=progress)
    if path.suffix.lower() == ".jsonl" or text.lstrip().startswith("{"):
        return "requests", load_mooncake(path, hash_block_size=hash_block_size, text=text)
    # a metrics table anywhere in the log (engine logs put megabytes before the first one)
    if _METRICS_HEADER.search(text):
        return "steps", load_cudagraph_metrics(path)
    check_row_count(path, text)
    frame = parse_csv(path, io.StringIO(text))
    frame.attrs["path"] = str(path)
    check_repeated_header(frame)
    if len(_match(list(frame.columns), REQUEST_ALIASES)) >= 2:  # a request file, maybe lacking one
        return "requests", load_requests(frame, hash_block_size=hash_block_size)
    if "num_tokens" in _match(list(frame.columns), STEP_ALIASES) or (
        len(frame.columns) == 1 and _is_int(frame.columns[0])
    ):
        trace = check_trace(load_step_sizes(path if len(frame.columns) == 1 else frame))
        # without a uniform_decode column every step reads as mixed: say the kinds are unknown
        trace.attrs["step_kinds_known"] = "uniform_decode" in _match(
            list(frame.columns), STEP_ALIASES
        )
        trace.attrs[TIME_ORDERED] = "count" not in _match(list(frame.columns), STEP_ALIASES)
        return "steps", trace
    raise ValueError(
        f"{str(path)!r} holds neither requests (arrival, prompt and output token columns such "
        "as TIMESTAMP, ContextTokens, GeneratedTokens) nor steps (a num_tokens column, or a "
        f"vLLM --cudagraph-metrics log); its columns are {columns_shown(frame)}"
    )
