"""One ``torch.compile`` of a model with the splitting backend, private to one runner.

``compile_split`` returns the callable a piecewise runner steps through. It owns the two
details that keep runners independent: a code object per runner (so dynamo's cache entry,
and the graphs and pool it references, go with the runner), and one grad mode for every
call (dynamo guards on it; a recompile would split again into pieces without graphs).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .piecewise import PiecewiseBackend, mark_tokens_dynamic

__all__ = ["compile_split", "forget_compiled"]

_STEP_IDS = itertools.count()


def compile_split(
    model: Callable[..., Any],
    splitting_ops: Sequence[str],
    max_num_tokens: int,
    wrap_piece: Callable[[Callable[..., Any], int, bool], Callable[..., Any]],
    *,
    compile_pieces: bool = False,
) -> tuple[Callable[..., Any], PiecewiseBackend]:
    """``(step, backend)``: ``step(*inputs)`` runs ``model`` split at ``splitting_ops``.

    The token dimension is marked dynamic on the first call, so one compile serves every
    size; ``backend`` reports the split and holds the pieces.
    """
    backend = PiecewiseBackend(
        splitting_ops, max_num_tokens, wrap_piece, compile_pieces=compile_pieces
    )
    private = _private_step(model)
    compiled = torch.compile(private, backend=backend, fullgraph=True)
    first = [True]

    def run_compiled(*inputs: torch.Tensor) -> Any:
        if first[0]:  # dynamo reads the marks when it compiles, on the first call only
            mark_tokens_dynamic(*inputs)
            first[0] = False
        with torch.no_grad():
            return compiled(*inputs)

    run_compiled.step_code = private.__code__  # type: ignore[attr-defined]
    return run_compiled, backend


def forget_compiled(step: Callable[..., Any]) -> None:
    """Drop dynamo's cache entry for a ``compile_split`` step now, not at collection."""
    code = getattr(step, "step_code", None)
    reset_code = getattr(torch._dynamo, "reset_code", None)  # absent in older torch
    if code is not None and reset_code is not None:
        reset_code(code)


def _private_step(model: Callable[..., Any]) -> Callable[..., Any]:
    """``model(*inputs)`` behind a code object of its own, for one runner's torch.compile.

    Dynamo caches compiled frames per code object, across ``torch.compile`` calls: compiling
    ``model`` itself puts every runner's entry on the one ``forward`` of the model class, so
    the ninth piecewise runner in a process fails with the recompile limit (fullgraph) and
    each cache entry keeps an old runner's wrappers, graphs and CUDA pool alive. A private
    code object takes its cache entry with it when the runner goes.
    """

    def step(*inputs: Any) -> Any:
        return model(*inputs)

    name = f"cgdispatch_step_{next(_STEP_IDS)}"
    names = {"co_name": name, "co_qualname": name} if sys.version_info >= (3, 11) else {}
    step.__code__ = step.__code__.replace(**(names or {"co_name": name}))
    return step
