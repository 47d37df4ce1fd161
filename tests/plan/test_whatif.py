"""What-if engine: vectorised replay equals a plain loop over dispatch()."""

import numpy as np
import pandas as pd
import pytest

from cgdispatch import CudagraphDispatcher, GraphConfig
from cgdispatch.plan.costs import AffineCostModel, FunctionCostModel, TableCostModel, as_cost_model
from cgdispatch.plan.whatif import MODE_CODES, dispatch_arrays, evaluate
from cgdispatch.workload.trace import make_trace

CONFIGS = [
    GraphConfig(vllm_version="0.33", max_num_seqs=32),
    GraphConfig(
        vllm_version="0.33",
        cudagraph_mode="FULL_DECODE_ONLY",
        max_num_seqs=16,
        num_speculative_tokens=2,
    ).resolve(),
    GraphConfig(
        vllm_version="0.33", cudagraph_mode="PIECEWISE", cudagraph_capture_sizes=[3, 17, 40]
    ),
    GraphConfig(
        vllm_version="0.33",
        cudagraph_mode="FULL",
        max_num_seqs=8,
        max_loras=4,
        specialize_active_lora=True,
    ),
    GraphConfig(vllm_version="0.33", cudagraph_mode="NONE"),
]


def _random_trace(rng, n, top):
    loras = rng.integers(0, 6, n) * (rng.random(n) < 0.3)
    return make_trace(
        rng.integers(1, top, n), rng.random(n) < 0.6, has_lora=loras > 0, num_active_loras=loras
    )


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: str(c.cudagraph_mode))
def test_evaluate_matches_loop_over_dispatch(config):
    rng = np.random.default_rng(hash(str(config.cudagraph_mode)) % 2**32)
    trace = _random_trace(rng, 3000, 2 * (config.max_cudagraph_capture_size or 8) + 5)
    model = AffineCostModel(per_token_ms=float(rng.uniform(0.01, 0.1)))
    result = evaluate(config, trace, model)
    loop = CudagraphDispatcher(config)
    loop.initialize_cudagraph_keys()
    modes, padded, times = [], [], []
    for n, u, hl, nal in trace[
        ["num_tokens", "uniform_decode", "has_lora", "num_active_loras"]
    ].itertuples(index=False):
        mode, desc = loop.dispatch(
            int(n), uniform_decode=bool(u), has_lora=bool(hl), num_active_loras=int(nal)
        )
        modes.append(MODE_CODES[mode])
        padded.append(desc.num_tokens)
        times.append(model.base_ms[mode.name] + model.per_token_ms * desc.num_tokens)
    np.testing.assert_array_equal(result.runtime_mode, modes)
    np.testing.assert_array_equal(result.padded_tokens, padded)
    np.testing.assert_allclose(result.step_time_ms, times)
    s = result.summary
    graph = np.array(modes) > 0
    real = trace["num_tokens"].to_numpy()
    assert s["padding_tokens"] == int(np.sum(np.array(padded)[graph] - real[graph]))
    assert s["eager_step_share"] == pytest.approx(np.mean(~graph))
    assert s["total_time_s"] == pytest.approx(sum(times) / 1e3)
    # the loop's dispatcher counted the same calls per (mode, padded size)
    stats = loop.stats_frame().set_index(["runtime_mode", "padded_size"])["calls"]
    by_size = result.by_size[result.by_size["steps"] > 0].set_index(
        ["runtime_mode", "padded_size"]
    )["steps"]
    pd.testing.assert_series_equal(by_size.sort_index(), stats.sort_index(), check_names=False)


def test_unused_captured_sizes_are_listed_and_stats_untouched():
    config = GraphConfig(
        vllm_version="0.33", cudagraph_mode="PIECEWISE", cudagraph_capture_sizes=[4, 8, 64]
    )
    dispatcher = CudagraphDispatcher(config)
    dispatcher.initialize_cudagraph_keys()
    result = evaluate(dispatcher, make_trace([1, 2, 3, 5, 100]))
    rows = result.by_size.set_index(["runtime_mode", "padded_size"])["steps"]
    assert rows[("PIECEWISE", 64)] == 0 and rows[("PIECEWISE", 4)] == 3 and rows[("NONE", 100)] == 1
    assert dispatcher.stats_frame()["calls"].sum() == 0 and dispatcher.record_stats
    modes, padded = dispatch_arrays(config, make_trace([5]))
    assert modes.tolist() == [1] and padded.tolist() == [8]


def test_graph_memory_is_the_largest_captured_graph_and_capture_time_sums():
    config = GraphConfig(
        vllm_version="0.33",
        cudagraph_mode="FULL_AND_PIECEWISE",
        cudagraph_capture_sizes=[2, 4],
        max_num_seqs=4,
    )
    model = FunctionCostModel(
        lambda m, n: n * 1.0, graph_memory=lambda m, n: n * (10.0 if m.name == "FULL" else 1.0)
    )
    s = evaluate(config, make_trace([1, 3]), model).summary
    # keys: PIECEWISE 2, 4; FULL uniform 2, 4 (q=1, <= max_num_seqs); one pool, weak outputs
    assert s["graph_memory_bytes"] == 4 * 10.0
    assert "capture_s" not in s  # the model has no capture_time_s

    class WithCapture(FunctionCostModel):
        def capture_time_s(self, mode, n):  # noqa: ANN001, ANN202
            return 0.5 * n + (1.0 if mode.name == "FULL" else 0.0)

    s = evaluate(
        config, make_trace([1, 3]), WithCapture(model.step_time, model.graph_memory)
    ).summary
    assert s["capture_s"] == pytest.approx(0.5 * 6 + 0.5 * 6 + 2 * 1.0)
    assert s["num_captured_graphs"] == 4 and s["source"] == "model"


def test_table_cost_model_interpolates_and_extrapolates():
    table = pd.DataFrame(
        {
            "mode": ["FULL", "FULL", "FULL", "NONE"],
            "num_tokens": [1, 10, 20, 5],
            "latency_ms": [1.0, 2.0, 4.0, 7.0],
        }
    )
    model = as_cost_model(table, source="measured (CPU)")
    got = model.step_time_ms(
        GraphConfig(vllm_version="0.33").cudagraph_mode.decode_mode(), np.array([1, 5, 15, 30, 0])
    )
    np.testing.assert_allclose(got, [1.0, 1 + 4 / 9, 3.0, 6.0, 1 - 1 / 9])
    assert (
        model.step_time_ms(
            GraphConfig(vllm_version="0.33", cudagraph_mode="NONE").cudagraph_mode, np.array([100])
        )[0]
        == 7.0
    )
    assert isinstance(model, TableCostModel) and model.source == "measured (CPU)"
    with pytest.raises(ValueError, match="no rows for mode PIECEWISE"):
        model.step_time_ms(
            GraphConfig(vllm_version="0.33", cudagraph_mode="PIECEWISE").cudagraph_mode,
            np.array([1]),
        )
    with pytest.raises(ValueError, match="lacks columns"):
        TableCostModel(pd.DataFrame({"mode": ["FULL"]}))
    with pytest.raises(ValueError, match="cost_model"):
        as_cost_model(42)


def test_evaluate_rejects_bad_input():
    with pytest.raises(ValueError, match="GraphConfig"):
        evaluate("FULL", make_trace([1]))
    with pytest.raises(ValueError, match="empty"):
        evaluate(GraphConfig(vllm_version="0.33"), make_trace([]))


def test_sparse_lora_counts_take_the_sorting_path():
    # a huge active-LoRA count makes the dense key range sparse: same answers as dispatch()
    config = GraphConfig(
        vllm_version="0.33",
        cudagraph_mode="PIECEWISE",
        cudagraph_capture_sizes=[4, 16],
        max_loras=2,
    )
    trace = make_trace(
        [3, 3, 10, 20], has_lora=[True, True, True, False], num_active_loras=[1, 5_000_000, 2, 0]
    )
    result = evaluate(config, trace)
    d = CudagraphDispatcher(config)
    d.initialize_cudagraph_keys()
    want = [
        d.dispatch(n, has_lora=h, num_active_loras=a)
        for n, h, a in [(3, True, 1), (3, True, 5_000_000), (10, True, 2), (20, False, 0)]
    ]
    assert result.padded_tokens.tolist() == [desc.num_tokens for _, desc in want]
    assert result.runtime_mode.tolist() == [MODE_CODES[m] for m, _ in want]
    with pytest.raises(ValueError, match="row 0: num_active_loras=-1 is invalid"):
        evaluate(config, make_trace([3], num_active_loras=-1))
