"""Plan: cost models, the capture-size planner, the what-if engine, ladder comparison.

Importing this package registers the planner of each built-in ladder shape with core
(registration goes downward: core names no planner). The planners load on first use.
"""

from __future__ import annotations

from typing import Any

from ..core.ladder_shape import SplitLadders, TokenLadder, register_planner


def _plan_token_ladder(*args: Any, **kwargs: Any) -> Any:
    """:func:`cgdispatch.plan.planner.plan_capture_sizes`: one token list."""
    from .planner import plan_capture_sizes

    return plan_capture_sizes(*args, **kwargs)


def _plan_split_ladders(*args: Any, **kwargs: Any) -> Any:
    """:func:`cgdispatch.plan.planner_v2.plan_two_ladders`: prefill and decode ladders."""
    from .planner_v2 import plan_two_ladders

    return plan_two_ladders(*args, **kwargs)


register_planner(TokenLadder, _plan_token_ladder)
register_planner(SplitLadders, _plan_split_ladders)
