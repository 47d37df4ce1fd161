"""`PreparedStep`: what the runner builds once per dispatch answer and reuses every step.

Every generation's answer reaches the runner as a :class:`StepDispatch` (the registry's
adapter of the dispatcher's own answer) and becomes one; :func:`mode_and_key` reads it.
Nothing here dispatches or runs a step (``runner.py`` does).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.generation import GraphKey, StepDispatch
from ..core.modes import CUDAGraphMode
from .context import ForwardContext

__all__ = ["Answer", "PreparedStep", "mode_and_key"]

# a dispatch answer: the runtime mode and the generation's own descriptor
Answer = StepDispatch


@dataclass(slots=True, eq=False)
class PreparedStep:
    """Everything a dispatch answer needs per step, built once per answer.

    Built in ``GraphRunner._prepare`` and reused so that the hot path allocates nothing
    (``benchmarks/bench_replay_overhead.py`` holds it under 2x a bare wrapper call).
    """

    answer: Answer  # its key kept alive here, so that the key's id() keys the cache
    num_tokens: int  # real tokens; the model runs on padded_tokens
    padded_tokens: int  # the key's num_tokens
    oversized: bool  # above the largest capture: eager on the caller's tensors
    context: ForwardContext
    row_views: tuple[torch.Tensor, ...] = ()  # ids, positions, slots buffers, rows [0, n)
    packed_view: torch.Tensor | None = None  # the [3, n] block of all three, for packed inputs
    model_inputs: tuple[torch.Tensor, ...] = ()  # the buffers' padded rows, what the model reads
    out_slice: torch.Tensor | None = None  # cached out[:n] of a graph's persistent output


def mode_and_key(answer: Answer) -> tuple[CUDAGraphMode, GraphKey]:
    """(runtime mode, graph key) of a dispatch answer."""
    return answer.runtime_mode, answer.key
