"""CUDAGraphWrapper and the graph backends (CPU replay stand-in; CUDA tests skip here)."""

import pytest
import torch

from cgdispatch import BatchDescriptor, CUDAGraphMode
from cgdispatch.capture.backends import CpuReplayBackend, CudaGraphBackend, get_backend
from cgdispatch.capture.context import set_forward_context
from cgdispatch.capture.wrapper import CUDAGraphWrapper

M = CUDAGraphMode
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class Counted:
    """y = tanh(x @ w) + b, counting its calls."""

    def __init__(self, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.w = torch.randn(6, 6, generator=gen)
        self.calls = 0

    def __call__(self, x, b):
        self.calls += 1
        return torch.tanh(x @ self.w) + b


def fresh(shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def test_capture_once_then_replay_equals_eager_on_fresh_inputs():
    fn = Counted()
    wrapper = CUDAGraphWrapper(fn, M.FULL, "cpu", num_warmups=2)
    x, b = fresh((4, 6), 1), fresh((6,), 2)  # persistent inputs
    key = BatchDescriptor(4, 4)
    with set_forward_context(M.FULL, key):
        first = wrapper(x, b)
    assert fn.calls == 3  # 2 warm-ups + the capture run
    torch.testing.assert_close(first, torch.tanh(x @ fn.w) + b)
    for seed in range(3, 6):
        x.copy_(fresh((4, 6), seed))
        b.copy_(fresh((6,), seed + 10))
        with set_forward_context(M.FULL, key):
            out = wrapper(x, b)
        torch.testing.assert_close(out, torch.tanh(x @ fn.w) + b)
    assert wrapper.captured_keys == [key]
    assert wrapper.num_replays == 3 and wrapper.entries[key].replays == 3
    assert wrapper.num_bypasses == 0


def test_replay_overwrites_a_kept_output_as_a_cuda_graph_does():
    fn = Counted()
    wrapper = CUDAGraphWrapper(fn, M.FULL, "cpu", num_warmups=0)
    x, b = fresh((3, 6), 1), fresh((6,), 2)
    key = BatchDescriptor(3, 3)
    with set_forward_context(M.FULL, key):
        kept = wrapper(x, b)
        snapshot = kept.clone()
        x.copy_(fresh((3, 6), 7))
        again = wrapper(x, b)
    assert again is kept  # the same storage every replay
    expected = torch.tanh(x @ fn.w) + b
    torch.testing.assert_close(kept, expected)  # the earlier result is gone
    assert not torch.allclose(snapshot, expected)


def test_replay_reads_the_captured_tensors_not_new_arguments():
    fn = Counted()
    wrapper = CUDAGraphWrapper(fn, M.FULL, "cpu", num_warmups=0)
    x, b = fresh((2, 6), 1), fresh((6,), 2)
    key = BatchDescriptor(2, 2)
    with set_forward_context(M.FULL, key):
        wrapper(x, b)
        other = fresh((2, 6), 9)
        out = wrapper(other, b)  # a CUDA graph would ignore `other` too
    torch.testing.assert_close(out, torch.tanh(x @ fn.w) + b)


def test_debug_mode_rejects_inputs_at_other_addresses():
    wrapper = CUDAGraphWrapper(Counted(), M.FULL, "cpu", num_warmups=0, debug=True)
    x, b = fresh((2, 6), 1), fresh((6,), 2)
    key = BatchDescriptor(2, 2)
    with set_forward_context(M.FULL, key):
        wrapper(x, b)
        wrapper(x, b)  # same tensors: fine
        with pytest.raises(RuntimeError, match=r"BatchDescriptor\(num_tokens=2.*addresses"):
            wrapper(x.clone(), b)


@pytest.mark.parametrize("ctx_mode", [None, M.NONE, M.PIECEWISE])
def test_bypass_without_context_under_none_or_another_mode(ctx_mode):
    fn = Counted()
    wrapper = CUDAGraphWrapper(fn, M.FULL, "cpu")
    x, b = fresh((5, 6), 1), fresh((6,), 2)
    for seed in range(2):
        x.copy_(fresh((5, 6), seed + 3))
        if ctx_mode is None:
            out = wrapper(x, b)
        else:
            with set_forward_context(ctx_mode, BatchDescriptor(5)):
                out = wrapper(x, b)
        torch.testing.assert_close(out, torch.tanh(x @ fn.w) + b)
    assert wrapper.num_bypasses == 2 and fn.calls == 2
    assert wrapper.captured_keys == [] and wrapper.num_replays == 0


def test_nested_wrappers_each_act_only_in_their_own_mode():
    inner_fn = Counted(1)
    backend = CpuReplayBackend()
    inner = CUDAGraphWrapper(inner_fn, M.PIECEWISE, backend, num_warmups=0, name="piece")

    def model(x, b):
        return inner(x, b) * 2

    outer = CUDAGraphWrapper(model, M.FULL, backend, num_warmups=0, name="full")
    x, b = fresh((4, 6), 1), fresh((6,), 2)
    full_key, pw_key = BatchDescriptor(4, 4), BatchDescriptor(4)
    for step in range(3):
        x.copy_(fresh((4, 6), 10 + step))
        with set_forward_context(M.FULL, full_key):
            torch.testing.assert_close(outer(x, b), 2 * (torch.tanh(x @ inner_fn.w) + b))
        with set_forward_context(M.PIECEWISE, pw_key):
            torch.testing.assert_close(outer(x, b), 2 * (torch.tanh(x @ inner_fn.w) + b))
    # FULL: captured once, replayed twice; the inner piece is bypassed inside it
    assert outer.captured_keys == [full_key] and outer.num_replays == 2
    assert outer.num_bypasses == 3  # every PIECEWISE step
    assert inner.captured_keys == [pw_key] and inner.num_replays == 2
    # the FULL capture ran it once; on the CPU stand-in each FULL replay reruns the model,
    # so the inner wrapper sees (and bypasses) those too; a CUDA replay would not call it
    assert inner.num_bypasses == 1 + outer.num_replays
    assert backend.num_graphs == 2


def test_capture_switched_off_raises_naming_the_key():
    wrapper = CUDAGraphWrapper(Counted(), M.FULL, "cpu")
    key = BatchDescriptor(7, 7)
    with (
        pytest.raises(RuntimeError, match=r"num_tokens=7.*switched off"),
        set_forward_context(M.FULL, key, allow_capture=False),
    ):
        wrapper(fresh((7, 6), 1), fresh((6,), 2))
    assert wrapper.captured_keys == []


def test_graph_mode_without_descriptor_raises():
    wrapper = CUDAGraphWrapper(Counted(), M.FULL, "cpu")
    with pytest.raises(RuntimeError, match="no batch descriptor"), set_forward_context(M.FULL):
        wrapper(fresh((2, 6), 1), fresh((6,), 2))


def test_tuple_outputs_are_overwritten_in_place():
    def fn(x):
        return x * 2, {"sum": x.sum(0)}

    wrapper = CUDAGraphWrapper(fn, M.FULL, "cpu", num_warmups=0)
    x = fresh((3, 4), 1)
    with set_forward_context(M.FULL, BatchDescriptor(3, 3)):
        kept = wrapper(x)
        x.copy_(fresh((3, 4), 2))
        wrapper(x)
    torch.testing.assert_close(kept[0], x * 2)
    torch.testing.assert_close(kept[1]["sum"], x.sum(0))


def test_stats_frame_lists_captures_in_order():
    wrapper = CUDAGraphWrapper(Counted(), M.FULL, "cpu", num_warmups=0)
    for n in (8, 4):
        with set_forward_context(M.FULL, BatchDescriptor(n, n)):
            wrapper(fresh((n, 6), n), fresh((6,), 0))
    frame = wrapper.stats_frame()
    assert frame["num_tokens"].tolist() == [8, 4]
    assert frame["capture_order"].tolist() == [0, 1]
    assert (frame["capture_s"] >= 0).all() and frame["pool_bytes"].isna().all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"runtime_mode": M.NONE}, "NONE needs no wrapper"),
        ({"runtime_mode": M.FULL_AND_PIECEWISE}, "FULL or CUDAGraphMode.PIECEWISE"),
        ({"runtime_mode": M.FULL, "num_warmups": -1}, "num_warmups"),
    ],
)
def test_bad_wrapper_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CUDAGraphWrapper(Counted(), **kwargs)


def test_backend_choice():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert get_backend(None).name == expected and get_backend("auto").name == expected
    assert get_backend("CPU").name == "cpu"
    backend = CpuReplayBackend()
    assert get_backend(backend) is backend
    with pytest.raises(ValueError, match="unknown"):
        get_backend("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_cuda_backend_without_gpu_says_what_to_use():
    with pytest.raises(RuntimeError, match="backend='cpu'"):
        CudaGraphBackend()


@pytest.mark.cuda
@cuda
def test_cuda_graphs_replay_equals_eager_and_share_one_pool():
    backend = CudaGraphBackend()
    w = torch.randn(64, 64, device="cuda")
    wrapper = CUDAGraphWrapper(lambda x: torch.relu(x @ w), M.FULL, backend)
    bufs = {n: torch.randn(n, 64, device="cuda") for n in (32, 8)}
    for n, x in bufs.items():  # largest first
        with set_forward_context(M.FULL, BatchDescriptor(n, n)):
            torch.testing.assert_close(wrapper(x), torch.relu(x @ w))
    for n, x in bufs.items():
        x.copy_(torch.randn(n, 64, device="cuda"))
        with set_forward_context(M.FULL, BatchDescriptor(n, n)):
            torch.testing.assert_close(wrapper(x), torch.relu(x @ w))
    assert wrapper.num_replays == 2 and backend.num_graphs == 2
    assert all(e.pool_bytes is not None for e in wrapper.entries.values())


def test_capture_session_freezes_and_restores_the_garbage_collector():
    import gc

    backend = CpuReplayBackend()
    thawed = gc.get_freeze_count()
    gc.unfreeze()  # the harness froze its start-up heap (conftest.py): start from none
    try:
        assert gc.isenabled()
        with backend.capture_session():
            assert not gc.isenabled() and gc.get_freeze_count() > 0
        assert gc.isenabled() and gc.get_freeze_count() == 0
        with pytest.raises(KeyError), backend.capture_session():
            raise KeyError("capture failed")
        assert gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        if thawed:
            gc.freeze()


def _frozen(obj: object) -> bool:
    """Whether the collector tracks ``obj`` in its permanent generation (``gc.freeze``):
    ``gc.get_objects`` lists the objects of the three generations only."""
    import gc

    return gc.is_tracked(obj) and not any(o is obj for o in gc.get_objects())


def test_capture_session_keeps_a_heap_the_caller_froze_and_collects_what_came_after():
    import gc
    import weakref

    class Node:
        pass

    backend = CpuReplayBackend()
    harness_froze = gc.get_freeze_count() > 0  # conftest.py freezes the start-up heap
    startup = [Node()]  # part of the caller's start-up heap
    gc.freeze()  # the caller's start-up heap, as a server freezes it
    try:
        assert _frozen(startup)
        later = [Node()]  # alive, made after the freeze: never frozen by a session
        garbage = Node()
        garbage.self = garbage  # a cycle made after the freeze: only a collection frees it
        gone = weakref.ref(garbage)
        del garbage
        with backend.capture_session():
            assert not gc.isenabled() and gone() is None  # collected before capture
            assert _frozen(startup) and not _frozen(later)
        assert gc.isenabled() and _frozen(startup) and not _frozen(later)
        with pytest.raises(KeyError), backend.capture_session():
            raise KeyError("capture failed")
        assert gc.isenabled() and _frozen(startup) and not _frozen(later)
    finally:
        if not harness_froze:
            gc.unfreeze()


class _GraphLikeBackend(CpuReplayBackend):
    """Like the CUDA backend: the captured graph does not hold the callable (nor its inputs),
    and warm-ups are the backend's job (CUDA runs them on its capture stream)."""

    name = "graph-like"

    def __init__(self):
        super().__init__()
        self.warmup_runs = 0

    def warmup(self, fn, num_warmups):
        self.warmup_runs += num_warmups
        super().warmup(fn, num_warmups)

    def capture(self, fn, args=(), kwargs=None, **_):
        from cgdispatch.capture.backends import CapturedGraph

        output = fn(*args, **(kwargs or {}))
        graph = CapturedGraph(output, lambda: output, 0.0, 0, keepalive=[*args])
        graph.capture_output = output
        return self._record(graph)


def test_warmups_run_through_the_backend_on_its_capture_stream():
    fn, backend = Counted(), _GraphLikeBackend()
    wrapper = CUDAGraphWrapper(fn, M.FULL, backend, num_warmups=3)
    x, b = fresh((4, 6), 1), fresh((6,), 2)
    with set_forward_context(M.FULL, BatchDescriptor(4, 4)):
        out = wrapper(x, b)
    assert backend.warmup_runs == 3 and fn.calls == 4  # 3 warm-ups + the capture
    torch.testing.assert_close(out, torch.tanh(x @ fn.w) + b)


def test_the_backend_keeps_the_captured_inputs_alive():
    import gc
    import weakref

    wrapper = CUDAGraphWrapper(Counted(), M.FULL, _GraphLikeBackend(), num_warmups=0)
    x, b = fresh((2, 6), 1), fresh((6,), 2)
    alive = weakref.ref(x)
    with set_forward_context(M.FULL, BatchDescriptor(2, 2)):
        wrapper(x, b)
    del x
    gc.collect()
    assert alive() is not None  # a replay reads it by address: freeing it would be stale


def test_cpu_backend_warmup_runs_the_callable_n_times():
    calls = []
    CpuReplayBackend().warmup(lambda: calls.append(1), 2)
    assert len(calls) == 2
