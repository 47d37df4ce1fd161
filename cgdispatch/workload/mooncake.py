"""Requests with prefix identity: the mooncake_trace JSONL format, ``hash_ids`` cells of a
request CSV, and multi-turn sessions.

The mooncake_trace format (Mooncake, FAST'25; read by NVIDIA AIPerf and Dynamo) has one JSON
object per line: ``timestamp`` (arrival, ms), ``input_length`` and ``output_length``
(tokens), ``hash_ids`` (one id per block of ``hash_block_size`` prompt tokens, 512 by
default, the last block possibly partial; equal ids mean equal blocks) and, for multi-turn
sessions, ``session_id`` and ``delay`` (ms). A request table read from it carries a
``hash_ids`` column (a list of ints per request).

Sessions are read as AIPerf replays them ("deltas without responses", its default for
mooncake traces with ``hash_ids``, docs.nvidia.com/aiperf conversation-context-mode): a
turn's ``input_length`` is the new user text, and the prompt sent is the whole history
(every earlier turn's prompt and answer) followed by it. A turn with ``delay`` arrives that
many ms after the previous turn of its session finishes (closed loop: the replay decides
when, :mod:`cgdispatch.workload.closed_loop`); its ``arrival_s`` here is the earliest it
could arrive (the previous turn's arrival plus the delay), which a replay without the
closed loop uses as is.
"""

from __future__ import annotations

import json
import math
from itertools import count
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.validate import MAX_REQUEST_TOKENS, MAX_REQUESTS

__all__ = [
    "HASH_BLOCK_SIZE",
    "HASH_IDS",
    "SESSION_COLUMNS",
    "load_mooncake",
    "parse_hash_ids",
    "check_hash_ids",
    "accumulate_sessions",
]

HASH_BLOCK_SIZE = 512  # tokens per hash id in mooncake_trace (Mooncake's and AIPerf's default)
HASH_IDS = "hash_ids"  # the request-table column: a list of ints per request
# session columns: the session (0, 1, ... in order of first appearance; -1 none), the turn
# within it (0, 1, ...), and the wait after the previous turn finishes (s; NaN: open loop)
SESSION_COLUMNS = ("session_id", "turn", "delay_s")


def _where(path: str, line: int, field: str) -> str:
    return f"trace file {path!r}, line {line}, field {field!r}"


def _int_field(obj: dict, field: str, low: int, high: int, path: str, line: int) -> int:
    value = obj.get(field)
    ok = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, float) and value.is_integer():
        value, ok = int(value), True
    if not ok or not low <= value <= high:
        raise ValueError(
            f"{_where(path, line, field)}: found {value!r}, expected an integer from {low} to "
            f"{high:_}; fix or drop that line"
        )
    return int(value)


def _ms_field(obj: dict, field: str, path: str, line: int) -> float:
    value = obj[field]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(
            f"{_where(path, line, field)}: found {value!r}, expected milliseconds, a number "
            ">= 0 (mooncake_trace times are in ms); fix or drop that line"
        )
    if not math.isfinite(value):
        raise ValueError(
            f"{_where(path, line, field)}: found {value!r}, expected a finite number of ms"
        )
    return float(value)


def check_hash_ids(ids: object, prompt_tokens: int, block: int, where: str) -> list[int]:
    """``ids`` as a list of ints >= 0, one per ``block`` prompt tokens (the last block may be
    partial), or ValueError naming ``where``, the rule and the fix."""
    if not isinstance(ids, (list, tuple)) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
    ):
        raise ValueError(
            f"{where}: found {ids!r}, expected a list of integers >= 0 (one block id per "
            f"{block} prompt tokens)"
        )
    need = -(-prompt_tokens // block)
    if len(ids) != need:
        raise ValueError(
            f"{where}: {len(ids)} block ids for {prompt_tokens} prompt tokens, expected "
            f"{need} (one per {block} tokens, the last block partial): give the trace's block "
            f"size with --hash-block-size (hash_block_size=), or fix the line"
        )
    return [int(i) for i in ids]


def parse_hash_ids(cell: object, where: str) -> list[int]:
    """A CSV cell of block ids: a JSON list (``"[3, 4, 9]"``) or ids separated by spaces
    (``"3 4 9"``); a blank cell is no ids; a list or array (a DataFrame's cell) as it is."""
    if isinstance(cell, (list, tuple, np.ndarray)):  # a DataFrame built in Python
        return [i.item() if isinstance(i, np.generic) else i for i in cell]
    if cell is None or (isinstance(cell, float) and cell != cell):
        return []
    text = str(cell).strip()
    try:
        ids = json.loads(text) if text.startswith("[") else [int(t) for t in text.split()]
    except (ValueError, RecursionError):
        raise ValueError(
            f"{where}: found {text[:80]!r}, expected block ids as a JSON list ('[3, 4, 9]') or "
            "separated by spaces ('3 4 9')"
        ) from None
    return ids


def load_mooncake(
    source: str | Path, *, hash_block_size: int = HASH_BLOCK_SIZE, text: str | None = None
) -> pd.DataFrame:
    """A request table from a mooncake_trace JSONL file (module docstring).

    Columns: ``arrival_s`` (first arrival at 0), ``prompt_tokens``, ``output_tokens``,
    ``hash_ids`` when the lines carry them (all or none must), and the
    :data:`SESSION_COLUMNS` when some line has a ``session_id``. Sorted by arrival. A bad
    line raises ValueError naming the file, line, field, rule and fix. ``text``: the file's
    text when already read (standard input).
    """
    path = str(source)
    if (
        isinstance(hash_block_size, bool)
        or not isinstance(hash_block_size, int)
        or hash_block_size < 1
    ):
        raise ValueError(
            f"hash_block_size={hash_block_size!r} is invalid: give the tokens per hash id, an "
            f"integer >= 1 ({HASH_BLOCK_SIZE} in mooncake_trace)"
        )
    if text is None:
        text = Path(source).read_text(encoding="utf-8", errors="replace")
    rows: list[dict] = []
    with_ids = None
    for line, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"trace file {path!r}, line {line}: not JSON ({err.msg}): each line of a "
                'mooncake_trace file is one object such as {"timestamp": 0, '
                '"input_length": 600, "output_length": 40, "hash_ids": [0, 1]}'
            ) from None
        if not isinstance(obj, dict):
            raise ValueError(
                f"trace file {path!r}, line {line}: found {type(obj).__name__}, expected one "
                "JSON object per line (timestamp, input_length, output_length, hash_ids)"
            )
        if len(rows) >= MAX_REQUESTS:
            raise ValueError(
                f"trace file {path!r} has more than {MAX_REQUESTS:_} requests "
                "(MAX_REQUESTS): sample it (e.g. head -n 1000000 FILE)"
            )
        row = {
            "line": line,
            "prompt": _int_field(obj, "input_length", 1, MAX_REQUEST_TOKENS, path, line),
            "output": _int_field(obj, "output_length", 1, MAX_REQUEST_TOKENS, path, line),
            "timestamp": _ms_field(obj, "timestamp", path, line) if "timestamp" in obj else None,
            "delay": _ms_field(obj, "delay", path, line) if obj.get("delay") is not None else None,
            "session": obj.get("session_id"),
        }
        has = HASH_IDS in obj
        if with_ids is None:
            with_ids = has
        elif has != with_ids:
            raise ValueError(
                f"{_where(path, line, HASH_IDS)}: {'present' if has else 'missing'} here but "
                f"{'missing' if has else 'present'} on line {rows[0]['line']}: give hash_ids on "
                "every line or on none"
            )
        if has:
            row["ids"] = check_hash_ids(
                obj[HASH_IDS], row["prompt"], hash_block_size, _where(path, line, HASH_IDS)
            )
        if row["session"] is None and row["timestamp"] is None:
            raise ValueError(
                f"{_where(path, line, 'timestamp')}: missing: a request outside a session "
                "needs its arrival time in ms; add it or give the line a session_id"
            )
        rows.append(row)
    if not rows:
        raise ValueError(
            f"trace file {path!r} holds no requests: one JSON object per line expected"
        )
    return _table(rows, bool(with_ids), hash_block_size)


def _table(rows: list[dict], with_ids: bool, block: int) -> pd.DataFrame:
    """The request table of parsed lines: sessions chained, arrivals from 0, sorted."""
    sessions = any(r["session"] is not None for r in rows)
    codes: dict[object, int] = {}
    last: dict[int, int] = {}  # session -> its latest turn's row
    fresh = count(1 + max((i for r in rows for i in r.get("ids", ())), default=-1))
    arrival, session, turn, delay = [], [], [], []
    for k, r in enumerate(rows):
        sid = -1
        if r["session"] is not None:
            key = json.dumps(r["session"])
            sid = codes.setdefault(key, len(codes))
        prev = last.get(sid) if sid >= 0 else None
        wait = math.nan
        if prev is None:
            t = r["timestamp"] if r["timestamp"] is not None else (r["delay"] or 0.0)
        elif r["delay"] is not None or r["timestamp"] is None:
            wait = (r["delay"] or 0.0) / 1e3
            t = arrival[prev] * 1e3 + (r["delay"] or 0.0)  # the earliest it could arrive
        else:
            t = r["timestamp"]
        if prev is not None:  # the history, then the new user text (AIPerf's replay)
            p = rows[prev]
            new = r["prompt"]
            r["prompt"] = p["prompt"] + p["output"] + new
            if with_ids:
                r["ids"] = _history_ids(p["ids"], p["prompt"], r["prompt"], block, fresh)
        if sid >= 0:
            last[sid] = k
        arrival.append(t / 1e3)
        session.append(sid)
        turn.append(0 if prev is None else turn[prev] + 1)
        delay.append(wait)
    a = np.asarray(arrival, dtype=np.float64)
    out = pd.DataFrame(
        {
            "arrival_s": a - a.min(),
            "prompt_tokens": np.array([r["prompt"] for r in rows], dtype=np.int64),
            "output_tokens": np.array([r["output"] for r in rows], dtype=np.int64),
        }
    )
    if with_ids:
        out[HASH_IDS] = [r["ids"] for r in rows]
    if sessions:
        out["session_id"] = np.asarray(session, dtype=np.int64)
        out["turn"] = np.asarray(turn, dtype=np.int64)
        out["delay_s"] = np.asarray(delay, dtype=np.float64)
    out = out.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    out.attrs["hash_block_size"] = block
    return out


def _history_ids(
    prev_ids: list[int], prev_prompt: int, prompt: int, block: int, fresh: count
) -> list[int]:
    """Block ids of a turn whose prompt starts with the previous turn's prompt: that
    prompt's full blocks keep their ids; every later block (the previous answer, the new
    text) is new content, so gets an id no other block has."""
    keep = prev_ids[: prev_prompt // block]
    return keep + [next(fresh) for _ in range(-(-prompt // block) - len(keep))]


def accumulate_sessions(frame: pd.DataFrame, block: int = HASH_BLOCK_SIZE) -> pd.DataFrame:
    """Rows whose ``session_id``/``turn`` columns mark turns of one conversation, each
    turn's ``prompt_tokens`` the new text only, turned into the prompts a client sends: the
    history then the new text, ``hash_ids`` chained likewise (:func:`load_mooncake` does
    this for a file; synthetic multi-turn traffic calls it too)."""
    rows = []
    for r in frame.itertuples(index=False):
        d = r._asdict()
        rows.append(
            {
                "line": len(rows) + 1,
                "prompt": int(d["prompt_tokens"]),
                "output": int(d["output_tokens"]),
                "timestamp": None if d["turn"] else float(d["arrival_s"]) * 1e3,
                "delay": None if not d["turn"] else float(d["delay_s"]) * 1e3,
                "session": None if d["session_id"] < 0 else int(d["session_id"]),
                **({"ids": list(d[HASH_IDS])} if HASH_IDS in d else {}),
            }
        )
    return _table(rows, HASH_IDS in frame.columns, block)
