"""``tune --tensor-parallel-size``: a model too large for one GPU (the refusal's own advice)
tunes on several; every figure is one GPU's, priced from its shard of the published config,
and the ``vllm serve`` line carries the flag."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from cgdispatch import GraphConfig
from cgdispatch.__main__ import main
from cgdispatch.estimate.device_model import device_cost_model
from cgdispatch.estimate.kv_bytes import kv_bytes_per_token
from cgdispatch.estimate.startup import estimate_startup
from cgdispatch.models.published import published_model
from cgdispatch.plan.ladder_compare import compare
from cgdispatch.workload.sources import workload_trace

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CGDISPATCH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cost-cache"))


def test_a_model_refused_on_one_gpu_tunes_on_four(capsys):
    base = ["tune", "--model", LLAMA_70B, "--device", "H100", "--num-requests", "120",
            "--max-num-seqs", "64"]  # fmt: skip
    assert main(base) == 2
    assert "does not fit on H100 (TP1 PP1)" in capsys.readouterr().err
    assert main([*base, "--tensor-parallel-size", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the default ladder's KV tokens are the start-up estimate of one GPU of TP 4
    config = GraphConfig(max_num_seqs=64, max_num_batched_tokens=8192, tensor_parallel_size=4)
    expected = estimate_startup(LLAMA_70B, "H100", config.resolve(), tensor_parallel_size=4)
    assert out["held_out"]["vllm default"]["kv_cache_tokens"] == expected.kv_cache_tokens
    assert expected.kv_cache_tokens > 0
    words = shlex.split(out["flags"])
    assert "--tensor-parallel-size" in words
    assert words[words.index("--tensor-parallel-size") + 1] == "4"


def test_the_verdict_says_the_figures_are_per_gpu(capsys):
    argv = ["tune", "--model", "llama-3.1-8b", "--device", "H100", "--tensor-parallel-size",
            "2", "--num-requests", "120", "--max-num-seqs", "32"]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "on H100 x2 (TP 2, figures per GPU)" in lines[1]
    assert lines[-1].startswith("vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 2 ")


def test_one_rank_of_tp2_has_half_the_matmul_work_and_half_the_kv_bytes():
    one = device_cost_model("llama-3.1-8b", "H100")
    two = device_cost_model("llama-3.1-8b", "H100", tensor_parallel_size=2)
    assert device_cost_model(published_model("meta-llama/Llama-3.1-8B-Instruct"), "H100",
                             tensor_parallel_size=2).profile == two.profile  # fmt: skip
    # the GEMMs' FLOPs per token halve (heads, MLP and vocabulary split); TP adds the
    # all-reduce stand-ins, which carry bytes and no FLOPs
    assert two.profile.flops_per_token.sum() == pytest.approx(
        one.profile.flops_per_token.sum() / 2, rel=0.02
    )
    n = np.array([2048, 8192])
    assert np.all(two.step_time_ms("FULL", n) < 0.75 * one.step_time_ms("FULL", n))
    assert kv_bytes_per_token("llama-3.1-8b", tensor_parallel_size=2) == pytest.approx(
        kv_bytes_per_token("llama-3.1-8b") / 2
    )


def test_tp_on_a_model_without_a_published_config_is_refused():
    with pytest.raises(ValueError, match="tensor_parallel_size=2 is invalid for 'toy-tiny'"):
        device_cost_model("toy-tiny", "H100", tensor_parallel_size=2)
    with pytest.raises(ValueError, match="tensor_parallel_size=0"):
        device_cost_model("llama-3.1-8b", "H100", tensor_parallel_size=0)


def test_a_planned_serve_line_carries_the_flag_once(capsys):
    """The plan's flags come from serve_args, which already adds --tensor-parallel-size."""
    # judged on start-up: a 4-graph plan captures faster than vLLM's 30 graphs, so the
    # planned branch (whose flags carry TP) is the one printed
    argv = ["tune", "--model", "llama-3.1-8b", "--device", "H100", "--tensor-parallel-size",
            "16", "--num-requests", "120", "--max-num-seqs", "64", "--objective", "startup",
            "--max-graphs", "4", "--json"]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["recommendation"] == "planned"  # the branch under test
    words = shlex.split(out["flags"])
    assert words.count("--tensor-parallel-size") == 1
    assert words[words.index("--tensor-parallel-size") + 1] == "16"


@pytest.mark.parametrize("tp", [1, 2])
def test_plan_prices_one_gpu_of_its_tensor_parallel_size(capsys, tp):
    # V1 (0.33): one flat list of sizes per ladder, which compare takes as it is
    argv = ["plan", "--trace", "alpaca", "--max-graphs", "6", "--model", "llama-3.1-8b",
            "--device", "H100", "--tensor-parallel-size", str(tp), "--vllm-version", "0.33",
            "--json"]  # fmt: skip
    assert main(argv) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["ladders"]}
    config = GraphConfig(vllm_version="0.33", tensor_parallel_size=tp).resolve()
    trace, _ = workload_trace("alpaca")
    sizes = {name: rows[name]["sizes"] for name in ("planned", "vllm")}
    want = compare(
        trace, sizes, config=config,
        cost_model=device_cost_model("llama-3.1-8b", "H100", tensor_parallel_size=tp),
    ).set_index("ladder")  # fmt: skip
    for name in sizes:
        assert rows[name]["mean_step_ms"] == pytest.approx(want.loc[name, "mean_step_ms"])
