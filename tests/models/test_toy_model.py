"""Toy LM: attention ops against a token-by-token reference, slot isolation, tracing, batches."""

import pytest
import torch

from cgdispatch import AttentionCGSupport, BatchDescriptor, CUDAGraphMode
from cgdispatch.capture.context import set_forward_context
from cgdispatch.capture.stepbatch import make_decode_batch, make_mixed_batch
from cgdispatch.models.attention import attention_reference
from cgdispatch.models.toy import PRESETS, ToyConfig, build_toy_model

TINY = PRESETS["toy-tiny"]


def _qkv(n, seed, cfg=TINY):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(n, cfg.num_heads, cfg.head_dim, generator=gen)
    k = torch.randn(n, cfg.num_kv_heads, cfg.head_dim, generator=gen)
    v = torch.randn(n, cfg.num_kv_heads, cfg.head_dim, generator=gen)
    cache = torch.randn(
        2, cfg.num_slots + 1, cfg.max_seq_len, cfg.num_kv_heads, cfg.head_dim, generator=gen
    )
    return q, k, v, cache


@pytest.mark.parametrize("seed", [0, 1])
def test_attention_op_matches_token_by_token_reference_on_mixed_batch(seed):
    batch = make_mixed_batch(TINY, 11, seed=seed)
    q, k, v, cache = _qkv(11, seed)
    ref_cache = cache.clone()
    ref = attention_reference(q, k, v, ref_cache, batch.positions, batch.slots, 0.25)
    out = torch.ops.cgdispatch.attention(q, k, v, cache, batch.positions, batch.slots, 0.25)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(cache, ref_cache)


@pytest.mark.parametrize("q_len", [1, 3])
def test_uniform_op_uses_its_decode_kernel_only_for_uniform_keys(q_len):
    batch = make_decode_batch(TINY, 4 * q_len, q_len, seed=5)
    q, k, v, cache = _qkv(4 * q_len, 5)
    ref = attention_reference(q, k, v, cache.clone(), batch.positions, batch.slots, 0.3)
    key = BatchDescriptor(4 * q_len, 4, uniform=True)
    with set_forward_context(CUDAGraphMode.FULL, key):
        out = torch.ops.cgdispatch.attention_uniform(
            q, k, v, cache.clone(), batch.positions, batch.slots, 0.3
        )
    torch.testing.assert_close(out, ref)
    mixed = make_mixed_batch(TINY, 9, seed=6)  # no uniform key: the general kernel
    q, k, v, cache = _qkv(9, 6)
    ref = attention_reference(q, k, v, cache.clone(), mixed.positions, mixed.slots, 0.3)
    out = torch.ops.cgdispatch.attention_uniform(q, k, v, cache, mixed.positions, mixed.slots, 0.3)
    torch.testing.assert_close(out, ref)


def test_one_mixed_step_equals_each_request_run_alone():
    """Requests in different slots do not see each other: batching is invisible."""
    model = build_toy_model("toy-tiny", seed=3)
    model.fill_kv_cache_(4)
    start = [c.clone() for c in model.kv_caches()]
    batch = make_mixed_batch(TINY, 13, seed=8)
    together = model(batch.input_ids, batch.positions, batch.slots)
    after = [c.clone() for c in model.kv_caches()]
    for cache, saved in zip(model.kv_caches(), start):
        cache.copy_(saved)
    pieces, i = [], 0
    for length in batch.query_lens:
        sl = slice(i, i + length)
        pieces.append(model(batch.input_ids[sl], batch.positions[sl], batch.slots[sl]))
        i += length
    torch.testing.assert_close(together, torch.cat(pieces), atol=1e-5, rtol=1e-5)
    for cache, ref in zip(model.kv_caches(), after):
        torch.testing.assert_close(cache, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiles_in_one_graph_with_attention_as_opaque_nodes(dynamic):
    model = build_toy_model("toy-tiny", seed=1)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=dynamic)
    for n in (6, 11) if dynamic else (6,):  # dynamic: one graph serves every num_tokens
        batch = make_mixed_batch(TINY, n, seed=2)
        inputs = [t.clone() for t in (batch.input_ids, batch.positions, batch.slots)]
        model.fill_kv_cache_(0)
        ref = model(*inputs)
        model.fill_kv_cache_(0)
        torch.testing.assert_close(compiled(*inputs), ref)
    assert len(graphs) == 1
    attn = [n for n in graphs[0].graph.nodes if "cgdispatch" in str(n.target)]
    assert len(attn) == TINY.num_layers
    assert {n.target._qualified_op_name for n in attn} == {"cgdispatch::attention"}


def test_attention_support_and_presets():
    assert build_toy_model("toy-tiny").attention_cg_support is AttentionCGSupport.ALWAYS
    uni = build_toy_model(TINY.replace(attention="uniform"))
    assert uni.attention_cg_support is AttentionCGSupport.UNIFORM_BATCH
    assert {"toy-tiny", "toy-small", "toy-1b"} <= set(PRESETS)
    assert PRESETS["toy-1b"].hidden_size == 2048 and PRESETS["toy-1b"].num_layers == 16
    model = build_toy_model("toy-tiny", dtype="bfloat16")
    assert (
        model.embed.weight.dtype == torch.bfloat16 and model.kv_caches()[0].dtype == torch.bfloat16
    )
    assert model.rope_cos.dtype == torch.float32
    assert model.dummy_slot == TINY.num_slots
    assert model.kv_caches()[0].shape == (
        2,
        TINY.num_slots + 1,
        TINY.max_seq_len,
        TINY.num_kv_heads,
        TINY.head_dim,
    )


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"num_heads": 3}, "multiple of num_heads"),
        ({"attention": "flash"}, "unknown"),
        ({"dtype": "int8"}, "unknown"),
        ({"num_slots": 0}, "num_slots"),
        ({"hidden_size": 12, "num_heads": 4, "num_kv_heads": 1}, "even head_dim"),
    ],
)
def test_bad_model_config(changes, match):
    with pytest.raises(ValueError, match=match):
        ToyConfig(**changes)


def test_unknown_preset():
    with pytest.raises(ValueError, match="toy-tiny"):
        build_toy_model("toy-huge")


@pytest.mark.parametrize("n, q", [(1, 1), (8, 1), (6, 2), (16, 1)])
def test_decode_batch_shape(n, q):
    b = make_decode_batch(TINY, n, q, seed=n)
    assert b.uniform_decode and b.num_tokens == n and b.query_lens == (q,) * (n // q)
    slots = b.slots.view(-1, q)
    assert (slots == slots[:, :1]).all() and len(set(slots[:, 0].tolist())) == n // q
    pos = b.positions.view(-1, q)
    assert (pos[:, 1:] - pos[:, :-1] == 1).all() and int(b.positions.max()) < TINY.max_seq_len
    assert int(b.input_ids.max()) < TINY.vocab_size


@pytest.mark.parametrize("n", [1, 2, 5, 30, 200])
def test_mixed_batch_shape(n):
    b = make_mixed_batch(TINY, n, seed=n)
    assert not b.uniform_decode and b.num_tokens == n and sum(b.query_lens) == n
    assert len(set(b.slots.tolist())) == b.num_reqs <= TINY.num_slots
    if n >= 2:
        assert max(b.query_lens) >= 2  # at least one prefill chunk
    assert int(b.positions.max()) < TINY.max_seq_len


def test_batches_are_seeded():
    a, b = make_mixed_batch(TINY, 9, seed=4), make_mixed_batch(TINY, 9, seed=4)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.slots, b.slots)
    c = make_mixed_batch(TINY, 9, seed=5)
    assert not torch.equal(a.input_ids, c.input_ids)


def test_batches_that_do_not_fit_are_refused():
    with pytest.raises(ValueError, match="multiple of the query length"):
        make_decode_batch(TINY, 5, 2)
    with pytest.raises(ValueError, match="KV slots"):
        make_decode_batch(TINY, TINY.num_slots + 1)
    with pytest.raises(ValueError, match="does not fit"):
        make_mixed_batch(TINY, TINY.num_slots * TINY.max_seq_len + 1)
