"""Latency columns per ladder in compare(): each equals a direct simulate_latencies run with
the ladder's dispatched step time, and fewer KV blocks (the hook) mean more preemptions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch.core.config import GraphConfig
from cgdispatch.plan.costs import AffineCostModel
from cgdispatch.plan.gen2_ladder import ladder_config
from cgdispatch.plan.ladder_compare import compare
from cgdispatch.workload.latency import LATENCY_COLUMNS, serving_step_time, simulate_latencies
from cgdispatch.workload.scheduler import SchedulerLimits
from cgdispatch.workload.trace import simulate_steps


def _requests(seed: int, n: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 1.0, n)),
            "prompt_tokens": rng.integers(1, 300, n),
            "output_tokens": rng.integers(1, 80, n),
        }
    )


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_compare_latency_columns_equal_a_direct_run(version: str) -> None:
    req = _requests(2)
    config = GraphConfig(vllm_version=version, max_num_seqs=32, max_num_batched_tokens=512)
    cost = AffineCostModel(per_token_ms=0.05)
    ladders = {"small": [1, 2, 4], "wide": [1, 2, 4, 8, 16, 32]}
    table = compare(simulate_steps(req, max_num_seqs=32, max_num_batched_tokens=512), ladders,
                    config=config, cost_model=cost, requests=req)  # fmt: skip
    assert set(LATENCY_COLUMNS) <= set(table.columns)
    for _, row in table.iterrows():
        cfg = ladder_config(config, ladders[row["ladder"]])
        lim = SchedulerLimits(max_num_seqs=32, max_num_batched_tokens=512, vllm_version=version)
        want = simulate_latencies(req, lim, step_time_ms=serving_step_time(cfg, cost)).summary
        for col in LATENCY_COLUMNS:
            assert row[col] == pytest.approx(want[col]), col
    # the wide ladder graphs more decode steps, so its tokens come no slower
    by = table.set_index("ladder")
    assert by.loc["wide", "tpot_p50_ms"] <= by.loc["small", "tpot_p50_ms"]


def test_kv_blocks_hook_shrinks_the_cache_per_ladder() -> None:
    req = _requests(5, 80).assign(output_tokens=200)
    config = GraphConfig(vllm_version="0.34")
    ladders = {"few": [1, 2], "many": [1, 2, 4, 8, 16, 32, 64]}
    table = compare(
        simulate_steps(req), ladders, config=config, requests=req,
        kv_blocks=lambda cfg: 1100 - 100 * len(cfg.cudagraph_capture_sizes),
    )  # fmt: skip
    by = table.set_index("ladder")
    assert by.loc["few", "num_preemptions"] < by.loc["many", "num_preemptions"]
    assert by.loc["many", "num_preemptions"] > 0
