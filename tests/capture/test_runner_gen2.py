"""GraphRunner under generation 2 (vLLM 0.34's CudaGraphManager): graphs keyed by
BatchExecutionDescriptor, decode graphs sized by request count, replay equals eager."""

import pytest
import torch
from runner_checks import eager_then_runner

from cgdispatch import CUDAGraphMode, GraphConfig
from cgdispatch.capture.context import get_forward_context, set_forward_context
from cgdispatch.capture.runner import GraphRunner
from cgdispatch.core.v2.cudagraph_manager import BatchExecutionDescriptor, CudaGraphManager
from cgdispatch.measure.replay_check import check_replay
from cgdispatch.models.toy import PRESETS, build_toy_model

M = CUDAGraphMode
TINY = PRESETS["toy-tiny"]
PREFILL = [4, 8, 12]  # token-keyed graphs (the prefill grid, kept tiny)
DECODE = [1, 3, 6]  # uniform decode graphs, by request count
MAX_SEQS = 8
MODES = ["FULL", "PIECEWISE", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "NONE"]


def make_runner(mode, attention="general", seed=0, prefill=PREFILL, decode=DECODE, **config):
    model = build_toy_model(TINY.replace(attention=attention), seed=seed)
    model.fill_kv_cache_(seed + 1)
    config = GraphConfig(
        vllm_version="0.34",
        cudagraph_mode=mode,
        max_num_seqs=MAX_SEQS,
        max_num_batched_tokens=64,
        prefill_cudagraph_capture_token_sizes=prefill,
        decode_cudagraph_capture_request_sizes=decode,
        **config,
    )
    return GraphRunner(model, config)


def replayed_keys(runner, before):
    """Keys whose replay count grew since ``before`` ({(wrapper, key): replays})."""
    return {
        key
        for w in runner.wrappers
        for key, entry in w.entries.items()
        if entry.replays > before.get((w.name, key), 0)
    }


def replay_counts(runner):
    return {(w.name, k): e.replays for w in runner.wrappers for k, e in w.entries.items()}


@pytest.mark.parametrize("mode", MODES)
def test_replay_equals_eager_on_random_decode_and_mixed_batches(mode):
    runner = make_runner(mode)
    runner.capture_all(progress=False)
    assert isinstance(runner.dispatcher, CudaGraphManager)
    dummy = runner.model.dummy_slot
    graph_steps = 0
    for n in (1, 2, 3, 5, 6, 7, 8, 11, 13):  # 13 runs eagerly above the widest graph
        for kind in ("decode", "mixed"):
            make = runner.make_decode_batch if kind == "decode" else runner.make_mixed_batch
            batch = make(n, seed=1000 + 10 * n + (kind == "mixed"))
            if batch.num_reqs > MAX_SEQS:
                continue  # no scheduler forms it
            before = replay_counts(runner)
            ref, out, ref_caches, caches = eager_then_runner(runner, batch)
            assert out.shape == ref.shape == (n, TINY.vocab_size)
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
            for cache, r in zip(caches, ref_caches):
                torch.testing.assert_close(cache[:, :dummy], r[:, :dummy], atol=1e-5, rtol=1e-5)
            # the step replays exactly the graph the manager names, none when it says NONE
            desc = runner.dispatcher.dispatch(
                batch.num_reqs, n, 1 if batch.uniform_decode else None, 0
            )
            expected = set() if desc.cg_mode is M.NONE else {desc}
            assert replayed_keys(runner, before) == expected
            graph_steps += bool(expected)
    assert graph_steps > 0 or mode == "NONE"


@pytest.mark.parametrize("mode", MODES)
def test_graph_counts_and_order_equal_the_managers_capture_descs(mode):
    runner = make_runner(mode)
    report = runner.capture_all(progress=False)
    descs = CudaGraphManager(runner.config).capture_descs
    order = [d for ds in descs.values() for d in ds]
    by_wrapper_mode = {
        m: {k for wm, k in runner.captured_keys if wm is m} for m in (M.FULL, M.PIECEWISE)
    }
    for m in (M.FULL, M.PIECEWISE):
        assert by_wrapper_mode[m] == set(descs.get(m, []))  # one graph key per descriptor
    # the report lists the captures as they ran: PIECEWISE first, then FULL, widest first
    assert report["mode"].tolist() == [str(d.cg_mode) for d in order]
    assert report["num_tokens"].tolist() == [d.num_tokens for d in order]
    reqs = [None if r is None or r != r else int(r) for r in report["num_reqs"]]  # NaN: any
    assert reqs == [d.num_reqs for d in order]
    assert report["uniform"].tolist() == [d.uniform_token_count is not None for d in order]
    if mode == "NONE":
        assert order == [] and runner.wrappers == []


@pytest.mark.parametrize("spec_tokens", [0, 1])
def test_uniform_decode_replays_the_smallest_request_count_at_or_above(spec_tokens):
    runner = make_runner(
        "FULL_DECODE_ONLY", attention="uniform", num_speculative_tokens=spec_tokens
    )
    runner.capture_all(progress=False)
    q = 1 + spec_tokens
    decode = sorted(
        d.num_reqs for d in runner.dispatcher.capture_order() if d.uniform_token_count == q
    )
    assert decode == DECODE  # request counts, not token counts
    for r in range(1, MAX_SEQS + 1):
        batch = runner.make_decode_batch(r * q, seed=r)
        before = replay_counts(runner)
        ref, out, _, _ = eager_then_runner(runner, batch)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        want = min((s for s in DECODE if s >= r), default=None)
        got = replayed_keys(runner, before)
        if want is None:
            assert got == set()  # above the largest decode graph: eager in this mode
        else:
            (key,) = got
            assert (key.num_reqs, key.num_tokens, key.uniform_token_count) == (want, want * q, q)


def test_persistent_buffers_cover_the_widest_descriptor():
    # q = 2: the 6-request decode graph holds 12 tokens, wider than every prefill size
    runner = make_runner("FULL_AND_PIECEWISE", prefill=[2, 4], num_speculative_tokens=1)
    widest = max(d.num_tokens for d in runner.dispatcher.capture_order())
    assert widest == 12 and runner.max_num_tokens == widest
    assert runner.inputs.shape == (3, widest)
    runner.capture_all(progress=False)
    batch = runner.make_decode_batch(10, seed=3)  # 5 requests -> the 6-request graph
    ref, out, _, _ = eager_then_runner(runner, batch)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_the_forward_context_carries_the_generation_2_descriptor():
    desc = BatchExecutionDescriptor(M.FULL, 4, 4, uniform_token_count=1)
    with set_forward_context(M.FULL, desc):
        assert get_forward_context().batch_descriptor is desc
    with pytest.raises(ValueError, match="BatchExecutionDescriptor"):
        set_forward_context(M.FULL, (4, 4))  # refused when built, before any step


@pytest.mark.parametrize("mode", ["FULL", "FULL_AND_PIECEWISE"])
def test_check_replay_passes_for_a_generation_2_runner(mode):
    runner = make_runner(mode, seed=5)
    runner.capture_all(progress=False)
    checks = check_replay(runner, seed=11)
    keys = {(r.num_tokens, r.uniform) for r in checks.itertuples()}
    assert keys == {
        (d.num_tokens, d.uniform_token_count is not None) for d in runner.dispatcher.capture_order()
    }
    assert checks["ok"].all() and checks["replayed"].all()
    assert (checks["batch_reqs"] <= MAX_SEQS).all()


def test_step_request_count_is_checked_against_the_graphs():
    runner = make_runner("FULL", prefill=[4, 8])
    runner.capture_all(progress=False)
    batch = runner.make_mixed_batch(3, seed=2)
    before = replay_counts(runner)
    runner.execute_batch(batch)
    (key,) = replayed_keys(runner, before)
    assert key.num_tokens == 4 and key.num_reqs == 4
    with pytest.raises(ValueError, match="num_reqs=5"):
        runner.execute(batch.input_ids, batch.positions, batch.slots, num_reqs=5)
