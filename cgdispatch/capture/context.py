"""Forward context: the dispatcher's decision (runtime mode + graph key) for one model step.

The runner sets it around a step; graph wrappers and attention ops read it. It carries no
tensors. The current context is a module-level variable rather than a ``contextvars``
variable because entering and leaving it is on every step's critical path (a few hundred
nanoseconds here); like vLLM's, it is therefore per process, not per thread: do not run
two steps concurrently in threads of one process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.generation import GraphKey
from ..core.modes import CUDAGraphMode
from .graph_key import graph_key_types

__all__ = [
    "ForwardContext",
    "set_forward_context",
    "use_forward_context",
    "swap_forward_context",
    "get_forward_context",
]

_RUNTIME_MODES = frozenset({CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL})


@dataclass(frozen=True, slots=True)
class ForwardContext:
    """What one step runs as: a runtime mode and the (padded) batch descriptor.

    The descriptor is the generation's graph key: a V1 ``BatchDescriptor`` or a vLLM
    0.34 ``BatchExecutionDescriptor``; wrappers key their graphs by it as given.

    ``allow_capture=False`` makes a wrapper raise instead of capturing a key it has not
    seen (the runner switches capture off once every key is captured). ``metadata`` is
    free for attention backends; the wrappers never read it.
    """

    runtime_mode: CUDAGraphMode
    batch_descriptor: GraphKey | None = None
    allow_capture: bool = True
    metadata: Any = None


_current: ForwardContext | None = None


def swap_forward_context(context: ForwardContext | None) -> ForwardContext | None:
    """Make ``context`` current and return the one it replaces (the runner's hot path:
    ``previous = swap(ctx)`` ... ``finally: swap(previous)``, no object per step)."""
    global _current
    previous, _current = _current, context
    return previous


class use_forward_context:  # noqa: N801 - used like a function
    """Make a prebuilt :class:`ForwardContext` current; restore the previous one on exit.

    No validation and no allocation per step: the runner builds its contexts once and
    reuses them. Prefer :class:`set_forward_context` elsewhere.
    """

    __slots__ = ("context", "_previous")

    def __init__(self, context: ForwardContext) -> None:
        self.context = context
        self._previous: ForwardContext | None = None

    def __enter__(self) -> ForwardContext:
        self._previous = swap_forward_context(self.context)
        return self.context

    def __exit__(self, *exc: object) -> None:
        swap_forward_context(self._previous)


class set_forward_context(use_forward_context):  # noqa: N801 - used like a function
    """Context manager that makes a :class:`ForwardContext` current for one step.

    The previous context (or none) is restored on exit, also when the step raises, so
    contexts nest. ``runtime_mode`` must be a runtime mode (NONE, PIECEWISE or FULL); a
    config-level mode such as FULL_AND_PIECEWISE raises ``ValueError``.
    """

    __slots__ = ()

    def __init__(
        self,
        runtime_mode: CUDAGraphMode,
        batch_descriptor: GraphKey | None = None,
        *,
        allow_capture: bool = True,
        metadata: Any = None,
    ) -> None:
        if runtime_mode not in _RUNTIME_MODES:
            raise ValueError(
                f"runtime_mode={runtime_mode!r} is not a runtime mode: the forward context "
                "takes NONE, PIECEWISE or FULL (dispatch a batch to turn a config mode into one)"
            )
        if batch_descriptor is not None and type(batch_descriptor) not in graph_key_types():
            names = " or ".join(t.__name__ for t in graph_key_types())
            raise ValueError(
                f"batch_descriptor={batch_descriptor!r} is invalid: pass a cgdispatch {names}, "
                "as the dispatcher returns it, or None"
            )
        super().__init__(ForwardContext(runtime_mode, batch_descriptor, allow_capture, metadata))


def get_forward_context() -> ForwardContext | None:
    """The current forward context, or None outside any ``set_forward_context`` block."""
    return _current
