"""vLLM 0.34 planner: exact against brute force scored by CudaGraphManager itself."""

import itertools

import numpy as np
import pytest

from cgdispatch import CudaGraphManager, GraphConfig
from cgdispatch.core.generation import dispatch_step
from cgdispatch.plan.costs import FunctionCostModel
from cgdispatch.plan.gen2_ladder import Gen2Ladder, gen2_config
from cgdispatch.plan.planner_v2 import plan_gen2_capture_sizes
from cgdispatch.workload.trace import make_trace

MODES = ["FULL_AND_PIECEWISE", "FULL", "PIECEWISE", "FULL_DECODE_ONLY"]


def _instance(seed: int, mode: str):
    """A small random vLLM 0.34 config and trace whose uniform decodes have t / q requests."""
    rng = np.random.default_rng(seed)
    q = int(rng.integers(1, 3))
    cfg = GraphConfig(
        vllm_version="0.34",
        cudagraph_mode=mode,
        max_num_seqs=int(rng.integers(3, 6)),
        max_num_batched_tokens=int(rng.integers(6, 10)),
        num_speculative_tokens=q - 1,
    ).resolve()
    steps = int(rng.integers(4, 12))
    uniform = rng.random(steps) < 0.5
    reqs = rng.integers(1, cfg.max_num_seqs + 1, steps)
    tokens = np.where(uniform, reqs * q, rng.integers(1, cfg.max_num_batched_tokens + 1, steps))
    tokens = np.minimum(tokens, cfg.max_num_batched_tokens)
    reqs = np.where(uniform, -(-tokens // q), np.minimum(reqs, tokens))
    uniform &= tokens % q == 0
    trace = make_trace(tokens, uniform, reqs)
    # random increasing step times per mode (independent of the planner's arithmetic)
    tables = {m: np.cumsum(rng.uniform(0.1, 2.0, 64)) + rng.uniform(0, 5) for m in range(3)}
    model = FunctionCostModel(lambda mode, n: tables[mode.value][n - 1])
    return cfg, trace, model


def _score(cfg, trace, ladder, objective, model) -> float:
    """The objective of a ladder, every step asked of CudaGraphManager one by one."""
    manager = CudaGraphManager(gen2_config(cfg, ladder))
    total = 0.0
    for n, r, u in zip(trace["num_tokens"], trace["num_reqs"], trace["uniform_decode"]):
        answer = dispatch_step(manager, int(n), int(r), bool(u))
        graph = answer.runtime_mode.name != "NONE"
        if objective == "padding":
            total += answer.padded_tokens - n if graph else 0
        else:
            total += float(
                model.step_time_ms(answer.runtime_mode, np.array([answer.padded_tokens]))[0]
            )
    return total


def _brute(cfg, trace, k, objective, model) -> float:
    """Best score over every pair of ladders with <= k sizes under the planner's rules."""
    q = cfg.uniform_decode_query_len
    mode = cfg.cudagraph_mode
    decode_limit = min(cfg.max_num_seqs, cfg.max_num_batched_tokens // q)
    uses_decode = mode.separate_routine()
    uses_prefill = mode.mixed_mode().name != "NONE"
    dec = trace[trace["uniform_decode"]]
    r = -(-dec["num_tokens"] // q)
    to_decode = r[r <= decode_limit] if uses_decode else r[:0]
    token_steps = trace[~trace.index.isin(to_decode.index)]["num_tokens"]
    dec_top = int(to_decode.max()) if len(to_decode) else None
    pre_top = int(token_steps.max()) if len(token_steps) and uses_prefill else None
    dec_sets = [()]
    if dec_top is not None:  # the rule: the decode ladder reaches the largest decode
        others = range(1, dec_top)
        dec_sets = [(*c, dec_top) for b in range(k) for c in itertools.combinations(others, b)]
    pre_sets = [()]
    if pre_top is not None:
        universe = range(1, cfg.max_num_batched_tokens + 1)
        pre_sets = [c for b in range(1, k + 1) for c in itertools.combinations(universe, b)]
        if objective == "padding":
            pre_sets = [c for c in pre_sets if c[-1] == pre_top]
        elif dec_top is not None:  # with decode graphs, the time plan may capture no prefill
            pre_sets.append(())
    best = np.inf
    for d, p in itertools.product(dec_sets, pre_sets):
        if len(d) + len(p) <= k:
            best = min(best, _score(cfg, trace, Gen2Ladder(p, d), objective, model))
    return best


@pytest.mark.parametrize("objective", ["padding", "time"])
@pytest.mark.parametrize("seed", range(10))
def test_planner_matches_brute_force(seed, objective):
    mode = MODES[seed % len(MODES)]
    cfg, trace, model = _instance(seed, mode)
    k = 3
    ladder = plan_gen2_capture_sizes(trace, k, objective=objective, cost_model=model, config=cfg)
    assert ladder.num_sizes <= k
    got = _score(cfg, trace, ladder, objective, model)
    assert got == pytest.approx(_brute(cfg, trace, k, objective, model), abs=1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_decode_top_rule_costs_little_with_the_device_model(seed):
    """The rule (the decode ladder reaches the largest decode) against every pair of
    ladders, unrestricted, with the H200 device model's step times: within 0.5%."""
    from cgdispatch.estimate.device_model import device_cost_model

    model = device_cost_model("llama-3.1-8b", "H200")
    cfg, trace, _ = _instance(seed, MODES[seed % len(MODES)])
    k = 3
    ladder = plan_gen2_capture_sizes(trace, k, objective="time", cost_model=model, config=cfg)
    got = _score(cfg, trace, ladder, "time", model)
    best = np.inf
    for b in range(k + 1):
        for p in itertools.combinations(range(1, cfg.max_num_batched_tokens + 1), b):
            for db in range(k - b + 1):
                for d in itertools.combinations(range(1, cfg.max_num_seqs + 1), db):
                    if p or d:
                        best = min(best, _score(cfg, trace, Gen2Ladder(p, d), "time", model))
    assert best <= got <= best * 1.005


class _TimedCapture:
    """Random step times (as in _instance) plus a capture time per graph that grows with size."""

    def __init__(self, model, rng):
        self.model = model
        self.per_token = rng.uniform(0.01, 0.1, 3)

    def step_time_ms(self, mode, n):
        return self.model.step_time_ms(mode, n)

    def capture_time_s(self, mode, n):
        return 0.5 + self.per_token[mode.value] * np.asarray(n, dtype=np.float64)


def _ladder_capture(cfg, ladder, cost) -> float:
    mode = cfg.cudagraph_mode
    q = cfg.uniform_decode_query_len
    total = 0.0
    if mode.separate_routine():
        total += sum(
            cost.capture_time_s(mode.decode_mode(), np.array(ladder.decode_request_sizes) * q)
        )
    if mode.mixed_mode().name != "NONE":
        total += sum(cost.capture_time_s(mode.mixed_mode(), np.array(ladder.prefill_token_sizes)))
    return float(total)


@pytest.mark.parametrize("seed", range(40))
def test_capture_budget_fits_and_is_near_brute_force(seed):
    cfg, trace, base = _instance(seed, MODES[seed % len(MODES)])
    cost = _TimedCapture(base, np.random.default_rng(seed))
    k = 3
    free = plan_gen2_capture_sizes(trace, k, objective="time", cost_model=cost, config=cfg)
    budget = 0.7 * _ladder_capture(cfg, free, cost)
    q = cfg.uniform_decode_query_len
    limit = min(cfg.max_num_seqs, cfg.max_num_batched_tokens // q)
    decodes = -(-trace[trace["uniform_decode"]]["num_tokens"] // q)
    with_decode = cfg.cudagraph_mode.separate_routine() and (decodes <= limit).any()
    top = int(decodes[decodes <= limit].max()) if with_decode else None
    best = np.inf  # brute force under the planner's rule (the decode top is kept)
    for b in range(k + 1):
        for p in itertools.combinations(range(1, cfg.max_num_batched_tokens + 1), b):
            for db in range(k - b + 1):
                for d in itertools.combinations(range(1, limit + 1), db):
                    if (top is not None and (not d or d[-1] != top)) or not (p or d):
                        continue
                    lad = Gen2Ladder(p, d)
                    # a plan captures something (the planner never returns all eager)
                    if 0 < _ladder_capture(cfg, lad, cost) <= budget:
                        best = min(best, _score(cfg, trace, lad, "time", cost))
    plan = dict(objective="time", cost_model=cost, config=cfg, capture_budget_s=budget)
    if best == np.inf:  # no plan fits: refused, saying what to change
        with pytest.raises(ValueError, match="raise the budget"):
            plan_gen2_capture_sizes(trace, k, **plan)
        return
    ladder = plan_gen2_capture_sizes(trace, k, **plan)
    assert _ladder_capture(cfg, ladder, cost) <= budget + 1e-9
    got = _score(cfg, trace, ladder, "time", cost)
    assert got <= best * 1.15  # a heuristic: worst 13.8% on 82 such instances
