"""Output lifetimes on the CPU stand-in: what a caller may keep, and for how long.

vLLM 0.33 (``vllm/compilation/cuda_graph.py``) keeps weak references to the outputs of FULL
graphs and of the last piecewise graph, so the next graph in the pool may reuse their
blocks. The stand-in makes that reuse certain (one shared arena), so holding a result
across another key's replay gives wrong numbers here as it may on a GPU; a copy survives.
"""

import pytest
import torch

from cgdispatch import CUDAGraphMode, GraphConfig
from cgdispatch.capture.backends import CpuReplayBackend
from cgdispatch.capture.context import set_forward_context
from cgdispatch.capture.pool import OutputLifetime
from cgdispatch.capture.runner import GraphRunner
from cgdispatch.capture.wrapper import CUDAGraphWrapper
from cgdispatch.models.toy import PRESETS, build_toy_model

M = CUDAGraphMode
TINY = PRESETS["toy-tiny"]


def make_runner(mode, weak_outputs=True, seed=0):
    model = build_toy_model(TINY, seed=seed)
    model.fill_kv_cache_(seed + 1)
    config = GraphConfig(
        cudagraph_mode=mode, cudagraph_capture_sizes=[2, 4, 8], max_num_seqs=TINY.num_slots
    )
    runner = GraphRunner(model, config, weak_outputs=weak_outputs)
    runner.capture_all(progress=False)
    return runner


def eager(runner, batch):
    """The model's own logits for ``batch``, computed outside the runner (cache restored)."""
    saved = [c.clone() for c in runner.model.kv_caches()]
    with torch.no_grad():
        ref = runner.model(batch.input_ids, batch.positions, batch.slots)
    for cache, s in zip(runner.model.kv_caches(), saved):
        cache.copy_(s)
    return ref


@pytest.mark.parametrize("mode", ["FULL", "PIECEWISE", "FULL_AND_PIECEWISE"])
def test_weak_result_held_across_another_key_is_overwritten_a_copy_is_not(mode):
    runner = make_runner(mode)
    first = runner.make_decode_batch(4, seed=11)
    ref = eager(runner, first)
    held = runner.execute_batch(first)
    copied = held.clone()
    torch.testing.assert_close(held, ref, atol=1e-5, rtol=1e-5)
    other = runner.make_mixed_batch(8, seed=12)  # another key (8), another batch kind
    other_ref = eager(runner, other)
    out = runner.execute_batch(other)
    torch.testing.assert_close(out, other_ref, atol=1e-5, rtol=1e-5)
    # the 8-key graph wrote its output over the blocks the 4-key result points at
    assert not torch.allclose(held, ref, atol=1e-3)
    torch.testing.assert_close(held, out[:4])
    torch.testing.assert_close(copied, ref, atol=1e-5, rtol=1e-5)  # the copy is intact


@pytest.mark.parametrize("mode", ["FULL", "PIECEWISE"])
def test_strong_outputs_survive_other_keys_but_not_their_own_key(mode):
    runner = make_runner(mode, weak_outputs=False)
    first = runner.make_decode_batch(4, seed=21)
    ref = eager(runner, first)
    held = runner.execute_batch(first)
    runner.execute_batch(runner.make_mixed_batch(8, seed=22))  # another key: untouched
    torch.testing.assert_close(held, ref, atol=1e-5, rtol=1e-5)
    again = runner.make_decode_batch(4, seed=23)  # the same key: the graph's own output
    again_ref = eager(runner, again)
    runner.execute_batch(again)
    torch.testing.assert_close(held, again_ref, atol=1e-5, rtol=1e-5)


def test_inner_pieces_hand_back_outputs_the_caller_owns_until_dropped():
    """vLLM's non-last pieces: the capture returns them strongly; the pool gets the bytes
    back when the caller lets go (the stand-in's ledger follows the caller's alias)."""
    backend = CpuReplayBackend(round_bytes=1)
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(5, 7, generator=gen)
    x = torch.randn(3, 5, generator=gen)  # persistent input, refilled in place
    wrapper = CUDAGraphWrapper(
        lambda a: a @ w, M.FULL, backend, num_warmups=0, output_lifetime=OutputLifetime.CALLER
    )
    from cgdispatch import BatchDescriptor

    with set_forward_context(M.FULL, BatchDescriptor(3, 3)):
        out = wrapper(x)
    torch.testing.assert_close(out, x @ w)
    assert backend.ledger.held_bytes == 3 * 7 * 4  # the caller holds the output
    view = out[1:]
    del out
    assert backend.ledger.held_bytes == 3 * 7 * 4  # a view still holds the block
    del view
    assert backend.ledger.held_bytes == 0
    x.copy_(torch.randn(3, 5, generator=gen))
    with set_forward_context(M.FULL, BatchDescriptor(3, 3)):
        replayed = wrapper(x)  # the graph still owns its memory: replays stay correct
    torch.testing.assert_close(replayed, x @ w)


def test_weak_outputs_are_the_default_and_strong_is_an_option():
    assert make_runner("FULL").output_lifetime is OutputLifetime.WEAK
    strong = make_runner("FULL", weak_outputs=False)
    assert strong.output_lifetime is OutputLifetime.GRAPH
    assert {w.output_lifetime for w in strong.wrappers} == {OutputLifetime.GRAPH}
    pieces = make_runner("PIECEWISE").wrappers
    assert [w.output_lifetime for w in pieces] == [OutputLifetime.CALLER] * (len(pieces) - 1) + [
        OutputLifetime.WEAK
    ]


def test_bad_output_lifetime_is_a_value_error():
    with pytest.raises(ValueError, match="output_lifetime='weak' is invalid"):
        CUDAGraphWrapper(lambda x: x, M.FULL, "cpu", output_lifetime="weak")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_weak_outputs_shrink_the_pool_and_replays_stay_correct():
    from cgdispatch.capture.cuda_backend import capture_stream
    from cgdispatch.measure.timing import measure_capture_memory

    model = build_toy_model(TINY.replace(num_slots=256), device="cuda")
    model.fill_kv_cache_(1)
    config = GraphConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=[64, 128, 256])
    held = {}
    for weak in (True, False):
        with GraphRunner(model, config, weak_outputs=weak) as runner:
            # warm up where the captures warm up (the process's capture stream): the blocks
            # and cuBLAS workspace it makes there are reused by capture, not added to it
            stream = capture_stream(runner.device)
            stream.wait_stream(torch.cuda.current_stream())
            with torch.no_grad(), torch.cuda.stream(stream):
                for n in (64, 128, 256):
                    model(*runner.make_mixed_batch(n, seed=n).tokens.cuda())
            torch.cuda.current_stream().wait_stream(stream)
            _, memory = measure_capture_memory(lambda: runner.capture_all(progress=False))
            held[weak] = memory.allocated_bytes  # pool blocks still held after capture
            batch = runner.make_mixed_batch(100, seed=3)
            saved = [c.clone() for c in model.kv_caches()]
            with torch.no_grad():
                ref = model(*batch.tokens.cuda())
            for cache, s in zip(model.kv_caches(), saved):
                cache.copy_(s)
            out = runner.execute_batch(batch).clone()
            torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    assert held[True] < held[False]  # strong: every graph keeps its logits


def test_output_lifetime_table_shows_the_held_result_and_the_pool_per_policy():
    from cgdispatch.measure.lifetime import output_lifetime_table

    table = output_lifetime_table(sizes=(2, 4, 8), seed=3)
    assert table["held_result_still_right"].to_dict() == {"weak (vLLM)": False, "strong": True}
    assert table["copy_still_right"].all()
    assert (table["pool_bytes_stand_in"] == table["pool_bytes_estimate"]).all()
    assert (
        table.loc["weak (vLLM)", "pool_bytes_estimate"] < table.loc["strong", "pool_bytes_estimate"]
    )
    with pytest.raises(ValueError, match="held_size=4, other_size=4 are invalid"):
        output_lifetime_table(sizes=(2, 4), held_size=4, other_size=4)
