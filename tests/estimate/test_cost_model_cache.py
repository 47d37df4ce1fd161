"""The cost model's and the stage profile's one cache (core.cache inside
``device_cost_model`` and ``startup_pricing``): read back equal to a fresh build, a crafted
file refused, and keys from content (issue 36 item 1): a ``config.json`` edited in place or
the same relative ``--model`` path under another working folder never gets old figures."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from small_models import small_config

from cgdispatch.core import cache
from cgdispatch.core.config import GraphConfig
from cgdispatch.core.modes import CUDAGraphMode
from cgdispatch.estimate.device_model import device_cost_model
from cgdispatch.estimate.kv_bytes import kv_bytes_per_token
from cgdispatch.estimate.startup import startup_for

SIZES = np.arange(1, 513)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.delenv("CGDISPATCH_CACHE", raising=False)
    monkeypatch.delenv("CGDISPATCH_RESULT_CACHE", raising=False)
    monkeypatch.setenv("CGDISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    cache.clear_memory()
    yield tmp_path / "cache"
    cache.clear_memory()


def _figures(model) -> np.ndarray:  # noqa: ANN001
    return np.concatenate(
        [model.step_time_ms(mode, SIZES) for mode in (CUDAGraphMode.NONE, CUDAGraphMode.FULL)]
    )


def _uncached(monkeypatch, fn):  # noqa: ANN001, ANN202
    with monkeypatch.context() as m:
        m.setenv("CGDISPATCH_CACHE", "0")
        return fn()


def test_a_cached_cost_model_equals_a_fresh_build_and_is_read_back(folder, monkeypatch):
    first = device_cost_model("toy-tiny", "A100", context_len=64)
    (path,) = folder.glob("cost-model-*.json")
    cache.clear_memory()  # a new process: read from the file
    again = device_cost_model("toy-tiny", "A100", context_len=64)
    assert again is not first
    fresh = _uncached(monkeypatch, lambda: device_cost_model("toy-tiny", "A100", context_len=64))
    n = np.random.default_rng().integers(1, 600, 50)
    for mode in CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL:
        np.testing.assert_array_equal(again.step_time_ms(mode, n), fresh.step_time_ms(mode, n))
    for mode in CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL:
        np.testing.assert_array_equal(
            again.graph_memory_bytes(mode, n), fresh.graph_memory_bytes(mode, n)
        )
    device_cost_model("toy-tiny", "H200", context_len=64)
    assert len(list(folder.glob("cost-model-*.json"))) == 2  # another device, another file
    assert path.exists()


def test_a_crafted_file_cannot_run_code(folder, tmp_path):
    """A cache entry whose payload names a class outside the cost model's own
    (``subprocess.Popen``) is refused before anything is built from it, even with valid
    digests in both layers."""
    from cgdispatch.estimate.datafile import FORMAT

    device_cost_model("toy-tiny", "H100", context_len=16)
    (path,) = folder.glob("cost-model-*.json")
    marker = tmp_path / "ran"
    inner = json.dumps(
        {"dataclass": "subprocess:Popen", "fields": {"args": ["touch", str(marker)]}}
    )
    head = {"format": FORMAT, "kind": "DeviceCostModel",
            "sha256": hashlib.sha256(inner.encode()).hexdigest()}  # fmt: skip
    payload = (json.dumps(head) + "\n" + inner + "\n").encode()
    key = path.read_bytes()[len(cache._MAGIC) :].split(b"\n", 1)[0]
    path.write_bytes(
        cache._MAGIC + key + b"\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
    )
    cache.clear_memory()
    with pytest.warns(UserWarning, match="not one this file may hold"):
        model = device_cost_model("toy-tiny", "H100", context_len=16)
    assert not marker.exists() and model.source == "model (H100 SXM)"


def test_a_config_edited_in_place_gets_new_figures(folder, monkeypatch, tmp_path):
    """Issue 36 item 1: ``--model FOLDER``, then its config.json edited (more layers): the
    cost model, the start-up estimate and the KV bytes are those of the new file, as a run
    with every cache off computes them."""
    rng = np.random.default_rng()
    model_dir = tmp_path / "mdl"
    model_dir.mkdir()
    cfg = small_config(rng)
    config = GraphConfig(vllm_version="0.34", max_num_seqs=32).resolve()
    seen = []
    for layers in (cfg["num_hidden_layers"], cfg["num_hidden_layers"] * 2):
        (model_dir / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": layers}))

        def answers(source: str = str(model_dir)) -> tuple:
            start = startup_for(source, "H100")(config)
            return (
                _figures(device_cost_model(source, "H100")),
                start.graph_memory_bytes,
                start.kv_cache_tokens,
                kv_bytes_per_token(source),
            )

        got = answers()
        fresh = _uncached(monkeypatch, answers)
        np.testing.assert_array_equal(got[0], fresh[0])
        assert got[1:] == fresh[1:]
        seen.append(got)
    assert not np.array_equal(seen[0][0], seen[1][0])  # the edit is seen, not the old file
    assert seen[1][3] == 2 * seen[0][3]  # twice the layers: twice the KV bytes


def test_one_relative_path_under_two_working_folders_is_two_models(folder, monkeypatch, tmp_path):
    """Issue 36 item 1: the same relative ``--model mdl`` from two working folders holding
    different configs: each gets its own figures (the path is resolved, its bytes hashed)."""
    rng = np.random.default_rng()
    figures = []
    for name in ("one", "two"):
        (tmp_path / name / "mdl").mkdir(parents=True)
        (tmp_path / name / "mdl" / "config.json").write_text(json.dumps(small_config(rng)))
    for name in ("one", "two"):
        monkeypatch.chdir(tmp_path / name)
        got = _figures(device_cost_model("mdl", "L40S"))
        fresh = _uncached(monkeypatch, lambda: _figures(device_cost_model("mdl", "L40S")))
        np.testing.assert_array_equal(got, fresh)
        figures.append(got)
    same = json.loads((tmp_path / "one/mdl/config.json").read_text()) == json.loads(
        (tmp_path / "two/mdl/config.json").read_text()
    )
    assert same or not np.array_equal(figures[0], figures[1])
