"""Latency per request and per run from vLLM's own scheduler: a hand-worked trace, the
summary against numpy on random runs, and KV pressure that preempts as the cache shrinks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch.core.generation import VLLM_VERSIONS
from cgdispatch.workload.latency import LATENCY_COLUMNS, dispatched_step_time, simulate_latencies
from cgdispatch.workload.scheduler import SchedulerLimits
from cgdispatch.workload.serving_overhead import ServingOverhead


@pytest.mark.parametrize("version", ["0.33", "0.34"])
@pytest.mark.parametrize("is_async", [False, True])
def test_one_request_by_hand(version: str, is_async: bool) -> None:
    # 100-token prompt in one 10 ms step (first token at 10 ms), 4 more decode steps of 10 ms
    req = pd.DataFrame({"arrival_s": [0.5], "prompt_tokens": [100], "output_tokens": [5]})
    lim = SchedulerLimits(vllm_version=version, async_scheduling=is_async)
    run = simulate_latencies(req, lim, step_time_ms=lambda n, r: 10.0 if n else 0.0)
    row = run.requests.iloc[0]
    assert row["ttft_s"] == pytest.approx(0.010)
    assert row["tpot_s"] == pytest.approx(0.010)
    assert row["e2e_s"] == pytest.approx(0.050)
    assert run.steps["num_tokens"].tolist() == [100, 1, 1, 1, 1]
    assert run.summary["throughput_tok_s"] == pytest.approx(5 / 0.05)


def test_summary_agrees_with_numpy_on_a_random_run() -> None:
    rng = np.random.default_rng(7)
    n = 80
    req = pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 1.0, n)),
            "prompt_tokens": rng.integers(1, 600, n),
            "output_tokens": rng.integers(1, 60, n),
        }
    )
    lim = SchedulerLimits(vllm_version="0.34", num_gpu_blocks=80, max_num_batched_tokens=1024)
    run = simulate_latencies(req, lim)
    lat = run.requests
    first = lat["first_token_s"].to_numpy()
    fin = lat["finish_s"].to_numpy()
    arr = req["arrival_s"].to_numpy()
    np.testing.assert_allclose(run.summary["ttft_p50_ms"], np.median(first - arr) * 1e3)
    out = req["output_tokens"].to_numpy()
    more = out > 1
    tpot = (fin - first)[more] / (out[more] - 1)
    np.testing.assert_allclose(run.summary["tpot_p99_ms"], np.percentile(tpot, 99) * 1e3)
    np.testing.assert_allclose(run.summary["throughput_req_s"], n / (fin.max() - arr.min()))
    assert 0 < run.summary["kv_util_mean"] <= run.summary["kv_util_peak"] <= 1
    assert set(LATENCY_COLUMNS) <= set(run.summary)


def test_a_smaller_cache_preempts_more_and_waits_longer() -> None:
    rng = np.random.default_rng(1)
    n = 60
    req = pd.DataFrame(
        {"arrival_s": np.zeros(n), "prompt_tokens": rng.integers(10, 60, n), "output_tokens": 300}
    )
    runs = [
        simulate_latencies(req, SchedulerLimits(vllm_version="0.34", num_gpu_blocks=b)).summary
        for b in (400, 60)
    ]
    assert runs[0]["num_preemptions"] < runs[1]["num_preemptions"]
    assert runs[0]["e2e_p99_ms"] < runs[1]["e2e_p99_ms"]


def test_without_a_release_it_replays_the_newest() -> None:
    rng = np.random.default_rng()
    n = int(rng.integers(2, 40))
    req = pd.DataFrame(
        {"arrival_s": np.sort(rng.uniform(0, 1, n)), "prompt_tokens": rng.integers(1, 200, n),
         "output_tokens": rng.integers(1, 30, n)}
    )  # fmt: skip
    newest = max(VLLM_VERSIONS, key=lambda v: tuple(int(p) for p in v.split(".")))
    blocks = int(rng.integers(30, 400))
    got = simulate_latencies(req, SchedulerLimits(num_gpu_blocks=blocks))
    want = simulate_latencies(req, SchedulerLimits(vllm_version=newest, num_gpu_blocks=blocks))
    pd.testing.assert_frame_equal(got.steps, want.steps)
    pd.testing.assert_frame_equal(got.requests, want.requests)


def test_step_time_follows_the_dispatchers_padding() -> None:
    from cgdispatch.core.config import GraphConfig
    from cgdispatch.core.modes import CUDAGraphMode

    class PerToken:
        def step_time_ms(self, mode: CUDAGraphMode, num_tokens: np.ndarray) -> np.ndarray:
            return np.asarray(num_tokens, dtype=np.float64) * (1.0 if mode.name == "NONE" else 0.5)

    cfg = GraphConfig(cudagraph_capture_sizes=[1, 2, 4, 8], cudagraph_mode="FULL_AND_PIECEWISE")
    cost = dispatched_step_time(cfg, PerToken())
    assert cost(0, 0) == 0.0
    assert cost(3, 3) == pytest.approx(0.5 * 4)  # a decode of 3 runs the graph of 4
    assert cost(100, 2) == pytest.approx(100.0)  # beyond the largest graph: eager


@pytest.mark.parametrize("host", [False, True], ids=["gpu-only", "with-host-time"])
def test_a_steady_stretchs_clock_gives_each_steps_content_price_exactly(host: bool) -> None:
    """``decode_ms(n)(kv)``, the clock of a steady stretch, is the very float that
    ``content_ms`` gives the step's content (n one-token decodes reading kv tokens), for
    graph modes with one line (FULL) and several (PIECEWISE, eager), on fresh sizes; and a
    replay priced through it gives the steps and request times of one priced per content."""
    import cgdispatch as cg
    from cgdispatch.core.config import GraphConfig
    from cgdispatch.core.step_content import StepContent

    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    model = cg.device_cost_model("qwen2.5-1.5b", "H100")
    cfg = GraphConfig(cudagraph_capture_sizes=[1, 2, 4, 8, 16, 32, 64], cudagraph_mode="FULL_AND_PIECEWISE")  # fmt: skip
    # with the host's time on, a step lasts the slower of the two in both clocks
    over = ServingOverhead(step_request_ms=float(rng.uniform(0.05, 0.3))) if host else None
    cost = dispatched_step_time(cfg, model, overhead=over)
    kinds = set()
    for n in (int(x) for x in rng.integers(1, 300, 25)):
        mode, padded = cost._route(n, n)
        kinds.add(len(cost.pricer.lines(mode, padded)[0]) > 1)
        at = cost.decode_ms(n)
        for kv in (int(x) for x in rng.integers(n, n * 8000, 8)):
            assert at(kv) == cost.content_ms(StepContent(n, n, kv)), f"seed {seed}: n={n} kv={kv}"
    assert kinds == {False, True}, f"seed {seed}: both kinds of step"

    class ContentOnly:  # the same prices without the stretch clock
        def __init__(self, inner):
            self.content_ms = inner.content_ms

        def __call__(self, num_tokens: int, num_reqs: int) -> float:
            raise AssertionError("priced by content")

    n = 200
    req = pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 5, n)),
            "prompt_tokens": rng.integers(1, 2000, n),
            "output_tokens": rng.integers(1, 400, n),
        }
    )
    lim = SchedulerLimits(vllm_version="0.34", num_gpu_blocks=int(rng.integers(2000, 6000)))
    fast = simulate_latencies(req, lim, step_time_ms=cost)
    slow = simulate_latencies(req, lim, step_time_ms=ContentOnly(cost))
    pd.testing.assert_frame_equal(fast.steps, slow.steps)
    pd.testing.assert_frame_equal(fast.requests, slow.requests)
