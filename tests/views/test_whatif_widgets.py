"""What-if dashboard: the metrics shown equal a brute-force replay of the trace through the
dispatcher, on random traces, ladders and modes; bad entries show messages, never raise."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from cgdispatch import CudagraphDispatcher, CUDAGraphMode, GraphConfig, whatif_dashboard
from cgdispatch.plan.costs import AffineCostModel
from cgdispatch.views.plots import figure_source
from cgdispatch.views.whatif_handlers import metrics_html, whatif_for_box
from cgdispatch.views.whatif_plots import whatif_figure
from cgdispatch.workload.trace import make_trace

BASE = GraphConfig(vllm_version="0.33", max_num_seqs=16, max_num_batched_tokens=256)


def attrs(html_text: str) -> dict[str, str]:
    """The data-* attributes of the first element of an HTML fragment."""
    return dict(re.findall(r'data-([a-z-]+)="([^"]*)"', html_text.split(">", 1)[0]))


def random_trace(rng: random.Random, steps: int, max_tokens: int = 256, max_loras: int = 0):
    n = np.array([rng.randint(1, max_tokens) for _ in range(steps)])
    uniform = np.array([rng.random() < 0.6 for _ in range(steps)])
    n = np.where(uniform, np.minimum(n, 16), n)  # decodes: one token per request, <= max_num_seqs
    loras = np.array([rng.randint(0, max_loras) for _ in range(steps)])
    return make_trace(n, uniform, num_reqs=n, has_lora=loras > 0, num_active_loras=loras)


def brute_force(config: GraphConfig, trace, cost=None) -> dict[str, float]:
    """Dispatch every step one by one and total what happened."""
    dispatcher = CudagraphDispatcher(config, record_stats=False)
    dispatcher.initialize_cudagraph_keys()
    eager = padding = graph_real = 0
    full = piecewise = 0
    total_ms = 0.0
    for row in trace.itertuples():
        mode, desc = dispatcher.dispatch(
            int(row.num_tokens),
            uniform_decode=bool(row.uniform_decode),
            has_lora=bool(row.has_lora),
            num_active_loras=int(row.num_active_loras),
        )
        if mode is CUDAGraphMode.NONE:
            eager += 1
        else:
            padding += desc.num_tokens - int(row.num_tokens)
            graph_real += int(row.num_tokens)
            full += mode is CUDAGraphMode.FULL
            piecewise += mode is CUDAGraphMode.PIECEWISE
        if cost is not None:
            total_ms += float(cost.step_time_ms(mode, np.array([desc.num_tokens]))[0])
    steps = len(trace)
    return {
        "eager-steps": eager,
        "eager-step-share": eager / steps,
        "padding-tokens": padding,
        "padded-token-ratio": padding / graph_real if graph_real else 0.0,
        "step-share-full": full / steps,
        "step-share-piecewise": piecewise / steps,
        "mean-step-ms": total_ms / steps,
    }


def test_dashboard_metrics_equal_a_brute_force_replay_on_random_edits():
    rng = random.Random(71)
    for _ in range(6):
        max_loras = rng.choice([0, 2])
        base = BASE.replace(max_loras=max_loras)
        trace = random_trace(rng, rng.randint(50, 300), max_loras=max_loras)
        cost = AffineCostModel(per_token_ms=rng.uniform(0.005, 0.05))
        dash = whatif_dashboard(trace, base, cost, trace_source="synthetic test trace")
        dash.draw = False  # the numbers are the point here; figures are tested below
        for _ in range(3):
            sizes = sorted(rng.sample(range(1, 257), rng.randint(1, 12)))
            mode = rng.choice(list(CUDAGraphMode))
            dash.mode_box.value = mode.name
            dash.sizes_box.value = ", ".join(map(str, rng.sample(sizes, len(sizes))))
            got = attrs(dash.metrics.value)
            want = brute_force(
                base.replace(cudagraph_mode=mode, cudagraph_capture_sizes=sizes), trace, cost
            )
            assert got["testid"] == "whatif-metrics" and got["mode"] == mode.name
            # NONE keeps no capture sizes (vLLM 0.33 _set_cudagraph_sizes)
            assert got["sizes"] == ("" if mode is CUDAGraphMode.NONE else ",".join(map(str, sizes)))
            assert int(got["eager-steps"]) == want["eager-steps"]
            assert int(got["padding-tokens"]) == want["padding-tokens"]
            for key in (
                "eager-step-share",
                "padded-token-ratio",
                "step-share-full",
                "step-share-piecewise",
            ):
                assert float(got[key]) == pytest.approx(want[key], abs=1e-12), key
            assert float(got["mean-step-ms"]) == pytest.approx(want["mean-step-ms"], rel=1e-9)
            assert dash.message.value == ""


def test_dashboard_decision_and_prediction_follow_the_dispatcher():
    rng = random.Random(72)
    trace = random_trace(rng, 100)
    cost = AffineCostModel(per_token_ms=rng.uniform(0.005, 0.05))
    config = BASE.replace(cudagraph_capture_sizes=[1, 2, 4, 8, 16, 32, 64])
    dash = whatif_dashboard(trace, config, cost, num_tokens=20)
    dash.draw = False
    ref = CudagraphDispatcher(config.resolve(), record_stats=False)
    ref.initialize_cudagraph_keys()
    for _ in range(30):
        n = rng.randint(1, dash.slider.max)
        uniform = rng.random() < 0.5
        dash.uniform.value = uniform
        dash.slider.value = n
        mode, desc = ref.dispatch(n, uniform_decode=uniform)
        got = attrs(dash.decision.value)
        assert (int(got["num-tokens"]), got["runtime-mode"], int(got["padded-size"])) == (
            n,
            mode.name,
            desc.num_tokens,
        )
        predicted = float(cost.step_time_ms(mode, np.array([desc.num_tokens]))[0])
        assert f"{predicted:.3f} ms (model)" in dash.decision.value


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("1, 2, x", "not integers"),
        ("", "no capture sizes"),
        ("4, 999", "exceed max_num_batched_tokens=256"),
    ],
)
def test_bad_entries_show_a_message_and_clear_the_metrics(text, fragment):
    trace = random_trace(random.Random(73), 40)
    dash = whatif_dashboard(trace, BASE)
    assert dash.metrics.value and dash.plot.value  # the starting ladder is shown, with its figure
    dash.sizes_box.value = text
    assert dash.metrics.value == "" and dash.plot.value == b"" and dash.decision.value == ""
    assert fragment in dash.message.value
    dash.sizes_box.value = "8, 40"  # a good entry brings everything back
    assert attrs(dash.metrics.value)["sizes"] == "8,40" and dash.message.value == ""
    assert dash.plot.value[:4] == b"\x89PNG"


def test_whatif_for_box_reports_failing_cost_models_and_bad_modes():
    trace = random_trace(random.Random(74), 30)

    def broken(mode, n):
        raise KeyError(mode.name)

    result, notes = whatif_for_box(BASE, trace, "1, 2, 4", "FULL", broken)
    assert result is None and "cost model failed: KeyError" in notes[0]
    result, notes = whatif_for_box(BASE, trace, "1, 2, 4", "FOO", None)
    assert result is None and "'FOO' is unknown" in notes[0]
    dash = whatif_dashboard(trace, BASE, broken)
    assert "cost model failed" in dash.message.value and dash.metrics.value == ""


def test_metrics_html_labels_times_with_the_cost_source_and_escapes():
    trace = random_trace(random.Random(75), 50)
    cost = AffineCostModel(source="model (illustrative)")
    result, _ = whatif_for_box(BASE, trace, "1, 8, 64", "FULL", cost)
    page = metrics_html(result, "<b>synthetic</b>")
    assert "ms mean (model (illustrative))" in page and "MiB" in page
    assert "&lt;b&gt;synthetic&lt;/b&gt;" in page and "<b>synthetic</b>" not in page
    plain, _ = whatif_for_box(BASE, trace, "1, 8, 64", "FULL", None)
    assert "mean-step-ms" not in attrs(metrics_html(plain))


def test_whatif_figure_counts_every_step_and_names_its_source():
    rng = random.Random(76)
    trace = random_trace(rng, 120)
    result, _ = whatif_for_box(BASE, trace, "1, 4, 16, 64", "FULL_AND_PIECEWISE")
    fig = whatif_figure(result, "synthetic trace (seed 76)")
    assert figure_source(fig) == "synthetic trace (seed 76)"
    left = fig.axes[0]
    assert sum(p.get_height() for p in left.patches) == len(trace)


def test_dashboard_rejects_bad_traces_and_configs():
    with pytest.raises(ValueError, match="num_tokens"):
        whatif_dashboard(make_trace([1, 2]).drop(columns="num_tokens"))
    with pytest.raises(ValueError, match="GraphConfig"):
        whatif_dashboard(make_trace([1, 2]), {"cudagraph_mode": "FULL"})


def test_step_histogram_and_ladder_figures_draw_the_data_given():
    from cgdispatch import compare, step_histogram
    from cgdispatch.views.whatif_plots import ladder_comparison_figure, step_histogram_figure

    rng = random.Random(77)
    trace = random_trace(rng, 150)
    hist = step_histogram(trace)
    fig = step_histogram_figure(hist, source="synthetic test trace")
    assert figure_source(fig) == "synthetic test trace"
    heights = sum(p.get_height() for p in fig.axes[0].patches)
    assert heights == len(trace)
    table = compare(
        trace, {"a": [1, 8, 64], "b": [4, 16]}, config=BASE, cost_model=AffineCostModel()
    )
    fig = ladder_comparison_figure(table, source="synthetic test trace")
    panels = {ax.get_title().split("\n")[0]: ax for ax in fig.axes}
    assert "[model]" in panels["mean step (ms)"].get_title()
    shown = [p.get_height() for p in panels["eager steps (%)"].patches]
    assert shown == pytest.approx(list(100 * table["eager_step_share"]))
    assert [p.get_height() for p in panels["capture sizes"].patches] == [3, 2]
    # vLLM 0.34: the first panel counts prefill token and decode request sizes together
    from cgdispatch.plan.gen2_ladder import Gen2Ladder

    gen2 = compare(trace, {"a": Gen2Ladder((8, 64), (2, 16))}, config=GEN2)
    fig = ladder_comparison_figure(gen2, source="synthetic test trace")
    panels = {ax.get_title().split("\n")[0]: ax for ax in fig.axes}
    assert [p.get_height() for p in panels["sizes (prefill + decode)"].patches] == [4]


def test_workload_trace_from_presets_and_files(tmp_path):
    from cgdispatch import simulate_steps, synthetic_requests
    from cgdispatch.workload.sources import workload_trace

    trace, label = workload_trace("alpaca", num_requests=40, rate_per_s=5.0, seed=3, max_num_seqs=8)
    want = simulate_steps(
        synthetic_requests(40, "alpaca", rate_per_s=5.0, seed=3), max_num_seqs=8, seed=3
    )
    assert trace.equals(want) and label.startswith("synthetic (alpaca preset, 40 requests")
    steps = tmp_path / "steps.csv"
    steps.write_text("num_tokens\n" + "\n".join(str(n) for n in [3, 9, 1, 40]) + "\n")
    trace, label = workload_trace(str(steps))
    assert trace["num_tokens"].tolist() == [3, 9, 1, 40] and label == "steps from steps.csv"
    with pytest.raises(ValueError, match="neither a synthetic preset"):
        workload_trace("sharegtp")


def test_dashboard_switches_cost_model_and_plans_for_each_objective():
    from cgdispatch.plan.planner import plan_capture_sizes
    from cgdispatch.plan.whatif import evaluate

    rng = random.Random(8)
    trace = random_trace(rng, 400)
    models = {
        "affine": AffineCostModel(),
        "steep": AffineCostModel(base_ms={"NONE": 9.0, "PIECEWISE": 2.0, "FULL": 1.0}),
    }
    dash = whatif_dashboard(trace, BASE, cost_models=models)
    dash.draw = False
    shown = attrs(dash.metrics.value)
    config = BASE.resolve()
    want = evaluate(config, trace, models["affine"]).summary
    assert float(shown["mean-step-ms"]) == pytest.approx(want["mean_step_ms"])
    dash.model_box.value = "steep"
    want = evaluate(config, trace, models["steep"]).summary
    assert float(attrs(dash.metrics.value)["mean-step-ms"]) == pytest.approx(want["mean_step_ms"])
    for objective in ("time", "padding"):
        dash.objective_box.value = objective
        dash.graphs_box.value = 5
        dash.plan()
        sizes = plan_capture_sizes(
            trace, 5, objective=objective, cost_model=models["steep"], config=config
        )
        assert attrs(dash.metrics.value)["sizes"] == ",".join(map(str, sizes))
    # a plan that cannot be made shows a message, never raises
    dash.mode_box.value = "NONE"
    dash.plan()
    assert "no steps to plan for" in dash.message.value


GEN2 = GraphConfig(vllm_version="0.34", max_num_seqs=16, max_num_batched_tokens=256)


def brute_force_gen2(config: GraphConfig, trace, cost) -> dict[str, float]:
    """Every step asked of vLLM 0.34's CudaGraphManager one by one, totalled."""
    from cgdispatch import CudaGraphManager

    manager = CudaGraphManager(config.resolve())
    eager = padding = 0
    total_ms = 0.0
    for row in trace.itertuples():
        q = config.uniform_decode_query_len
        desc = manager.dispatch(
            int(row.num_reqs),
            int(row.num_tokens),
            q if row.uniform_decode else None,
            int(row.num_active_loras),
        )
        eager += desc.cg_mode is CUDAGraphMode.NONE
        if desc.cg_mode is not CUDAGraphMode.NONE:
            padding += desc.num_tokens - int(row.num_tokens)
        total_ms += float(cost.step_time_ms(desc.cg_mode, np.array([desc.num_tokens]))[0])
    return {"eager-steps": eager, "padding-tokens": padding, "mean-step-ms": total_ms / len(trace)}


def test_dashboard_defaults_to_vllm_034_and_says_so():
    trace = random_trace(random.Random(3), 80)
    dash = whatif_dashboard(trace)
    assert dash.version_box.value == "0.34" and dash.decode_box.layout.display is None
    got = attrs(dash.metrics.value)
    assert got["vllm-version"] == "0.34" and "the newest" in dash.metrics.value
    want = GraphConfig(vllm_version="0.34").resolve()
    assert got["sizes"] == ",".join(map(str, want.prefill_cudagraph_capture_token_sizes))
    assert got["decode-sizes"] == ",".join(map(str, want.decode_cudagraph_capture_request_sizes))


def test_gen2_dashboard_metrics_equal_the_manager_on_random_edits():
    rng = random.Random(74)
    trace = random_trace(rng, 250)
    cost = AffineCostModel(per_token_ms=rng.uniform(0.005, 0.05))
    dash = whatif_dashboard(trace, GEN2, cost)
    dash.draw = False
    for _ in range(5):
        prefill = sorted(rng.sample(range(1, 257), rng.randint(1, 10)))
        decode = sorted(rng.sample(range(1, 17), rng.randint(1, 5)))
        mode = rng.choice(["FULL_AND_PIECEWISE", "FULL", "PIECEWISE", "FULL_DECODE_ONLY"])
        dash.mode_box.value = mode
        dash.decode_box.value = ", ".join(map(str, decode))
        dash.sizes_box.value = ", ".join(map(str, prefill))
        got = attrs(dash.metrics.value)
        want = brute_force_gen2(
            GEN2.replace(
                cudagraph_mode=mode,
                prefill_cudagraph_capture_token_sizes=prefill,
                decode_cudagraph_capture_request_sizes=decode,
            ),
            trace,
            cost,
        )
        assert got["vllm-version"] == "0.34" and got["mode"] == mode
        assert got["sizes"] == ",".join(map(str, prefill))
        assert got["decode-sizes"] == ",".join(map(str, decode))
        assert int(got["eager-steps"]) == want["eager-steps"]
        assert int(got["padding-tokens"]) == want["padding-tokens"]
        assert float(got["mean-step-ms"]) == pytest.approx(want["mean-step-ms"], rel=1e-9)


def test_gen2_dashboard_plans_both_boxes_and_toggles_generation():
    from cgdispatch.plan.planner_v2 import plan_gen2_capture_sizes

    rng = random.Random(9)
    trace = random_trace(rng, 300)
    models = {"affine": AffineCostModel()}
    dash = whatif_dashboard(trace, GEN2, cost_models=models)
    dash.draw = False
    dash.objective_box.value = "padding"
    dash.graphs_box.value = 6
    dash.plan()
    want = plan_gen2_capture_sizes(trace, 6, config=GEN2.resolve())
    got = attrs(dash.metrics.value)
    assert got["sizes"] == ",".join(map(str, want.prefill_token_sizes))
    assert got["decode-sizes"] == ",".join(map(str, want.decode_request_sizes))
    # to V1 and back: the metrics follow the generation
    dash.version_box.value = "0.33"
    assert attrs(dash.metrics.value)["vllm-version"] == "0.33"
    assert dash.decode_box.layout.display == "none"
    dash.version_box.value = "0.34"
    assert attrs(dash.metrics.value)["vllm-version"] == "0.34"


def test_dashboard_with_requests_shows_vllms_scheduler_for_the_boxed_sizes():
    """With the request table, the metrics carry p50/p99 TTFT and TPOT, throughput and
    preemptions equal to a direct run of vLLM's scheduler with the box's ladder."""
    from cgdispatch import ladder_config, synthetic_requests
    from cgdispatch.plan.ladder_latency import ladder_latency
    from cgdispatch.workload.trace import simulate_steps

    config = GraphConfig(vllm_version="0.33", max_num_seqs=16, max_num_batched_tokens=256)
    requests = synthetic_requests(40, "sharegpt", rate_per_s=5.0, seed=2)
    trace = simulate_steps(requests, max_num_seqs=16, max_num_batched_tokens=256)
    model = AffineCostModel()
    dash = whatif_dashboard(trace, config, model, requests=requests)
    dash.draw = False
    for text in ("1,2,4,8,16", "4,64,256"):
        dash.sizes_box.value = text
        head = dash.metrics.value.split(">", 1)[0]
        shown = dict(re.findall(r'data-([a-z0-9-]+)="([^"]*)"', head))
        sizes = [int(x) for x in text.split(",")]
        direct = ladder_latency(ladder_config(config, sizes).resolve(), requests, model)
        for key, value in direct.items():
            assert float(shown[key.replace("_", "-")]) == pytest.approx(value), key
        assert (
            "vLLM&#x27;s scheduler" in dash.metrics.value
            or "vLLM's scheduler" in dash.metrics.value
        )


def test_a_plan_is_always_accepted_by_the_widget_that_asked_for_it():
    """Issue 37: notebook 04's settings (vLLM 0.34, the device model, objective time, max
    graphs <= 8) give a time plan with no prefill size; the box shows "none", the what-if
    accepts it and the figure shows (no empty box rejected, no broken image)."""
    from cgdispatch.estimate.device_model import device_cost_model
    from cgdispatch.plan.planner_v2 import plan_gen2_capture_sizes
    from cgdispatch.views.whatif_handlers import plan_boxes
    from cgdispatch.workload.sources import workload_trace

    rng = random.Random()
    config = GraphConfig(vllm_version="0.34", max_num_seqs=64, max_num_batched_tokens=2048)
    trace, _ = workload_trace(
        "sharegpt", num_requests=150, rate_per_s=8.0, seed=rng.randint(0, 99),
        max_num_seqs=64, max_num_batched_tokens=2048,
    )  # fmt: skip
    model = device_cost_model("llama-3.1-8b", "H200")
    dash = whatif_dashboard(trace, config, cost_models={"H200": model})
    cases = [(n, rng.choice(["time", "padding"])) for n in rng.sample(range(2, 9), 3)]
    for max_graphs, objective in [*cases, (8, "time")]:  # the notebook's own: time, 8
        boxes, notes = plan_boxes(config, trace, "FULL_AND_PIECEWISE", objective, max_graphs, model)
        assert boxes is not None, notes
        want = plan_gen2_capture_sizes(
            trace, max_graphs, objective=objective, cost_model=model, config=config.resolve()
        )
        assert whatif_for_box(config, trace, boxes.sizes_text, "FULL_AND_PIECEWISE", model,
                              boxes.decode_text)[0] is not None  # fmt: skip
        dash.objective_box.value, dash.graphs_box.value = objective, max_graphs
        dash.plan()
        assert dash.result is not None and dash.message.value == "", dash.message.value
        got = attrs(dash.metrics.value)
        assert got["sizes"] == ",".join(map(str, want.prefill_token_sizes))
        assert got["decode-sizes"] == ",".join(map(str, want.decode_request_sizes))
        assert dash.plot.layout.display is None and dash.plot.value
    dash.graphs_box.value = 1  # too few for two ladders: one message, the last result kept
    dash.plan()
    assert "max_graphs=1 is too few" in dash.message.value and dash.result is not None
    dash.sizes_box.value = ""  # a cleared box: one message, and no broken image
    assert dash.result is None and "none" in dash.message.value
    assert dash.plot.layout.display == "none"
