"""The request table the simulators read: its columns, dtypes and bounds, checked up front.

It checks; it neither sorts nor simulates (:mod:`cgdispatch.workload.scheduler` does both).
"""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pandas as pd

from ..core.validate import MAX_REQUEST_TOKENS
from .steps import HASH_IDS_COLUMN, LORA_COLUMN, TOKEN_IDS_COLUMN

__all__ = ["check_requests", "check_cells"]

_REQUEST_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
# multi-turn sessions (cgdispatch.workload.mooncake.SESSION_COLUMNS): kept when all are given
_SESSION_COLUMNS = ("session_id", "turn", "delay_s")


def check_requests(requests: pd.DataFrame) -> pd.DataFrame:
    """A request table's columns with their dtypes, or ValueError naming the first bad row
    (by the frame's own index label, as ``requests.loc[row]`` finds it) and column."""
    if not isinstance(requests, pd.DataFrame):
        raise ValueError(
            f"a request table must be a pandas DataFrame, got {type(requests).__name__}: give "
            f"one with columns {list(_REQUEST_COLUMNS)}"
        )
    missing = [c for c in _REQUEST_COLUMNS if c not in requests.columns]
    if missing:
        raise ValueError(
            f"request table lacks columns {missing}: it needs {list(_REQUEST_COLUMNS)} "
            "(cgdispatch.workload.files.load_requests maps common CSV column names)"
        )
    if len(requests) == 0:
        raise ValueError("request table is empty: give at least one request")
    lists = [c for c in (HASH_IDS_COLUMN, TOKEN_IDS_COLUMN) if c in requests.columns]
    if len(lists) > 1:
        raise ValueError(
            f"request table has both {HASH_IDS_COLUMN!r} and {TOKEN_IDS_COLUMN!r}: give one "
            "source of prefix identity (drop the other column)"
        )
    frame = requests[lists]
    has_lora = LORA_COLUMN in requests.columns
    columns = {
        "arrival_s": (-np.inf, np.inf, False),
        "prompt_tokens": (1, MAX_REQUEST_TOKENS, True),
        "output_tokens": (1, MAX_REQUEST_TOKENS, True),
        **({LORA_COLUMN: (-1, 2**62, True)} if has_lora else {}),
    }
    out = check_cells(requests, "request table", columns)
    out["arrival_s"] = out["arrival_s"].astype(np.float64)
    if all(c in requests.columns for c in _SESSION_COLUMNS):
        out.update(_sessions(requests[list(_SESSION_COLUMNS)]))
    checked = pd.DataFrame(out)
    for col in lists:
        checked[col] = _id_lists(frame[col], col, out["prompt_tokens"])
    # the client's limit (workload.closed_loop) and the tokens per hash id of the trace's ids
    for key in ("max_concurrency", "hash_block_size"):
        if key in requests.attrs:
            checked.attrs[key] = requests.attrs[key]
    return checked


def _sessions(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """The session columns as int64, int64 and float64 (NaN delay: a fixed arrival), or
    ValueError naming the first bad row by its index label."""
    out: dict[str, np.ndarray] = {}
    for col, low in (("session_id", -1), ("turn", 0)):
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values) | (values != np.round(values)) | (values < low)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"request table row {frame.index[pos]}: {col}={_shown(frame[col].iloc[pos])} is "
                f"invalid: it must be an integer >= {low}"
            )
        out[col] = values.astype(np.int64)
    delay = pd.to_numeric(frame["delay_s"], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~(np.isnan(delay) | ((delay >= 0) & np.isfinite(delay)))
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"request table row {frame.index[pos]}: delay_s={_shown(frame['delay_s'].iloc[pos])} "
            "is invalid: give "
            "the seconds after the session's previous turn finishes (>= 0), or blank for a "
            "turn that arrives at its arrival_s"
        )
    out["delay_s"] = delay
    return out


def check_cells(
    frame: pd.DataFrame, what: str, columns: dict[str, tuple[float, float, bool]]
) -> dict[str, np.ndarray]:
    """Each of ``columns`` (name -> least, most, integral) of ``frame`` as a numpy array
    (int64 where integral), or ValueError naming the first bad cell: text where a number
    belongs, a blank, NaN or infinity, a fraction in a count, a value out of range. Rows are
    named by the frame's index label, as the person who built it counts them."""
    out = {}
    for col, (least, most, integral) in columns.items():
        cells = frame[col]
        if cells.dtype == object or pd.api.types.is_string_dtype(cells.dtype):
            text = cells.map(lambda v: isinstance(v, (str, bytes))).to_numpy(dtype=bool)
            if text.any():
                pos = int(np.flatnonzero(text)[0])
                raise ValueError(
                    f"{what} row {frame.index[pos]}: {col}={_shown(cells.iloc[pos])} is not a "
                    "finite number but text: give numbers "
                    f"(pd.to_numeric(frame[{col!r}]) converts a column of digits)"
                )
        values = pd.to_numeric(cells, errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values) | (values < least) | (values > most)
        if integral:
            bad |= values != np.round(values)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            cell = f"{what} row {frame.index[pos]}: {col}={_shown(cells.iloc[pos])}"
            if not integral:
                low = "" if least == -np.inf else f" >= {least:g}"
                raise ValueError(f"{cell} is not a finite number{low}: fill or drop blank ones")
            per = " (at most MAX_REQUEST_TOKENS per request)" if most == MAX_REQUEST_TOKENS else ""
            raise ValueError(
                f"{cell} is invalid: it must be an integer from {least:_} to {most:_}{per}"
            )
        out[col] = values.astype(np.int64) if integral else values
    return out


# integer types whose values int() keeps exactly (no bool, no float, no text)
_INT_TYPES = frozenset(
    {int, np.int64, np.int32, np.int16, np.int8, np.uint64, np.uint32, np.uint16, np.uint8}
)


def _id_lists(column: pd.Series, col: str, prompt: np.ndarray) -> list[tuple[int, ...]]:
    """A list-of-ints column as tuples of Python ints, or ValueError naming the first bad row
    by its index label (token ids: exactly ``prompt_tokens`` of them). A cell may be a list,
    a tuple, an array or, as a CSV holds it, the text of a JSON list (``"[12, 7, 7]"``)."""
    out: list[tuple[int, ...]] = []
    for pos, (row, value) in enumerate(zip(column.index, column.tolist())):
        if isinstance(value, np.ndarray):
            value = value.tolist()
        elif isinstance(value, str) and value.strip().startswith("["):
            with contextlib.suppress(ValueError):  # else refused below, as written
                value = json.loads(value)
        ok = isinstance(value, (list, tuple)) and len(value) > 0
        if ok and _INT_TYPES.issuperset(map(type, value)):
            ids = tuple(map(int, value))  # plain integers (the common case), checked at once
        elif ok:
            try:
                ids = tuple(int(x) for x in value)
            except (TypeError, ValueError):
                ok = False
            else:
                ok = all(
                    type(x).__name__ not in ("str", "float", "bool", "float64") and x == y
                    for x, y in zip(value, ids)
                )
        if not ok:
            raise ValueError(
                f"request table row {row}: {col}={_shown(value)} is invalid: it must be a "
                "non-empty list of integers (one id per hash block of the prompt for "
                f"{HASH_IDS_COLUMN!r}, one per prompt token for {TOKEN_IDS_COLUMN!r})"
            )
        if col == TOKEN_IDS_COLUMN and len(ids) != int(prompt[pos]):
            raise ValueError(
                f"request table row {row}: {col} holds {len(ids)} token ids but prompt_tokens="
                f"{int(prompt[pos])}: give one id per prompt token"
            )
        out.append(ids)
    return out


def _shown(value: object) -> str:
    """A cell as the user wrote it: ``6.5``, not ``np.float64(6.5)``."""
    return repr(value.item() if isinstance(value, np.generic) else value)
