"""Numbers as a person writes them: one home for every figure a verdict, table or label shows.

Durations go to the unit that keeps them short (``850 ms``, ``1.6 s``, ``6.7 h``), bytes to
binary units (``281 MiB``, ``1.2 GiB``), counts get thousands separators (``895,856``); none
is ever in scientific notation. Each keeps about three significant digits below 100 of its
unit and whole units above (``1,610 ms`` is written ``1.6 s``; ``410 min`` is ``6.8 h``).
Figures keep their units in code (``_ms``, ``_bytes``); only what a person reads goes
through here. It formats; it rounds nothing that is computed on.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "duration",
    "duration_s",
    "nbytes",
    "count",
    "number",
    "percent",
    "band",
    "format_in",
    "readable_table",
]

# (unit, size in ms), smallest first: a duration takes the largest unit it is >= 1 of
_TIME_UNITS = (("ms", 1.0), ("s", 1e3), ("min", 60e3), ("h", 3600e3))
_BYTE_UNITS = (("B", 1), ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40))


def _plain(value: float, *, sign: bool = False) -> str:
    """``value`` with three significant digits in fixed notation, thousands separated:
    2 decimals below 10, 1 below 100, none from 100 (``1.23``, ``12.3``, ``123``, ``1,234``);
    below 1, three significant digits (``0.0123``)."""
    plus = "+" if sign else ""
    size = float(f"{abs(value):.3g}")  # rounded first: 9.996 is 10.0, not 10.00
    if size == 0:
        return f"{plus}0"
    if size < 1:
        decimals = min(12, 2 - math.floor(math.log10(size)))
    else:
        decimals = 2 if size < 10 else 1 if size < 100 else 0
    return f"{value:{plus},.{decimals}f}"


def _scaled(value: float, units: tuple[tuple[str, float], ...], *, sign: bool) -> str:
    size = abs(value)
    name, scale = units[0]
    for unit, factor in units:
        if size >= factor:
            name, scale = unit, factor
    text = _plain(value / scale, sign=sign)
    index = [u for u, _ in units].index(name)
    # 999.7 ms is shown as 1,000 ms: move up a unit when the rounded figure reaches the next
    if index + 1 < len(units):
        next_name, next_scale = units[index + 1]
        if abs(float(text.replace(",", ""))) * scale >= next_scale:
            text, name = _plain(value / next_scale, sign=sign), next_name
    return f"{text} {name}"


def duration(ms: float, *, sign: bool = False) -> str:
    """``ms`` milliseconds in ms, s, min or h (``0.85 ms``, ``1.61 s``, ``6.69 h``); "n/a"
    where it is undefined (NaN, infinite). ``sign``: a leading ``+`` on gains."""
    if not math.isfinite(ms):
        return "n/a"
    return _scaled(float(ms), _TIME_UNITS, sign=sign)


def duration_s(seconds: float, *, sign: bool = False) -> str:
    """:func:`duration` of ``seconds``."""
    return duration(seconds * 1e3, sign=sign) if math.isfinite(seconds) else "n/a"


def nbytes(value: float, *, sign: bool = False) -> str:
    """``value`` bytes in B, KiB, MiB, GiB or TiB (``281 MiB``, ``1.17 GiB``)."""
    if not math.isfinite(value):
        return "n/a"
    return _scaled(float(value), _BYTE_UNITS, sign=sign)


def count(value: float, *, sign: bool = False) -> str:
    """A count, rounded to a whole number, thousands separated (``895,856``)."""
    if not math.isfinite(value):
        return "n/a"
    return f"{round(value):{'+' if sign else ''},d}"


def number(value: float, *, sign: bool = False) -> str:
    """Any other figure: about three significant digits, fixed notation (``0.0123``,
    ``1.23``, ``12,345``)."""
    return _plain(float(value), sign=sign) if math.isfinite(value) else "n/a"


def percent(fraction: float, *, sign: bool = True) -> str:
    """``fraction`` (0.34) as a percentage with two decimals (``+34.00%``)."""
    if not math.isfinite(fraction):
        return "n/a"
    return f"{100 * fraction:{'+' if sign else ''}.2f}%"


def band(value: float, unit: str) -> str:
    """A half-width ``±value`` in ``unit``: ``"ms"`` (a duration), ``"s"``, ``"bytes"``,
    ``"tokens"``, ``"tok/s"`` or ``""`` (a plain number)."""
    return "\u00b1" + format_in(abs(value), unit)


def format_in(value: float, unit: str, *, sign: bool = False) -> str:
    """``value`` of a figure kept in ``unit`` (see :func:`band`), for a person."""
    if unit == "ms":
        return duration(value, sign=sign)
    if unit == "s":
        return duration_s(value, sign=sign)
    if unit == "bytes":
        return nbytes(value, sign=sign)
    if unit in ("tokens", "tok/s"):
        return f"{count(value, sign=sign)} {unit}"
    if unit == "":
        return number(value, sign=sign)
    raise ValueError(
        f"unit={unit!r} is invalid: give 'ms', 's', 'bytes', 'tokens', 'tok/s' or '' "
        "(a plain number)"
    )


def readable_table(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each number as a person reads it, by its column's unit suffix:
    ``*_ms`` durations, ``*_s`` seconds (not rates: ``*_req_s``, ``*_tok_s``), ``*_bytes``
    bytes, ``*_tokens`` and integer columns counts, other floats :func:`number`. For display
    only: the cells become text (the numbers stay in ``frame``)."""
    import pandas as pd

    out = frame.copy()
    for column in out.columns:
        values = out[column]
        if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            continue
        name = str(column)
        if name.endswith("_ms"):
            fmt = duration
        elif name.endswith("_s") and not name.endswith(("_req_s", "_tok_s")):
            fmt = duration_s
        elif name.endswith("_bytes"):
            fmt = nbytes
        elif name.endswith(("_tokens", "_tok_s", "_req_s")) or pd.api.types.is_integer_dtype(
            values
        ):
            fmt = count if not name.endswith("_req_s") else number
        else:
            fmt = number
        out[column] = [fmt(float(v)) if pd.notna(v) else "n/a" for v in values]
    return out
