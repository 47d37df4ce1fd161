"""Workloads: synthetic requests, the steps vLLM's scheduler forms for them, histograms."""

import numpy as np
import pandas as pd
import pytest

from cgdispatch.core.generation import VLLM_VERSIONS
from cgdispatch.workload.limits import SchedulerLimits
from cgdispatch.workload.synthetic import LENGTH_PRESETS, synthetic_requests
from cgdispatch.workload.trace import check_trace, make_trace, simulate_steps, step_histogram


@pytest.mark.parametrize("preset", ["sharegpt", "alpaca"])
def test_synthetic_lengths_match_published_means(preset):
    req = synthetic_requests(40_000, preset, rate_per_s=5.0, seed=3)
    p = LENGTH_PRESETS[preset]
    # clipping at the max pulls the mean down a little; 8% covers it
    assert req["prompt_tokens"].mean() == pytest.approx(p.prompt_mean, rel=0.08)
    assert req["output_tokens"].mean() == pytest.approx(p.output_mean, rel=0.08)
    assert req["prompt_tokens"].min() >= 1 and req["output_tokens"].max() <= p.max_output_tokens
    gaps = np.diff(req["arrival_s"].to_numpy())
    assert gaps.mean() == pytest.approx(1 / 5.0, rel=0.05)
    assert np.std(gaps) / gaps.mean() == pytest.approx(1.0, rel=0.05)  # Poisson: CV 1


def test_bursty_arrivals_are_burstier():
    gaps = np.diff(synthetic_requests(20_000, rate_per_s=4.0, burstiness=0.25, seed=1)["arrival_s"])
    assert gaps.mean() == pytest.approx(0.25, rel=0.1)
    assert np.std(gaps) / gaps.mean() > 1.5  # gamma shape 0.25: CV 2


def test_bad_request_arguments():
    with pytest.raises(ValueError, match="preset 'nope'"):
        synthetic_requests(10, "nope")
    with pytest.raises(ValueError, match="num_requests"):
        synthetic_requests(0)
    with pytest.raises(ValueError, match="rate_per_s"):
        synthetic_requests(5, rate_per_s=0)


def test_simulator_hand_example():
    req = pd.DataFrame({"arrival_s": [0.0, 0.0], "prompt_tokens": [3, 2], "output_tokens": [2, 1]})
    steps = simulate_steps(req, max_num_batched_tokens=4, max_num_seqs=8)
    # step 1: r0 prefills 3, r1 1 (chunked); step 2: r0 decodes 1, r1 prefills its last 1
    assert steps["num_tokens"].tolist() == [4, 2]
    assert steps["num_reqs"].tolist() == [2, 2]
    # vLLM calls a step uniform when every query has q tokens, a 1-token prefill chunk included
    assert steps["uniform_decode"].tolist() == [False, True]


def _random_requests(rng, n):
    return pd.DataFrame(
        {
            "arrival_s": np.sort(rng.exponential(0.01, n).cumsum()),
            "prompt_tokens": rng.integers(1, 300, n),
            "output_tokens": rng.integers(1, 60, n),
        }
    )


@pytest.mark.parametrize("seed", range(4))
def test_simulator_conserves_tokens_and_respects_limits(seed):
    rng = np.random.default_rng()  # fresh traffic each run
    req = _random_requests(rng, 150)
    seqs, budget = int(rng.integers(2, 40)), int(rng.integers(64, 600))
    limits = SchedulerLimits(
        vllm_version=VLLM_VERSIONS[seed % len(VLLM_VERSIONS)],
        async_scheduling=seed >= 2,
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
    )
    steps = simulate_steps(req, limits)
    assert steps["num_tokens"].max() <= budget and steps["num_reqs"].max() <= seqs
    # every prompt token is computed once (no KV limit: no preemption) and each later output
    # token costs one decode token
    assert (
        steps["num_tokens"].sum() == req["prompt_tokens"].sum() + (req["output_tokens"] - 1).sum()
    )
    # vLLM counts a request's lone last prompt token as a decode: at most one per request
    prompt = int(req["prompt_tokens"].sum())
    assert prompt - len(req) <= steps["num_prefill_tokens"].sum() <= prompt
    decode_only = steps["num_prefill_tokens"] == 0
    assert (steps["uniform_decode"] >= decode_only).all()  # q = 1: decode-only steps are uniform
    assert np.all(np.diff(steps["time_s"]) > 0)


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_simulator_speculative_decoding_all_accepted(version):
    rng = np.random.default_rng()
    # prompts of 2 tokens or more: vLLM pads a lone 1-token prompt to a decode of 1 + k
    req = _random_requests(rng, 80).assign(prompt_tokens=lambda r: r["prompt_tokens"] + 1)
    k = int(rng.integers(1, 4))
    # sync scheduling: each decode step schedules 1 + k tokens and all are accepted (async
    # schedules a step ahead, drafts past a request's end included, as vLLM does)
    limits = SchedulerLimits(vllm_version=version, async_scheduling=False)
    steps = simulate_steps(req, limits, num_speculative_tokens=k, spec_acceptance_rate=1.0)
    decode_steps_per_req = -(-(req["output_tokens"] - 1) // (1 + k))
    assert (
        steps["num_tokens"].sum()
        == req["prompt_tokens"].sum() + (1 + k) * decode_steps_per_req.sum()
    )
    uni = steps[steps["uniform_decode"]]
    assert (uni["num_tokens"] == (1 + k) * uni["num_reqs"]).all()


def test_simulator_without_chunking_keeps_prompts_whole():
    rng = np.random.default_rng(2)
    req = _random_requests(rng, 60)
    steps = simulate_steps(req, max_num_batched_tokens=400, enable_chunked_prefill=False)
    assert steps["num_prefill_tokens"].sum() == req["prompt_tokens"].sum()
    with pytest.raises(ValueError, match="chunked prefill"):
        simulate_steps(req, max_num_batched_tokens=100, enable_chunked_prefill=False)


def test_simulator_rejects_bad_input():
    with pytest.raises(ValueError, match="lacks columns"):
        simulate_steps(pd.DataFrame({"arrival_s": [0.0]}))
    req = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [0], "output_tokens": [3]})
    with pytest.raises(ValueError, match="row 0: prompt_tokens=0 is invalid"):
        simulate_steps(req)
    with pytest.raises(ValueError, match="max_num_seqs"):
        simulate_steps(req, max_num_seqs=0)


def test_histogram_splits_kinds():
    rng = np.random.default_rng(0)
    n = rng.integers(1, 50, 500)
    uni = rng.random(500) < 0.6
    hist = step_histogram(make_trace(n, uni))
    for size in np.unique(n):
        assert hist.loc[size, "uniform_decode"] == np.sum((n == size) & uni)
        assert hist.loc[size, "mixed"] == np.sum((n == size) & ~uni)
    assert hist["total"].sum() == 500 and hist.index.is_monotonic_increasing


def test_check_trace_fills_defaults_and_rejects():
    trace = check_trace(pd.DataFrame({"num_tokens": [3, 5]}))
    assert trace["num_reqs"].tolist() == [3, 5] and not trace["has_lora"].any()
    with pytest.raises(ValueError, match="num_tokens"):
        check_trace(pd.DataFrame({"tokens": [3]}))
    with pytest.raises(
        ValueError, match="row 0: num_tokens=0 is invalid: it must be an integer from 1"
    ):
        check_trace(pd.DataFrame({"num_tokens": [0]}))


def test_lora_requests_and_adapter_limit():
    req = synthetic_requests(400, "alpaca", rate_per_s=50, lora_fraction=0.5, num_loras=3, seed=2)
    assert set(req["lora_id"]) <= {-1, 0, 1, 2}
    assert (req["lora_id"] >= 0).mean() == pytest.approx(0.5, abs=0.08)
    free = simulate_steps(req, max_num_seqs=32)
    assert (free["has_lora"] == (free["num_active_loras"] > 0)).all()
    assert free["num_active_loras"].max() == 3
    assert (free["num_active_loras"] <= free["num_reqs"]).all()
    capped = simulate_steps(req, max_num_seqs=32, max_loras=1)
    assert capped["num_active_loras"].max() == 1
    # skipping a request for a step never loses it: every token is still scheduled
    total = req["prompt_tokens"].sum() + (req["output_tokens"] - 1).sum()
    assert capped["num_tokens"].sum() == total == free["num_tokens"].sum()
    with pytest.raises(ValueError, match="num_loras"):
        synthetic_requests(5, lora_fraction=0.5)
    with pytest.raises(ValueError, match="max_loras"):
        simulate_steps(req, max_loras=0)
