"""Strict JSON for everything cgdispatch prints or writes as JSON.

Python's ``json`` writes ``NaN`` and ``Infinity`` by default, which no JSON parser outside
Python accepts. :func:`strict_json` writes a non-finite number as ``null`` and, for an
object at the top, lists why under ``"null_reasons"`` (``{"held_out.planned.p99_tpot_ms":
"..."}``), so a reader learns that the value is undefined, not lost.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["strict_json", "json_ready", "NULL_REASONS_KEY"]

NULL_REASONS_KEY = "null_reasons"

# why a figure can be undefined, by its key; anything else gets the generic reason
_REASONS = {
    "p99_tpot_ms": "undefined: no request has a second output token, so there is no time "
    "per output token to take a percentile of",
    "tpot_p99_ms": "undefined: no request has a second output token, so there is no time "
    "per output token to take a percentile of",
    "padded_token_ratio": "undefined: no step ran in a graph",
}


def _reason(key: str, value: float) -> str:
    if key in _REASONS:
        return _REASONS[key]
    what = "NaN" if math.isnan(value) else ("+inf" if value > 0 else "-inf")
    return f"undefined on this data ({what} is not a JSON number)"


def json_ready(value: Any, path: str = "") -> tuple[Any, dict[str, str]]:
    """``value`` with numpy scalars/arrays as Python numbers/lists and every non-finite
    float as None, and the reasons for those Nones by dotted path."""
    reasons: dict[str, str] = {}

    def walk(v: Any, where: str) -> Any:
        if isinstance(v, Mapping):
            return {str(k): walk(x, f"{where}.{k}" if where else str(k)) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x, f"{where}[{i}]") for i, x in enumerate(v)]
        if type(v).__module__ == "numpy":  # arrays and scalars, without importing numpy here
            v = v.tolist()
            if isinstance(v, list):
                return walk(v, where)
        if isinstance(v, bool):
            return v
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            f = v
            if math.isfinite(f):
                return f
            key = where.rsplit(".", 1)[-1].split("[", 1)[0]
            reasons[where] = _reason(key, f)
            return None
        if v is None or isinstance(v, str):
            return v
        try:  # pandas' NA / NaT and other missing markers
            import pandas as pd

            if pd.isna(v):
                reasons[where] = "missing"
                return None
        except (TypeError, ValueError):
            pass
        return str(v)

    return walk(value, path), reasons


def strict_json(value: Any, **kwargs: Any) -> str:
    """``value`` as JSON that every parser reads: non-finite numbers become ``null`` and a
    top-level object gains ``"null_reasons"`` naming each one and why."""
    clean, reasons = json_ready(value)
    if reasons and isinstance(clean, dict):
        clean[NULL_REASONS_KEY] = reasons
    return json.dumps(clean, allow_nan=False, **kwargs)
