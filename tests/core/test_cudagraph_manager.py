"""Generation 2 (vLLM 0.34.0): size resolution, mode lowering, descriptors, dispatch,
the vllm_version switch and the vLLM JSON round trip. Rules: docs/semantics_v2.md."""

from __future__ import annotations

import json
import random
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_dispatchers import ReferenceManager

import cgdispatch
from cgdispatch import (
    AttentionCGSupport,
    BatchExecutionDescriptor,
    CudagraphDispatcher,
    CudaGraphManager,
    CUDAGraphMode,
    GraphConfig,
)
from cgdispatch.core.v2.config import (
    decode_cudagraph_capture_grid,
    decode_cudagraph_capture_shapes,
    get_lora_capture_cases,
    prefill_cudagraph_capture_grid,
    varlen_decode_cudagraph_capture_grid,
)

M = CUDAGraphMode
A = AttentionCGSupport
D = BatchExecutionDescriptor


def gen2(**kw) -> GraphConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return GraphConfig(vllm_version="0.34", **kw)


# ----- grids --------------------------------------------------------------------------
def test_prefill_grid_has_54_sizes_at_8192():
    grid = prefill_cudagraph_capture_grid(8192)
    assert len(grid) == 54
    assert grid[:12] == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80]
    assert grid[-3:] == [7424, 7680, 8192]
    assert prefill_cudagraph_capture_grid(0) == []
    assert prefill_cudagraph_capture_grid(100)[-1] == 100


def test_prefill_grid_dense_head_adds_every_count_to_32():
    grid = prefill_cudagraph_capture_grid(8192, dense_head=True)
    assert grid[:32] == list(range(1, 33))


def test_decode_grid_has_64_sizes_at_1024():
    grid = decode_cudagraph_capture_grid(1024)
    assert len(grid) == 64
    assert grid[:8] == [1, 2, 3, 4, 5, 6, 8, 10]
    assert grid[-1] == 1024


def test_varlen_grid_ends_at_its_max():
    grid = varlen_decode_cudagraph_capture_grid(100)
    assert grid[:4] == [1, 2, 4, 8] and grid[-1] == 100
    assert varlen_decode_cudagraph_capture_grid(0) == []


def test_decode_shapes_cap_the_first_size_above_the_limit():
    # limit = min(8 requests, 20 tokens // 3) = 6: 8 is captured at 6, larger unreachable
    assert decode_cudagraph_capture_shapes([1, 2, 4, 8, 16], {3: 8}, 20) == [
        (1, 3),
        (2, 3),
        (4, 3),
        (6, 3),
    ]
    assert decode_cudagraph_capture_shapes([1, 2], {3: 8}, 2) == []


def test_lora_capture_cases():
    assert get_lora_capture_cases(0, True, True) == [0]
    assert get_lora_capture_cases(4, False, True) == [0, 5]
    assert get_lora_capture_cases(4, True, True) == [0, 1, 2, 4, 5]
    assert get_lora_capture_cases(4, True, False) == [0, 5]


# ----- size resolution --------------------------------------------------------------------
def test_default_sizes_off_sm100_come_from_the_shared_ladder():
    c = gen2(max_num_seqs=256, max_num_batched_tokens=8192, device_capability=(9, 0))
    ladder = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
    assert c.prefill_cudagraph_capture_token_sizes == ladder
    assert c.decode_cudagraph_capture_request_sizes == [s for s in ladder if s <= 256]
    assert c.max_decode_cudagraph_capture_requests == 256
    assert c.max_decode_cudagraph_capture_tokens is None
    assert c.cudagraph_capture_sizes == ladder and c.max_cudagraph_capture_size == 512


def test_sm100_widens_the_defaults():
    c = gen2(max_num_seqs=256, max_num_batched_tokens=8192, device_capability=(10, 0))
    assert c.prefill_cudagraph_capture_token_sizes == prefill_cudagraph_capture_grid(8192)
    assert c.decode_cudagraph_capture_request_sizes == decode_cudagraph_capture_grid(256)
    assert c.max_decode_cudagraph_capture_tokens == 8192
    assert c.max_cudagraph_capture_size == 8192
    # capped by max_num_batched_tokens
    small = gen2(max_num_batched_tokens=2048, device_capability=(10, 3))
    assert small.prefill_cudagraph_capture_token_sizes[-1] == 2048


def test_spec_decode_defaults_append_uniform_decode_sizes():
    c = gen2(max_num_seqs=64, num_speculative_tokens=2)
    # max = min(64 * 3 * 2, 512) = 384; decode sizes n * 3 within it are captured too
    assert 3 in c.cudagraph_capture_sizes and 6 in c.cudagraph_capture_sizes
    assert c.decode_cudagraph_capture_request_sizes[-1] == 64


def test_max_prefill_tokens_selects_the_grid():
    c = gen2(max_prefill_cudagraph_capture_tokens=1024)
    assert c.prefill_cudagraph_capture_token_sizes == prefill_cudagraph_capture_grid(1024)
    assert c.max_prefill_cudagraph_capture_tokens == 1024


def test_max_decode_requests_selects_the_grid():
    c = gen2(max_num_seqs=128, max_decode_cudagraph_capture_requests=48)
    assert c.decode_cudagraph_capture_request_sizes == decode_cudagraph_capture_grid(48)


def test_interactivity_dense_small_sizes():
    c = gen2(performance_mode="interactivity")
    assert c.prefill_cudagraph_capture_token_sizes[:32] == list(range(1, 33))


def test_explicit_sizes_out_of_range_are_dropped_with_a_warning():
    with pytest.warns(UserWarning, match="Dropping"):
        c = GraphConfig(
            vllm_version="0.34",
            max_num_batched_tokens=64,
            max_num_seqs=16,
            prefill_cudagraph_capture_token_sizes=[0, 8, 64, 128],
        )
    assert c.prefill_cudagraph_capture_token_sizes == [8, 64]


def test_explicit_sizes_above_their_cap_are_refused():
    with pytest.raises(ValueError, match="max_prefill_cudagraph_capture_tokens"):
        gen2(prefill_cudagraph_capture_token_sizes=[8, 64], max_prefill_cudagraph_capture_tokens=32)
    with pytest.raises(ValueError, match="max_decode_cudagraph_capture_requests"):
        gen2(
            decode_cudagraph_capture_request_sizes=[8, 64], max_decode_cudagraph_capture_requests=32
        )


def test_legacy_sizes_warn_deprecated_and_feed_both_kinds():
    with pytest.warns(UserWarning, match="deprecated"):
        c = GraphConfig(vllm_version="0.34", cudagraph_capture_sizes=[1, 2, 4, 8], max_num_seqs=4)
    assert c.prefill_cudagraph_capture_token_sizes == [1, 2, 4, 8]
    assert c.decode_cudagraph_capture_request_sizes == [1, 2, 4]


def test_legacy_and_new_sizes_that_disagree_are_refused():
    with pytest.raises(ValueError, match="cannot be combined"):
        gen2(cudagraph_capture_sizes=[1, 2, 4, 8], decode_cudagraph_capture_request_sizes=[3])


def test_legacy_max_inconsistent_with_sizes_is_refused():
    with pytest.raises(ValueError, match="consistent"):
        gen2(cudagraph_capture_sizes=[1, 2, 4], max_cudagraph_capture_size=8)


def test_full_decode_only_records_only_decode_sizes():
    c = gen2(cudagraph_mode="FULL_DECODE_ONLY", max_num_seqs=16)
    assert c.cudagraph_capture_sizes == c.decode_cudagraph_capture_request_sizes
    assert c.max_cudagraph_capture_size == 16


def test_no_sizes_left_sets_mode_none():
    c = gen2(
        cudagraph_mode="FULL_AND_PIECEWISE",
        prefill_cudagraph_capture_token_sizes=[],
        decode_cudagraph_capture_request_sizes=[],
    )
    assert c.cudagraph_mode is M.NONE and c.cudagraph_capture_sizes == []
    assert not CudaGraphManager(c).needs_capture()


def test_mode_none_leaves_new_fields_unset():
    c = gen2(cudagraph_mode="NONE")
    assert c.prefill_cudagraph_capture_token_sizes is None
    assert c.cudagraph_capture_sizes == [] and c.max_cudagraph_capture_size == 0


# ----- mode lowering -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "mode,support,splitting_ops,q,expected",
    [
        ("FULL", A.ALWAYS, None, 1, M.FULL),
        ("FULL", A.UNIFORM_BATCH, None, 1, M.FULL_AND_PIECEWISE),
        ("FULL", A.UNIFORM_BATCH, [], 1, M.FULL_DECODE_ONLY),
        ("FULL_AND_PIECEWISE", A.UNIFORM_SINGLE_TOKEN_DECODE, None, 1, M.FULL_AND_PIECEWISE),
        ("FULL_AND_PIECEWISE", A.UNIFORM_SINGLE_TOKEN_DECODE, None, 3, M.PIECEWISE),
        ("FULL_DECODE_ONLY", A.UNIFORM_SINGLE_TOKEN_DECODE, [], 3, M.NONE),
        ("FULL_DECODE_ONLY", A.NEVER, None, 1, M.PIECEWISE),
        ("FULL_DECODE_ONLY", A.NEVER, [], 1, M.NONE),
        ("PIECEWISE", A.NEVER, [], 1, M.NONE),
        ("FULL_AND_PIECEWISE", A.ALWAYS, [], 1, M.FULL),
        ("NONE", A.NEVER, None, 1, M.NONE),
    ],
)
def test_resolve_lowers_the_mode(mode, support, splitting_ops, q, expected):
    c = gen2(cudagraph_mode=mode, splitting_ops=splitting_ops, num_speculative_tokens=q - 1)
    resolved = c.resolve(support)
    assert resolved.cudagraph_mode is expected
    # sizes are not touched by resolution in generation 2
    assert resolved.cudagraph_capture_sizes == c.cudagraph_capture_sizes


def test_full_with_never_is_refused():
    with pytest.raises(ValueError, match="PIECEWISE"):
        gen2(cudagraph_mode="FULL").resolve(A.NEVER)
    # FULL only on decode batches is lowered instead
    assert gen2(cudagraph_mode="FULL_AND_PIECEWISE").resolve(A.NEVER).cudagraph_mode is M.PIECEWISE


def test_piecewise_capture_unavailable_drops_piecewise():
    c = gen2(cudagraph_mode="FULL_AND_PIECEWISE")
    assert (
        c.resolve(A.ALWAYS, piecewise_capture_available=False).cudagraph_mode is M.FULL_DECODE_ONLY
    )
    p = gen2(cudagraph_mode="PIECEWISE")
    assert p.resolve(A.ALWAYS, piecewise_capture_available=False).cudagraph_mode is M.NONE


def test_adaptive_verification_takes_a_separate_decode_route():
    c = gen2(cudagraph_mode="FULL", num_speculative_tokens=3, enable_adaptive_verification=True)
    assert c.resolve(A.ALWAYS).cudagraph_mode is M.FULL_AND_PIECEWISE
    with pytest.raises(ValueError, match="LoRA"):
        gen2(num_speculative_tokens=3, enable_adaptive_verification=True, max_loras=2)
    with pytest.raises(ValueError, match="full CUDA graphs"):
        gen2(
            cudagraph_mode="PIECEWISE", num_speculative_tokens=3, enable_adaptive_verification=True
        )
    with pytest.raises(ValueError, match="needs decode CUDA graphs"):
        gen2(
            num_speculative_tokens=3,
            enable_adaptive_verification=True,
            decode_cudagraph_capture_request_sizes=[],
        )


# ----- descriptors and dispatch ---------------------------------------------------------
def test_capture_order_piecewise_first_each_widest_first():
    mgr = CudaGraphManager(gen2(max_num_seqs=16, num_speculative_tokens=1).resolve())
    descs = mgr.capture_descs
    assert list(descs) == [M.PIECEWISE, M.FULL]
    for group in descs.values():
        tokens = [d.num_tokens for d in group]
        assert tokens == sorted(tokens, reverse=True)
    assert all(d.num_reqs is None for d in descs[M.PIECEWISE])
    assert all(d.uniform_token_count == 2 for d in descs[M.FULL])


def test_full_mode_uses_token_keyed_graphs_for_every_batch():
    mgr = CudaGraphManager(gen2(cudagraph_mode="FULL", max_num_seqs=8).resolve())
    assert all(d.uniform_token_count is None for d in mgr.capture_descs[M.FULL])
    d = mgr.dispatch(3, 3, 1, 0)
    assert (d.cg_mode, d.num_tokens, d.num_reqs) == (M.FULL, 4, 4)


def test_decode_and_mixed_dispatch():
    mgr = CudaGraphManager(gen2(max_num_seqs=8, num_speculative_tokens=2).resolve())
    decode = mgr.dispatch(4, 12, 3, 0)
    assert decode == D(M.FULL, 12, 4, uniform_token_count=3)
    mixed = mgr.dispatch(4, 13, None, 0)
    assert mixed.cg_mode is M.PIECEWISE and mixed.num_tokens == 16
    eager = mgr.dispatch(4, 10_000, None, 0)
    assert eager == D(M.NONE, 10_000, 4)
    assert mgr.dispatch(0, 0, None, 0).cg_mode is M.NONE


def test_lora_counts_map_to_the_smallest_captured_case():
    mgr = CudaGraphManager(gen2(max_loras=4, specialize_active_lora=True, max_num_seqs=8).resolve())
    assert mgr.lora_capture_cases == [0, 1, 2, 4, 5]
    assert mgr.dispatch(1, 1, 1, 3).num_active_loras == 4
    assert mgr.dispatch(1, 1, 1, 9).num_active_loras == 5  # clamped to the largest case
    assert mgr.dispatch(1, 1, 1, 0).num_active_loras == 0


def test_microbatch_twins_need_dbo_and_data_parallel():
    cfg = gen2(cudagraph_mode="FULL_AND_PIECEWISE", max_num_seqs=64, enable_dbo=True)
    assert all(d.num_ubatches == 1 for d in CudaGraphManager(cfg).capture_order())
    cfg = gen2(max_num_seqs=64, enable_dbo=True, data_parallel_size=2)
    mgr = CudaGraphManager(cfg)
    twins = [d for d in mgr.capture_order() if d.num_ubatches == 2]
    assert twins and all(d.cg_mode is M.FULL and d.num_tokens >= 32 for d in twins)
    d = mgr.dispatch(40, 40, 1, 0, num_ubatches=2)
    assert d.num_ubatches == 2 and d.cg_mode is M.FULL
    # a small decode pads to the smallest twin; a mixed split batch has no graph
    assert mgr.dispatch(4, 4, 1, 0, num_ubatches=2).num_tokens == min(t.num_tokens for t in twins)
    assert mgr.dispatch(4, 4, None, 0, num_ubatches=2) == D(M.NONE, 4, 4, num_ubatches=2)


def test_varlen_decode_graphs_bound_query_length():
    cfg = gen2(max_num_seqs=8, num_speculative_tokens=2, enable_adaptive_verification=True)
    mgr = CudaGraphManager(cfg.resolve())
    d = mgr.dispatch(3, 6, None, 0, max_query_len=3)
    assert d.cg_mode is M.FULL and d.max_query_len == 3
    assert mgr.dispatch(3, 6, None, 0).cg_mode is M.PIECEWISE
    assert mgr.dispatch(3, 6, None, 0, max_query_len=4).cg_mode is M.PIECEWISE


def test_descriptor_is_frozen_with_vllms_fields():
    d = D(M.FULL, 8, 8)
    assert [f for f in d.__dataclass_fields__] == [
        "cg_mode",
        "num_tokens",
        "num_reqs",
        "uniform_token_count",
        "max_query_len",
        "num_active_loras",
        "num_ubatches",
    ]
    with pytest.raises(AttributeError):
        d.num_tokens = 4  # type: ignore[misc]


# ----- the switch ------------------------------------------------------------------------
def test_each_class_refuses_the_other_generation():
    with pytest.raises(ValueError, match="CudaGraphManager"):
        CudagraphDispatcher(gen2())
    with pytest.raises(ValueError, match="CudagraphDispatcher"):
        CudaGraphManager(GraphConfig(vllm_version="0.33"))


def test_unset_version_is_the_newest_and_each_class_builds_its_own_default():
    cfg = GraphConfig(max_num_seqs=16)
    assert cfg.vllm_version == "0.34"
    mgr = CudaGraphManager(cfg)
    assert mgr.config is cfg and mgr.config.decode_cudagraph_capture_request_sizes is not None
    with pytest.raises(ValueError, match="vllm_version='0.33' for CudagraphDispatcher"):
        CudagraphDispatcher(cfg)
    assert CudagraphDispatcher().config.vllm_version == "0.33"
    assert CudaGraphManager().config.vllm_version == "0.34"


def test_gen2_fields_need_the_gen2_version():
    with pytest.raises(ValueError, match="vllm_version='0.34'"):
        GraphConfig(vllm_version="0.33", prefill_cudagraph_capture_token_sizes=[8])
    with pytest.raises(ValueError, match="unknown"):
        GraphConfig(vllm_version="0.35")


def test_v1_config_is_unchanged_by_the_switch():
    assert GraphConfig() == GraphConfig(vllm_version=None)
    assert (
        GraphConfig(vllm_version="0.33").cudagraph_capture_sizes
        == GraphConfig().cudagraph_capture_sizes
    )


def test_public_names_are_exported():
    for name in ("CudaGraphManager", "BatchExecutionDescriptor"):
        assert name in cgdispatch.__all__ and hasattr(cgdispatch, name)


def test_invalid_values_say_what_to_change():
    with pytest.raises(ValueError, match="performance_mode"):
        gen2(performance_mode="fast")
    with pytest.raises(ValueError, match="device_capability"):
        gen2(device_capability="sm100")
    with pytest.raises(ValueError, match="list of integers"):
        gen2(prefill_cudagraph_capture_token_sizes="8,16")


# ----- vLLM JSON -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"device_capability": (10, 0), "max_num_seqs": 64, "num_speculative_tokens": 2},
        {"cudagraph_mode": "FULL_DECODE_ONLY", "max_loras": 2},
        {
            "prefill_cudagraph_capture_token_sizes": [4, 16],
            "decode_cudagraph_capture_request_sizes": [1, 2],
        },
        {
            "cudagraph_capture_sizes": [1, 2, 4, 8, 16],
            "max_num_seqs": 8,
            "num_speculative_tokens": 1,
        },
        {"cudagraph_mode": "NONE"},
    ],
)
def test_to_vllm_from_vllm_round_trip(kw):
    cfg = gen2(**kw)
    cc = json.loads(cfg.to_vllm())
    assert "cudagraph_capture_sizes" not in cc and "max_cudagraph_capture_size" not in cc
    engine = {k: v for k, v in kw.items() if k not in cc and k != "cudagraph_capture_sizes"}
    back = GraphConfig.from_vllm(cfg.to_vllm(), **engine)
    assert back.vllm_version == "0.34"  # named by its keys, or the default (the newest)
    assert back == cfg
    assert "--compilation-config" in cfg.to_vllm_args()


def test_from_vllm_reads_gen2_json_and_warns_on_unmodelled_keys():
    text = '{"cudagraph_mode": "FULL_AND_PIECEWISE", "max_prefill_cudagraph_capture_tokens": 256, "decoder_replay_cudagraph_capture_sizes": [8]}'
    with pytest.warns(UserWarning, match="decoder_replay_cudagraph_capture_sizes"):
        cfg = GraphConfig.from_vllm(text, max_num_seqs=32)
    assert cfg.vllm_version == "0.34"
    assert cfg.prefill_cudagraph_capture_token_sizes == prefill_cudagraph_capture_grid(256)
    with pytest.raises(ValueError, match="0.34"):
        GraphConfig.from_vllm(text, vllm_version="0.33")


def test_gen2_args_name_the_engine_flags():
    cfg = gen2(
        num_speculative_tokens=2,
        speculative_method="eagle",
        performance_mode="interactivity",
        data_parallel_size=2,
        enable_dbo=True,
    )
    args = cfg.to_vllm_args()
    for flag in ('"method": "eagle"', "--performance-mode interactivity", "--enable-dbo"):
        assert flag in args


# ----- property: the fast manager agrees with the plain reference -------------------------
configs = st.builds(
    dict,
    cudagraph_mode=st.sampled_from(list(M)),
    max_num_seqs=st.integers(1, 96),
    max_num_batched_tokens=st.integers(1, 2048),
    num_speculative_tokens=st.integers(0, 4),
    max_loras=st.sampled_from([0, 0, 1, 3, 4]),
    specialize_active_lora=st.booleans(),
    cudagraph_specialize_lora=st.booleans(),
    device_capability=st.sampled_from([None, (9, 0), (10, 0)]),
    performance_mode=st.sampled_from(["balanced", "interactivity"]),
    max_prefill_cudagraph_capture_tokens=st.one_of(st.none(), st.integers(0, 1024)),
    max_decode_cudagraph_capture_requests=st.one_of(st.none(), st.integers(0, 64)),
    max_decode_cudagraph_capture_tokens=st.one_of(st.none(), st.integers(1, 512)),
    data_parallel_size=st.sampled_from([1, 2]),
    enable_dbo=st.booleans(),
    dbo_decode_token_threshold=st.integers(0, 64),
)
batches = st.lists(
    st.tuples(
        st.integers(1, 100),
        st.integers(0, 2100),
        st.one_of(st.none(), st.integers(1, 5)),
        st.integers(0, 6),
        st.one_of(st.none(), st.integers(1, 6)),
        st.sampled_from([1, 1, 2]),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, st.sampled_from(list(A)), st.booleans(), batches, st.booleans())
def test_dispatch_agrees_with_the_reference(kw, support, adaptive, batch_list, dynamic):
    if adaptive and kw["num_speculative_tokens"] and not kw["max_loras"]:
        kw = {**kw, "enable_adaptive_verification": True}
    try:
        cfg = gen2(**kw).resolve(support)
    except ValueError:
        return  # refused configs are covered by the rule tests
    lens = None
    if dynamic:  # dynamic speculative decoding: narrower queries for larger batches
        q, seqs = cfg.uniform_decode_query_len, cfg.max_num_seqs
        lens = {k: max(1, seqs * (q - k + 1) // q) for k in range(1, q + 1)}
    mgr, ref = CudaGraphManager(cfg, decode_query_lens=lens), ReferenceManager(cfg, lens)
    assert mgr.capture_descs == ref.capture_descs()
    for args in batch_list:
        assert mgr.dispatch(*args) == ref.dispatch(*args), args
        assert mgr.dispatch(*args) == ref.dispatch(*args), args  # memoised answer
    # the uniform decode batches the runner forms
    q = cfg.uniform_decode_query_len
    for n in range(1, cfg.max_num_seqs + 1, 7):
        assert mgr.dispatch(n, n * q, q, 0) == ref.dispatch(n, n * q, q, 0)


def test_benchmark_runs_and_agrees():
    from bench_dispatch_v2 import main

    assert main(n_batches=3000, repeats=1) > 1


def test_compile_sizes_expand_the_recorded_sizes():
    c = gen2(cudagraph_capture_sizes=[1, 2, 4, 8], compile_sizes=(2, "cudagraph_capture_sizes"))
    assert c.compile_sizes == (1, 2, 2, 4, 8)
    with pytest.raises(ValueError, match="compile size"):
        gen2(compile_sizes=("all",))


def test_empty_splitting_ops_lower_the_mode_after_the_sizes():
    c = gen2(cudagraph_mode="FULL_AND_PIECEWISE", splitting_ops=[], max_num_seqs=8)
    assert c.cudagraph_mode is M.FULL
    # the sizes were resolved with FULL_AND_PIECEWISE (prefill sizes recorded too)
    assert c.cudagraph_capture_sizes == c.prefill_cudagraph_capture_token_sizes


def test_engine_level_refusals():
    with pytest.raises(ValueError, match="is below max_num_seqs=64"):
        gen2(max_num_seqs=64, max_num_batched_tokens=32)
    with pytest.raises(ValueError, match="LoRA with speculative decoding"):
        gen2(max_num_seqs=64, max_num_batched_tokens=100, num_speculative_tokens=1, max_loras=1)


@pytest.mark.parametrize(
    "args, name",
    [
        ((1, 10**30, None, 0), "num_tokens"),
        ((-1, 8, None, 0), "num_reqs"),
        ((1, "8", None, 0), "num_tokens"),
        ((1, 8, None, -2), "num_active_loras"),
        ((1, 8, 0, 0), "uniform_token_count"),
    ],
)
def test_dispatch_refuses_batches_no_scheduler_forms(args, name):
    mgr = CudaGraphManager(gen2(max_num_seqs=8))
    with pytest.raises(ValueError, match=name):
        mgr.dispatch(*args)
    assert mgr.dispatch(1, 8, None, 0).num_tokens >= 8  # a good batch still answers


def test_eager_answers_are_kept_and_bad_arguments_still_refused():
    rng = random.Random()  # fresh inputs each run; the seed is in the failure message
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    cfg = gen2(
        max_num_seqs=rng.randint(1, 64),
        max_cudagraph_capture_size=rng.randint(8, 300),
        max_num_batched_tokens=4096,
        cudagraph_mode=rng.choice(["FULL_AND_PIECEWISE", "FULL", "PIECEWISE", "FULL_DECODE_ONLY"]),
    ).resolve(AttentionCGSupport.ALWAYS)
    mgr, ref = CudaGraphManager(cfg), ReferenceManager(cfg)
    top = max((d.num_tokens for d in ref.decode + ref.token_keyed), default=0)
    seen: dict[tuple, D] = {}
    for _ in range(3000):
        tokens = rng.randint(1, 2 * top + 10)
        reqs = rng.randint(1, min(tokens, 2 * cfg.max_num_seqs))
        u = 1 if rng.random() < 0.5 else None
        if u == 1:
            reqs = tokens
        got = mgr.dispatch(reqs, tokens, u, 0)
        assert got == ref.dispatch(reqs, tokens, u, 0), (seed, reqs, tokens, u)
        if got.cg_mode is M.NONE:
            assert got is seen.setdefault((reqs, tokens), got), seed  # kept, not rebuilt
    if seen:
        reqs, tokens = next(iter(seen))
        # the kept answers never let a malformed call through
        for bad in (dict(num_ubatches=True), dict(num_active_loras=0.0)):
            args = dict(num_reqs=reqs, num_tokens=tokens, uniform_token_count=None)
            with pytest.raises(ValueError):
                mgr.dispatch(**{"num_active_loras": 0, **args, **bad})
        with pytest.raises(ValueError, match="uniform_token_count"):
            mgr.dispatch(reqs, tokens, True, 0)
