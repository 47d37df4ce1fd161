"""A Hugging Face model through GraphRunner: replay equals eager for every mode and every
decode size (padded ones included), graphs of the expected mode replay, and the capture
command's --check passes."""

import functools

import pytest
import torch

pytest.importorskip("transformers")

from cgdispatch.__main__ import main  # noqa: E402
from cgdispatch.capture.runner import GraphRunner  # noqa: E402
from cgdispatch.core.config import GraphConfig  # noqa: E402
from cgdispatch.core.modes import CUDAGraphMode  # noqa: E402
from cgdispatch.models.hf.presets import build_hf_model  # noqa: E402

SIZES = [1, 2, 4]
M = CUDAGraphMode


@pytest.fixture(scope="module", autouse=True)
def _instantiate_every_hf_class_before_compiling():
    """torch.compile guards on transformers' registry of instantiated model classes: a
    class first instantiated after a capture recompiles into pieces without graphs."""
    for preset in ("hf-llama-tiny", "hf-gpt2-tiny"):
        build_hf_model(preset)


@functools.cache  # shared by the tests of this module; each test restores what it checks
def _runner(preset: str, mode: str) -> GraphRunner:
    model = build_hf_model(preset, seed=1)
    model.fill_kv_cache_(seed=2)
    config = GraphConfig(
        cudagraph_mode=mode, cudagraph_capture_sizes=SIZES, max_num_seqs=model.num_slots
    )
    runner = GraphRunner(model, config)
    runner.capture_all(progress=False)
    return runner


def _replay_vs_eager(runner: GraphRunner, n: int, seed: int, uniform: bool = True):
    """Logits and caches of one step through the runner and through the model directly
    (unpadded, eager), both from the same cache state; returns the wrapper replays."""
    model = runner.model
    batch = model.make_decode_batch(n, seed=seed)
    snapshot = [c.clone() for c in model.kv_caches()]
    with torch.no_grad():
        ref = model(batch.input_ids, batch.positions, batch.slots).clone()
    ref_caches = [c.clone() for c in model.kv_caches()]
    for c, s in zip(model.kv_caches(), snapshot):
        c.copy_(s)
    before = {w.name: w.num_replays for w in runner.wrappers}
    out = runner.execute(
        batch.input_ids, batch.positions, batch.slots, uniform_decode=uniform
    ).clone()
    real = slice(0, model.num_slots)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)
    for c, r in zip(model.kv_caches(), ref_caches):
        torch.testing.assert_close(c[:, real], r[:, real], atol=1e-5, rtol=1e-4)
    return {w.name: w.num_replays - before[w.name] for w in runner.wrappers}


@pytest.mark.parametrize(
    "preset, mode, resolved",
    [
        ("hf-llama-tiny", "NONE", M.NONE),
        ("hf-llama-tiny", "FULL_DECODE_ONLY", M.FULL_DECODE_ONLY),
        ("hf-llama-tiny", "PIECEWISE", M.PIECEWISE),
        ("hf-llama-tiny", "FULL_AND_PIECEWISE", M.FULL_AND_PIECEWISE),
    ],
)
def test_replay_equals_eager_for_every_decode_size(preset, mode, resolved):
    runner = _runner(preset, mode)
    assert runner.cudagraph_mode is resolved
    for n in [*range(1, SIZES[-1] + 1), 6]:  # 3 is padded to 4; 6 is above the largest size
        replays = _replay_vs_eager(runner, n, seed=100 + n)
        full = replays.get("full", 0)
        pieces = sum(v for k, v in replays.items() if k != "full")
        if resolved is M.NONE or n > SIZES[-1]:
            assert full == pieces == 0
        elif resolved.decode_mode() is M.FULL:
            assert full == 1
        else:  # PIECEWISE: every graph piece replays once
            assert pieces == runner.piecewise_backend.report.num_graph_pieces
    if resolved.requires_piecewise_compilation():
        assert runner.piecewise_backend.num_splits == 1  # one compile serves every size
        assert runner.piecewise_backend.report.num_pieces == 5  # 3 graph pieces, 2 SDPA calls


def test_full_and_piecewise_replays_piecewise_graphs_for_non_uniform_dispatch():
    runner = _runner("hf-llama-tiny", "FULL_AND_PIECEWISE")
    for n in (3, 4):
        replays = _replay_vs_eager(runner, n, seed=7 * n, uniform=False)
        assert replays["full"] == 0 and sum(replays.values()) == 3


@pytest.mark.parametrize("mode", ["FULL_DECODE_ONLY", "PIECEWISE"])
def test_replayed_decode_from_position_0_equals_hf_forward_without_cache(mode):
    """Several consecutive replayed steps build the cache the next step reads: the last
    logits equal HF's own forward over the whole sequences (an independent computation)."""
    runner = _runner("hf-llama-tiny", mode)
    model = runner.model
    gen = torch.Generator().manual_seed(5)
    num_reqs, steps = 3, 5
    seqs = torch.randint(0, model.config.vocab_size, (num_reqs, steps), generator=gen)
    slots = torch.randperm(model.num_slots, generator=gen)[:num_reqs]
    with torch.no_grad():
        ref = model.hf_model(input_ids=seqs).logits
    replays = sum(w.num_replays for w in runner.wrappers)
    for p in range(steps):
        out = runner.execute(seqs[:, p], torch.full((num_reqs,), p), slots, uniform_decode=True)
        torch.testing.assert_close(out, ref[:, p], atol=1e-5, rtol=1e-4)
    assert sum(w.num_replays for w in runner.wrappers) > replays


def test_modes_resolve_to_decode_only_full_graphs():
    """UNIFORM_SINGLE_TOKEN_DECODE: FULL graphs for decode steps only (vLLM's lowering)."""
    support = build_hf_model("hf-gpt2-tiny").attention_cg_support
    resolved = {
        mode: GraphConfig(cudagraph_mode=mode).resolve(support).cudagraph_mode
        for mode in ("FULL", "FULL_DECODE_ONLY", "PIECEWISE", "NONE")
    }
    assert resolved == {
        "FULL": M.FULL_AND_PIECEWISE,
        "FULL_DECODE_ONLY": M.FULL_DECODE_ONLY,
        "PIECEWISE": M.PIECEWISE,
        "NONE": M.NONE,
    }
    no_split = GraphConfig(cudagraph_mode="FULL", splitting_ops=[]).resolve(support)
    assert no_split.cudagraph_mode is M.FULL_DECODE_ONLY


def test_runner_refuses_mixed_batches_for_the_adapter():
    model = build_hf_model("hf-gpt2-tiny")
    runner = GraphRunner(model, GraphConfig(cudagraph_mode="NONE"))
    with pytest.raises(ValueError, match="mixed batches"):
        runner.make_mixed_batch(4)
    assert (runner.make_decode_batch(4, seed=1).positions.unique().numel()) == 1


@pytest.mark.parametrize("mode", ["FULL_AND_PIECEWISE"])  # GPT-2: FULL decode and PIECEWISE keys
def test_capture_command_check_passes_for_the_hf_model(mode, capsys):
    rc = main(
        [
            "capture",
            "--model",
            "hf-gpt2-tiny",
            "--mode",
            mode,
            "--sizes",
            "1,2",
            "--check",
            "--no-progress",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    checks = out.split("replay vs eager")[1]
    assert "ok: " in checks and "MISMATCH" not in checks and " mixed " not in checks
    if mode == "FULL_AND_PIECEWISE":
        assert "decode-nonuniform" in checks and "FULL " in checks


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["FULL_DECODE_ONLY", "PIECEWISE"])
def test_cuda_replay_equals_eager(mode):
    model = build_hf_model("hf-llama-tiny", device="cuda", seed=1)
    model.fill_kv_cache_(seed=2)
    config = GraphConfig(cudagraph_mode=mode, cudagraph_capture_sizes=SIZES, max_num_seqs=16)
    runner = GraphRunner(model, config)
    assert runner.backend.name == "cuda"
    runner.capture_all(progress=False)
    for n in range(1, SIZES[-1] + 1):
        batch = model.make_decode_batch(n, seed=n)
        ids, pos, slots = (t.cuda() for t in (batch.input_ids, batch.positions, batch.slots))
        start = [c.clone() for c in model.kv_caches()]
        with torch.no_grad():
            ref = model(ids, pos, slots).clone()
        for cache, saved in zip(model.kv_caches(), start):
            cache.copy_(saved)
        replays = sum(w.num_replays for w in runner.wrappers)
        out = runner.execute(ids, pos, slots, uniform_decode=True)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
        assert sum(w.num_replays for w in runner.wrappers) > replays
