"""Capture-size planner: the sizes that minimise padding or modelled step time under budgets.

``plan_capture_sizes`` builds a :class:`~cgdispatch.plan.problem.PlanProblem` by vLLM V1's
dispatch rules and solves it by dynamic programming (:mod:`cgdispatch.plan.dp`). It plans
token sizes and captures nothing; comparing plans with the engines' ladders and exporting
them as engine flags is :mod:`cgdispatch.plan.ladder_compare`.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pandas as pd

from ..core.arith import round_up
from ..core.config import GraphConfig
from ..core.modes import CUDAGraphMode
from ..core.validate import check_int
from .costs import CostModel, as_cost_model
from .dp import Budgets, solve, solve_with_budgets
from .gen2_ladder import Gen2Ladder
from .histogram import Steps, as_histogram, smooth_histogram
from .problem import PlanProblem, V1Rules, v1_problem

__all__ = [
    "plan_capture_sizes",
    "plan_ladder",
    "largest_token_size",
    "plan_cost",
    "as_histogram",
    "smooth_histogram",
    "plan_multiple_of",
]

Objective = Literal["padding", "time", "padded_tokens", "step_time"]
# "padded_tokens" and "step_time" are the names of 0.1; "step_time" keeps its fixed top
_OBJECTIVES = {
    "padding": "padding",
    "padded_tokens": "padding",
    "time": "time",
    "step_time": "time",
}


def plan_multiple_of(config: GraphConfig) -> int:
    """What every capture size of ``config`` must be a multiple of: q = 1 + speculative
    tokens when decodes run FULL graphs with q > 1, and the TP size with sequence
    parallelism (their lcm for both). The one rule the CLI and the notebooks share."""
    q = config.uniform_decode_query_len
    multiple = q if config.cudagraph_mode.decode_mode() is CUDAGraphMode.FULL and q > 1 else 1
    if config.sequence_parallel:  # tokens split evenly across TP ranks
        multiple = math.lcm(multiple, config.tensor_parallel_size)
    return multiple


def _rules(config: GraphConfig | None, mode: CUDAGraphMode | str) -> V1Rules:
    if config is None:
        return V1Rules(CUDAGraphMode.parse(mode))
    if not isinstance(config, GraphConfig):
        raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig or None")
    return V1Rules(config.cudagraph_mode, config.uniform_decode_query_len, config.max_num_seqs)


def _candidates(
    hist: pd.DataFrame, rules: V1Rules, max_size: int | None, multiple_of: int, fixed_top: bool
) -> np.ndarray:
    """Observed sizes that can replay a graph, rounded up to ``multiple_of``, ascending; with
    ``fixed_top`` the top (``max_size``, default the largest such size) is the last."""
    n = hist.index.to_numpy(dtype=np.int64)
    dec, mix = rules.runtime_modes(n)
    can = ((hist["uniform_decode"].to_numpy() > 0) & (dec != 0)) | (
        (hist["mixed"].to_numpy() > 0) & (mix != 0)
    )
    n = n[can]
    if not len(n):
        raise ValueError(
            f"no steps to plan for: the trace is empty or every step runs eagerly under {rules.mode}"
        )
    if max_size is not None and max_size % multiple_of:
        raise ValueError(
            f"max_size={max_size} is not a multiple of multiple_of={multiple_of}: "
            f"use {round_up(max_size, multiple_of)}"
        )
    rounded = round_up(n, multiple_of)
    if rules.mode.separate_routine() and rules.mode.decode_mode() is CUDAGraphMode.FULL:
        # above q * max_num_seqs a size has no FULL decode graph: its memory and capture
        # time drop there, so the first such size is a candidate (keeps the DP exact)
        edge = rules.q * rules.max_num_seqs + 1
        if edge <= rounded.max():
            rounded = np.append(rounded, round_up(edge, multiple_of))
    rounded = np.unique(rounded)
    top = int(rounded[-1]) if max_size is None else max_size
    rounded = rounded[rounded <= top]
    return np.unique(np.append(rounded, top)) if fixed_top else rounded


def _problem(
    steps: Steps,
    objective: str,
    cost_model: CostModel | None,
    rules: V1Rules,
    max_size: int | None,
    multiple_of: int,
    memory_budget_bytes: float | None,
    budgets: bool,
) -> PlanProblem:
    hist = as_histogram(steps)
    fixed_top = objective == "padding" or max_size is not None
    cand = _candidates(hist, rules, max_size, multiple_of, fixed_top)
    kw = {"objective": objective, "fixed_top": fixed_top, "budgets": budgets}
    problem = v1_problem(hist, rules, cand, cost_model, **kw)
    if memory_budget_bytes is None:
        return problem
    # weak-output pool = the largest graph's, so a size fits or not on its own (exact); a
    # model that prices each graph: a size that alone breaks the budget is dropped, the sum
    # is the solver's (memory_budget)
    base = _pool_base(cost_model)
    fits = base + problem.memory_bytes <= memory_budget_bytes
    if fixed_top and not fits[-1] or not fits.any():
        smallest = base + (problem.memory_bytes[-1] if fixed_top else problem.memory_bytes.min())
        raise ValueError(
            f"memory_budget_bytes={memory_budget_bytes:.0f} is below the graph memory of "
            f"{'the largest size' if fixed_top else 'every candidate size'} "
            f"({smallest:.0f} bytes): raise the budget or lower max_size"
        )
    return v1_problem(hist, rules, cand[fits], cost_model, **kw)


def _pool_base(model: CostModel | None) -> float:
    """The fixed pool of a model that prices each graph (0 for a largest-graph model)."""
    if not getattr(model, "graph_memory_additive", False):
        return 0.0
    return float(model.graph_pool_base_bytes)


def memory_budget(model: CostModel | None, memory_budget_bytes: float | None) -> float | None:
    """The part of a memory budget the solver sums sizes against: with a model that prices
    each graph, the budget less the fixed pool; else None (the per-size filter is exact)."""
    if memory_budget_bytes is None or not getattr(model, "graph_memory_additive", False):
        return None
    return memory_budget_bytes - _pool_base(model)


def _check_budget(name: str, value: float | None, needs: str, model: CostModel | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name}={value!r} is invalid: give a number > 0 or None (no budget)")
    if model is None or not callable(getattr(model, needs, None)):
        raise ValueError(
            f"{name} needs a cost_model with {needs}(mode, num_tokens): pass "
            "cost_model=cgdispatch.device_cost_model(model, device)"
        )


def plan_capture_sizes(
    steps: Steps,
    max_graphs: int,
    *,
    objective: Objective = "padding",
    cost_model: CostModel | None = None,
    mode: CUDAGraphMode | str = CUDAGraphMode.FULL_AND_PIECEWISE,
    max_size: int | None = None,
    multiple_of: int | None = None,
    memory_budget_bytes: float | None = None,
    capture_budget_s: float | None = None,
    config: GraphConfig | None = None,
    smoothing: float = 0.0,
) -> list[int]:
    """The capture sizes (at most ``max_graphs``) that minimise the expected cost of ``steps``.

    ``steps``: a step trace, a histogram, ``{size: count}`` or an array of sizes.

    ``objective="padding"``: tokens added by padding; ``max_size`` (default: the largest step
    that can replay a graph, rounded up) is always a size, larger steps run eagerly.
    ``objective="time"``: the summed modelled step time of every step (``cost_model``): a
    padded step at the runtime mode vLLM V1's dispatcher picks for its padded size (FULL
    decode keys only for ``q <= size <= q * max_num_seqs`` with a separate decode routine,
    else the PIECEWISE key), an eager step at its own size; the planner also chooses the
    largest size (capped by ``max_size`` when given, which then is always a size).
    ``"padded_tokens"`` and ``"step_time"`` are 0.1's names (``"step_time"``: time with
    the largest step as a fixed top).

    Budgets need a cost model with ``graph_memory_bytes`` / ``capture_time_s`` (e.g.
    :func:`~cgdispatch.estimate.device_model.device_cost_model`).
    ``memory_budget_bytes``: the graph pool. With a model that prices each graph (the
    calibrated start-up model of published architectures: a fixed pool plus a cost per
    graph) the summed pool must fit, by the same Lagrangian relaxation as the capture budget
    (within 15% of brute force on random tiny instances, tests/plan); with a largest-graph
    model (weak outputs: the pool is the largest graph's) sizes whose graphs exceed it are
    dropped: exact.
    ``capture_budget_s``: summed modelled capture time, by Lagrangian relaxation: a
    heuristic (a knapsack in disguise); within 10% of brute force on random tiny instances
    (tests/plan), within 0.01% of its Lagrangian lower bound on the benchmark workloads
    (benchmarks/bench_planner.py, half of vLLM's capture time as the budget).

    ``config``: mode, ``max_num_seqs`` and q come from it (else ``mode``, 256, 1), and
    ``multiple_of`` defaults to :func:`plan_multiple_of` of it (else 1). Sizes are chosen
    among the observed sizes rounded up to ``multiple_of``: exact whenever step time, graph
    memory and capture time do not fall with size (then the divide-and-conquer DP runs;
    otherwise every split is tried). Fewer sizes are returned when more would not help.
    ``smoothing``: plan on :func:`smooth_histogram` of the steps (0.1 spreads each size over
    +-10%): exact sizes seen once rarely recur, so a plan for held-out traffic generalises
    better (benchmarks/bench_planner.py measures both).
    """
    check_int("max_graphs", max_graphs, 1)
    if objective not in _OBJECTIVES:
        raise ValueError(f"objective={objective!r} is unknown: use 'padding' or 'time'")
    kind = _OBJECTIVES[objective]
    rules = _rules(config, mode)
    if multiple_of is None:
        multiple_of = 1 if config is None else plan_multiple_of(config)
    check_int("multiple_of", multiple_of, 1)
    if max_size is not None:
        check_int("max_size", max_size, 1)
    model = as_cost_model(cost_model)
    if kind == "time" and model is None:
        raise ValueError(
            "objective='time' needs a cost_model: pass cost_model=cgdispatch.device_cost_model("
            "'llama-3.1-8b', 'H200') or any CostModel (cgdispatch.plan.costs)"
        )
    _check_budget("memory_budget_bytes", memory_budget_bytes, "graph_memory_bytes", model)
    _check_budget("capture_budget_s", capture_budget_s, "capture_time_s", model)
    if objective == "step_time" and max_size is None:  # 0.1: the largest step is the top
        max_size = int(_candidates(as_histogram(steps), rules, None, multiple_of, True)[-1])
    budgets = memory_budget_bytes is not None or capture_budget_s is not None
    steps = smooth_histogram(as_histogram(steps), smoothing)
    problem = _problem(
        steps, kind, model, rules, max_size, multiple_of, memory_budget_bytes, budgets
    )
    limits = Budgets(capture_budget_s, memory_budget(model, memory_budget_bytes))
    solution = (
        solve_with_budgets(problem, max_graphs, limits) if limits else solve(problem, max_graphs)
    )
    return [int(problem.sizes[i]) for i in solution.indices]


def plan_cost(
    steps: Steps,
    sizes: list[int],
    *,
    objective: Objective = "padding",
    cost_model: CostModel | None = None,
    mode: CUDAGraphMode | str = CUDAGraphMode.FULL_AND_PIECEWISE,
    config: GraphConfig | None = None,
) -> float:
    """The planner's objective for given ``sizes``: padding tokens of the steps up to the
    largest size (``"padding"``), or the modelled total step time in ms of every step
    (``"time"``; what :func:`~cgdispatch.plan.whatif.evaluate` reports as ``total_time_s``)."""
    if objective not in _OBJECTIVES:
        raise ValueError(f"objective={objective!r} is unknown: use 'padding' or 'time'")
    if not len(sizes):
        raise ValueError("sizes is empty: give at least one capture size")
    kind = _OBJECTIVES[objective]
    model = as_cost_model(cost_model)
    if kind == "time" and model is None:
        raise ValueError("objective='time' needs a cost_model (see cgdispatch.plan.costs)")
    rules = _rules(config, mode)
    hist = as_histogram(steps)
    cand = np.asarray(sorted(set(int(s) for s in sizes)), dtype=np.int64)
    p = v1_problem(hist, rules, cand, model, objective=kind, fixed_top=True)
    total = float(np.sum(p.counts * p.graph_cost + p.eager * p.eager_flag) + p.tail_cost[-1])
    if kind == "time":
        return total
    n = hist.index.to_numpy(dtype=np.int64)
    dec, mix = rules.runtime_modes(
        np.asarray(cand)[np.minimum(np.searchsorted(cand, n), len(cand) - 1)]
    )
    inside = n <= cand[-1]
    real = hist["uniform_decode"].to_numpy() * (dec != 0) + hist["mixed"].to_numpy() * (mix != 0)
    return total - float(np.sum((real * n)[inside]))


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
) -> list[int] | Gen2Ladder:
    """The planned ladder for ``config``'s generation: its registered planner
    (``Generation.planner``) plans a token list (V1, :func:`plan_capture_sizes`) or a
    :class:`~cgdispatch.plan.gen2_ladder.Gen2Ladder` (two ladders,
    :func:`~cgdispatch.plan.planner_v2.plan_gen2_capture_sizes`). ``max_size``: the largest
    (prefill) token size, as each planner reads it."""
    if not isinstance(config, GraphConfig):
        raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig")
    options = {"objective": objective, "cost_model": cost_model, "max_size": max_size}
    budgets = {"memory_budget_bytes": memory_budget_bytes, "capture_budget_s": capture_budget_s}
    return config.generation.plan_ladder(steps, max_graphs, config=config, **options, **budgets)


def largest_token_size(ladder: list[int] | Gen2Ladder) -> int:
    """The largest token size a ladder captures for non-decode steps: a token list's
    largest size, a :class:`Gen2Ladder`'s largest prefill size (0 when it has none)."""
    if isinstance(ladder, Gen2Ladder):
        return max(ladder.prefill_token_sizes, default=0)
    if not len(ladder):
        raise ValueError("the ladder is empty: give at least one capture size")
    return int(max(ladder))
