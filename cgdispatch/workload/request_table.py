"""The request table the simulators read: its columns, dtypes and bounds, checked up front.

It checks; it neither sorts nor simulates (:mod:`cgdispatch.workload.scheduler` does both).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.validate import MAX_REQUEST_TOKENS
from .steps import LORA_COLUMN

__all__ = ["check_requests"]

_REQUEST_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
# multi-turn sessions (cgdispatch.workload.mooncake.SESSION_COLUMNS): kept when all are given
_SESSION_COLUMNS = ("session_id", "turn", "delay_s")


def check_requests(requests: pd.DataFrame) -> pd.DataFrame:
    """A request table's columns with their dtypes, or ValueError naming the first bad row."""
    missing = [c for c in _REQUEST_COLUMNS if c not in getattr(requests, "columns", ())]
    if missing:
        raise ValueError(
            f"request table lacks columns {missing}: it needs {list(_REQUEST_COLUMNS)} "
            "(cgdispatch.workload.files.load_requests maps common CSV column names)"
        )
    if len(requests) == 0:
        raise ValueError("request table is empty: give at least one request")
    cols = [*_REQUEST_COLUMNS, *([LORA_COLUMN] if LORA_COLUMN in requests.columns else [])]
    frame = requests[cols].reset_index(drop=True)
    arrival = pd.to_numeric(frame["arrival_s"], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(arrival)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"request table row {row}: arrival_s={_shown(frame['arrival_s'][row])} is not a finite "
            "number: every request needs an arrival time in seconds (fill or drop blank ones)"
        )
    out: dict = {"arrival_s": arrival}
    for col in ("prompt_tokens", "output_tokens", *cols[3:]):
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64)
        low = -1 if col == LORA_COLUMN else 1
        high = 2**62 if col == LORA_COLUMN else MAX_REQUEST_TOKENS
        bad = ~np.isfinite(values) | (values != np.round(values)) | (values < low)
        bad |= values > high
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"request table row {row}: {col}={_shown(frame[col][row])} is invalid: it must be "
                f"an integer from {low} to {high:_}"
                + (" (at most MAX_REQUEST_TOKENS per request)" if col != LORA_COLUMN else "")
            )
        out[col] = values.astype(np.int64)
    if all(c in requests.columns for c in _SESSION_COLUMNS):
        out.update(_sessions(requests[list(_SESSION_COLUMNS)].reset_index(drop=True)))
    checked = pd.DataFrame(out)
    if "max_concurrency" in requests.attrs:  # the client's limit (workload.closed_loop)
        checked.attrs["max_concurrency"] = requests.attrs["max_concurrency"]
    return checked


def _sessions(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """The session columns as int64, int64 and float64 (NaN delay: a fixed arrival), or
    ValueError naming the first bad row."""
    out: dict[str, np.ndarray] = {}
    for col, low in (("session_id", -1), ("turn", 0)):
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values) | (values != np.round(values)) | (values < low)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"request table row {row}: {col}={_shown(frame[col][row])} is invalid: it must "
                f"be an integer >= {low}"
            )
        out[col] = values.astype(np.int64)
    delay = pd.to_numeric(frame["delay_s"], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~(np.isnan(delay) | ((delay >= 0) & np.isfinite(delay)))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"request table row {row}: delay_s={_shown(frame['delay_s'][row])} is invalid: give "
            "the seconds after the session's previous turn finishes (>= 0), or blank for a "
            "turn that arrives at its arrival_s"
        )
    out["delay_s"] = delay
    return out


def _shown(value: object) -> str:
    """A cell as the user wrote it: ``6.5``, not ``np.float64(6.5)``."""
    return repr(value.item() if isinstance(value, np.generic) else value)
