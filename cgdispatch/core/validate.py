"""Checks of user values shared by the modules (pure Python: no torch, no pandas)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "check_int",
    "check_bool",
    "check_device",
    "MAX_STEP_TOKENS",
    "MAX_REQUEST_TOKENS",
    "MAX_STEPS",
]

# Upper bounds on counts a user types, so that a slip (10**12) is refused at once instead of
# looping for days or asking for terabytes. Each is far above any real deployment.
MAX_STEP_TOKENS = 2**31 - 1  # tokens in one step: GPU kernels index a step's tokens with int32
MAX_REQUEST_TOKENS = 100_000_000  # prompt or output of one request: 10x the longest context
# a released model accepts (10M tokens)
MAX_STEPS = 10_000_000  # steps one command simulates or dispatches: a day of a busy engine
# (8.6M steps at 100 steps/s), about 700 MB as a step trace


def check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """``value`` if it is an int in [``minimum``, ``maximum``] (bool is not), else ValueError
    naming the value, the rule and the bound."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} is invalid: it must be an integer >= {minimum}")
    if maximum is not None and value > maximum:
        raise ValueError(
            f"{name}={value!r} is invalid: it must be at most {maximum:_} "
            "(a sane upper bound; see cgdispatch.core.validate)"
        )
    return value


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is a bool (numpy's too), else ValueError: ``"no"`` is not False."""
    if type(value).__name__ not in ("bool", "bool_"):
        raise ValueError(f"{name}={value!r} is invalid: it must be True or False")
    return bool(value)


def check_device(name: str, value: Any) -> str:
    """``cpu``, ``cuda`` or ``cuda:N``, else ValueError: the devices cgdispatch runs on."""
    import re

    if not isinstance(value, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", value):
        raise ValueError(f"{name}={value!r} is invalid: use 'cpu' or 'cuda' ('cuda:N' for one GPU)")
    return value
