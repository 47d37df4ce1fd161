"""Integer arithmetic shared by every layer (pure Python; numpy arrays work too)."""

from __future__ import annotations

from typing import Any

__all__ = ["cdiv", "round_up"]


def cdiv(a: Any, b: Any) -> Any:
    """``ceil(a / b)`` for integers (vLLM's ``cdiv``); elementwise on numpy integer arrays."""
    return -(-a // b)


def round_up(a: Any, multiple: Any) -> Any:
    """The smallest multiple of ``multiple`` that is >= ``a`` (vLLM's ``round_up``)."""
    return cdiv(a, multiple) * multiple
