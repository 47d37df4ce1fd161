"""Capture-size planner for vLLM 0.34 (generation 2): decode request sizes and prefill token sizes.

vLLM 0.34's ``CudaGraphManager`` (docs/semantics_v2.md) runs a uniform-decode step of
``t`` tokens (``r = cdiv(t, q)`` requests) on the smallest decode graph holding ``r``
requests (``num_tokens = n * q``), and every other step, and decodes above the decode
graphs, on the smallest token-keyed graph of at least ``t`` tokens (the mode's mixed
mode). So the graph budget buys two ladders: request counts for the decodes and token
sizes for the rest. :func:`plan_gen2_capture_sizes` builds one
:class:`~cgdispatch.plan.problem.PlanProblem` per ladder, solves each with the same DP as
V1 for every size count at once (:func:`~cgdispatch.plan.dp.solve_each_count`) and takes
the split of ``max_graphs`` with the lowest total: the best split, not a rule of thumb.

The rule that keeps the two problems apart: the decode ladder always reaches the largest
decode step that can have a decode graph (``r <= min(max_num_seqs, decode token budget //
q)``), so which decodes fall back to token-keyed graphs does not depend on the plan. Within
that rule the plan is exact (tests/plan/test_planner_v2.py checks it against brute force
scored by ``CudaGraphManager``); against every pair of ladders, unrestricted, the rule cost
at most 0.2% of modelled step time on 24 small random instances with the H200 device
model (the test allows 0.5%). A capture-time budget is not planned for generation 2.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.config import GraphConfig
from ..core.modes import CUDAGraphMode
from .costs import CostModel, as_cost_model
from .dp import Solution, solve_each_count
from .gen2_ladder import Gen2Ladder
from .histogram import Steps, as_histogram, smooth_histogram
from .planner import _check_budget, _check_int
from .problem import PlanProblem

__all__ = ["plan_gen2_capture_sizes", "Gen2Rules"]

NONE, FULL = CUDAGraphMode.NONE, CUDAGraphMode.FULL
_OBJECTIVES = ("padding", "time")


@dataclass(frozen=True)
class Gen2Rules:
    """The dispatch facts of a resolved vLLM 0.34 config that the planner needs.

    ``decode_limit``: the most requests a decode graph can hold (0: no decode graphs, as
    in modes without a separate decode routine); ``mixed_mode``: the mode of token-keyed
    graphs (NONE: none, FULL_DECODE_ONLY); ``max_tokens``: the largest prefill size
    (``max_num_batched_tokens``).
    """

    q: int
    decode_limit: int
    mixed_mode: CUDAGraphMode
    max_tokens: int

    @classmethod
    def of(cls, config: GraphConfig) -> Gen2Rules:
        mode, q = config.cudagraph_mode, config.uniform_decode_query_len
        if config.enable_adaptive_verification:
            raise ValueError(
                "enable_adaptive_verification=True gives decodes token-keyed varlen graphs, "
                "which this planner does not plan: plan without adaptive verification"
            )
        limit = 0
        if mode.separate_routine() and mode.decode_mode() is FULL:
            budget = min(
                config.max_num_batched_tokens,
                config.max_decode_cudagraph_capture_tokens or config.max_num_batched_tokens,
            )
            limit = min(config.max_num_seqs, budget // q)
        return cls(q, limit, mode.mixed_mode(), config.max_num_batched_tokens)


def _gen2(config: GraphConfig | None) -> GraphConfig:
    if config is None:
        return GraphConfig(vllm_version="0.34").resolve()
    if not isinstance(config, GraphConfig):
        raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig or None")
    if config.vllm_version == "0.33":
        raise ValueError(
            "config has vllm_version='0.33' (V1): plan it with plan_capture_sizes, or build "
            "it with vllm_version='0.34' to plan vLLM 0.34's two ladders"
        )
    if config.vllm_version is None:
        config = config.replace(vllm_version="0.34")
    if config.cudagraph_mode is NONE:
        raise ValueError("cudagraph_mode is NONE: nothing is captured; pick a graph mode")
    return config


@dataclass(frozen=True)
class _Rows:
    """Steps of one ladder: at size ``n`` (request counts or tokens), ``count`` of them,
    ``eager_ms`` the cost of each run eagerly at its own token count."""

    n: np.ndarray
    count: np.ndarray
    eager_ms: np.ndarray


def _split_steps(hist: pd.DataFrame, rules: Gen2Rules, model: CostModel | None, kind: str):
    """(decode rows by request count, token rows by tokens, cost no plan changes)."""
    t = hist.index.to_numpy(dtype=np.int64)
    dec = hist["uniform_decode"].to_numpy(np.float64)
    mix = hist["mixed"].to_numpy(np.float64)
    eager = np.zeros(len(t)) if kind == "padding" else model.step_time_ms(NONE, t)
    eager = np.asarray(eager, dtype=np.float64)
    r = -(-t // rules.q)
    to_decode = (r <= rules.decode_limit) & (dec > 0)
    token_count = mix + np.where(to_decode, 0.0, dec)  # decodes above: token-keyed graphs
    graphable = (rules.mixed_mode is not NONE) & (t <= rules.max_tokens) & (token_count > 0)
    constant = float(np.sum((token_count * eager)[~graphable]))
    decode_rows = _Rows(r[to_decode], dec[to_decode], eager[to_decode])
    token_rows = _Rows(t[graphable], token_count[graphable], eager[graphable])
    return decode_rows, token_rows, constant


def _problem(
    rows: _Rows,
    sizes: np.ndarray,
    graph_cost: np.ndarray,
    memory: np.ndarray,
    fixed_top: bool,
    constant: float,
) -> PlanProblem:
    """A one-class problem: each row pads to the smallest size >= its ``n``, at
    ``graph_cost`` of that size; rows above the largest size run eagerly (the tail)."""
    m = len(sizes)
    bucket = np.searchsorted(sizes, rows.n)
    inside = bucket < m
    counts = np.bincount(bucket[inside], rows.count[inside], m)[None, :]
    eager = np.bincount(bucket[inside], (rows.count * rows.eager_ms)[inside], m)[None, :]
    above = float(np.sum((rows.count * rows.eager_ms)[~inside]))
    later = np.concatenate([np.cumsum(eager[0][::-1])[::-1][1:], [0.0]])
    return PlanProblem(
        sizes,
        counts,
        eager,
        graph_cost[None, :].astype(np.float64),
        np.zeros((1, m)),
        later + above + constant,
        np.zeros(m),
        memory,
        fixed_top,
    )


def _fit(sizes: np.ndarray, memory: np.ndarray, budget: float | None, fixed_top: bool, what: str):
    if budget is None:
        return sizes, memory
    fits = memory <= budget
    if (fixed_top and not fits[-1]) or not fits.any():
        raise ValueError(
            f"memory_budget_bytes={budget:.0f} is below the graph memory of the largest "
            f"{what} ({memory[-1]:.0f} bytes): raise the budget or lower the limits"
        )
    return sizes[fits], memory[fits]


def _costs(
    model: CostModel | None, kind: str, mode: CUDAGraphMode, tokens: np.ndarray, budgeted: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(cost per step padded to each size, graph memory of each size when ``budgeted``)."""
    cost = tokens.astype(np.float64)
    if kind == "time":
        cost = np.asarray(model.step_time_ms(mode, tokens), dtype=np.float64)
    memory = np.zeros(len(tokens))
    if budgeted:
        memory = np.asarray(model.graph_memory_bytes(mode, tokens), dtype=np.float64)
    return cost, memory


def plan_gen2_capture_sizes(
    steps: Steps,
    max_graphs: int,
    *,
    objective: str = "padding",
    cost_model: CostModel | None = None,
    config: GraphConfig | None = None,
    max_prefill_tokens: int | None = None,
    memory_budget_bytes: float | None = None,
    smoothing: float = 0.0,
) -> Gen2Ladder:
    """The vLLM 0.34 ladder (at most ``max_graphs`` sizes in both lists together) that
    minimises the expected cost of ``steps`` (a trace, histogram, ``{size: count}`` or
    sizes; see :func:`~cgdispatch.plan.planner.plan_capture_sizes`).

    ``objective="padding"``: tokens added by padding; both ladders reach their largest
    step. ``"time"``: the summed modelled step time (``cost_model``), decodes at FULL
    ``n * q`` tokens, other steps at the mixed mode's padded size, eager steps at their
    own size; the planner also chooses the largest prefill size (capped by
    ``max_prefill_tokens`` when given, which then is always a size). The decode ladder
    always reaches the largest decode step a decode graph can hold (module doc).
    ``memory_budget_bytes`` drops the sizes whose graph exceeds it (exact: one shared
    pool). ``config``: a vLLM 0.34 config, resolved (default
    ``GraphConfig(vllm_version="0.34")``); its mode decides which ladders are used
    (FULL and PIECEWISE: prefill only; FULL_DECODE_ONLY: decode only). Each used ladder
    gets at least one size; fewer sizes are returned when more would not help.
    """
    _check_int("max_graphs", max_graphs, 1)
    if objective not in _OBJECTIVES:
        raise ValueError(f"objective={objective!r} is unknown: use 'padding' or 'time'")
    config = _gen2(config)
    rules = Gen2Rules.of(config)
    model = as_cost_model(cost_model)
    if objective == "time" and model is None:
        raise ValueError(
            "objective='time' needs a cost_model: pass cost_model=cgdispatch.device_cost_model("
            "'llama-3.1-8b', 'H200') or any CostModel (cgdispatch.plan.costs)"
        )
    if max_prefill_tokens is not None:
        _check_int("max_prefill_tokens", max_prefill_tokens, 1)
        rules = Gen2Rules(
            rules.q, rules.decode_limit, rules.mixed_mode, min(rules.max_tokens, max_prefill_tokens)
        )
    _check_budget("memory_budget_bytes", memory_budget_bytes, "graph_memory_bytes", model)
    hist = smooth_histogram(as_histogram(steps), smoothing)
    decode_rows, token_rows, constant = _split_steps(hist, rules, model, objective)

    budgeted = memory_budget_bytes is not None
    problems: list[tuple[str, PlanProblem]] = []
    if len(decode_rows.n):  # fixed top: the largest decode (module doc)
        sizes = np.unique(decode_rows.n)
        cost, memory = _costs(model, objective, FULL, sizes * rules.q, budgeted)
        sizes, memory = _fit(sizes, memory, memory_budget_bytes, True, "decode graph")
        cost = cost[np.isin(np.unique(decode_rows.n), sizes)]
        problems.append(("decode", _problem(decode_rows, sizes, cost, memory, True, 0.0)))
    if len(token_rows.n):
        fixed_top = objective == "padding" or max_prefill_tokens is not None
        sizes = np.unique(token_rows.n)
        if max_prefill_tokens is not None:
            sizes = np.unique(np.append(sizes, rules.max_tokens))
        cost, memory = _costs(model, objective, rules.mixed_mode, sizes, budgeted)
        kept, memory = _fit(sizes, memory, memory_budget_bytes, fixed_top, "prefill graph")
        cost = cost[np.isin(sizes, kept)]
        problems.append(("prefill", _problem(token_rows, kept, cost, memory, fixed_top, 0.0)))
    if not problems:
        raise ValueError(
            f"no steps to plan for: the trace is empty or every step runs eagerly under "
            f"{config.cudagraph_mode}"
        )
    if max_graphs < len(problems):
        raise ValueError(
            f"max_graphs={max_graphs} is too few for vLLM 0.34 in {config.cudagraph_mode}: "
            "decode request sizes and prefill token sizes need one size each; give "
            f"max_graphs >= {len(problems)}"
        )
    options = [list(enumerate(solve_each_count(p, max_graphs), start=1)) for _, p in problems]
    for (_, problem), option in zip(problems, options):
        if not problem.fixed_top and len(problems) == 2:
            # time objective: every non-decode step eager (no prefill size) may be best
            option.insert(0, (0, Solution([], float(problem.tail_cost[0] + _first_eager(problem)))))
    plans = _best_split(options, max_graphs)
    chosen = {
        name: tuple(int(p.sizes[i]) for i in sol.indices) for (name, p), sol in zip(problems, plans)
    }
    return Gen2Ladder(chosen.get("prefill", ()), chosen.get("decode", ()))


def _first_eager(problem: PlanProblem) -> float:
    """Eager cost of the steps of the first bucket (``tail_cost[0]`` covers the later ones)."""
    return float(problem.eager[:, 0].sum())


def _best_split(options: list[list[tuple[int, Solution]]], k: int) -> list[Solution]:
    """The best plan per ladder whose sizes add up to at most ``k``: every split of the
    budget is tried (``options[p]``: (at most b sizes, ladder p's best plan with them));
    among equal totals the fewest sizes win."""
    best: tuple[float, int, list[Solution]] | None = None
    for pair in itertools.product(*options):
        if sum(b for b, _ in pair) > k:
            continue
        plans = [sol for _, sol in pair]
        key = (sum(p.cost for p in plans), sum(len(p.indices) for p in plans))
        if best is None or key < best[:2]:
            best = (*key, plans)
    return best[2]
