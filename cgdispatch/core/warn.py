"""Warnings that point at the caller's line, not at cgdispatch's internals.

``warnings.warn(stacklevel=N)`` needs the exact depth, which changes with every refactor
(a dataclass ``__post_init__`` called from ``__init__`` called from ``replace``...).
:func:`warn_user` counts it: the first frame outside this package is the line that gets
the warning, so ``GraphConfig(vllm_version=<generation 2>, cudagraph_capture_sizes=[...])`` warns at
the user's own line.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

__all__ = ["warn_user", "caller_stacklevel"]

_PACKAGE = str(Path(__file__).resolve().parents[1])


def caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside the package, for a ``warnings.warn``
    called by the function that calls this one."""
    frame = sys._getframe(2)  # the function that asked, as warnings.warn's stacklevel=1
    level = 1
    while frame is not None:
        name = frame.f_code.co_filename
        # "<string>": the __init__ dataclasses generate for our classes
        inside = name.startswith(_PACKAGE) or name == "<string>"
        if not inside:
            return level
        frame = frame.f_back
        level += 1
    return level


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` at the first line outside cgdispatch."""
    warnings.warn(message, category, stacklevel=caller_stacklevel() + 1)
