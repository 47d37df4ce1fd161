"""One planner call for either generation: the config's ``vllm_version`` picks the planner.

Notebooks and dashboards plan for whatever generation the user chose; this module routes
to :func:`~cgdispatch.plan.planner.plan_capture_sizes` (V1, one token ladder) or
:func:`~cgdispatch.plan.planner_v2.plan_gen2_capture_sizes` (vLLM 0.34, two lists) and
names the largest token size of either kind of ladder. It plans nothing itself.
"""

from __future__ import annotations

from ..core.config import GraphConfig
from .costs import CostModel
from .gen2_ladder import Gen2Ladder
from .histogram import Steps
from .ladder_compare import Ladder
from .planner import plan_capture_sizes
from .planner_v2 import plan_gen2_capture_sizes

__all__ = ["plan_ladder", "largest_token_size"]


def plan_ladder(
    steps: Steps,
    max_graphs: int,
    *,
    config: GraphConfig,
    objective: str = "padding",
    cost_model: CostModel | None = None,
    max_size: int | None = None,
    memory_budget_bytes: float | None = None,
    capture_budget_s: float | None = None,
) -> Ladder:
    """The planned ladder for ``config``'s generation: a token list for V1
    (``vllm_version`` "0.33" or None), a :class:`Gen2Ladder` for "0.34". ``max_size``:
    the largest (prefill) token size, as each planner reads it."""
    if not isinstance(config, GraphConfig):
        raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig")
    common = {
        "objective": objective,
        "cost_model": cost_model,
        "config": config,
        "memory_budget_bytes": memory_budget_bytes,
        "capture_budget_s": capture_budget_s,
    }
    if config.vllm_version == "0.34":
        return plan_gen2_capture_sizes(steps, max_graphs, max_prefill_tokens=max_size, **common)
    return plan_capture_sizes(steps, max_graphs, max_size=max_size, **common)


def largest_token_size(ladder: Ladder) -> int:
    """The largest token size a ladder captures for non-decode steps: a token list's
    largest size, a :class:`Gen2Ladder`'s largest prefill size (0 when it has none)."""
    if isinstance(ladder, Gen2Ladder):
        return max(ladder.prefill_token_sizes, default=0)
    if not len(ladder):
        raise ValueError("the ladder is empty: give at least one capture size")
    return int(max(ladder))
