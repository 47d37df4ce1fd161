"""The "why" lines every generation's ``explain`` says alike (the explorer's and
``explain_dispatch``'s one-line reasons); each generation's ``explain`` adds its own."""

from __future__ import annotations

from .modes import CUDAGraphMode

__all__ = ["piecewise_line", "plain_eager_line"]


def piecewise_line(why: str) -> str:
    """A PIECEWISE answer; ``why``: the generation's reason it is not FULL ("" when none)."""
    return f"PIECEWISE graph, attention runs eagerly between pieces{why}"


def plain_eager_line(config_mode: CUDAGraphMode, num_tokens: int) -> str | None:
    """Why an eager answer needs no look at the graphs (mode NONE, an empty batch), else None."""
    if config_mode is CUDAGraphMode.NONE:
        return "cudagraph_mode is NONE: every step runs eagerly"
    if num_tokens == 0:
        return "empty batch: nothing to run"
    return None
