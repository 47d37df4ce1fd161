"""Piecewise graphs: the split, graph counts per mode, replay == eager for all five modes."""

import pytest
import torch

from cgdispatch import CUDAGraphMode, GraphConfig
from cgdispatch.capture.context import set_forward_context
from cgdispatch.capture.piecewise import PiecewiseBackend, _StaticOutput, is_splitting_op
from cgdispatch.capture.runner import GraphRunner
from cgdispatch.core.batch import BatchDescriptor
from cgdispatch.models.toy import ToyConfig, build_toy_model

M = CUDAGraphMode
SIZES = [1, 2, 4, 8]


def make_runner(mode, layers=2, attention="general", sizes=SIZES, **kw):
    torch._dynamo.reset()
    cfg = ToyConfig(num_layers=layers, attention=attention, num_slots=16, max_seq_len=32)
    model = build_toy_model(cfg, seed=layers)
    config = GraphConfig(cudagraph_mode=mode, cudagraph_capture_sizes=sizes, max_num_seqs=4, **kw)
    return model, GraphRunner(model, config)


def eager(model, batch):
    with torch.no_grad():
        return model(batch.input_ids, batch.positions, batch.slots).clone()


@pytest.mark.parametrize("layers", [1, 3])
def test_graph_counts_per_mode(layers):
    counts = {}
    for mode in ("PIECEWISE", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        _, runner = make_runner(mode, layers=layers, sizes=[4])
        report = runner.capture_all(progress=False)
        counts[mode] = dict(zip(report["mode"], report["num_graphs"]))
        if runner.piecewise_backend is not None:
            assert runner.piecewise_backend.report.num_graph_pieces == layers + 1
            assert runner.piecewise_backend.report.num_pieces == 2 * layers + 1
    assert counts["PIECEWISE"] == {"PIECEWISE": layers + 1}
    assert counts["FULL_DECODE_ONLY"] == {"FULL": 1}
    assert counts["FULL_AND_PIECEWISE"] == {"PIECEWISE": layers + 1, "FULL": 1}


@pytest.mark.parametrize("mode", list(M))
def test_replay_equals_eager_every_mode_every_size(mode):
    model, runner = make_runner(mode)
    runner.capture_all(progress=False)
    captured = len(runner.captured_keys)
    for n in range(1, SIZES[-1] + 3):  # every size, padded ones and two eager ones above
        for uniform in (False, True):
            seed = 100 * n + uniform
            batch = (
                runner.make_decode_batch(n, seed=seed)
                if uniform
                else runner.make_mixed_batch(n, seed=seed)
            )
            want = eager(model, batch)
            got = runner.execute_batch(batch)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert len(runner.captured_keys) == captured  # nothing captured after capture_all
    if mode.requires_piecewise_compilation():
        assert runner.piecewise_backend.num_splits == 1  # compiled and split once for all sizes


def test_piecewise_replays_and_bypasses_follow_dispatch():
    model, runner = make_runner("FULL_AND_PIECEWISE")
    runner.capture_all(progress=False)
    full, *pieces = runner.wrappers
    assert full.runtime_mode is M.FULL and all(p.runtime_mode is M.PIECEWISE for p in pieces)
    before = [p.num_replays for p in pieces], full.num_replays
    runner.execute_batch(runner.make_mixed_batch(3, seed=5))  # mixed -> PIECEWISE graphs
    assert [p.num_replays for p in pieces] == [b + 1 for b in before[0]]
    assert full.num_replays == before[1]
    runner.execute_batch(runner.make_decode_batch(3, seed=6))  # uniform decode -> FULL graph
    assert full.num_replays == before[1] + 1
    assert [p.num_replays for p in pieces] == [b + 1 for b in before[0]]


def test_mode_lowering_with_uniform_only_attention():
    model, runner = make_runner("FULL", attention="uniform")
    assert runner.cudagraph_mode is M.FULL_AND_PIECEWISE  # resolve() lowered it
    runner.capture_all(progress=False)
    for n, uniform in [(3, True), (3, False), (8, False)]:
        batch = (
            runner.make_decode_batch(n, seed=n) if uniform else runner.make_mixed_batch(n, seed=n)
        )
        torch.testing.assert_close(
            runner.execute_batch(batch), eager(model, batch), rtol=1e-4, atol=1e-4
        )
    _, no_split = make_runner("FULL", attention="uniform", splitting_ops=[])
    assert no_split.cudagraph_mode is M.FULL_DECODE_ONLY and no_split.piecewise_backend is None


def test_piece_outputs_survive_at_fixed_addresses():
    model, runner = make_runner("PIECEWISE")
    runner.capture_all(progress=False)
    statics = [
        f
        for f in runner.piecewise_backend.split_gm.__dict__.values()
        if isinstance(f, _StaticOutput)
    ]
    assert len(statics) == 2  # one per attention op
    ptrs = [s.buffers[0].data_ptr() for s in statics]
    runner.execute_batch(runner.make_mixed_batch(5, seed=1))
    assert [s.buffers[0].data_ptr() for s in statics] == ptrs


def test_static_output_only_in_piecewise_mode():
    calls = []

    def attn(x):
        calls.append(x)
        return x * 2

    s = _StaticOutput(attn, max_num_tokens=4)
    x = torch.randn(3, 5)
    assert s(x).data_ptr() == calls[-1].data_ptr() or s.buffers == {}  # no context: no copy
    with set_forward_context(M.PIECEWISE, BatchDescriptor(3)):
        a = s(x)
        b = s(torch.randn(2, 5))
        big = s(torch.randn(6, 5))  # above the buffer: returned as is
    assert a.data_ptr() == b.data_ptr() == s.buffers[0].data_ptr()
    torch.testing.assert_close(big, calls[-1] * 2)


def test_bad_splitting_ops_are_clear_errors():
    with pytest.raises(ValueError, match="splitting_ops is empty"):
        PiecewiseBackend([], 8)
    model, runner = make_runner("PIECEWISE", splitting_ops=["nope::missing"])
    with pytest.raises(Exception, match="no splitting op"):
        runner.capture_all(progress=False)


def test_is_splitting_op_names():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    attn = graph.call_function(torch.ops.cgdispatch.attention.default, (x,))
    packet = graph.call_function(torch.ops.cgdispatch.attention, (x,))
    sdpa = graph.call_function(torch._C._nn.scaled_dot_product_attention, (x, x, x))
    relu = graph.call_function(torch.relu, (x,))
    ops = ["cgdispatch::attention", "aten::scaled_dot_product_attention"]
    assert [is_splitting_op(n, ops) for n in (x, attn, packet, sdpa, relu)] == [
        False,
        True,
        True,
        True,
        False,
    ]
    assert not is_splitting_op(attn, ["cgdispatch::attention_uniform"])


@pytest.mark.slow
def test_inductor_compiled_pieces_match_eager():
    model, runner = make_runner("PIECEWISE", layers=1, sizes=[2, 4])
    runner = GraphRunner(model, runner.config, compile_pieces=True)
    runner.capture_all(progress=False)
    for n in (1, 3, 4):
        batch = runner.make_mixed_batch(n, seed=n)
        torch.testing.assert_close(
            runner.execute_batch(batch), eager(model, batch), rtol=1e-4, atol=1e-4
        )


def test_capture_cli_full_and_piecewise_check():
    from cgdispatch.__main__ import main

    assert (
        main(
            [
                "capture",
                "--model",
                "toy-tiny",
                "--mode",
                "FULL_AND_PIECEWISE",
                "--sizes",
                "1,2,4",
                "--check",
                "--no-progress",
            ]
        )
        == 0
    )


def test_recompile_after_locked_capture_is_a_clear_error():
    model, runner = make_runner("PIECEWISE")
    runner.capture_all(progress=False)
    torch._dynamo.reset()  # as if a guard failed: the next step recompiles
    with pytest.raises(Exception, match="recompiled the model after its graphs were captured"):
        runner.execute_batch(runner.make_mixed_batch(3, seed=2))
    runner.capture_enabled = True  # lazy capture allowed: a recompile is fine again
    batch = runner.make_mixed_batch(3, seed=2)
    torch.testing.assert_close(
        runner.execute_batch(batch), eager(model, batch), rtol=1e-4, atol=1e-4
    )
