"""One graph budget split between several ladders (vLLM 0.34: decode and prefill sizes).

Each ladder is its own :class:`~cgdispatch.plan.problem.PlanProblem`; one DP run per ladder
gives its best plan for every size count (:func:`~cgdispatch.plan.dp.solve_each_count`),
and :func:`solve_split` tries every split of ``max_graphs`` between them: exact for the
count budget. A capture-time budget over all ladders is met as
:func:`~cgdispatch.plan.dp.solve_with_capture_budget` meets it for one ladder: each size's
capture time priced at ``lam``, ``lam`` bisected to the cheapest price whose plan fits (a
Lagrangian heuristic; tests/plan measures its gap to brute force).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .dp import Solution, solve_each_count
from .problem import PlanProblem

__all__ = ["Ladder", "solve_split"]


@dataclass(frozen=True)
class Ladder:
    """One ladder's problem; ``may_be_empty``: a plan may give it no size at all (its
    steps then run eagerly), else it gets at least one."""

    problem: PlanProblem
    may_be_empty: bool = False


def _capture(ladders: list[Ladder], plans: list[Solution]) -> float:
    return sum(float(lad.problem.capture_s[sol.indices].sum()) for lad, sol in zip(ladders, plans))


def _pick(ladders: list[Ladder], k: int, lam: float) -> list[Solution]:
    """The best plan per ladder, sizes adding up to at most ``k``, capture priced at ``lam``;
    among equal totals the fewest sizes win."""
    options = []
    for lad in ladders:
        p = lad.problem
        option = list(enumerate(solve_each_count(p, k, lam * p.capture_s), start=1))
        if lad.may_be_empty:  # every step of this ladder eager: the tail from the first size
            option.insert(0, (0, Solution([], float(p.tail_cost[0] + p.eager[:, 0].sum()))))
        options.append(option)
    best: tuple[float, int, list[Solution]] | None = None
    for pair in itertools.product(*options):
        if sum(b for b, _ in pair) > k:
            continue
        plans = [sol for _, sol in pair]
        total = sum(sol.cost for sol in plans) + lam * _capture(ladders, plans)
        key = (total, sum(len(sol.indices) for sol in plans))
        if best is None or key < best[:2]:
            best = (*key, plans)
    if best is None:
        raise ValueError(f"max_graphs={k} is too few: every ladder needs one size")
    return best[2]


def solve_split(
    ladders: list[Ladder], k: int, capture_budget_s: float | None = None, rounds: int = 40
) -> list[Solution]:
    """The best plan per ladder with at most ``k`` sizes in all, and summed ``capture_s``
    within ``capture_budget_s`` when given (Lagrangian, see module doc)."""
    free = _pick(ladders, k, 0.0)
    if capture_budget_s is None or _capture(ladders, free) <= capture_budget_s:
        return free  # the budget does not bind: the unconstrained optimum, exact
    scale = max(float(np.abs(lad.problem.tail_cost).max(initial=0.0)) for lad in ladders)
    lo, hi = 0.0, max(scale, 1.0)
    best = _pick(ladders, k, hi)
    while _capture(ladders, best) > capture_budget_s:
        hi *= 4
        if hi > 1e15:
            # a ladder keeps its fixed top, or at least one size unless it may be empty
            floor = 0.0
            for lad in ladders:
                capture = lad.problem.capture_s
                if lad.problem.fixed_top:
                    floor += float(capture[-1])
                elif not lad.may_be_empty:
                    floor += float(capture.min())
            raise ValueError(
                f"capture_budget_s={capture_budget_s} is below the capture time of any plan "
                f"(the sizes every plan keeps take {floor:.3g} s): raise the budget"
            )
        best = _pick(ladders, k, hi)

    def cost(plans: list[Solution]) -> float:
        return sum(sol.cost for sol in plans)

    for _ in range(rounds):
        mid = (lo + hi) / 2
        trial = _pick(ladders, k, mid)
        if _capture(ladders, trial) <= capture_budget_s:
            hi = mid
            if cost(trial) < cost(best):  # keep the cheapest plan that fits seen so far
                best = trial
        else:
            lo = mid
    return best
