"""Latency per ladder as the rate rises (issue 19): each row is vLLM's scheduler over the same
draw at that rate with the ladder's dispatch pricing its steps, and each ladder's KV cache
is the budget less its graph memory."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import cgdispatch as cg
from cgdispatch.plan.costs import AffineCostModel
from cgdispatch.plan.latency_sweep import graph_memory_of, kv_blocks_within, latency_by_rate
from cgdispatch.views.sources import figure_source
from cgdispatch.workload.latency import serving_step_time, simulate_latencies
from cgdispatch.workload.scheduler import SchedulerLimits


class MemoryModel(AffineCostModel):
    """Affine step times plus graph memory proportional to the graph's tokens."""

    def graph_memory_bytes(self, mode, num_tokens):
        return np.asarray(num_tokens, dtype=np.float64) * 1e5


@pytest.fixture(scope="module")
def config():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cg.GraphConfig(
            vllm_version="0.34", max_num_seqs=32, max_num_batched_tokens=1024
        ).resolve()


def test_kv_blocks_are_the_budget_less_the_graph_memory(config) -> None:
    model = MemoryModel()
    blocks = kv_blocks_within(200e6, kv_bytes_per_token=4096.0, cost_model=model, block_size=16)
    for sizes in ([1, 2, 4, 8], [1, 8, 64, 512], cg.powers_of_two_ladder(1024)):
        cfg = cg.ladder_config(config, sizes)
        memory = graph_memory_of(cfg, model)
        assert memory == pytest.approx(max(sizes) * 1e5)  # the pool is the widest graph's
        assert blocks(cfg) == int((200e6 - memory) // (4096 * 16)) + 1
    with pytest.raises(ValueError, match="leaves no KV block"):
        kv_blocks_within(2e6, kv_bytes_per_token=4096.0, cost_model=model)(
            cg.ladder_config(config, [1, 1024])
        )
    with pytest.raises(ValueError, match="kv_budget_bytes"):
        kv_blocks_within(0, kv_bytes_per_token=1.0, cost_model=model)


def test_each_row_is_the_scheduler_run_at_that_rate(config) -> None:
    model = MemoryModel()
    ladders = {"small": [1, 2, 4, 8], "wide": [1, 8, 64, 512, 1024]}
    kv = kv_blocks_within(140e6, kv_bytes_per_token=4096.0, cost_model=model)
    rates = [2.0, 50.0]
    table = latency_by_rate(
        ladders, rates, config=config, cost_model=model, num_requests=60, seed=3, kv_blocks=kv
    )
    assert list(zip(table["rate_req_s"], table["ladder"])) == [
        (r, name) for r in rates for name in ladders
    ]
    for row in table.itertuples():
        cfg = cg.ladder_config(config, ladders[row.ladder])
        requests = cg.synthetic_requests(60, "sharegpt", rate_per_s=row.rate_req_s, seed=3)
        limits = SchedulerLimits(
            max_num_seqs=32, max_num_batched_tokens=1024, vllm_version="0.34",
            num_gpu_blocks=kv(cfg),
        )  # fmt: skip
        direct = simulate_latencies(
            requests, limits, step_time_ms=serving_step_time(cfg, model), seed=3
        ).summary
        assert row.ttft_p99_ms == pytest.approx(direct["ttft_p99_ms"])
        assert row.num_preemptions == direct["num_preemptions"]
        assert row.num_gpu_blocks == kv(cfg)
    wide, small = (table[table["ladder"] == n] for n in ("wide", "small"))
    assert (wide["num_gpu_blocks"].to_numpy() < small["num_gpu_blocks"].to_numpy()).all()
    with pytest.raises(ValueError, match="rates"):
        latency_by_rate(ladders, [0.0], config=config, cost_model=model)


def test_preemption_onset_and_the_figure() -> None:
    frame = pd.DataFrame(
        {
            "rate_req_s": [1.0, 2.0, 4.0] * 2,
            "ladder": ["a"] * 3 + ["b"] * 3,
            "ttft_p99_ms": [10.0, 20.0, 900.0, 11.0, 15.0, 30.0],
            "tpot_p99_ms": [5.0, 5.5, 9.0, 5.0, 5.1, 5.2],
            "num_preemptions": [0, 3, 40, 0, 0, 0],
            "graph_memory_mib": [500.0] * 3 + [20.0] * 3,
            "num_gpu_blocks": [300] * 3 + [900] * 3,
            "source": ["model (H200 SXM)"] * 6,
        }
    )
    assert cg.preemption_onset(frame) == {"a": 2.0, "b": None}
    fig = cg.latency_by_rate_figure(frame)
    assert figure_source(fig) == "model (H200 SXM)"
    axes = fig.axes
    assert len(axes) == 3 and "preemptions start at 2 req/s" in fig._suptitle.get_text()
    labels = [t.get_text() for t in axes[0].get_legend().get_texts()]
    assert labels == ["a (500 MiB graphs, 300 KV blocks)", "b (20 MiB graphs, 900 KV blocks)"]
    ys = {line.get_gid(): list(line.get_ydata()) for line in axes[2].lines if line.get_gid()}
    assert ys["latency-num_preemptions-a"] == [0, 3, 40]


def test_evaluate_with_requests_adds_the_schedulers_latencies(config) -> None:
    from cgdispatch.plan.ladder_latency import ladder_latency

    model = MemoryModel()
    requests = cg.synthetic_requests(50, "sharegpt", rate_per_s=4.0, seed=7)
    trace = cg.simulate_steps(requests, max_num_seqs=32, max_num_batched_tokens=1024)
    for sizes in ([1, 4, 16], [2, 32, 512]):
        cfg = cg.ladder_config(config, sizes)
        summary = cg.evaluate(cfg, trace, model, requests=requests).summary
        direct = ladder_latency(cfg, requests, model)
        for key, value in direct.items():
            assert summary[key] == pytest.approx(value), key
    assert "ttft_p99_ms" not in cg.evaluate(cfg, trace, model).summary
