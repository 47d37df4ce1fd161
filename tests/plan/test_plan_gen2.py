"""vLLM 0.34 in the plan layer: evaluate, compare, engine_ladders and export_plan against
CudaGraphManager and vLLM 0.34's own config resolution."""

import json
import warnings

import numpy as np
import pytest

from cgdispatch import CudaGraphManager, GraphConfig
from cgdispatch.plan.costs import AffineCostModel, FunctionCostModel
from cgdispatch.plan.gen2_ladder import Gen2Ladder, gen2_config, ladder_config, vllm_gen2_ladder
from cgdispatch.plan.ladder_compare import compare, engine_ladders, export_plan
from cgdispatch.plan.planner_v2 import plan_gen2_capture_sizes
from cgdispatch.plan.whatif import MODE_CODES, evaluate
from cgdispatch.workload.trace import make_trace

GEN2_CONFIGS = [
    dict(max_num_seqs=32, max_num_batched_tokens=512),
    dict(max_num_seqs=16, max_num_batched_tokens=256, num_speculative_tokens=2),
    dict(cudagraph_mode="FULL", max_num_seqs=8, max_num_batched_tokens=128),
    dict(cudagraph_mode="PIECEWISE", prefill_cudagraph_capture_token_sizes=[3, 17, 40]),
    dict(cudagraph_mode="FULL_DECODE_ONLY", max_num_seqs=24, num_speculative_tokens=1),
    dict(max_num_seqs=16, max_loras=3, specialize_active_lora=True, max_num_batched_tokens=300),
    dict(max_num_seqs=64, device_capability=(10, 0), max_num_batched_tokens=2048),
]


def _gen2_trace(rng, n, cfg):
    """Random steps a scheduler could run: uniform decodes of q tokens per request, other
    steps with 1..min(tokens, max_num_seqs + 8) requests, some LoRA adapters."""
    q = cfg.uniform_decode_query_len
    top = cfg.max_num_batched_tokens
    uniform = rng.random(n) < 0.5
    reqs = rng.integers(1, cfg.max_num_seqs + 9, n)
    tokens = np.where(uniform, np.minimum(reqs * q, top // q * q), rng.integers(1, top + 1, n))
    reqs = np.where(uniform, tokens // q, np.minimum(reqs, tokens))
    loras = rng.integers(0, cfg.max_loras + 2, n) * (rng.random(n) < 0.3)
    return make_trace(tokens, uniform, reqs, has_lora=loras > 0, num_active_loras=loras)


@pytest.mark.parametrize("fields", GEN2_CONFIGS, ids=lambda f: str(sorted(f.items())))
def test_evaluate_gen2_matches_manager_step_by_step(fields):
    rng = np.random.default_rng(len(str(fields)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = GraphConfig(vllm_version="0.34", **fields).resolve()
    trace = _gen2_trace(rng, 2000, cfg)
    model = AffineCostModel(per_token_ms=float(rng.uniform(0.01, 0.1)))
    result = evaluate(cfg, trace, model)
    manager = CudaGraphManager(cfg)
    q = cfg.uniform_decode_query_len
    modes, padded, times = [], [], []
    for n, r, u, loras in trace[
        ["num_tokens", "num_reqs", "uniform_decode", "num_active_loras"]
    ].itertuples(index=False):
        desc = manager.dispatch(int(r), int(n), q if u else None, int(loras))
        modes.append(MODE_CODES[desc.cg_mode])
        padded.append(desc.num_tokens)
        times.append(model.base_ms[desc.cg_mode.name] + model.per_token_ms * desc.num_tokens)
    np.testing.assert_array_equal(result.runtime_mode, modes)
    np.testing.assert_array_equal(result.padded_tokens, padded)
    np.testing.assert_allclose(result.step_time_ms, times)
    s = result.summary
    graph = np.array(modes) > 0
    real = trace["num_tokens"].to_numpy()
    assert s["padding_tokens"] == int(np.sum(np.array(padded)[graph] - real[graph]))
    assert s["vllm_version"] == "0.34"
    descs = manager.capture_order()
    assert s["num_captured_graphs"] == len(descs)
    decode = {d.num_reqs for d in descs if d.uniform_token_count is not None}
    prefill = {d.num_tokens for d in descs if d.uniform_token_count is None}
    assert s["num_graphs"] == len(decode) + len(prefill)


def test_evaluate_gen2_request_count_matters():
    """The same tokens with more requests than a FULL graph holds run eagerly (gen 2 only)."""
    cfg = GraphConfig(vllm_version="0.34", cudagraph_mode="FULL", max_num_seqs=4).resolve()
    trace = make_trace([8, 8], False, [4, 5])
    assert list(evaluate(cfg, trace).runtime_mode) == [MODE_CODES[cfg.cudagraph_mode], 0]


def test_engine_ladders_gen2_are_vllm_034_defaults():
    for fields in GEN2_CONFIGS[:3] + GEN2_CONFIGS[-1:]:
        cfg = GraphConfig(vllm_version="0.34", **fields).resolve()
        ladders = engine_ladders(cfg)
        vllm = ladders["vllm"]
        default = GraphConfig(vllm_version="0.34", **fields).resolve()
        assert list(vllm.prefill_token_sizes) == default.prefill_cudagraph_capture_token_sizes
        assert list(vllm.decode_request_sizes) == default.decode_cudagraph_capture_request_sizes
        assert ladders["pow2"][-1] <= max(vllm.prefill_token_sizes)
    sm100 = vllm_gen2_ladder(GraphConfig(vllm_version="0.34", device_capability=(10, 0)))
    assert len(sm100.prefill_token_sizes) == 54  # vLLM 0.34's prefill grid at 8192


def test_export_plan_gen2_writes_new_fields_only():
    cfg = GraphConfig(vllm_version="0.34", max_num_seqs=32, num_speculative_tokens=1).resolve()
    ladder = Gen2Ladder((5, 64, 300), (1, 3, 32))
    flags = export_plan(ladder, cfg)
    cc = json.loads(flags["vllm_compilation_config"])
    assert cc["prefill_cudagraph_capture_token_sizes"] == [5, 64, 300]
    assert cc["decode_cudagraph_capture_request_sizes"] == [1, 3, 32]
    assert "cudagraph_capture_sizes" not in cc and "max_cudagraph_capture_size" not in cc
    assert flags["sglang"] == "--cuda-graph-bs 1 3 32 --cuda-graph-max-bs 32"
    # the JSON read back by from_vllm gives a config capturing the same graphs
    back = GraphConfig.from_vllm(cc, max_num_seqs=32, num_speculative_tokens=1).resolve()
    assert (
        CudaGraphManager(back).capture_order()
        == CudaGraphManager(gen2_config(cfg, ladder)).capture_order()
    )
    # no decode sizes (modes without decode graphs): request counts from the prefill sizes
    flags = export_plan(Gen2Ladder((2, 6, 64, 300), ()), cfg)
    assert flags["sglang"] == "--cuda-graph-bs 1 3 32 --cuda-graph-max-bs 32"  # q = 2, <= 32
    # a token list is split as vLLM 0.34 splits the legacy field, then written as new fields
    cc = json.loads(export_plan([1, 2, 4, 8, 16], cfg)["vllm_compilation_config"])
    assert "cudagraph_capture_sizes" not in cc
    assert cc["decode_cudagraph_capture_request_sizes"] == [1, 2, 4, 8]


def test_compare_gen2_rows_match_evaluate():
    rng = np.random.default_rng(3)
    cfg = GraphConfig(vllm_version="0.34", max_num_seqs=32, max_num_batched_tokens=512).resolve()
    trace = _gen2_trace(rng, 1500, cfg)
    ladders = {"mine": Gen2Ladder((16, 100, 512), (2, 8, 32)), "tokens": [8, 64, 512]}
    table = compare(trace, ladders, config=cfg).set_index("ladder")
    for name, ladder in ladders.items():
        summary = evaluate(ladder_config(cfg, ladder), trace).summary
        assert table.loc[name, "padding_tokens"] == summary["padding_tokens"]
        assert table.loc[name, "vllm_version"] == "0.34"
    assert table.loc["mine", "decode_sizes"] == [2, 8, 32]
    assert table.loc["tokens", "prefill_sizes"] == [8, 64, 512]


def test_gen2_planner_errors_and_budgets():
    trace = make_trace([1, 2, 3, 40, 41, 300], [True, True, True, False, False, False])
    v1 = GraphConfig(vllm_version="0.33")
    with pytest.raises(ValueError, match="plan_capture_sizes"):
        plan_gen2_capture_sizes(trace, 4, config=v1)
    gen2 = GraphConfig(vllm_version="0.34").resolve()
    with pytest.raises(ValueError, match="max_graphs >= 2"):
        plan_gen2_capture_sizes(trace, 1, config=gen2)
    with pytest.raises(ValueError, match="cost_model"):
        plan_gen2_capture_sizes(trace, 4, objective="time", config=gen2)
    with pytest.raises(ValueError, match="objective"):
        plan_gen2_capture_sizes(trace, 4, objective="speed", config=gen2)
    with pytest.raises(ValueError, match="NONE"):
        plan_gen2_capture_sizes(
            trace, 4, config=GraphConfig(vllm_version="0.34", cudagraph_mode="NONE")
        )
    ladder = plan_gen2_capture_sizes(trace, 2, config=gen2)
    assert ladder == Gen2Ladder((300,), (3,))
    # memory budget: graphs above 200 tokens cost too much, so the prefill top must fit
    model = FunctionCostModel(
        lambda m, n: (5.0 if m.name == "NONE" else 1.0) + n, graph_memory=lambda m, n: n * 1.0
    )
    with pytest.raises(ValueError, match="memory_budget_bytes"):
        plan_gen2_capture_sizes(trace, 4, cost_model=model, memory_budget_bytes=200, config=gen2)
    timed = plan_gen2_capture_sizes(
        trace, 4, objective="time", cost_model=model, memory_budget_bytes=200, config=gen2
    )
    assert timed == Gen2Ladder((40, 41), (1, 3))  # 300 does not fit: it runs eagerly
