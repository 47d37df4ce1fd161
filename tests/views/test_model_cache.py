"""The disk cache of the device cost model: same figures as a fresh build, one file per
(model, device, context) and code version, a damaged file rebuilt; and of the start-up
estimates, one file per (model, device, config)."""

from __future__ import annotations

import numpy as np
import pytest

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


def _damages(text: str) -> list[str]:
    """Ways a cache file gets damaged: garbage, truncation, an edited number, a pickle."""
    import pickle

    head, _, body = text.partition("\n")
    digit = next(i for i, c in enumerate(body) if c.isdigit())
    edited = body[:digit] + str((int(body[digit]) + 1) % 10) + body[digit + 1 :]
    return [
        "not a cache file",
        text[: len(text) // 2],
        head + "\n" + edited,
        pickle.dumps({"a": 1}).decode("latin-1"),
        "",
    ]


def test_a_damaged_file_warns_and_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("CGDISPATCH_CACHE", str(tmp_path))
    model_cache.cached_cost_model("toy-tiny", "H100", context_len=32)
    path = model_cache.cache_path("toy-tiny", "H100", 32)
    good = path.read_text()
    for damaged in _damages(good):
        path.write_text(damaged, encoding="latin-1")
        with pytest.warns(UserWarning, match="damaged.*rebuilding it"):
            model = model_cache.cached_cost_model("toy-tiny", "H100", context_len=32)
        assert model.source == "model (H100 SXM)"
        assert path.read_text() == good  # rebuilt: the next run reads it without a warning


def test_a_crafted_file_cannot_run_code(tmp_path, monkeypatch):
    """A file naming a class outside the cache's own (``os.system``'s module, say) is
    refused before anything is built from it, even with a valid digest."""
    import hashlib
    import json

    from cgdispatch.estimate.datafile import FORMAT

    monkeypatch.setenv("CGDISPATCH_CACHE", str(tmp_path))
    path = model_cache.cache_path("toy-tiny", "H100", 16)
    path.parent.mkdir(parents=True, exist_ok=True)
    marker = tmp_path / "ran"
    payload = json.dumps(
        {"dataclass": "subprocess:Popen", "fields": {"args": ["touch", str(marker)]}}
    )
    head = {"format": FORMAT, "kind": "DeviceCostModel",
            "sha256": hashlib.sha256(payload.encode()).hexdigest()}  # fmt: skip
    path.write_text(json.dumps(head) + "\n" + payload + "\n")
    with pytest.warns(UserWarning, match="not one this file may hold"):
        model = model_cache.cached_cost_model("toy-tiny", "H100", context_len=16)
    assert not marker.exists() and model.source == "model (H100 SXM)"


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
    assert len(list(tmp_path.glob("startup-*.json"))) == 2
    assert firsts == [direct(config) for config in configs]
    assert firsts[0] != firsts[1]

    def no_build(config):
        raise AssertionError("estimated again instead of read from the cache")

    monkeypatch.setattr(model_cache, "startup_for", lambda model, device, **_: no_build)
    again = model_cache.cached_startup("llama-3.1-8b", "H200")
    assert [again(config) for config in configs] == firsts
