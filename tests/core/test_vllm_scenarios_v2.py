"""vLLM 0.34's tests/v1/cudagraph/test_cudagraph_manager.py scenarios, re-expressed.

vLLM builds its manager from a hand-made CompilationConfig with cudagraph_capture_sizes
[1, 2, 4, 8, 16, 24], max_num_seqs 8, FULL_AND_PIECEWISE and decode query length 3. Here
the same graphs come from a GraphConfig: those token counts as prefill sizes and, rounded
up to whole requests of q = 3, the decode request counts, as vLLM 0.34 resolves the
deprecated field. Scenarios that need a live engine (graph-pool ids, capture with mocked
torch.cuda, memory profiling with a sample of FULL graphs) are listed in
docs/semantics_v2.md and not repeated here.
"""

from __future__ import annotations

import warnings
from collections import defaultdict

import pytest

from cgdispatch import AttentionCGSupport, CudaGraphManager, CUDAGraphMode, GraphConfig

M = CUDAGraphMode
Q = 3  # _DECODE_QUERY_LEN


def make_manager(
    decode_query_len: int = Q,
    capture_sizes: list[int] | None = None,
    max_num_seqs: int = 8,
    varlen_decode: bool = False,
    decode_query_lens: dict[int, int] | None = None,
    **kw,
) -> CudaGraphManager:
    if capture_sizes is None and not kw:
        capture_sizes = [1, 2, 4, 8, 16, 24]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecated field warns, as in vLLM
        cfg = GraphConfig(
            vllm_version="0.34",
            cudagraph_mode="FULL_AND_PIECEWISE",
            cudagraph_capture_sizes=capture_sizes,
            max_num_seqs=max_num_seqs,
            num_speculative_tokens=decode_query_len - 1,
            enable_adaptive_verification=varlen_decode,
            **kw,
        ).resolve(AttentionCGSupport.ALWAYS)
    return CudaGraphManager(cfg, decode_query_lens=decode_query_lens)


def test_resolved_sizes_match_the_legacy_mapping():
    mgr = make_manager()
    assert mgr.config.prefill_cudagraph_capture_token_sizes == [1, 2, 4, 8, 16, 24]
    assert mgr.config.decode_cudagraph_capture_request_sizes == [1, 2, 3, 6, 8]
    full = sorted(d.num_tokens for d in mgr.capture_descs[M.FULL])
    assert full == [3, 6, 9, 18, 24]


def test_uniform_decode_pads_up_to_full_graph():
    desc = make_manager().dispatch(
        num_reqs=4, num_tokens=12, uniform_token_count=Q, num_active_loras=0
    )
    assert desc.cg_mode is M.FULL
    assert desc.uniform_token_count == Q
    assert (desc.num_tokens, desc.num_reqs) == (18, 6)


def test_uniform_decode_exact_match_is_not_over_padded():
    desc = make_manager().dispatch(
        num_reqs=3, num_tokens=9, uniform_token_count=Q, num_active_loras=0
    )
    assert (desc.cg_mode, desc.num_tokens, desc.num_reqs) == (M.FULL, 9, 3)


def test_mixed_batch_never_selects_a_uniform_decode_graph():
    desc = make_manager().dispatch(
        num_reqs=2, num_tokens=12, uniform_token_count=None, num_active_loras=0
    )
    assert desc.cg_mode is M.PIECEWISE
    assert desc.uniform_token_count is None
    assert desc.num_tokens == 16


def test_varlen_decode_graph_takes_bounded_decode_batches_only():
    mgr = make_manager(varlen_decode=True)

    def dispatch(max_query_len):
        return mgr.dispatch(
            num_reqs=3,
            num_tokens=6,
            uniform_token_count=None,
            num_active_loras=0,
            max_query_len=max_query_len,
        )

    desc = dispatch(Q)
    assert desc.cg_mode is M.FULL
    assert desc.max_query_len == Q
    assert dispatch(None).cg_mode is M.PIECEWISE
    assert dispatch(Q + 1).cg_mode is M.PIECEWISE


def test_mixed_batch_at_decode_only_token_count_still_gets_a_graph():
    mgr = make_manager()
    decode_only = sorted(
        {d.num_tokens for d in mgr.capture_descs[M.FULL]}
        - {d.num_tokens for d in mgr.capture_descs[M.PIECEWISE]}
    )
    assert decode_only  # the premise
    for num_tokens in decode_only:
        desc = mgr.dispatch(
            num_reqs=1, num_tokens=num_tokens, uniform_token_count=None, num_active_loras=0
        )
        assert desc.cg_mode is M.PIECEWISE, num_tokens
        assert desc.uniform_token_count is None, num_tokens
        assert desc.num_tokens >= num_tokens, num_tokens


def test_uniform_decode_beyond_capture_ladder_falls_back():
    desc = make_manager().dispatch(
        num_reqs=9, num_tokens=27, uniform_token_count=Q, num_active_loras=0
    )
    assert desc.cg_mode is M.NONE


def test_dynamic_spec_decode_shared_token_count_stays_reachable():
    # K narrows as the batch grows: schedule [(1, 2, 3), (3, 4, 2), (5, 6, 1), (7, 8, 0)]
    # gives query lengths 4, 3, 2, 1 up to 2, 4, 6, 8 requests
    mgr = make_manager(
        decode_query_len=4,
        decode_query_lens={4: 2, 3: 4, 2: 6, 1: 8},
        decode_cudagraph_capture_request_sizes=[1, 2, 3, 4, 6, 8],
        prefill_cudagraph_capture_token_sizes=[2, 4, 6, 8],
    )
    full = mgr.capture_descs[M.FULL]
    by_tokens: dict[int, list] = defaultdict(list)
    for desc in full:
        by_tokens[desc.num_tokens].append(desc)
    assert any(len(descs) > 1 for descs in by_tokens.values())  # the premise
    for desc in full:
        got = mgr.dispatch(
            num_reqs=desc.num_reqs,
            num_tokens=desc.num_tokens,
            uniform_token_count=desc.uniform_token_count,
            num_active_loras=0,
        )
        assert got == desc, desc


@pytest.mark.parametrize(
    "decode_query_len,capture_sizes",
    [(1, [1, 2, 4, 8]), (2, [2, 4, 8, 16]), (8, [8, 16, 32, 64])],
)
def test_divisor_query_len_dispatch_is_unchanged(decode_query_len, capture_sizes):
    mgr = make_manager(decode_query_len=decode_query_len, capture_sizes=capture_sizes)
    max_reqs = capture_sizes[-1] // decode_query_len
    for num_reqs in range(1, max_reqs + 1):
        num_tokens = num_reqs * decode_query_len
        desc = mgr.dispatch(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            uniform_token_count=decode_query_len,
            num_active_loras=0,
        )
        expected = min(s for s in capture_sizes if s >= num_tokens)
        assert desc.cg_mode is M.FULL, num_tokens
        assert desc.num_tokens == expected, num_tokens
        assert desc.num_reqs == expected // decode_query_len, num_tokens
