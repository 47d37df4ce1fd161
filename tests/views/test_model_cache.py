"""The disk cache of the device cost model: same figures as a fresh build, one file per
(model, device, context) and code version, a damaged file rebuilt; and of the start-up
estimates, one file per (model, device, config)."""

from __future__ import annotations

import numpy as np

from cgdispatch.core.config import GraphConfig
from cgdispatch.core.modes import CUDAGraphMode
from cgdispatch.estimate.device_model import device_cost_model
from cgdispatch.estimate.startup import startup_for
from cgdispatch.views import model_cache


def test_cached_model_equals_a_fresh_build_and_is_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("CGDISPATCH_CACHE", str(tmp_path))
    first = model_cache.cached_cost_model("toy-tiny", "A100", context_len=64)
    path = model_cache.cache_path("toy-tiny", "A100", 64)
    assert path.parent == tmp_path and path.exists()
    fresh = device_cost_model("toy-tiny", "A100", context_len=64)
    again = model_cache.cached_cost_model("toy-tiny", "A100", context_len=64)
    assert again is not first  # read from disk, not the same object
    n = np.random.default_rng(0).integers(1, 600, 50)
    for mode in CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL:
        np.testing.assert_array_equal(again.step_time_ms(mode, n), fresh.step_time_ms(mode, n))
    for mode in CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL:
        np.testing.assert_array_equal(
            again.graph_memory_bytes(mode, n), fresh.graph_memory_bytes(mode, n)
        )
    assert model_cache.cache_path("toy-tiny", "H200", 64) != path


def test_a_damaged_file_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("CGDISPATCH_CACHE", str(tmp_path))
    path = model_cache.cache_path("toy-tiny", "H100", 32)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a pickle")
    model = model_cache.cached_cost_model("toy-tiny", "H100", context_len=32)
    assert model.source == "model (H100 SXM)"
    assert path.read_bytes() != b"not a pickle"


def test_cached_startup_equals_the_estimate_and_is_read_back_per_config(tmp_path, monkeypatch):
    monkeypatch.setenv("CGDISPATCH_CACHE", str(tmp_path))
    assert model_cache.cached_startup("toy-tiny", "H200") is None  # no published config
    cached = model_cache.cached_startup("llama-3.1-8b", "H200")
    direct = startup_for("llama-3.1-8b", "H200")
    configs = [
        GraphConfig(vllm_version="0.34", max_num_seqs=seqs, max_num_batched_tokens=2048).resolve()
        for seqs in (32, 64)
    ]
    firsts = [cached(config) for config in configs]
    assert len(list(tmp_path.glob("startup-*.pkl"))) == 2
    assert firsts == [direct(config) for config in configs]
    assert firsts[0] != firsts[1]

    def no_build(config):
        raise AssertionError("estimated again instead of read from the cache")

    monkeypatch.setattr(model_cache, "startup_for", lambda model, device: no_build)
    again = model_cache.cached_startup("llama-3.1-8b", "H200")
    assert [again(config) for config in configs] == firsts
