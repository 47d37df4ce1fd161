"""The capture-size DP: the best <= k candidates of a :class:`~cgdispatch.plan.problem.PlanProblem`.

Choosing sizes cuts the sorted candidates into segments, each served by its largest size,
so the problem is a k-segment partition: ``dp[l][i] = min_j dp[l-1][j] + seg(j, i)`` with
``seg(j, i) = sum_r (P_r[i] - P_r[j]) * W_r[i] + extra[i]`` (``P_r`` prefix sums of step
counts and eager costs, ``W_r`` the per-step cost at size i). The plan's cost is then
``dp[l][i] + tail[i]`` (steps above the largest size run eagerly), minimised over ``l <= k``
and, unless the top is fixed, over the largest size ``i`` too. With every ``W_r``
non-decreasing the costs are Monge, the leftmost optimal splits are monotone and each row is
solved by divide and conquer, vectorised level by level (O(k m log m)); otherwise every split
is tried (O(k m^2), chunked). Both are exact; the budgets (:func:`solve_with_budgets`:
summed capture time, and summed graph memory when the cost model prices each graph) are a
Lagrangian heuristic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .problem import PlanProblem

__all__ = [
    "Budgets",
    "Solution",
    "solve",
    "solve_each_count",
    "solve_with_budgets",
    "solve_with_capture_budget",
]

Arr = np.ndarray


@dataclass(frozen=True)
class _Tables:
    """1-based prefix sums ``P [R, m+1]`` and weights ``W [R, m+1]`` of the segment cost."""

    P: Arr
    W: Arr
    extra: Arr  # [m+1] cost of choosing size i (Lagrangian capture term)

    def seg(self, prev: Arr, i: Arr, j: Arr) -> Arr:
        """DP value of closing a segment at i after a split at j (vectorised over i, j)."""
        out = prev[j] + self.extra[i]
        for P, W in zip(self.P, self.W):
            out = out + (P[i] - P[j]) * W[i]
        return out


@dataclass(frozen=True)
class Solution:
    """Chosen candidate indices (ascending) and the plan's objective (without the extra);
    under a capture budget also the Lagrangian lower bound on the budgeted optimum."""

    indices: list[int]
    cost: float
    lower_bound: float | None = None


def _tables(problem: PlanProblem, extra: Arr) -> _Tables:
    rows_p = np.concatenate([problem.counts, problem.eager])
    rows_w = np.concatenate([problem.graph_cost, problem.eager_flag])
    zero = np.zeros((len(rows_p), 1))
    P = np.concatenate([zero, np.cumsum(rows_p, axis=1)], axis=1)
    W = np.concatenate([zero, rows_w], axis=1)
    return _Tables(P, W, np.concatenate([[0.0], extra]))


def solve(problem: PlanProblem, k: int, extra: Arr | None = None) -> Solution:
    """The best plan of at most ``k`` sizes (fewest sizes among equal costs)."""
    return solve_each_count(problem, k, extra)[-1]


def solve_each_count(problem: PlanProblem, k: int, extra: Arr | None = None) -> list[Solution]:
    """For each budget ``b = 1..min(k, m)`` the best plan of at most ``b`` sizes (fewest
    sizes among equal costs), from one run of the DP: the DP's layer ``l`` already is the
    best plan of exactly ``l`` sizes. The generation-2 planner splits one graph budget
    between two ladders with these."""
    m = len(problem.sizes)
    extra = np.zeros(m) if extra is None else extra
    tables = _tables(problem, extra)
    row_solver = _row_monotone if problem.monge else _row_full
    tail = np.concatenate([[np.inf], problem.tail_cost])  # 1-based; no size at all: inf
    if problem.fixed_top:
        tail[:m] = np.inf
    prev = np.full(m + 1, np.inf)
    prev[0] = 0.0
    splits, best, ends = [], [], []
    for layer in range(1, min(k, m) + 1):
        cur, arg = row_solver(prev, tables, layer, m)
        total = cur + tail
        end = int(np.argmin(total))
        splits.append(arg)
        best.append(total[end])
        ends.append(end)
        prev = cur
    out = []
    for budget in range(1, len(best) + 1):
        layers = int(np.argmin(best[:budget])) + 1  # fewest sizes among the best
        chosen, i = [], ends[layers - 1]
        for layer in range(layers, 0, -1):
            chosen.append(i - 1)
            i = int(splits[layer - 1][i])
        indices = sorted(chosen)
        out.append(Solution(indices, float(best[layers - 1] - extra[indices].sum())))
    return out


@dataclass(frozen=True)
class Budgets:
    """Summed budgets over the chosen sizes: ``capture_s`` (seconds, of the problems'
    ``capture_s``) and ``memory_bytes`` (bytes of their ``memory_bytes``: the part of an
    additive graph-memory model above its fixed pool). None: no such budget."""

    capture_s: float | None = None
    memory_bytes: float | None = None

    def __bool__(self) -> bool:
        return self.capture_s is not None or self.memory_bytes is not None

    def price(self, problem: PlanProblem) -> Arr:
        """What a size uses, one number per candidate: capture seconds, plus memory scaled
        so that a full memory budget weighs as much as a full capture budget."""
        out = np.zeros(len(problem.sizes))
        if self.capture_s is not None:
            out = out + problem.capture_s
        if self.memory_bytes is not None:
            scale = (self.capture_s or 1.0) / max(self.memory_bytes, 1e-300)
            out = out + problem.memory_bytes * scale
        return out

    def price_limit(self) -> float:
        """The budget in :meth:`price`'s units (both budgets: the sum of the two)."""
        return (self.capture_s or 0.0) + (
            (self.capture_s or 1.0) if self.memory_bytes is not None else 0.0
        )

    def used(self, problems: list[PlanProblem], plans: list[list[int]]) -> tuple[float, float]:
        capture = sum(float(p.capture_s[i].sum()) for p, i in zip(problems, plans))
        memory = sum(float(p.memory_bytes[i].sum()) for p, i in zip(problems, plans))
        return capture, memory

    def fits(self, problems: list[PlanProblem], plans: list[list[int]]) -> bool:
        capture, memory = self.used(problems, plans)
        return (self.capture_s is None or capture <= self.capture_s) and (
            self.memory_bytes is None or memory <= self.memory_bytes
        )

    def infeasible(self, floor_capture: float, floor_memory: float) -> ValueError:
        """The error when even the sizes every plan keeps break a budget."""
        if self.capture_s is not None and floor_capture > self.capture_s:
            return ValueError(
                f"capture_budget_s={self.capture_s} is below the capture time of any plan "
                f"(the sizes every plan keeps take {floor_capture:.3g} s): raise the budget"
            )
        return ValueError(
            f"the graph-memory budget leaves {self.memory_bytes:.0f} bytes above the fixed "
            f"pool, below what any plan's graphs add ({floor_memory:.0f} bytes): raise "
            "memory_budget_bytes or lower the limits"
        )


def solve_with_budgets(
    problem: PlanProblem, k: int, budgets: Budgets, rounds: int = 40
) -> Solution:
    """The best plan whose summed use fits ``budgets``, by Lagrangian relaxation: price
    each size's use (:meth:`Budgets.price`) at ``lam`` (cost units per unit) and bisect
    ``lam`` to the cheapest price whose plan fits. A heuristic: a plan between two prices
    can be missed (the tests measure the gap against brute force)."""
    use = budgets.price(problem)
    limit = budgets.price_limit()

    def priced(lam: float) -> tuple[Solution, float]:
        """The relaxed optimum at price ``lam`` and its bound: weak duality makes
        ``cost + lam * (use - limit)`` <= every budgeted plan's cost (one budget)."""
        sol = solve(problem, k, lam * use)
        return sol, sol.cost + lam * (float(use[sol.indices].sum()) - limit)

    def fits(sol: Solution) -> bool:
        return budgets.fits([problem], [sol.indices])

    free, bound = priced(0.0)
    if fits(free):  # the budget does not bind: the unconstrained optimum, exact
        return Solution(free.indices, free.cost, free.cost)
    lo, hi = 0.0, max(float(np.abs(problem.tail_cost).max(initial=0.0)), 1.0)
    best, hi_bound = priced(hi)
    while not fits(best):
        hi *= 4
        if hi > 1e15:
            keep = [len(problem.sizes) - 1] if problem.fixed_top else [int(np.argmin(use))]
            raise budgets.infeasible(*budgets.used([problem], [keep]))
        best, hi_bound = priced(hi)
    bound = max(bound, hi_bound)
    for _ in range(rounds):
        mid = (lo + hi) / 2
        trial, trial_bound = priced(mid)
        bound = max(bound, trial_bound)
        if fits(trial):
            hi, best = mid, trial
        else:
            lo = mid
    if budgets.capture_s is not None and budgets.memory_bytes is not None:
        bound = None  # weak duality bounds one budget at a time
    return Solution(best.indices, best.cost, bound)


def solve_with_capture_budget(
    problem: PlanProblem, k: int, capture_budget_s: float, rounds: int = 40
) -> Solution:
    """The best plan whose summed ``capture_s`` fits the budget (:func:`solve_with_budgets`
    with a capture budget alone)."""
    return solve_with_budgets(problem, k, Budgets(capture_s=capture_budget_s), rounds)


def _row_monotone(prev: Arr, t: _Tables, layer: int, m: int) -> tuple[Arr, Arr]:
    """One DP row by divide and conquer on monotone split points, all tasks of a level at once."""
    cur = np.full(m + 1, np.inf)
    arg = np.zeros(m + 1, dtype=np.int64)
    # tasks: query range [ql, qr], split range [ol, oh]; split j < i and j >= layer - 1
    ql, qr = np.array([layer]), np.array([m])
    ol, oh = np.array([layer - 1]), np.array([m - 1])
    while len(ql):
        mid = (ql + qr) // 2
        hi = np.minimum(oh, mid - 1)
        length = hi - ol + 1
        starts = np.concatenate([[0], np.cumsum(length)[:-1]])
        task = np.repeat(np.arange(len(mid)), length)
        j = ol[task] + np.arange(length.sum()) - starts[task]
        val = t.seg(prev, mid[task], j)
        low = np.minimum.reduceat(val, starts)
        pick = np.where(val == low[task], j, np.iinfo(np.int64).max)
        best_j = np.minimum.reduceat(pick, starts)
        cur[mid], arg[mid] = low, best_j
        left, right = ql <= mid - 1, mid + 1 <= qr
        ql, qr, ol, oh = (
            np.concatenate([ql[left], mid[right] + 1]),
            np.concatenate([mid[left] - 1, qr[right]]),
            np.concatenate([ol[left], best_j[right]]),
            np.concatenate([best_j[left], oh[right]]),
        )
    return cur, arg


def _row_full(prev: Arr, t: _Tables, layer: int, m: int, chunk: int = 512) -> tuple[Arr, Arr]:
    """One DP row trying every split (any segment costs), ``chunk`` rows of the matrix at a time."""
    cur = np.full(m + 1, np.inf)
    arg = np.zeros(m + 1, dtype=np.int64)
    j = np.arange(m)
    for start in range(layer, m + 1, chunk):
        i = np.arange(start, min(start + chunk, m + 1))[:, None]
        val = np.where(j[None, :] < i, t.seg(prev, i, j[None, :]), np.inf)
        arg[i[:, 0]] = np.argmin(val, axis=1)
        cur[i[:, 0]] = val[np.arange(len(i)), arg[i[:, 0]]]
    return cur, arg
