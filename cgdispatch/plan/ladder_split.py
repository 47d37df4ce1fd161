"""One graph budget split between several ladders (vLLM 0.34: decode and prefill sizes).

Each ladder is its own :class:`~cgdispatch.plan.problem.PlanProblem`; one DP run per ladder
gives its best plan for every size count (:func:`~cgdispatch.plan.dp.solve_each_count`),
and :func:`solve_split` tries every split of ``max_graphs`` between them: exact for the
count budget. Budgets summed over all ladders (capture time; graph memory when the cost
model prices each graph, :class:`~cgdispatch.plan.dp.Budgets`) are met as
:func:`~cgdispatch.plan.dp.solve_with_budgets` meets them for one ladder: each size's use
priced at ``lam``, ``lam`` bisected to the cheapest price whose plan fits (a Lagrangian
heuristic; tests/plan measures its gap to brute force).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .dp import Budgets, Solution, solve_each_count
from .problem import PlanProblem

__all__ = ["SplitLadder", "solve_split"]


@dataclass(frozen=True)
class SplitLadder:
    """One ladder's problem; ``may_be_empty``: a plan may give it no size at all (its
    steps then run eagerly), else it gets at least one."""

    problem: PlanProblem
    may_be_empty: bool = False


def _use(ladders: list[SplitLadder], plans: list[Solution], budgets: Budgets) -> float:
    return sum(
        float(budgets.price(lad.problem)[sol.indices].sum()) for lad, sol in zip(ladders, plans)
    )


def _fits(ladders: list[SplitLadder], plans: list[Solution], budgets: Budgets) -> bool:
    return budgets.fits([lad.problem for lad in ladders], [sol.indices for sol in plans])


def _pick(ladders: list[SplitLadder], k: int, lam: float, budgets: Budgets) -> list[Solution]:
    """The best plan per ladder, sizes adding up to at most ``k``, use priced at ``lam``;
    among equal totals the fewest sizes win."""
    options = []
    for lad in ladders:
        p = lad.problem
        option = list(enumerate(solve_each_count(p, k, lam * budgets.price(p)), start=1))
        if lad.may_be_empty:  # every step of this ladder eager: the tail from the first size
            option.insert(0, (0, Solution([], float(p.tail_cost[0] + p.eager[:, 0].sum()))))
        options.append(option)
    best: tuple[float, int, list[Solution]] | None = None
    for pair in itertools.product(*options):
        if sum(b for b, _ in pair) > k:
            continue
        plans = [sol for _, sol in pair]
        total = sum(sol.cost for sol in plans) + lam * _use(ladders, plans, budgets)
        key = (total, sum(len(sol.indices) for sol in plans))
        if best is None or key < best[:2]:
            best = (*key, plans)
    if best is None:
        raise ValueError(f"max_graphs={k} is too few: every ladder needs one size")
    return best[2]


def solve_split(
    ladders: list[SplitLadder],
    k: int,
    capture_budget_s: float | None = None,
    rounds: int = 40,
    *,
    budgets: Budgets | None = None,
) -> list[Solution]:
    """The best plan per ladder with at most ``k`` sizes in all, within the summed
    ``budgets`` (or ``capture_budget_s`` alone) when given (Lagrangian, see module doc)."""
    if budgets is None:
        budgets = Budgets(capture_s=capture_budget_s)
    free = _pick(ladders, k, 0.0, budgets)
    if not budgets or _fits(ladders, free, budgets):
        return free  # the budget does not bind: the unconstrained optimum, exact
    scale = max(float(np.abs(lad.problem.tail_cost).max(initial=0.0)) for lad in ladders)
    lo, hi = 0.0, max(scale, 1.0)
    best = _pick(ladders, k, hi, budgets)
    while not _fits(ladders, best, budgets):
        hi *= 4
        if hi > 1e15:
            # a ladder keeps its fixed top, or at least one size unless it may be empty
            keep = []
            for lad in ladders:
                price = budgets.price(lad.problem)
                if lad.problem.fixed_top:
                    keep.append([len(price) - 1])
                elif not lad.may_be_empty:
                    keep.append([int(np.argmin(price))])
                else:
                    keep.append([])
            raise budgets.infeasible(*budgets.used([lad.problem for lad in ladders], keep))
        best = _pick(ladders, k, hi, budgets)

    def cost(plans: list[Solution]) -> float:
        return sum(sol.cost for sol in plans)

    for _ in range(rounds):
        mid = (lo + hi) / 2
        trial = _pick(ladders, k, mid, budgets)
        if _fits(ladders, trial, budgets):
            hi = mid
            if cost(trial) < cost(best):  # keep the cheapest plan that fits seen so far
                best = trial
        else:
            lo = mid
    return best
