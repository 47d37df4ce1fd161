"""Checks of user values shared by the modules (pure Python: no torch, no pandas)."""

from __future__ import annotations

from typing import Any

__all__ = ["check_int"]


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` if it is an int >= ``minimum`` (bool is not), else ValueError naming both."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} is invalid: it must be an integer >= {minimum}")
    return value
