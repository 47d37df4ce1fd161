"""GraphRunner: replay equals eager, padding isolation, aliasing, capture order, lowering."""

import pytest
import torch
from runner_checks import eager_then_runner

from cgdispatch import BatchDescriptor, CUDAGraphMode, GraphConfig
from cgdispatch.capture.runner import GraphRunner
from cgdispatch.models.toy import PRESETS, build_toy_model

M = CUDAGraphMode
TINY = PRESETS["toy-tiny"]
SIZES = [1, 2, 4, 8]


def make_runner(mode="FULL", sizes=SIZES, attention="general", seed=0, **config):
    model = build_toy_model(TINY.replace(attention=attention), seed=seed)
    model.fill_kv_cache_(seed + 1)
    config = GraphConfig(
        vllm_version="0.33",
        cudagraph_mode=mode,
        cudagraph_capture_sizes=sizes,
        max_num_seqs=TINY.num_slots,
        **config,
    )
    return GraphRunner(model, config)


def assert_real_slots_equal(caches, refs, dummy):
    for cache, ref in zip(caches, refs):
        torch.testing.assert_close(cache[:, :dummy], ref[:, :dummy], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["NONE", "FULL", "FULL_DECODE_ONLY"])
def test_replay_equals_eager_for_every_size_decode_and_mixed(mode):
    runner = make_runner(mode)
    runner.capture_all(progress=False)
    dummy = runner.model.dummy_slot
    for n in range(1, 11):  # 9 and 10 run eagerly above the largest capture size
        for kind in ("decode", "mixed"):
            make = runner.make_decode_batch if kind == "decode" else runner.make_mixed_batch
            batch = make(n, seed=100 + n)
            ref, out, ref_caches, caches = eager_then_runner(runner, batch)
            assert out.shape == ref.shape == (n, TINY.vocab_size)
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
            assert_real_slots_equal(caches, ref_caches, dummy)
    replays = sum(w.num_replays for w in runner.wrappers)
    expected = {"NONE": 0, "FULL": 16, "FULL_DECODE_ONLY": 8}[
        mode
    ]  # n <= 8: both kinds / decodes only
    assert replays == expected


def test_padding_never_touches_real_slots_even_with_stale_buffers():
    runner = make_runner("FULL")
    model, dummy = runner.model, runner.model.dummy_slot
    big = runner.make_decode_batch(8, seed=1)  # fills all 8 buffer rows with real slots
    runner.execute_batch(big)
    small = runner.make_mixed_batch(5, seed=2)  # padded to 8: rows 5..7 hold stale slots
    ref, out, ref_caches, caches = eager_then_runner(runner, small)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert_real_slots_equal(caches, ref_caches, dummy)
    assert (runner.slots[5:8] == dummy).all()
    # the slots of the big batch that are not in the small one are exactly as before the step
    untouched = sorted(set(big.slots.tolist()) - set(small.slots.tolist()))
    for cache, ref_cache in zip(caches, ref_caches):
        assert torch.equal(cache[:, untouched], ref_cache[:, untouched])
    assert model.dummy_slot not in small.slots.tolist()


def test_returned_logits_alias_the_graph_output():
    runner = make_runner("FULL")
    first = runner.execute_batch(runner.make_decode_batch(4, seed=1))
    kept = first.clone()
    second = runner.execute_batch(runner.make_decode_batch(4, seed=2))
    assert first.data_ptr() == second.data_ptr()
    torch.testing.assert_close(first, second)  # documented: the replay overwrote it
    assert not torch.allclose(first, kept)


def test_eager_mode_returns_fresh_tensors():
    runner = make_runner("NONE")
    assert runner.wrappers == [] and runner.cudagraph_mode is M.NONE
    first = runner.execute_batch(runner.make_decode_batch(4, seed=1))
    kept = first.clone()
    runner.execute_batch(runner.make_decode_batch(4, seed=2))
    torch.testing.assert_close(first, kept)


def test_capture_all_goes_largest_first_and_reports_each_key():
    runner = make_runner("FULL_DECODE_ONLY", sizes=[1, 2, 4, 8, 16])
    report = runner.capture_all(progress=False)
    assert report["num_tokens"].tolist() == [16, 8, 4, 2, 1]
    assert [d.num_tokens for _, d in runner.captured_keys] == [16, 8, 4, 2, 1]
    assert report["uniform"].all() and (report["mode"] == "FULL").all()
    assert report["num_reqs"].tolist() == [16, 8, 4, 2, 1]
    assert (report["num_graphs"] == 1).all() and (report["capture_s"] > 0).all()
    assert (report["step_s"] >= report["capture_s"]).all()
    assert report["pool_bytes"].isna().all() and report.attrs["backend"] == "cpu"
    # capture wrote only into the dummy slot
    assert runner.capture_report_ is report


def test_capture_does_not_write_real_slots():
    runner = make_runner("FULL")
    before = [c[:, : runner.model.dummy_slot].clone() for c in runner.model.kv_caches()]
    runner.capture_all(progress=False)
    for cache, saved in zip(runner.model.kv_caches(), before):
        assert torch.equal(cache[:, : runner.model.dummy_slot], saved)


def test_after_capture_all_a_new_key_raises_and_lazy_capture_works_before():
    runner = make_runner("FULL")
    runner.execute_batch(runner.make_mixed_batch(3, seed=1))  # lazily captures key 4
    assert [d.num_tokens for _, d in runner.captured_keys] == [4]
    runner.capture_enabled = False
    with pytest.raises(RuntimeError, match=r"num_tokens=8.*switched off"):
        runner.execute_batch(runner.make_mixed_batch(7, seed=1))
    runner.execute_batch(runner.make_mixed_batch(4, seed=2))  # captured key still replays


def test_full_with_uniform_attention_lowers_to_decode_only():
    runner = make_runner(
        "FULL", attention="uniform", num_speculative_tokens=1, sizes=[2, 4, 8], splitting_ops=[]
    )
    assert runner.cudagraph_mode is M.FULL_DECODE_ONLY
    runner.capture_all(progress=False)
    assert all(d.uniform and d.num_reqs == d.num_tokens // 2 for _, d in runner.captured_keys)
    for n in (2, 4, 6, 8):  # 6 tokens = 3 requests, padded to 4 requests with one dummy request
        batch = runner.make_decode_batch(n, seed=n)
        ref, out, ref_caches, caches = eager_then_runner(runner, batch)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        assert_real_slots_equal(caches, ref_caches, runner.model.dummy_slot)
    mixed = runner.make_mixed_batch(5, seed=3)
    ref, out, _, _ = eager_then_runner(runner, mixed)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert runner.wrappers[0].num_replays == 4 and runner.wrappers[0].num_bypasses == 1


def test_piecewise_modes_build_a_split_model():
    runner = make_runner("FULL", attention="uniform")  # lowered to FULL_AND_PIECEWISE
    assert runner.cudagraph_mode is CUDAGraphMode.FULL_AND_PIECEWISE
    assert runner.piecewise_backend is not None
    assert make_runner("PIECEWISE").piecewise_backend is not None


def test_bad_inputs():
    runner = make_runner("FULL")
    ids = torch.tensor([1, 2, 3])
    with pytest.raises(ValueError, match="equal length"):
        runner.execute(ids, torch.tensor([0, 1]), torch.tensor([0, 0, 0]))
    debug = GraphRunner(runner.model, runner.config, debug=True)
    with pytest.raises(ValueError, match=r"slots range \[0, 99\]"):
        debug.execute(ids, torch.tensor([0, 1, 2]), torch.tensor([0, 0, 99]))
    with pytest.raises(ValueError, match="GraphConfig"):
        GraphRunner(runner.model, {"cudagraph_mode": "FULL"})


def test_debug_runner_replays_with_matching_addresses():
    model = build_toy_model("toy-tiny")
    runner = GraphRunner(
        model,
        GraphConfig(vllm_version="0.33", cudagraph_mode="FULL", cudagraph_capture_sizes=SIZES),
        debug=True,
    )
    runner.capture_all(progress=False)
    for n in (3, 8):
        runner.execute_batch(runner.make_mixed_batch(n, seed=n))
    assert runner.wrappers[0].num_replays == 2
    assert BatchDescriptor(8, 8) in runner.wrappers[0].entries


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_runner_replay_equals_eager():
    model = build_toy_model("toy-tiny", device="cuda")
    model.fill_kv_cache_(1)
    runner = GraphRunner(
        model,
        GraphConfig(
            vllm_version="0.33",
            cudagraph_mode="FULL",
            cudagraph_capture_sizes=SIZES,
            max_num_seqs=16,
        ),
    )
    assert runner.backend.name == "cuda"
    report = runner.capture_all(progress=False)
    assert (report["pool_bytes"] >= 0).all()
    for n in (1, 3, 8):
        batch = runner.make_mixed_batch(n, seed=n)
        ids, pos, slots = (t.cuda() for t in (batch.input_ids, batch.positions, batch.slots))
        start = [c.clone() for c in model.kv_caches()]
        ref = model(ids, pos, slots)
        for cache, saved in zip(model.kv_caches(), start):
            cache.copy_(saved)
        out = runner.execute(ids, pos, slots)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def test_packed_and_separate_inputs_give_the_same_step():
    runner = make_runner("FULL")
    batch = runner.make_mixed_batch(6, seed=4)
    start = [c.clone() for c in runner.model.kv_caches()]
    packed = runner.execute_packed(batch.tokens).clone()
    for cache, saved in zip(runner.model.kv_caches(), start):
        cache.copy_(saved)
    separate = runner.execute(batch.input_ids, batch.positions, batch.slots).clone()
    torch.testing.assert_close(packed, separate)
    with pytest.raises(ValueError, match=r"\[3, num_tokens\]"):
        runner.execute_packed(batch.tokens[:2])


def test_steps_above_the_largest_capture_run_eagerly_on_the_inputs():
    runner = make_runner("FULL", sizes=[1, 2])
    batch = runner.make_mixed_batch(5, seed=1)
    ref, out, ref_caches, caches = eager_then_runner(runner, batch)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert_real_slots_equal(caches, ref_caches, runner.model.dummy_slot)
    assert runner.captured_keys == [] and runner.wrappers[0].num_bypasses == 1


def test_cuda_backend_for_a_cpu_model_is_refused():
    # a CUDA graph of CPU work records nothing: its replays would return stale logits
    model = build_toy_model("toy-tiny")
    for backend in ("cuda", "CUDA"):
        with pytest.raises(ValueError, match=r"backend 'cuda' with a model on cpu.*backend='cpu'"):
            GraphRunner(
                model,
                GraphConfig(vllm_version="0.33", cudagraph_mode="FULL", max_num_seqs=16),
                backend=backend,
            )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_toy_model_on_cuda_without_a_gpu_raises_value_error():
    with pytest.raises(ValueError, match=r"device='cuda'.*device='cpu'"):
        build_toy_model("toy-tiny", device="cuda")


def test_piecewise_runners_do_not_share_one_dynamo_cache():
    # dynamo caches per code object: when every runner compiled the model class's forward,
    # the ninth piecewise runner of a process failed with the recompile limit (fullgraph)
    import torch._dynamo.config as dynamo_config

    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    with dynamo_config.patch(**{name: 1}):
        _three_piecewise_runners()


def _three_piecewise_runners():
    for seed in range(3):
        runner = make_runner("PIECEWISE", sizes=[1, 2], seed=seed)
        batch = runner.make_mixed_batch(2, seed=seed)
        expected = runner.model(*batch.tokens)
        torch.testing.assert_close(runner.execute_batch(batch), expected)
        assert runner.piecewise_backend.num_splits == 1
