"""``startup_features`` sums one GPU's :class:`GraphPricing` over a config's capture keys:
the counts and sums match a key-by-key reading of the price list on random ladders, and a
value that is not a price list is refused with the call that makes one."""

from __future__ import annotations

import numpy as np
import pytest

import cgdispatch as cg
from cgdispatch.core.generation import capture_keys
from cgdispatch.core.modes import CUDAGraphMode
from cgdispatch.estimate.startup_pricing import GIB, graph_pricing, startup_features


@pytest.fixture(scope="module")
def pricing():
    return graph_pricing("Qwen/Qwen3-8B", "H100")


@pytest.mark.parametrize("release", ["0.33", "0.34"])
def test_features_are_the_price_list_summed_over_the_keys(pricing, release):
    rng = np.random.default_rng()
    sizes = sorted({int(s) for s in rng.integers(1, 600, size=int(rng.integers(1, 20)))})
    seqs = int(rng.integers(max(sizes), 1024)) if release == "0.33" else int(rng.integers(1, 512))
    # 0.33: the random token ladder; 0.34: vLLM's ladders for the random request limit
    ladder = {"cudagraph_capture_sizes": sizes} if release == "0.33" else {}
    config = cg.GraphConfig(vllm_version=release, max_num_seqs=seqs, **ladder)
    got = startup_features(pricing, config)
    keys = capture_keys(config)
    graphed = [k for k in keys if k.runtime_mode in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL)]
    runs = config.cudagraph_num_of_warmups + 1
    assert got["keys"] == len(keys)
    assert got["graphs"] == sum(pricing.graphs(k.runtime_mode) for k in graphed)
    assert got["nodes"] == sum(pricing.nodes(k.runtime_mode) for k in graphed)
    assert got["moe_keys"] == len(keys) * pricing.moe_layers
    tokens = sum(k.num_tokens for k in graphed)
    assert got["boundary_gib"] == pytest.approx(tokens * pricing.boundary_bytes_per_token / GIB)
    eager = sum(float(pricing.eager_s(np.array([k.num_tokens]))[0]) for k in graphed)
    assert got["eager_s"] == pytest.approx(runs * eager, rel=1e-12)


def test_a_value_that_is_not_a_price_list_is_refused():
    with pytest.raises(ValueError, match="pricing=.*pass a GraphPricing"):
        startup_features("Qwen/Qwen3-8B", cg.GraphConfig())
