"""The time objective and the budgets against brute force through the real dispatcher.

The reference total of a ladder is computed independently of the planner's problem tables:
every histogram row is dispatched by :class:`CudagraphDispatcher` and timed by the cost
model at the runtime mode and padded size it returns (eager rows at their own size).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgdispatch import CudagraphDispatcher, GraphConfig
from cgdispatch.plan.dp import solve_with_capture_budget
from cgdispatch.plan.planner import (
    _problem,
    _rules,
    as_histogram,
    plan_capture_sizes,
    plan_cost,
    smooth_histogram,
)
from cgdispatch.plan.whatif import evaluate
from cgdispatch.workload.trace import make_trace

MODES = ["FULL_AND_PIECEWISE", "FULL", "PIECEWISE", "FULL_DECODE_ONLY"]


@dataclass(frozen=True)
class ArrayCosts:
    """Random per-size costs: graph times non-decreasing (the planner's exact case)."""

    full: np.ndarray
    piecewise: np.ndarray
    eager: np.ndarray
    memory: np.ndarray
    capture: np.ndarray
    source: str = "model"

    def step_time_ms(self, mode, n):  # noqa: ANN001, ANN201
        table = {"FULL": self.full, "PIECEWISE": self.piecewise, "NONE": self.eager}
        return table[mode.name][np.asarray(n)]

    def graph_memory_bytes(self, mode, n):  # noqa: ANN001, ANN201
        return self.memory[np.asarray(n)] * (2.0 if mode.name == "FULL" else 1.0)

    def capture_time_s(self, mode, n):  # noqa: ANN001, ANN201
        return self.capture[np.asarray(n)] + (0.5 if mode.name == "FULL" else 0.0)


def _costs(rng: np.random.Generator, top: int = 64) -> ArrayCosts:
    full = np.cumsum(rng.random(top + 1) * 0.2) + 1.0
    return ArrayCosts(
        full,
        full + np.cumsum(rng.random(top + 1) * 0.05),
        full + 0.5 + rng.random(top + 1),  # eager: dearer, any shape
        np.cumsum(rng.random(top + 1)),
        rng.random(top + 1) + 0.2,
    )


def _dispatch_total(config, sizes, hist, costs) -> tuple[float, float, float]:  # noqa: ANN001
    """(total time, pool bytes, capture s) of a ladder by a loop over dispatch()."""
    d = CudagraphDispatcher(config.replace(cudagraph_capture_sizes=list(sizes)))
    d.initialize_cudagraph_keys()
    total = 0.0
    for n, row in hist.iterrows():
        for uniform, count in ((True, row["uniform_decode"]), (False, row["mixed"])):
            if count:
                mode, desc = d.dispatch(int(n), uniform_decode=uniform)
                size = n if mode.name == "NONE" else desc.num_tokens
                total += count * float(costs.step_time_ms(mode, np.array([size]))[0])
    descs = [(m, x.num_tokens) for m, xs in d.get_capture_descs() for x in xs]
    pool = max((float(costs.graph_memory_bytes(m, np.array([s]))[0]) for m, s in descs), default=0)
    capture = sum(float(costs.capture_time_s(m, np.array([s]))[0]) for m, s in descs)
    return total, pool, capture


def _brute(config, hist, costs, k, memory=np.inf, capture=np.inf):  # noqa: ANN001, ANN202
    """The best total over every ladder of <= k sizes in 1..max step (not only observed)."""
    top = int(hist.index.max())
    best = np.inf
    for r in range(1, k + 1):
        for ladder in itertools.combinations(range(1, top + 1), r):
            total, pool, cap = _dispatch_total(config, ladder, hist, costs)
            if pool <= memory and cap <= capture:
                best = min(best, total)
    return best


def _random_trace(rng: np.random.Generator, top: int, max_num_seqs: int = 4) -> object:
    """Mixed steps up to ``top`` tokens, decode steps (one token per request) up to
    ``max_num_seqs``, as a scheduler makes them."""
    n = rng.integers(1, top + 1, int(rng.integers(3, 25)))
    decode = (rng.random(len(n)) < 0.5) & (n <= max_num_seqs)
    return make_trace(n, decode)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from(MODES), st.integers(1, 3), st.integers(2, 8))
def test_time_plan_matches_brute_force_over_every_size(seed, mode, k, max_num_seqs):
    rng = np.random.default_rng(seed)
    costs, trace = _costs(rng), _random_trace(rng, 14, max_num_seqs)
    config = GraphConfig(vllm_version="0.33", cudagraph_mode=mode, max_num_seqs=max_num_seqs)
    hist = as_histogram(trace)
    if mode == "FULL_DECODE_ONLY" and not hist["uniform_decode"].any():
        return  # nothing a graph can serve: the planner says so (tested below)
    sizes = plan_capture_sizes(trace, k, objective="time", cost_model=costs, config=config)
    got, _, _ = _dispatch_total(config, sizes, hist, costs)
    assert len(sizes) <= k
    assert got == pytest.approx(_brute(config, hist, costs, k))
    assert plan_cost(trace, sizes, objective="time", cost_model=costs, config=config) == (
        pytest.approx(got)
    )


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 3))
def test_memory_budget_is_exact(seed, k):
    rng = np.random.default_rng(seed)
    costs, trace = _costs(rng), _random_trace(rng, 12)
    config = GraphConfig(vllm_version="0.33", max_num_seqs=4)
    hist = as_histogram(trace)
    budget = float(costs.memory[int(rng.integers(1, 13))]) * 1.5
    kw = dict(objective="time", cost_model=costs, config=config, memory_budget_bytes=budget)
    try:
        sizes = plan_capture_sizes(trace, k, **kw)
    except ValueError as err:  # no observed size fits: the best ladder serves no step
        assert "memory_budget_bytes" in str(err)
        all_eager = float(np.sum(hist["total"].to_numpy() * costs.eager[hist.index.to_numpy()]))
        assert _brute(config, hist, costs, k, memory=budget) in (np.inf, pytest.approx(all_eager))
        return
    got, pool, _ = _dispatch_total(config, sizes, hist, costs)
    assert pool <= budget
    assert got == pytest.approx(_brute(config, hist, costs, k, memory=budget))


def test_capture_budget_heuristic_is_feasible_and_near_brute_force():
    gaps = []
    for seed in range(12):
        rng = np.random.default_rng(seed)
        costs, trace = _costs(rng), _random_trace(rng, 12)
        config = GraphConfig(vllm_version="0.33", max_num_seqs=4)
        hist = as_histogram(trace)
        budget = 1.3 + 1.5 * rng.random()
        best = _brute(config, hist, costs, 3, capture=budget)
        kw = dict(objective="time", cost_model=costs, config=config, capture_budget_s=budget)
        if best == np.inf:
            with pytest.raises(ValueError, match="capture_budget_s"):
                plan_capture_sizes(trace, 3, **kw)
            continue
        sizes = plan_capture_sizes(trace, 3, **kw)
        got, _, cap = _dispatch_total(config, sizes, hist, costs)
        assert cap <= budget + 1e-9
        problem = _problem(trace, "time", costs, _rules(config, "FULL"), None, 1, None, True)
        bound = solve_with_capture_budget(problem, 3, budget).lower_bound
        assert bound <= best + 1e-9 <= got + 2e-9
        gaps.append(got / best - 1)
    # a knapsack on tiny instances: the planner docstring quotes this bound (and the
    # benchmark's gap to the Lagrangian lower bound on real workloads)
    assert gaps and max(gaps) < 0.10 and np.mean(gaps) < 0.03


def test_time_plan_total_equals_evaluate_on_a_larger_trace():
    rng = np.random.default_rng(11)
    trace = make_trace(rng.integers(1, 65, 3000), rng.random(3000) < 0.6)
    costs = _costs(rng)
    config = GraphConfig(vllm_version="0.33", max_num_seqs=32)
    sizes = plan_capture_sizes(trace, 6, objective="time", cost_model=costs, config=config)
    summary = evaluate(config.replace(cudagraph_capture_sizes=sizes), trace, costs).summary
    total = plan_cost(trace, sizes, objective="time", cost_model=costs, config=config)
    assert total == pytest.approx(summary["total_time_s"] * 1e3)
    # the planner beats vLLM-style ladders cut to as many sizes
    for other in ([1, 2, 4, 8, 16, 32], [8, 16, 24, 32, 48, 64]):
        assert total <= plan_cost(trace, other, objective="time", cost_model=costs, config=config)


def test_time_objective_chooses_the_largest_size():
    # eager costs 10 at any size, graphs 1 + n: capturing 60 would cost more than eager
    costs = ArrayCosts(
        1.0 + np.arange(65.0), 1.0 + np.arange(65.0), np.full(65, 10.0), np.ones(65), np.ones(65)
    )
    trace = make_trace([2] * 50 + [60] * 50)
    sizes = plan_capture_sizes(trace, 4, objective="time", cost_model=costs)
    assert sizes == [2]
    fixed = plan_capture_sizes(trace, 4, objective="time", cost_model=costs, max_size=60)
    assert fixed == [2, 60]  # max_size given: always a size


def test_smoothing_keeps_totals_and_spreads():
    rng = np.random.default_rng(2)
    trace = make_trace(rng.integers(1, 300, 500), rng.random(500) < 0.5)
    hist = as_histogram(trace)
    smooth = smooth_histogram(hist, 0.1)
    for col in ("uniform_decode", "mixed"):
        assert smooth[col].sum() == pytest.approx(hist[col].sum())
    one = smooth_histogram(as_histogram({100: 21}), 0.1)
    assert list(one.index) == list(range(90, 111)) and np.allclose(one["mixed"], 1.0)
    assert smooth_histogram(hist, 0) is hist
    with pytest.raises(ValueError, match="smoothing"):
        smooth_histogram(hist, -1)


def test_budget_and_objective_errors_name_the_fix():
    trace = make_trace([1, 5, 9])
    costs = _costs(np.random.default_rng(0))
    with pytest.raises(ValueError, match="objective='time' needs a cost_model"):
        plan_capture_sizes(trace, 2, objective="time")
    with pytest.raises(ValueError, match="memory_budget_bytes=0 is invalid"):
        plan_capture_sizes(trace, 2, objective="time", cost_model=costs, memory_budget_bytes=0)
    with pytest.raises(ValueError, match="capture_budget_s needs a cost_model"):
        plan_capture_sizes(trace, 2, capture_budget_s=1.0)
    with pytest.raises(ValueError, match="below the graph memory"):
        plan_capture_sizes(trace, 2, objective="time", cost_model=costs, memory_budget_bytes=1e-9)
    with pytest.raises(ValueError, match="no steps to plan for"):
        plan_capture_sizes(make_trace([3], False), 2, mode="FULL_DECODE_ONLY")


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 3))
def test_time_plan_with_spec_decode_matches_brute_force(seed, k):
    """q = 2: decode steps are multiples of q; the planner's sizes follow multiple_of."""
    rng = np.random.default_rng(seed)
    costs = _costs(rng)
    n = rng.integers(1, 13, int(rng.integers(3, 20)))
    decode = rng.random(len(n)) < 0.5
    n = np.where(decode, 2 * np.minimum(n, 4), n)  # 2 tokens per request, <= 4 requests
    trace = make_trace(n, decode)
    config = GraphConfig(vllm_version="0.33", max_num_seqs=4, num_speculative_tokens=1)
    hist = as_histogram(trace)
    sizes = plan_capture_sizes(trace, k, objective="time", cost_model=costs, config=config)
    assert all(s % 2 == 0 for s in sizes)
    got, _, _ = _dispatch_total(config, sizes, hist, costs)
    best = np.inf
    top = int(hist.index.max()) + 1
    for r in range(1, k + 1):
        for ladder in itertools.combinations(range(2, top + 1, 2), r):
            best = min(best, _dispatch_total(config, ladder, hist, costs)[0])
    assert got == pytest.approx(best)


@dataclass(frozen=True)
class PricedCosts(ArrayCosts):
    """A model that prices each graph (as the calibrated start-up model does): a ladder's
    pool is ``graph_pool_base_bytes`` plus the sum over its graphs."""

    graph_pool_base_bytes: float = 3.0
    graph_memory_additive: bool = True


def _priced_pool(config, sizes, costs) -> float:  # noqa: ANN001
    """Base plus every captured graph's price, by a loop over the dispatcher's keys."""
    d = CudagraphDispatcher(config.replace(cudagraph_capture_sizes=list(sizes)))
    d.initialize_cudagraph_keys()
    descs = [(m, x.num_tokens) for m, xs in d.get_capture_descs() for x in xs]
    graphs = sum(float(costs.graph_memory_bytes(m, np.array([s]))[0]) for m, s in descs)
    return costs.graph_pool_base_bytes + graphs


def test_a_summed_memory_budget_is_met_and_near_brute_force():
    gaps = []
    for seed in range(10):
        rng = np.random.default_rng(seed)
        base = _costs(rng)
        costs = PricedCosts(*dataclasses.astuple(base)[:5], source="model")
        trace, config = _random_trace(rng, 10), GraphConfig(vllm_version="0.33", max_num_seqs=4)
        hist = as_histogram(trace)
        budget = costs.graph_pool_base_bytes + 4.0 + 6.0 * rng.random()
        best = np.inf
        for r in range(1, 4):
            for ladder in itertools.combinations(range(1, int(hist.index.max()) + 1), r):
                if _priced_pool(config, ladder, costs) <= budget:
                    best = min(best, _dispatch_total(config, ladder, hist, costs)[0])
        kw = dict(objective="time", cost_model=costs, config=config, memory_budget_bytes=budget)
        if best == np.inf:
            with pytest.raises(ValueError, match="memory"):
                plan_capture_sizes(trace, 3, **kw)
            continue
        sizes = plan_capture_sizes(trace, 3, **kw)
        assert _priced_pool(config, sizes, costs) <= budget + 1e-9
        got = _dispatch_total(config, sizes, hist, costs)[0]
        assert got >= best - 1e-9
        gaps.append(got / best - 1)
    assert gaps and max(gaps) < 0.15


def test_generation_2_plans_meet_a_summed_memory_budget():
    from cgdispatch import capture_keys
    from cgdispatch.plan.gen2_ladder import gen2_config
    from cgdispatch.plan.planner_v2 import plan_gen2_capture_sizes
    from cgdispatch.plan.whatif import graph_costs

    rng = np.random.default_rng(3)
    base = _costs(rng, top=200)
    costs = PricedCosts(*dataclasses.astuple(base)[:5], source="model")
    trace = _random_trace(rng, 60, max_num_seqs=8)
    config = GraphConfig(vllm_version="0.34", max_num_seqs=8).resolve()
    free = plan_gen2_capture_sizes(trace, 8, objective="time", cost_model=costs, config=config)
    used = graph_costs(capture_keys(gen2_config(config, free)), costs)["graph_memory_bytes"]
    budget = costs.graph_pool_base_bytes + 0.5 * (used - costs.graph_pool_base_bytes)
    tight = plan_gen2_capture_sizes(
        trace, 8, objective="time", cost_model=costs, config=config, memory_budget_bytes=budget
    )
    assert (
        graph_costs(capture_keys(gen2_config(config, tight)), costs)["graph_memory_bytes"] <= budget
    )
