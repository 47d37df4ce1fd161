"""`PreparedStep`: what the runner builds once per dispatch answer and reuses every step.

Every generation's answer reaches the runner through its ``Generation.graphs.step_dispatch``
(the dispatcher's own answer object, its runtime mode and graph key) and becomes one.
Nothing here dispatches or runs a step (``runner.py`` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .context import ForwardContext

__all__ = ["PreparedStep"]


@dataclass(slots=True, eq=False)
class PreparedStep:
    """Everything a dispatch answer needs per step, built once per answer.

    Built in ``GraphRunner._prepare`` and reused so that the hot path allocates nothing
    (``benchmarks/bench_replay_overhead.py`` holds it under 2x a bare wrapper call).
    """

    answer: Any  # the dispatcher's answer, kept alive here so that its id() keys the cache
    num_tokens: int  # real tokens; the model runs on padded_tokens
    padded_tokens: int  # the key's num_tokens
    oversized: bool  # above the largest capture: eager on the caller's tensors
    context: ForwardContext
    row_views: tuple[torch.Tensor, ...] = ()  # ids, positions, slots buffers, rows [0, n)
    packed_view: torch.Tensor | None = None  # the [3, n] block of all three, for packed inputs
    model_inputs: tuple[torch.Tensor, ...] = ()  # the buffers' padded rows, what the model reads
    out_slice: torch.Tensor | None = None  # cached out[:n] of a graph's persistent output
