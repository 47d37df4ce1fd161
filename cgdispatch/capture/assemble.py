"""Build and tear down the callable a :class:`GraphRunner` steps through.

``assemble_step`` puts the wrappers where the runner's mode asks: PIECEWISE wrappers
around the pieces of one split ``torch.compile`` (outputs as vLLM: the last piece's are the
step's, weak unless the runner keeps them; the others are read by the next piece, so they
stay until the step drops them), and a FULL wrapper around the whole model.
``release_step`` frees what it built: graphs, pool, compiled pieces and dynamo's cache
entry. Neither runs a step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.modes import CUDAGraphMode
from .pool import OutputLifetime
from .runner_state import RunnerState
from .wrapper import CUDAGraphWrapper

__all__ = ["assemble_step", "release_step"]


def assemble_step(runner: RunnerState) -> Callable[..., Any]:
    """The model, compiled piecewise and/or FULL-wrapped; wrappers go to ``runner.wrappers``."""
    inner: Callable[..., Any] = runner.model
    if runner.cudagraph_mode.requires_piecewise_compilation():
        inner = _compile_piecewise(runner, inner)
    if runner.cudagraph_mode.has_full_cudagraphs():
        full = _wrapper(runner, inner, CUDAGraphMode.FULL, "full", runner.output_lifetime)
        runner.wrappers.append(full)
        return full
    return inner


def _wrapper(
    runner: RunnerState,
    fn: Callable[..., Any],
    mode: CUDAGraphMode,
    name: str,
    lifetime: OutputLifetime,
) -> CUDAGraphWrapper:
    return CUDAGraphWrapper(
        fn,
        mode,
        runner.backend,
        num_warmups=runner.config.cudagraph_num_of_warmups,
        debug=runner.debug,
        name=name,
        output_lifetime=lifetime,
    )


def _compile_piecewise(runner: RunnerState, model: Callable[..., Any]) -> Callable[..., Any]:
    """One ``torch.compile`` split at ``config.effective_splitting_ops``, pieces wrapped."""
    from .split_compile import compile_split

    def wrap(fn: Callable[..., Any], index: int, last: bool) -> CUDAGraphWrapper:
        lifetime = runner.output_lifetime if last else OutputLifetime.CALLER
        wrapper = _wrapper(runner, fn, CUDAGraphMode.PIECEWISE, f"piece_{index}", lifetime)
        runner.wrappers.append(wrapper)
        return wrapper

    step, runner.piecewise_backend = compile_split(
        model,
        runner.config.effective_splitting_ops,
        runner.max_num_tokens,
        wrap,
        compile_pieces=runner.compile_pieces,
    )
    return step


def release_step(runner: RunnerState) -> None:
    """Free the runner's graphs, pool and compiled pieces; its steps raise afterwards."""
    from .split_compile import forget_compiled

    for wrapper in runner.wrappers:
        wrapper.reset_graphs()
    runner.wrappers.clear()
    runner.backend.release()
    if runner.piecewise_backend is not None:
        runner.piecewise_backend.release()
        forget_compiled(getattr(runner.model_callable, "runnable", runner.model_callable))
    runner.model_callable = _released_step


def _released_step(*inputs: Any) -> Any:
    raise RuntimeError(
        "this GraphRunner was released (release_graphs() or the end of its with-block): "
        "build a new runner to run more steps"
    )
