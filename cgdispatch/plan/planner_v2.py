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
model (the test allows 0.5%).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.arith import cdiv
from ..core.config import GraphConfig
from ..core.generation import GENERATIONS
from ..core.ladder_shape import SplitLadders
from ..core.modes import CUDAGraphMode
from ..core.validate import check_int
from .costs import CostModel, as_cost_model
from .dp import Budgets
from .gen2_ladder import Gen2Ladder
from .histogram import Steps, as_histogram, smooth_histogram
from .ladder_split import SplitLadder, solve_split
from .planner import _check_budget, _pool_base, memory_budget
from .problem import PlanProblem

__all__ = ["plan_gen2_capture_sizes", "plan_two_ladders", "Gen2Rules"]

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


def _two_ladder_release() -> str:
    """The newest registered release with two ladders: the planner's default."""
    return [g.release for g in GENERATIONS.values() if isinstance(g.ladder, SplitLadders)][-1]


def _gen2(config: GraphConfig | None) -> GraphConfig:
    if config is None:
        return GraphConfig(vllm_version=_two_ladder_release()).resolve()
    if not isinstance(config, GraphConfig):
        raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig or None")
    if config.vllm_version is None:
        config = config.replace(vllm_version=_two_ladder_release())
    if not isinstance(config.generation.ladder, SplitLadders):
        raise ValueError(
            f"config has vllm_version={config.vllm_version!r} ({config.generation.name}, one "
            "token ladder): plan it with plan_capture_sizes, or build it with "
            f"vllm_version={_two_ladder_release()!r} to plan the two ladders"
        )
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


def _split_steps(
    hist: pd.DataFrame, rules: Gen2Rules, model: CostModel | None, kind: str
) -> tuple[_Rows, _Rows]:
    """(decode rows by request count, token rows by tokens); steps no plan changes (eager
    whatever the ladders) are left out: they add the same to every plan."""
    t = hist.index.to_numpy(dtype=np.int64)
    dec = hist["uniform_decode"].to_numpy(np.float64)
    mix = hist["mixed"].to_numpy(np.float64)
    eager = np.zeros(len(t)) if kind == "padding" else model.step_time_ms(NONE, t)
    eager = np.asarray(eager, dtype=np.float64)
    r = cdiv(t, rules.q)
    to_decode = (r <= rules.decode_limit) & (dec > 0)
    token_count = mix + np.where(to_decode, 0.0, dec)  # decodes above: token-keyed graphs
    graphable = (rules.mixed_mode is not NONE) & (t <= rules.max_tokens) & (token_count > 0)
    decode_rows = _Rows(r[to_decode], dec[to_decode], eager[to_decode])
    token_rows = _Rows(t[graphable], token_count[graphable], eager[graphable])
    return decode_rows, token_rows


def _problem(
    rows: _Rows,
    sizes: np.ndarray,
    graph_cost: np.ndarray,
    memory: np.ndarray,
    capture: np.ndarray,
    fixed_top: bool,
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
        later + above,
        capture,
        memory,
        fixed_top,
    )


@dataclass(frozen=True)
class _Pricing:
    """How sizes are priced: the objective, the cost model, and which budgets need the
    model's graph memory and capture time."""

    objective: str
    model: CostModel | None
    memory_budget_bytes: float | None
    capture_budget: bool

    def problem(
        self, rows: _Rows, sizes: np.ndarray, tokens_per_size: int, mode: CUDAGraphMode, top: bool
    ) -> PlanProblem:
        """The ladder's problem over candidate ``sizes`` (graphs of ``sizes *
        tokens_per_size`` tokens in ``mode``), sizes whose graph exceeds the memory budget
        dropped (exact: one shared pool)."""
        tokens = sizes * tokens_per_size
        cost = tokens.astype(np.float64)
        if self.objective == "time":
            cost = np.asarray(self.model.step_time_ms(mode, tokens), dtype=np.float64)
        memory, capture = np.zeros(len(sizes)), np.zeros(len(sizes))
        if self.memory_budget_bytes is not None:
            memory = np.asarray(self.model.graph_memory_bytes(mode, tokens), dtype=np.float64)
            # a model that prices each graph: the fixed pool plus this size's graph must fit
            # (the solver bounds the sum); else the pool is the largest graph's (exact)
            fits = _pool_base(self.model) + memory <= self.memory_budget_bytes
            if (top and not fits[-1]) or not fits.any():
                raise ValueError(
                    f"memory_budget_bytes={self.memory_budget_bytes:.0f} is below the graph "
                    f"memory of the largest {mode.name} graph of {tokens[-1]} tokens "
                    f"({memory[-1]:.0f} bytes): raise the budget or lower the limits"
                )
            sizes, cost, memory = sizes[fits], cost[fits], memory[fits]
        if self.capture_budget:
            capture = np.asarray(
                self.model.capture_time_s(mode, sizes * tokens_per_size), dtype=np.float64
            )
        return _problem(rows, sizes, cost, memory, capture, top)


def plan_gen2_capture_sizes(
    steps: Steps,
    max_graphs: int,
    *,
    objective: str = "padding",
    cost_model: CostModel | None = None,
    config: GraphConfig | None = None,
    max_prefill_tokens: int | None = None,
    memory_budget_bytes: float | None = None,
    capture_budget_s: float | None = None,
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
    pool); ``capture_budget_s`` bounds the summed modelled capture time of both ladders
    (a Lagrangian heuristic, :mod:`cgdispatch.plan.ladder_split`: within 15% of brute force on
    random tiny instances, worst 13.8% of 82 measured). ``config``: a vLLM 0.34 config, resolved (default
    ``GraphConfig`` of the newest release with two ladders); its mode decides which ladders are used
    (FULL and PIECEWISE: prefill only; FULL_DECODE_ONLY: decode only). Each used ladder
    gets at least one size; fewer sizes are returned when more would not help.
    """
    check_int("max_graphs", max_graphs, 1)
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
        check_int("max_prefill_tokens", max_prefill_tokens, 1)
        rules = Gen2Rules(
            rules.q, rules.decode_limit, rules.mixed_mode, min(rules.max_tokens, max_prefill_tokens)
        )
    _check_budget("memory_budget_bytes", memory_budget_bytes, "graph_memory_bytes", model)
    _check_budget("capture_budget_s", capture_budget_s, "capture_time_s", model)
    hist = smooth_histogram(as_histogram(steps), smoothing)
    decode_rows, token_rows = _split_steps(hist, rules, model, objective)
    pricing = _Pricing(objective, model, memory_budget_bytes, capture_budget_s is not None)
    problems: list[tuple[str, PlanProblem]] = []
    if len(decode_rows.n):  # fixed top: the largest decode (module doc)
        sizes = np.unique(decode_rows.n)
        problems.append(("decode", pricing.problem(decode_rows, sizes, rules.q, FULL, True)))
    if len(token_rows.n):
        fixed_top = objective == "padding" or max_prefill_tokens is not None
        sizes = np.unique(token_rows.n)
        if max_prefill_tokens is not None:
            sizes = np.unique(np.append(sizes, rules.max_tokens))
        prefill = pricing.problem(token_rows, sizes, 1, rules.mixed_mode, fixed_top)
        problems.append(("prefill", prefill))
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
    ladders = [SplitLadder(p, not p.fixed_top and len(problems) == 2) for _, p in problems]
    limits = Budgets(capture_budget_s, memory_budget(model, memory_budget_bytes))
    plans = solve_split(ladders, max_graphs, budgets=limits)
    chosen = {
        name: tuple(int(p.sizes[i]) for i in sol.indices) for (name, p), sol in zip(problems, plans)
    }
    # steps without decodes plan no decode size: a ladder that leaves decodes eager (or on
    # token graphs); ``tune`` adds vLLM's default ones when its held-out window has decodes
    # (plan.overload.with_default_decodes), ``export_plan`` leaves that list at vLLM's default
    return Gen2Ladder(chosen.get("prefill", ()), chosen.get("decode", ()))


def plan_two_ladders(
    steps: Steps, max_graphs: int, *, max_size: int | None = None, **options: object
) -> Gen2Ladder:
    """The planner entry of a release with two ladders (``Generation.planner``):
    :func:`plan_gen2_capture_sizes` with ``max_size`` as the largest prefill size."""
    return plan_gen2_capture_sizes(steps, max_graphs, max_prefill_tokens=max_size, **options)
