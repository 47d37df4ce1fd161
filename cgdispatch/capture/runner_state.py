"""What the capture helpers read of a :class:`~cgdispatch.capture.runner.GraphRunner`.

``assemble`` (build and release the step callable) and ``capture_keys`` (capture every key)
take the runner as this Protocol instead of importing the runner module, which imports them:
the helpers sit below the runner, with no import cycle.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["RunnerState"]


class RunnerState(Protocol):
    """The runner's parts the helpers use (see ``GraphRunner`` for each one's meaning)."""

    config: Any
    model: Any
    model_callable: Any
    backend: Any
    piecewise_backend: Any
    wrappers: Any
    dispatcher: Any
    cudagraph_mode: Any
    output_lifetime: Any
    compile_pieces: Any
    max_num_tokens: int
    debug: bool
    device: Any
    input_ids: Any
    positions: Any
    slots: Any
    capture_enabled: bool

    def capture_all(self, *args: Any, **kwargs: Any) -> Any: ...
