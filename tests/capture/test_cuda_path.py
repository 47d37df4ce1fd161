"""The CUDA backend's device, stream and warm-up rules, on a fake ``torch.cuda`` (no GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fake_cuda import install

from cgdispatch import BatchDescriptor
from cgdispatch.capture import runner as runner_module
from cgdispatch.capture.backends import CpuReplayBackend, get_backend
from cgdispatch.capture.context import set_forward_context
from cgdispatch.capture.cuda_backend import CudaGraphBackend, capture_stream
from cgdispatch.capture.pool import OutputLifetime
from cgdispatch.capture.runner import GraphRunner
from cgdispatch.capture.wrapper import CUDAGraphWrapper
from cgdispatch.core.config import GraphConfig
from cgdispatch.core.modes import CUDAGraphMode as M
from cgdispatch.models.toy import build_toy_model


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch):
    return install(monkeypatch)


def test_one_capture_stream_per_device_for_the_whole_process(cuda):
    a, b = CudaGraphBackend("cuda:1"), get_backend("cuda", "cuda:1")
    c = CudaGraphBackend("cuda:0")
    assert a.stream is b.stream is capture_stream(1) is capture_stream("cuda:1")
    assert c.stream is capture_stream(0) and c.stream is not a.stream
    assert a.stream.device == torch.device("cuda", 1) and c.stream.device.index == 0
    assert len(cuda.streams_made) == 2  # one per device, however many backends


def test_warmups_and_capture_run_on_the_models_device_and_the_capture_stream(cuda):
    rng = np.random.default_rng()
    num_warmups = int(rng.integers(1, 4))
    backend = get_backend(None, "cuda:1")  # the current device stays 0
    assert isinstance(backend, CudaGraphBackend) and backend.device == torch.device("cuda", 1)
    seen = []
    w = torch.from_numpy(rng.standard_normal((6, 6)))

    def step(x: torch.Tensor) -> torch.Tensor:
        seen.append(cuda.on_thread())
        return torch.tanh(x @ w)

    # GRAPH lifetime: the fake replay runs nothing, so only the capture's own output holds values
    wrapper = CUDAGraphWrapper(
        step, M.FULL, backend, num_warmups=num_warmups, output_lifetime=OutputLifetime.GRAPH
    )
    x = torch.from_numpy(rng.standard_normal((4, 6)))
    with set_forward_context(M.FULL, BatchDescriptor(4, 4)):
        out = wrapper(x)
    torch.testing.assert_close(out, torch.tanh(x @ w))
    assert seen == [(1, capture_stream(1))] * (num_warmups + 1)  # warm-ups + the capture
    graph = backend.graphs[0].keepalive[0]
    assert graph.began_on == (1, capture_stream(1))
    syncs = [i for name, i in cuda.calls if name == "synchronize"]
    assert syncs and set(syncs) == {1}
    assert cuda.on_thread() == (0, cuda.default[0])  # nothing leaks out of the capture


@pytest.mark.parametrize("mode", ["FULL", "PIECEWISE"])
def test_capture_without_warmup_is_refused_on_cuda(cuda, mode):
    backend = CudaGraphBackend("cuda:0")
    with pytest.raises(ValueError, match=r"cudagraph_num_of_warmups=0 is invalid.*>= 1"):
        CUDAGraphWrapper(lambda x: x, M[mode], backend, num_warmups=0)
    with pytest.raises(ValueError, match="num_warmups=0 is invalid on CUDA"):
        backend.warmup(lambda: None, 0)
    CUDAGraphWrapper(lambda x: x, M[mode], backend, num_warmups=1)  # one is enough


class _NeedsWarmup(CpuReplayBackend):
    """The CPU stand-in with CUDA's warm-up rule, to build whole runners without a GPU."""

    min_warmups = 1


@pytest.mark.parametrize("mode", ["FULL", "PIECEWISE", "FULL_AND_PIECEWISE"])
def test_runner_refuses_zero_warmups_when_its_backend_needs_one(mode):
    model = build_toy_model("toy-tiny")
    config = GraphConfig(
        cudagraph_mode=mode, cudagraph_capture_sizes=[1, 2], cudagraph_num_of_warmups=0
    )
    with pytest.raises(ValueError, match="cudagraph_num_of_warmups=0 is invalid"):
        GraphRunner(model, config, backend=_NeedsWarmup())
    GraphRunner(model, config, backend=CpuReplayBackend()).release_graphs()  # CPU: no rule
    none = GraphConfig(cudagraph_mode="NONE", cudagraph_num_of_warmups=0)
    GraphRunner(model, none, backend=_NeedsWarmup()).release_graphs()  # captures nothing


def test_a_cuda_backend_on_another_device_than_the_model_is_refused(cuda):
    backend = CudaGraphBackend("cuda:0")
    assert get_backend(backend, "cuda:0") is backend and get_backend(backend, "cuda") is backend
    with pytest.raises(ValueError, match="backend on cuda:0 with a model on cuda:1 is invalid"):
        get_backend(backend, "cuda:1")
    with pytest.raises(ValueError, match="device=cpu is invalid"):
        CudaGraphBackend("cpu")


def test_the_runner_builds_its_backend_on_the_models_device(monkeypatch):
    asked = []

    def spy(backend=None, device=None):
        asked.append(device)
        return get_backend(backend, device)

    monkeypatch.setattr(runner_module, "get_backend", spy)
    model = build_toy_model("toy-tiny")
    GraphRunner(model, GraphConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=[2]))
    assert asked == [torch.device(model.device)]


def test_eager_runner_buffers_cover_every_step_like_vllms(monkeypatch):
    """A NONE runner sizes its buffers as vLLM does (max_num_batched_tokens), so its steps
    take the one-copy path, and returns what the three-copy path returns."""
    rng = np.random.default_rng()
    model = build_toy_model("toy-tiny")
    tokens = int(rng.integers(256, 1024))
    config = GraphConfig(cudagraph_mode="NONE", max_num_seqs=8, max_num_batched_tokens=tokens)
    eager = GraphRunner(model, config)
    assert eager.max_num_tokens == config.max_num_batched_tokens
    narrow = GraphRunner(model, config, max_num_tokens=1)  # the old size: every step large
    n = int(rng.integers(2, 9))
    batch = eager.make_mixed_batch(n, seed=int(rng.integers(1 << 30)))
    saved = [c.clone() for c in model.kv_caches()]
    with torch.no_grad():
        slow = narrow.execute_batch(batch).clone()
    for cache, s in zip(model.kv_caches(), saved):
        cache.copy_(s)

    def large(*_):
        raise AssertionError("an eager step within max_num_batched_tokens took the large path")

    monkeypatch.setattr(eager, "_execute_large", large)
    with torch.no_grad():
        fast = eager.execute_batch(batch)
    torch.testing.assert_close(fast, slow)


def test_max_num_tokens_below_the_largest_key_is_refused():
    model = build_toy_model("toy-tiny")
    config = GraphConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=[1, 2, 4, 8])
    with pytest.raises(ValueError, match=r"max_num_tokens=4 is invalid.*>= 8"):
        GraphRunner(model, config, max_num_tokens=4)
    assert GraphRunner(model, config, max_num_tokens=16).max_num_tokens == 16


def test_each_graph_records_the_free_memory_its_capture_took(cuda):
    """Per graph, as vLLM measures the whole capture: free memory before and after (on the
    model's device), so the driver's memory for the graph counts beside the pool's."""
    rng = np.random.default_rng()
    backend = CudaGraphBackend("cuda:1")
    costs = [tuple(int(v) << 20 for v in rng.integers(1, 64, 2)) for _ in range(3)]
    for i, (segment, driver) in enumerate(costs):

        def step(x: torch.Tensor, segment=segment, driver=driver) -> torch.Tensor:
            if cuda.capturing:  # what the graph's capture takes; warm-ups take nothing here
                cuda.allocate(1, reserved=segment, allocated=segment, driver=driver)
            return x + 1

        wrapper = CUDAGraphWrapper(step, M.FULL, backend, output_lifetime=OutputLifetime.GRAPH)
        with set_forward_context(M.FULL, BatchDescriptor(i + 1, i + 1)):
            wrapper(torch.zeros(i + 1))
    per_graph = [(g.pool_bytes, g.device_bytes) for g in backend.graphs]
    assert per_graph == [(s, s + d) for s, d in costs]
    assert backend.device_bytes_total == sum(s + d for s, d in costs)
    assert {i for name, i in cuda.calls if name == "mem_get_info"} == {1}


def test_the_capture_report_has_device_bytes_nan_on_cpu():
    model = build_toy_model("toy-tiny")
    config = GraphConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=[1, 2])
    with GraphRunner(model, config) as runner:
        report = runner.capture_all(progress=False)
    assert "device_bytes" in report.columns and report["device_bytes"].isna().all()
