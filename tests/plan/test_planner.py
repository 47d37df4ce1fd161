"""Planner: exact DP checked against brute force; comparison and export."""

import itertools
import json

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cgdispatch import CudagraphDispatcher, GraphConfig
from cgdispatch.plan.costs import FunctionCostModel
from cgdispatch.plan.ladder_compare import compare, engine_ladders, export_plan
from cgdispatch.plan.planner import as_histogram, plan_capture_sizes, plan_cost
from cgdispatch.workload.trace import make_trace


def _brute(dec, mix, k, q, a_fn, b_fn):
    """Best total over every subset of <= k candidate sizes containing the max (independent)."""
    sizes = sorted(set(dec) | set(mix))
    top = -(-max(sizes) // q) * q
    cands = sorted({-(-s // q) * q for s in sizes} - {top})
    best = np.inf
    for r in range(0, k):
        for combo in itertools.combinations(cands, r):
            ladder = [*combo, top]
            total = 0.0
            for n, c in dec.items():
                total += c * a_fn(min(s for s in ladder if s >= n))
            for n, c in mix.items():
                total += c * b_fn(min(s for s in ladder if s >= n))
            best = min(best, total)
    return best


def _total(sizes, dec, mix, a_fn, b_fn):
    pad = lambda n: min(s for s in sizes if s >= n)  # noqa: E731
    return sum(c * a_fn(pad(n)) for n, c in dec.items()) + sum(
        c * b_fn(pad(n)) for n, c in mix.items()
    )


hist_st = st.dictionaries(st.integers(1, 70), st.integers(1, 40), min_size=1, max_size=9)


@settings(max_examples=60, deadline=None)
@given(hist_st, st.integers(1, 5), st.integers(1, 4))
def test_padding_plan_matches_brute_force(hist, k, q):
    sizes = plan_capture_sizes(hist, k, multiple_of=q)
    top = -(-max(hist) // q) * q
    assert len(sizes) <= k and sizes[-1] == top and all(s % q == 0 for s in sizes)
    assert sizes == sorted(set(sizes))
    got = _total(sizes, {}, hist, float, float) - sum(n * c for n, c in hist.items())
    best = _brute({}, hist, k, q, float, float) - sum(n * c for n, c in hist.items())
    assert got == pytest.approx(best)
    assert plan_cost(hist, sizes) == pytest.approx(got)


@settings(max_examples=40, deadline=None)
@given(hist_st, hist_st, st.integers(1, 4), st.booleans(), st.integers(0, 2**31))
def test_step_time_plan_matches_brute_force(dec, mix, k, monotone, seed):
    rng = np.random.default_rng(seed)
    if monotone:  # Monge case: divide and conquer
        ta, tb = np.cumsum(rng.random(80)), np.cumsum(rng.random(80)) * 2
    else:  # arbitrary latencies: every split is tried
        ta, tb = rng.random(80) * 10, rng.random(80) * 10
    model = FunctionCostModel(lambda m, n: (ta if m.name == "FULL" else tb)[n])
    trace = make_trace(
        [n for n, c in dec.items() for _ in range(c)]
        + [n for n, c in mix.items() for _ in range(c)],
        [True] * sum(dec.values()) + [False] * sum(mix.values()),
    )
    sizes = plan_capture_sizes(trace, k, objective="step_time", cost_model=model)
    a_fn, b_fn = (lambda s: ta[s]), (lambda s: tb[s])
    assert _total(sizes, dec, mix, a_fn, b_fn) == pytest.approx(_brute(dec, mix, k, 1, a_fn, b_fn))


def test_mode_drops_steps_that_run_eagerly_anyway():
    # FULL_DECODE_ONLY: mixed steps are eager whatever the sizes, so only decodes count
    trace = make_trace([5, 5, 5, 60, 61, 62, 63], [True] * 3 + [False] * 4)
    assert plan_capture_sizes(trace, 1, mode="FULL_DECODE_ONLY") == [5]
    assert plan_capture_sizes(trace, 1)[-1] == 63


def test_max_size_and_budget():
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 300, 5000)
    plan = plan_capture_sizes(sizes, 10, max_size=128)
    assert plan[-1] == 128 and len(plan) == 10
    assert plan_capture_sizes(sizes, 10_000) == sorted(set(sizes.tolist()))  # zero padding
    assert plan_cost(sizes, plan_capture_sizes(sizes, 10_000)) == 0
    with pytest.raises(ValueError, match="multiple_of=4"):
        plan_capture_sizes(sizes, 3, max_size=130, multiple_of=4)
    with pytest.raises(ValueError, match="max_graphs"):
        plan_capture_sizes(sizes, 0)
    with pytest.raises(ValueError, match="needs a cost_model"):
        plan_capture_sizes(sizes, 3, objective="step_time")
    with pytest.raises(ValueError, match="objective"):
        plan_capture_sizes(sizes, 3, objective="speed")


def test_histogram_inputs_agree():
    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 40, 400)
    a = as_histogram(sizes)
    b = as_histogram(make_trace(sizes))
    assert a["total"].equals(b["total"])
    assert plan_capture_sizes(dict(zip(a.index, a["total"])), 5) == plan_capture_sizes(b, 5)


def test_compare_rows_match_a_dispatch_loop():
    rng = np.random.default_rng(5)
    trace = make_trace(rng.integers(1, 700, 2000), rng.random(2000) < 0.7)
    config = GraphConfig(vllm_version="0.33", max_num_seqs=128)
    ladders = {"plan": plan_capture_sizes(trace, 12, max_size=256), **engine_ladders(config)}
    table = compare(trace, ladders, config=config).set_index("ladder")
    assert ladders["vllm"] == config.cudagraph_capture_sizes
    for name, sizes in ladders.items():
        d = CudagraphDispatcher(config.replace(cudagraph_capture_sizes=sizes))
        d.initialize_cudagraph_keys()
        pads = reals = eager = 0
        for n, u in zip(trace["num_tokens"], trace["uniform_decode"]):
            mode, desc = d.dispatch(int(n), uniform_decode=bool(u))
            if mode.name == "NONE":
                eager += 1
            else:
                pads += desc.num_tokens - n
                reals += n
        assert table.loc[name, "padded_token_ratio"] == pytest.approx(pads / reals)
        assert table.loc[name, "eager_step_share"] == pytest.approx(eager / len(trace))
        assert table.loc[name, "num_graphs"] == len(sizes)
    assert table.loc["plan", "padded_token_ratio"] < table.loc["pow2", "padded_token_ratio"]


def test_export_plan_round_trips():
    config = GraphConfig(vllm_version="0.33", max_num_seqs=64, num_speculative_tokens=1)
    sizes = [2, 6, 10, 32]
    out = export_plan(sizes, config)
    back = GraphConfig.from_vllm(json.loads(out["vllm_compilation_config"]), max_num_seqs=64)
    assert back.cudagraph_capture_sizes == sizes
    assert out["sglang"] == "--cuda-graph-bs 1 3 5 16 --cuda-graph-max-bs 16"
    trt = yaml.safe_load(out["trtllm"])["cuda_graph_config"]
    assert trt["batch_sizes"] == [1, 3, 5, 16] and trt["max_batch_size"] == 16
    assert "--max-num-seqs 64" in out["vllm"]


def test_compare_with_cost_model_adds_time_and_memory():
    rng = np.random.default_rng(9)
    trace = make_trace(rng.integers(1, 100, 500), rng.random(500) < 0.5)
    model = FunctionCostModel(lambda m, n: 1.0 + 0.01 * n, graph_memory=lambda m, n: 1000.0 * n)
    table = compare(trace, {"a": [8, 64, 128], "b": [128]}, cost_model=model).set_index("ladder")
    padded_a = [min(s for s in (8, 64, 128) if s >= n) for n in trace["num_tokens"]]
    assert table.loc["a", "mean_step_ms"] == pytest.approx(
        np.mean([1 + 0.01 * p for p in padded_a])
    )
    assert table.loc["b", "mean_step_ms"] == pytest.approx(1 + 0.01 * 128)
    # one shared pool with weak outputs (vLLM): the largest captured graph's memory
    assert table.loc["a", "graph_memory_bytes"] == 1000.0 * 128
    assert table.loc["a", "source"] == "model"
