"""``tune_for`` is the one place that turns tune settings into a result: the CLI's ``--json``
and the dashboard's result are its answer for the same settings, and its answer is
``tune`` called on inputs assembled by hand here."""

from __future__ import annotations

import json
import random
from dataclasses import replace

from cgdispatch import GraphConfig, SchedulerLimits, tune, tune_dashboard
from cgdispatch.__main__ import main
from cgdispatch.estimate.device_model import device_cost_model
from cgdispatch.estimate.kv_bytes import kv_bytes_per_token
from cgdispatch.estimate.startup import startup_for
from cgdispatch.plan.tune_run import TuneSettings, tune_for
from cgdispatch.workload.sources import workload_requests, workload_trace


def _settings() -> TuneSettings:
    rng = random.Random()  # fresh settings each run
    return TuneSettings(
        model="qwen2.5-7b",
        device=rng.choice(["H100", "H200", "A100"]),
        trace=rng.choice(["alpaca", "sharegpt"]),
        num_requests=rng.randrange(120, 200),
        rate_per_s=rng.choice([4.0, 8.0, 16.0]),
        vllm_version=rng.choice(["0.33", "0.34"]),
        max_num_seqs=rng.choice([32, 64]),
        max_num_batched_tokens=rng.choice([2048, 4096]),
    )


def _by_hand(s: TuneSettings):
    config = GraphConfig(
        vllm_version=s.vllm_version,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
    ).resolve()
    startup = startup_for(s.model, s.device)
    # the planning trace: vLLM's scheduler of the release, with vLLM's default ladder's KV
    # cache (whole 16-token blocks plus the null block)
    limits = SchedulerLimits(
        vllm_version=s.vllm_version,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        num_gpu_blocks=int(startup(config).kv_cache_tokens // 16) + 1,
    )
    steps, label = workload_trace(
        s.trace, num_requests=s.num_requests, rate_per_s=s.rate_per_s, limits=limits
    )
    requests = workload_requests(s.trace, num_requests=s.num_requests, rate_per_s=s.rate_per_s)
    # vLLM's max_model_len: a registry model states no context length, so the KV cache's
    # whole 16-token blocks; these presets' prompts are far shorter, none is rejected
    max_model_len = int(startup(config).kv_cache_tokens // 16) * 16
    assert (requests["prompt_tokens"] < max_model_len).all()
    result = tune(
        steps,
        config=config,
        cost_model=device_cost_model(s.model, s.device),
        kv_bytes_per_token=kv_bytes_per_token(s.model),
        trace_label=label,
        requests=requests,
        startup=startup,
    )
    traffic = {"max_model_len": max_model_len, "rejected_requests": 0,
               "prefix_hit_rate": None, "max_concurrency": None}  # fmt: skip
    return replace(result, traffic=traffic)


def test_the_cli_the_dashboard_and_a_hand_assembled_call_agree(capsys) -> None:
    s = _settings()
    want = json.loads(_by_hand(s).to_json())
    assert json.loads(tune_for(s).to_json()) == want
    argv = [
        "tune", "--model", s.model, "--device", str(s.device), "--trace", s.trace,
        "--num-requests", str(s.num_requests), "--rate", str(s.rate_per_s),
        "--vllm-version", s.vllm_version, "--max-num-seqs", str(s.max_num_seqs),
        "--max-num-batched-tokens", str(s.max_num_batched_tokens), "--json",
    ]  # fmt: skip
    capsys.readouterr()
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == want
    dash = tune_dashboard(
        model=s.model, device=s.device, trace=s.trace, num_requests=s.num_requests,
        rate_per_s=s.rate_per_s, vllm_version=s.vllm_version, max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens, draw=False,
    )  # fmt: skip
    assert dash.result is not None and json.loads(dash.result.to_json()) == want


def test_the_model_s_own_tp_size_is_the_absent_flag() -> None:
    assert TuneSettings(model="llama-3.1-70b-tp8", tensor_parallel_size=8).tp_flag() is None
    assert TuneSettings(model="llama-3.1-70b-tp8", tensor_parallel_size=4).tp_flag() == 4
    assert TuneSettings(model="llama-3.1-8b", tensor_parallel_size=1).tp_flag() is None
    assert TuneSettings(model="llama-3.1-8b", tensor_parallel_size=2).tp_flag() == 2
    assert TuneSettings(model="llama-3.1-8b").tp_flag() is None
