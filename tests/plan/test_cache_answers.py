"""Every answer is the same with caches off, cold and warm (issue 38 item 4): a simulated step
trace, a ladder's latency figures, a what-if replay and a whole ``tune`` verdict (from the
person's settings, the real cost model and start-up estimate) on fresh random traffic. And
``tune`` on ``--model FOLDER`` whose config.json is edited between runs gives the new
figures (issue 36 item 1)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from small_models import small_config

from cgdispatch.core import cache
from cgdispatch.core.config import GraphConfig
from cgdispatch.plan.costs import AffineCostModel
from cgdispatch.plan.ladder_latency import ladder_latency
from cgdispatch.plan.tune import tune
from cgdispatch.plan.whatif import evaluate
from cgdispatch.workload.trace import simulate_steps


class MemoryAffine(AffineCostModel):
    """The affine stand-in with capture time (a tune needs it)."""

    def capture_time_s(self, mode, n):  # noqa: ANN001, ANN201
        return 0.01 + 1e-4 * np.asarray(n, dtype=np.float64)


class Switch:
    """Runs a function with caches off, cold (an empty folder, memory emptied) or warm."""

    def __init__(self, monkeypatch, tmp_path) -> None:  # noqa: ANN001
        self.monkeypatch, self.tmp_path, self.folders = monkeypatch, tmp_path, 0
        monkeypatch.delenv("CGDISPATCH_RESULT_CACHE", raising=False)
        monkeypatch.delenv("CGDISPATCH_CACHE", raising=False)
        self.cold_folder()

    def cold_folder(self) -> Path:
        self.folders += 1
        self.folder = self.tmp_path / f"cache{self.folders}"
        self.monkeypatch.setenv("CGDISPATCH_CACHE_DIR", str(self.folder))
        cache.clear_memory()
        return self.folder

    def off(self, fn):  # noqa: ANN001, ANN201
        with self.monkeypatch.context() as m:
            m.setenv("CGDISPATCH_CACHE", "0")
            return fn()

    def files(self, kind: str) -> list[Path]:
        return sorted(self.folder.glob(f"{kind}-*"))


@pytest.fixture
def switch(monkeypatch, tmp_path):
    yield Switch(monkeypatch, tmp_path)
    cache.clear_memory()


def _requests(seed: int, n: int = 80) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 4.0, n)),
            "prompt_tokens": rng.integers(1, 700, n),
            "output_tokens": rng.integers(1, 120, n),
        }
    )


def _same(a: dict, b: dict) -> bool:
    """Equal dicts, NaN equal to NaN."""
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (isinstance(a[k], float) and np.isnan(a[k]) and np.isnan(b[k])) for k in a
    )


def _seed() -> int:
    return int(np.random.default_rng().integers(1 << 30))


def test_simulated_steps_equal_off_cold_and_warm(switch):
    req = _requests(_seed())
    settings = {"max_num_seqs": 16, "max_num_batched_tokens": 512, "seed": 3}
    fresh = switch.off(lambda: simulate_steps(req, **settings))
    assert switch.files("steps") == []  # off: nothing written
    cold = simulate_steps(req, **settings)
    assert len(switch.files("steps")) == 1
    warm = simulate_steps(req, **settings)
    cache.clear_memory()
    from_disk = simulate_steps(req, **settings)
    for got in (cold, warm, from_disk):
        pd.testing.assert_frame_equal(got, fresh, check_exact=True)
    # other limits or other requests are other keys
    simulate_steps(req, **{**settings, "max_num_seqs": 8})
    simulate_steps(req.assign(output_tokens=req["output_tokens"] + 1), **settings)
    assert len(switch.files("steps")) == 3


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_ladder_latency_equal_off_cold_and_warm_and_keyed_on_prices(switch, version):
    req = _requests(_seed(), n=50)
    config = GraphConfig(vllm_version=version, max_num_seqs=16, max_num_batched_tokens=512)
    config = config.resolve()
    slow, fast = AffineCostModel(per_token_ms=0.05), AffineCostModel(per_token_ms=0.01)
    for model in (slow, fast, None):
        fresh = switch.off(lambda m=model: ladder_latency(config, req, m))
        cold = ladder_latency(config, req, model)
        warm = ladder_latency(config, req, model)
        assert cold == pytest.approx(fresh, nan_ok=True, rel=0, abs=0)
        assert warm == pytest.approx(fresh, nan_ok=True, rel=0, abs=0)
        assert {k: type(v) for k, v in warm.items()} == {k: type(v) for k, v in cold.items()}
    assert len(switch.files("latency")) == 3  # each cost model its own entry


def test_a_what_if_replay_equal_off_cold_and_warm(switch):
    req = _requests(_seed(), n=60)
    config = GraphConfig(vllm_version="0.34", max_num_seqs=16, max_num_batched_tokens=512)
    config = config.resolve()
    model = AffineCostModel(per_token_ms=float(np.random.default_rng().uniform(0.005, 0.05)))

    def run() -> tuple:
        trace = simulate_steps(req, max_num_seqs=16, max_num_batched_tokens=512)
        result = evaluate(config, trace, model, requests=req)
        return result.summary, result.step_time_ms, result.by_size

    fresh = switch.off(run)
    for got in (run(), run()):  # cold, warm
        assert _same(got[0], fresh[0])
        np.testing.assert_array_equal(got[1], fresh[1])
        pd.testing.assert_frame_equal(got[2], fresh[2], check_exact=True)


def test_tune_with_an_affine_model_equal_off_cold_and_warm(switch):
    from cgdispatch.workload.sources import workload_requests, workload_trace

    kwargs = {"num_requests": 90, "rate_per_s": 6.0, "seed": _seed() % (1 << 20)}
    limits = {"max_num_seqs": 24, "max_num_batched_tokens": 512}
    config = GraphConfig(vllm_version="0.34", **limits).resolve()

    def run() -> str:
        trace, label = workload_trace("sharegpt", **kwargs, **limits)
        requests = workload_requests("sharegpt", **kwargs)
        model = MemoryAffine(per_token_ms=0.02)
        return tune(trace, config=config, cost_model=model, max_graphs=6, requests=requests,
                    trace_label=label).to_json()  # fmt: skip

    fresh = switch.off(run)
    assert run() == fresh  # cold
    assert run() == fresh  # warm
    assert switch.files("steps") and switch.files("latency")


def test_tunes_verdict_equal_off_cold_and_warm_and_after_a_config_edit(switch, tmp_path):
    """The person's ``tune`` (tune_for: the real cost model and start-up estimate of a
    config.json folder) gives one verdict with caches off, cold and warm; after the config
    is edited in place (twice the layers), the cached run gives the new file's verdict."""
    from cgdispatch.plan.tune_run import TuneSettings, tune_for
    from cgdispatch.views.tune_verdict import verdict_text

    rng = np.random.default_rng()
    model_dir = tmp_path / "mdl"
    model_dir.mkdir()
    cfg = small_config(rng)
    settings = TuneSettings(
        model=str(model_dir),
        device=str(rng.choice(["H100", "A100", "L40S"])),
        num_requests=60,
        rate_per_s=6.0,
        seed=int(rng.integers(1 << 20)),
        max_num_seqs=24,
        max_num_batched_tokens=1024,
        max_graphs=6,
    )

    def verdict() -> str:
        result = tune_for(settings)
        return verdict_text(result, model=settings.model, device=str(settings.device))

    texts = []
    for layers in (cfg["num_hidden_layers"], 2 * cfg["num_hidden_layers"]):
        (model_dir / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": layers}))
        fresh = switch.off(verdict)
        assert verdict() == fresh  # cold for the first file; the edit is a new key
        assert verdict() == fresh  # warm
        texts.append(fresh)
    assert switch.files("cost-model") and switch.files("stage-profile")
    assert texts[0] != texts[1]
    switch.cold_folder()
    assert verdict() == texts[1]  # cold again, in a new folder
