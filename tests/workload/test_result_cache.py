"""The result cache gives what a fresh computation gives: a simulated step trace, a ladder's
latency figures and a whole ``tune`` verdict are equal with the cache off, cold and warm on
a fresh random trace; a damaged or tampered file warns and is rebuilt; another cost model
or another seed never reads a stored result."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch.core.config import GraphConfig
from cgdispatch.plan.costs import AffineCostModel
from cgdispatch.plan.ladder_latency import ladder_latency
from cgdispatch.plan.tune import tune
from cgdispatch.workload import result_cache
from cgdispatch.workload.trace import simulate_steps


class MemoryAffine(AffineCostModel):
    """The affine stand-in with capture time (a tune needs it)."""

    def capture_time_s(self, mode, n):  # noqa: ANN001, ANN201
        return 0.01 + 1e-4 * np.asarray(n, dtype=np.float64)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CGDISPATCH_CACHE", str(tmp_path))
    monkeypatch.setenv("CGDISPATCH_RESULT_CACHE", "1")
    return tmp_path


def _requests(seed: int, n: int = 80) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 4.0, n)),
            "prompt_tokens": rng.integers(1, 700, n),
            "output_tokens": rng.integers(1, 120, n),
        }
    )


def _uncached(monkeypatch, fn):  # noqa: ANN001, ANN202
    with monkeypatch.context() as m:
        m.setenv("CGDISPATCH_RESULT_CACHE", "0")
        return fn()


def _files(folder, kind: str) -> list:  # noqa: ANN001
    return sorted(folder.glob(f"{kind}-*.npz"))


def test_simulated_steps_equal_off_cold_and_warm(cache, monkeypatch):
    req = _requests(int(np.random.default_rng().integers(1 << 30)))
    settings = {"max_num_seqs": 16, "max_num_batched_tokens": 512, "seed": 3}
    fresh = _uncached(monkeypatch, lambda: simulate_steps(req, **settings))
    assert _files(cache, "steps") == []
    cold = simulate_steps(req, **settings)
    assert len(_files(cache, "steps")) == 1
    warm = simulate_steps(req, **settings)
    pd.testing.assert_frame_equal(cold, fresh, check_exact=True)
    pd.testing.assert_frame_equal(warm, fresh, check_exact=True)
    # other limits, another seed or other requests are other keys
    simulate_steps(req, **{**settings, "max_num_seqs": 8})
    simulate_steps(req.assign(output_tokens=req["output_tokens"] + 1), **settings)
    assert len(_files(cache, "steps")) == 3


@pytest.mark.parametrize("damage", ["garbage", "tampered"])
def test_a_damaged_file_warns_and_is_rebuilt(cache, monkeypatch, damage):
    req = _requests(11)
    fresh = _uncached(monkeypatch, lambda: simulate_steps(req))
    simulate_steps(req)
    (path,) = _files(cache, "steps")
    if damage == "garbage":
        path.write_bytes(b"PK\x03\x04 not a zip file")
    else:  # a valid npz whose arrays no longer match its checksum
        with np.load(path, allow_pickle=False) as f:
            arrays = {name: f[name] for name in f.files}
        arrays["num_tokens"] = arrays["num_tokens"] + 1
        with path.open("wb") as f:
            np.savez(f, **arrays)
    with pytest.warns(UserWarning, match="damaged"):
        again = simulate_steps(req)
    pd.testing.assert_frame_equal(again, fresh, check_exact=True)
    pd.testing.assert_frame_equal(
        simulate_steps(req), fresh, check_exact=True
    )  # rebuilt: no warning


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_ladder_latency_equal_off_cold_and_warm_and_keyed_on_prices(cache, monkeypatch, version):
    req = _requests(int(np.random.default_rng().integers(1 << 30)), n=50)
    config = GraphConfig(
        vllm_version=version, max_num_seqs=16, max_num_batched_tokens=512
    ).resolve()
    slow, fast = AffineCostModel(per_token_ms=0.05), AffineCostModel(per_token_ms=0.01)
    for model in (slow, fast, None):
        fresh = _uncached(monkeypatch, lambda m=model: ladder_latency(config, req, m))
        cold = ladder_latency(config, req, model)
        warm = ladder_latency(config, req, model)
        assert cold == pytest.approx(fresh, nan_ok=True, rel=0, abs=0)
        assert warm == pytest.approx(fresh, nan_ok=True, rel=0, abs=0)
        assert {k: type(v) for k, v in warm.items()} == {k: type(v) for k, v in cold.items()}
    assert len(_files(cache, "latency")) == 3  # each cost model its own entry


def test_tune_verdict_equal_with_and_without_the_cache(cache, monkeypatch):
    from cgdispatch.workload.sources import workload_requests, workload_trace

    seed = int(np.random.default_rng().integers(1 << 20))
    kwargs = {"num_requests": 90, "rate_per_s": 6.0, "seed": seed}
    limits = {"max_num_seqs": 24, "max_num_batched_tokens": 512}
    config = GraphConfig(vllm_version="0.34", **limits).resolve()

    def run() -> str:
        trace, label = workload_trace("sharegpt", **kwargs, **limits)
        requests = workload_requests("sharegpt", **kwargs)
        model = MemoryAffine(per_token_ms=0.02)
        return tune(trace, config=config, cost_model=model, max_graphs=6, requests=requests,
                    trace_label=label).to_json()  # fmt: skip

    fresh = _uncached(monkeypatch, run)
    assert run() == fresh  # cold
    assert run() == fresh  # warm
    assert _files(cache, "steps") and _files(cache, "latency")


def test_files_load_without_pickle_and_the_switch_turns_it_off(cache, monkeypatch):
    simulate_steps(_requests(5))
    (path,) = _files(cache, "steps")
    with np.load(path, allow_pickle=False) as f:
        assert "num_tokens" in f.files
    monkeypatch.setenv("CGDISPATCH_RESULT_CACHE", "off")
    assert not result_cache.enabled()
    simulate_steps(_requests(6))
    assert len(_files(cache, "steps")) == 1
