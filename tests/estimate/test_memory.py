"""Graph-memory estimate on fake tensors, checked against sizes computed by hand."""

from __future__ import annotations

import random

import pandas as pd
import pytest
import torch
from small_models import MLP
from torch import nn

from cgdispatch import CUDAGraphMode, GraphConfig
from cgdispatch.estimate.graph_memory import estimate_graph_memory, round_up, shared_pool_bytes


def mlp_inputs(hidden: int, dtype: torch.dtype = torch.float32):
    return lambda desc: ((torch.randn(desc.num_tokens, hidden, dtype=dtype),), {})


def hand_mlp(tokens: int, hidden: int, elem: int, block: int) -> tuple[int, int]:
    """(peak, output) bytes: fc1 out and gelu out live together (8h); then gelu + fc2 (5h)."""
    wide, narrow = (
        round_up(tokens * 4 * hidden * elem, block),
        round_up(tokens * hidden * elem, block),
    )
    return max(2 * wide, wide + narrow), narrow


@pytest.mark.parametrize("block", [1, 512])
def test_mlp_per_key_matches_hand_sizes(block: int) -> None:
    rng = random.Random(block)
    hidden = rng.choice([24, 40, 72])
    sizes = sorted(rng.sample(range(1, 65), 4))
    model = MLP(hidden)
    est = estimate_graph_memory(
        model,
        GraphConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=sizes),
        mlp_inputs(hidden),
        round_bytes=block,
        keep_outputs=True,
    )
    assert est.per_key["num_tokens"].tolist() == sorted(sizes, reverse=True)  # largest first
    for row in est.per_key.itertuples():
        peak, out = hand_mlp(row.num_tokens, hidden, 4, block)
        assert (row.kept_bytes, row.output_bytes, row.pieces) == (peak, out, 1)
    hand = [hand_mlp(s, hidden, 4, block) for s in sorted(sizes, reverse=True)]
    retained, pool = 0, 0
    for peak, out in hand:  # outputs of earlier graphs stay, the rest is reused
        pool = max(pool, retained + peak)
        retained += out
    assert est.shared_pool_bytes == est.strong_pool_bytes == pool
    assert est.weak_pool_bytes == max(p for p, _ in hand)  # weak outputs: the largest peak
    assert est.separate_pools_bytes == sum(p for p, _ in hand)
    assert est.source == "model" and "model" in est.summary()


def test_bf16_halves_the_bytes_and_meta_matches_fake() -> None:
    hidden, sizes = 32, [4, 16]
    cfg = GraphConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=sizes)
    real = MLP(hidden).to(torch.bfloat16)
    before = [p.clone() for p in real.parameters()]
    est = estimate_graph_memory(real, cfg, mlp_inputs(hidden, torch.bfloat16), round_bytes=1)
    assert all(torch.equal(a, b) for a, b in zip(before, real.parameters()))  # untouched
    for row in est.per_key.itertuples():
        assert (row.kept_bytes, row.output_bytes) == hand_mlp(row.num_tokens, hidden, 2, 1)
    with torch.device("meta"):
        meta = MLP(hidden).to(torch.bfloat16)

    def meta_inputs(d):
        return (torch.empty(d.num_tokens, hidden, dtype=torch.bfloat16, device="meta"),), {}

    est_meta = estimate_graph_memory(meta, cfg, meta_inputs, round_bytes=1)
    assert est_meta.per_key["kept_bytes"].tolist() == est.per_key["kept_bytes"].tolist()


def test_shared_pool_model_hand_cases() -> None:
    # largest graph first, small outputs: everything fits in the first graph's blocks
    assert shared_pool_bytes([10, 8, 3], [2, 1, 1]) == (10, [10, 0, 0])
    # outputs that stay allocated push later graphs above the first peak
    assert shared_pool_bytes([4, 4, 4], [3, 3, 3]) == (10, [4, 3, 3])
    # weak-referenced outputs (vLLM): the pool is the largest peak
    assert shared_pool_bytes([4, 4, 4], [3, 3, 3], keep_outputs=False) == (4, [4, 0, 0])


@torch.library.custom_op("cgtest::mix", mutates_args=())
def _mix(x: torch.Tensor) -> torch.Tensor:
    return x.softmax(-1)


@_mix.register_fake
def _mix_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Split(nn.Module):
    """Two linears around a custom op that plays the attention (splitting) op."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(hidden, 2 * hidden), nn.Linear(2 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.cgtest.mix(self.a(x))  # piece 0: a(x); mix runs eagerly
        return self.b(y) * 2  # piece 1: b(y), then * 2


def test_piecewise_pieces_split_at_the_splitting_op() -> None:
    hidden, sizes = 16, [3, 8]
    cfg = GraphConfig(
        cudagraph_mode="PIECEWISE", cudagraph_capture_sizes=sizes, splitting_ops=["cgtest::mix"]
    )
    est = estimate_graph_memory(Split(hidden), cfg, mlp_inputs(hidden), round_bytes=1)
    assert len(est.graphs) == 2 * len(sizes)
    for row in est.graphs.itertuples():
        t = row.num_tokens
        if row.piece == 0:  # a(x) is the piece's output: kept for the eager op
            assert (row.peak_bytes, row.output_bytes) == (t * 2 * hidden * 4, t * 2 * hidden * 4)
        else:  # b(y) then * 2: both live at once, the product is the output
            assert (row.peak_bytes, row.output_bytes) == (2 * t * hidden * 4, t * hidden * 4)
    # the same module as one FULL graph also holds the eager op's output
    full = estimate_graph_memory(
        Split(hidden), cfg.replace(cudagraph_mode="FULL"), mlp_inputs(hidden), round_bytes=1
    )
    t = sizes[-1]
    assert full.per_key["kept_bytes"].iloc[0] == 2 * (t * 2 * hidden * 4)  # a(x) + mix(a(x))


def test_bad_arguments_raise_value_error() -> None:
    cfg = GraphConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=[2])
    with pytest.raises(ValueError, match="round_bytes"):
        estimate_graph_memory(MLP(8), cfg, mlp_inputs(8), round_bytes=0)
    with pytest.raises(ValueError, match="GraphConfig"):
        estimate_graph_memory(MLP(8), {"cudagraph_mode": "FULL"}, mlp_inputs(8))
    with pytest.raises(ValueError, match="inputs_fn"):
        estimate_graph_memory(MLP(8), cfg)


def test_toy_lm_full_and_piecewise_match_hand_sizes() -> None:
    from cgdispatch.models.toy import ToyConfig, build_toy_model

    # vocab far wider than the MLP, so the peak is at the LM head
    cfg = ToyConfig(
        vocab_size=4096,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=128,
        num_slots=16,
        max_seq_len=64,
    )
    model = build_toy_model(cfg, device="meta")
    sizes = [1, 5, 16, 24]
    r = lambda n: round_up(n, 512)  # noqa: E731
    est = estimate_graph_memory(
        model, GraphConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=sizes, max_num_seqs=16)
    )
    for row in est.per_key.itertuples():
        t = row.num_tokens
        logits = r(t * cfg.vocab_size * 4)
        # live at the LM head: rotary cos and sin [T, D/2], the residual and its norm [T, h], logits
        hand = logits + 2 * r(t * cfg.head_dim // 2 * 4) + 2 * r(t * cfg.hidden_size * 4)
        assert (row.kept_bytes, row.output_bytes) == (hand, logits)
    pw = estimate_graph_memory(
        model, GraphConfig(cudagraph_mode="PIECEWISE", cudagraph_capture_sizes=sizes)
    )
    assert (pw.per_key["pieces"] == cfg.num_layers + 1).all()  # split at each attention call
    last = pw.graphs[pw.graphs["piece"] == cfg.num_layers]
    assert last["output_bytes"].tolist() == [
        r(t * cfg.vocab_size * 4) for t in sorted(sizes, reverse=True)
    ]
    assert pw.separate_pools_bytes > pw.shared_pool_bytes > 0


def test_weak_outputs_policy_is_the_largest_peak() -> None:
    hidden, sizes = 16, [2, 6, 12]
    cfg = GraphConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=sizes)
    kept = estimate_graph_memory(
        MLP(hidden), cfg, mlp_inputs(hidden), round_bytes=1, keep_outputs=True
    )
    weak = estimate_graph_memory(MLP(hidden), cfg, mlp_inputs(hidden), round_bytes=1)
    assert (
        weak.shared_pool_bytes == hand_mlp(max(sizes), hidden, 4, 1)[0]
    )  # vLLM: largest peak only
    assert (
        kept.pool_bytes(False) == weak.shared_pool_bytes
        and weak.pool_bytes(True) == kept.shared_pool_bytes
    )
    assert kept.per_key["num_reqs"].tolist() == sorted(
        sizes, reverse=True
    )  # FULL keys: num_reqs = size


def stand_in_per_graph(runner):
    """(mode, num_tokens, peak, output, pool increment) per graph the stand-in captured."""
    return [
        (
            "FULL" if g.label[0] == "full" else "PIECEWISE",
            g.label[1].num_tokens,
            g.peak_bytes,
            g.output_bytes,
            g.pool_increment_bytes,
        )
        for g in runner.backend.ledger.graphs
    ]


MODES_WITH_GRAPHS = [
    ("FULL", "general"),
    ("PIECEWISE", "general"),
    ("FULL_AND_PIECEWISE", "general"),
    ("FULL_DECODE_ONLY", "general"),
    ("FULL_AND_PIECEWISE", "uniform"),  # FULL decode graphs, PIECEWISE mixed ones
]


def random_config(version: str, mode: str, rng: random.Random) -> GraphConfig:
    """A small config of either generation: V1 capture sizes, or generation 2's prefill
    token sizes and decode request sizes (explicit, so that the keys stay few)."""
    if version == "0.33":
        sizes = sorted(rng.sample(range(1, 17), 4))
        return GraphConfig(cudagraph_mode=mode, cudagraph_capture_sizes=sizes, max_num_seqs=16)
    return GraphConfig(
        vllm_version="0.34",
        cudagraph_mode=mode,
        max_num_seqs=8,
        max_num_batched_tokens=64,
        prefill_cudagraph_capture_token_sizes=sorted(rng.sample(range(1, 17), 3)),
        decode_cudagraph_capture_request_sizes=sorted(rng.sample(range(1, 9), 3)),
    )


def estimate_rows(est):
    """(mode, num_tokens, peak, output, pool increment) per estimated graph."""
    rows = est.graphs
    return list(
        zip(
            rows["runtime_mode"].map(lambda m: m.rsplit(".", 1)[-1]),
            rows["num_tokens"],
            rows["peak_bytes"],
            rows["output_bytes"],
            rows["pool_increment_bytes"],
        )
    )


@pytest.mark.parametrize("version", ["0.33", "0.34"])
@pytest.mark.parametrize("mode,attention", MODES_WITH_GRAPHS)
@pytest.mark.parametrize("weak", [True, False])
def test_estimate_equals_the_stand_in_capture_per_key(version, mode, attention, weak) -> None:
    """The estimate (meta tensors, plain model) against the CPU stand-in's ledger on the
    real capture path (real tensors, dynamo's split graph, wrappers, warm-ups), under
    either generation's keys and capture order."""
    from cgdispatch.capture.runner import GraphRunner
    from cgdispatch.models.toy import PRESETS, build_toy_model

    rng = random.Random(f"{version}-{mode}-{attention}-{weak}")
    tiny = PRESETS["toy-tiny"].replace(attention=attention)
    cfg = random_config(version, mode, rng)
    with GraphRunner(build_toy_model(tiny, seed=rng.randrange(99)), cfg, weak_outputs=weak) as r:
        r.capture_all(progress=False)
        measured = stand_in_per_graph(r)
        pool = r.backend.ledger.pool_bytes
        est = estimate_graph_memory(
            build_toy_model(tiny, device="meta"), r.config, keep_outputs=not weak
        )
    assert [tuple(map(str, e)) for e in estimate_rows(est)] == [
        tuple(map(str, m)) for m in measured
    ]
    assert est.shared_pool_bytes == pool > 0


def test_generation_2_estimate_has_the_managers_keys() -> None:
    """Generation 2: FULL decode graphs sized by request count (num_tokens = q * num_reqs,
    uniform), token-keyed graphs on the prefill grid, in the manager's capture order."""
    from cgdispatch.core.v2.cudagraph_manager import CudaGraphManager
    from cgdispatch.models.toy import PRESETS, build_toy_model

    rng = random.Random(7)
    prefill = sorted(rng.sample(range(2, 33), 3))
    decode = sorted(rng.sample(range(1, 9), 2))
    cfg = GraphConfig(
        vllm_version="0.34",
        cudagraph_mode="FULL_AND_PIECEWISE",
        max_num_seqs=8,
        max_num_batched_tokens=64,
        num_speculative_tokens=1,
        prefill_cudagraph_capture_token_sizes=prefill,
        decode_cudagraph_capture_request_sizes=decode,
    )
    est = estimate_graph_memory(build_toy_model(PRESETS["toy-tiny"], device="meta"), cfg)
    keys = est.per_key
    expected = CudaGraphManager(cfg).capture_order()
    reqs = [None if pd.isna(n) else int(n) for n in keys["num_reqs"]]
    assert list(zip(keys["num_tokens"], reqs)) == [(d.num_tokens, d.num_reqs) for d in expected]
    decode_rows = keys[keys["uniform"]]
    assert sorted(decode_rows["num_reqs"].tolist()) == decode
    assert (decode_rows["num_tokens"] == 2 * decode_rows["num_reqs"]).all()  # q = 2
    assert set(decode_rows["runtime_mode"]) == {str(CUDAGraphMode.FULL)}
    assert set(keys.loc[~keys["uniform"], "runtime_mode"]) == {str(CUDAGraphMode.PIECEWISE)}
