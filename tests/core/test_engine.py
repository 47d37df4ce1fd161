"""The generation-neutral facade (cgdispatch.core.generation) against each class asked directly,
on random configs and batches: spec decode, LoRA, every mode and attention support."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cgdispatch
from cgdispatch import (
    AttentionCGSupport,
    BatchDescriptor,
    BatchExecutionDescriptor,
    CudagraphDispatcher,
    CudaGraphManager,
    CUDAGraphMode,
    GraphConfig,
)
from cgdispatch.core.generation import (
    GENERATIONS,
    NEWEST,
    CaptureKey,
    StepDispatch,
    capture_keys,
    default_num_reqs,
    dispatch_step,
    for_generation,
    generation_of,
    make_graph_dispatcher,
    padded_token_table,
)

M = CUDAGraphMode

settings_ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

engine_fields = st.fixed_dictionaries(
    {
        "cudagraph_mode": st.sampled_from(list(M)),
        "max_num_seqs": st.integers(1, 48),
        "max_num_batched_tokens": st.integers(48, 600),
        "num_speculative_tokens": st.sampled_from([0, 0, 1, 3]),
        "max_loras": st.sampled_from([0, 0, 1, 3, 4]),
        "specialize_active_lora": st.booleans(),
        "cudagraph_specialize_lora": st.booleans(),
    }
)
supports = st.sampled_from(list(AttentionCGSupport))
steps = st.lists(
    st.tuples(st.integers(0, 700), st.booleans(), st.integers(0, 4), st.integers(0, 3)),
    min_size=1,
    max_size=30,
)


def build(fields: dict, version: str | None, support: AttentionCGSupport) -> GraphConfig | None:
    """A resolved config, or None where vLLM refuses it (covered by the rule tests)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return GraphConfig(vllm_version=version, **fields).resolve(support)
    except ValueError:
        return None


def direct_v1(config: GraphConfig) -> CudagraphDispatcher:
    dispatcher = CudagraphDispatcher(config, record_stats=False)
    dispatcher.initialize_cudagraph_keys()
    return dispatcher


def batch_of(config: GraphConfig, raw: tuple[int, bool, int, int]) -> tuple[int, int, bool, int]:
    """(num_tokens, num_reqs, uniform, loras) within the scheduler's limits."""
    tokens, uniform, extra_reqs, loras = raw
    tokens = min(tokens, config.max_num_batched_tokens)
    q = config.uniform_decode_query_len
    if uniform:
        reqs = min(-(-tokens // q), config.max_num_seqs)
        tokens = reqs * q if tokens else 0
    else:
        reqs = min(max(tokens and 1, 1 + extra_reqs), tokens, config.max_num_seqs)
    return tokens, reqs, uniform, min(loras, config.max_loras)


@settings_
@given(engine_fields, supports, steps)
def test_v1_answers_are_the_dispatchers(fields, support, raw_steps):
    config = build(fields, "0.33", support)
    if config is None:
        return
    facade, reference = make_graph_dispatcher(config, record_stats=False), direct_v1(config)
    assert isinstance(facade, CudagraphDispatcher)
    for raw in raw_steps:
        tokens, reqs, uniform, loras = batch_of(config, raw)
        mode, desc = reference.dispatch(
            tokens, uniform_decode=uniform, has_lora=loras > 0, num_active_loras=loras
        )
        got = dispatch_step(facade, tokens, reqs, uniform, loras)
        assert got == StepDispatch(
            mode, desc.num_tokens, None if mode is M.NONE else desc.num_reqs, desc
        )
        assert isinstance(got.key, BatchDescriptor)
        # V1 does not read the request count
        assert dispatch_step(facade, tokens, None, uniform, loras) == got


@settings_
@given(engine_fields, supports, steps)
def test_gen2_answers_are_the_managers(fields, support, raw_steps):
    config = build(fields, "0.34", support)
    if config is None:
        return
    facade, reference = make_graph_dispatcher(config), CudaGraphManager(config)
    assert isinstance(facade, CudaGraphManager)
    q = config.uniform_decode_query_len
    for raw in raw_steps:
        tokens, reqs, uniform, loras = batch_of(config, raw)
        desc = reference.dispatch(reqs, tokens, q if uniform else None, loras)
        got = dispatch_step(facade, tokens, reqs, uniform, loras)
        assert got.key == desc and isinstance(got.key, BatchExecutionDescriptor)
        assert (got.runtime_mode, got.padded_tokens) == (desc.cg_mode, desc.num_tokens)
        assert got.padded_reqs == (None if desc.cg_mode is M.NONE else desc.num_reqs)
        if uniform:  # the default count is the uniform decode's own: cdiv(tokens, q)
            assert dispatch_step(facade, tokens, None, True, loras) == got


@settings_
@given(engine_fields, supports, st.sampled_from(["0.33", "0.34"]))
def test_capture_keys_follow_each_class_in_order(fields, support, version):
    config = build(fields, version, support)
    if config is None:
        return
    keys = capture_keys(config)
    if version == "0.34":
        want = [CaptureKey(d.cg_mode, d) for d in CudaGraphManager(config).capture_order()]
    else:
        want = [
            CaptureKey(mode, d)
            for mode, descs in direct_v1(config).get_capture_descs()
            for d in descs
        ]
    assert keys == want
    modes = [k.runtime_mode for k in keys]
    assert modes == sorted(modes, key=lambda m: m is not M.PIECEWISE)  # PIECEWISE first
    for mode in (M.PIECEWISE, M.FULL):
        widths = [k.num_tokens for k in keys if k.runtime_mode is mode]
        assert widths == sorted(widths, reverse=True)  # widest first within a mode


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine_fields, supports, st.sampled_from(["0.33", "0.34"]), st.booleans(), st.integers(0, 4))
def test_padded_token_table_is_one_dispatch_per_count(fields, support, version, uniform, loras):
    config = build(fields, version, support)
    if config is None:
        return
    loras = min(loras, config.max_loras)
    dispatcher = make_graph_dispatcher(config, record_stats=False)
    table = padded_token_table(dispatcher, uniform, loras)
    assert len(table.padded_tokens) == config.max_num_batched_tokens + 1
    q = config.uniform_decode_query_len
    for n in range(0, config.max_num_batched_tokens + 1, 7):
        if version == "0.34":
            reqs = -(-n // q) if uniform else min(n, 1)
            desc = CudaGraphManager(config).dispatch(reqs, n, q if uniform else None, loras)
            want = (desc.cg_mode, desc.num_tokens)
        else:
            mode, desc = direct_v1(config).dispatch(
                n, uniform_decode=uniform, has_lora=loras > 0, num_active_loras=loras
            )
            want = (mode, desc.num_tokens)
        assert (table.runtime_modes[n], table.padded_tokens[n]) == want
        if table.runtime_modes[n] is not M.NONE:
            assert table.padded_tokens[n] >= n


def test_version_switch_and_none_is_the_newest():
    assert isinstance(make_graph_dispatcher(GraphConfig()), CudaGraphManager)
    assert isinstance(make_graph_dispatcher(None), CudaGraphManager)
    assert isinstance(make_graph_dispatcher(GraphConfig(vllm_version="0.33")), CudagraphDispatcher)
    manager = make_graph_dispatcher(GraphConfig(vllm_version="0.34"))
    assert isinstance(manager, CudaGraphManager) and make_graph_dispatcher(manager) is manager
    assert generation_of(GraphConfig()) is NEWEST
    assert generation_of(manager) is GENERATIONS["0.34"]
    assert NEWEST is GENERATIONS["0.34"] and list(GENERATIONS) == ["0.33", "0.34"]
    with pytest.raises(ValueError, match="GraphConfig"):
        make_graph_dispatcher({"cudagraph_mode": "FULL"})
    with pytest.raises(ValueError, match="GraphConfig"):
        generation_of("0.34")


def test_for_generation_keeps_the_engine_settings():
    base = GraphConfig(
        vllm_version="0.33",
        cudagraph_mode="FULL_DECODE_ONLY",
        max_num_seqs=24,
        max_num_batched_tokens=300,
        num_speculative_tokens=2,
        max_loras=2,
    )
    gen2 = for_generation(base, "0.34")
    assert gen2.vllm_version == "0.34" and gen2.decode_cudagraph_capture_request_sizes
    assert (gen2.max_num_seqs, gen2.num_speculative_tokens, gen2.max_loras) == (24, 2, 2)
    assert gen2 == GraphConfig(
        vllm_version="0.34",
        **{
            k: getattr(base, k)
            for k in (
                "cudagraph_mode",
                "max_num_seqs",
                "max_num_batched_tokens",
                "num_speculative_tokens",
                "max_loras",
            )
        },
    )
    explicit = gen2.replace(decode_cudagraph_capture_request_sizes=[1, 4, 8])
    back = for_generation(explicit, "0.33")  # generation-2 fields have no V1 flag: dropped
    assert back == base.replace(vllm_version="0.33")
    assert for_generation(base, "0.33") is base
    assert for_generation(base, None) == gen2  # None: the newest release
    with pytest.raises(ValueError, match="unknown"):
        for_generation(base, "0.35")


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda d: dispatch_step(d, -1), "num_tokens=-1"),
        (lambda d: dispatch_step(d, 4, 5), "num_reqs=5 is invalid with num_tokens=4"),
        (lambda d: dispatch_step(d, 4, True), "num_reqs=True"),
        (lambda d: dispatch_step(d, 4, 1, False, -1), "num_active_loras=-1"),
    ],
)
@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_bad_steps_are_refused(call, fragment, version):
    with pytest.raises(ValueError, match="invalid") as err:
        call(make_graph_dispatcher(GraphConfig(vllm_version=version)))
    assert fragment in str(err.value)


def test_cascade_attention_is_v1_only():
    v1 = make_graph_dispatcher(GraphConfig(vllm_version="0.33", cudagraph_mode="FULL"))
    assert dispatch_step(v1, 8, use_cascade_attn=True).runtime_mode is M.NONE
    with pytest.raises(ValueError, match="no cascade attention"):
        dispatch_step(
            make_graph_dispatcher(GraphConfig(vllm_version="0.34")), 8, use_cascade_attn=True
        )


def test_default_num_reqs():
    config = GraphConfig(num_speculative_tokens=2)
    assert default_num_reqs(config, 7, True) == 3 and default_num_reqs(config, 9, True) == 3
    assert default_num_reqs(config, 100, False) == 1 and default_num_reqs(config, 0, True) == 0


def test_public_names():
    for name in (
        "make_graph_dispatcher",
        "dispatch_step",
        "capture_keys",
        "StepDispatch",
        "for_generation",
        "padded_token_table",
    ):
        assert getattr(cgdispatch, name) is not None  # in __all__ or resolved for compatibility


def test_for_generation_takes_the_release_as_papermill_passes_it():
    from cgdispatch.core.generation import for_generation, generation_of

    v1 = GraphConfig(max_num_seqs=16)
    assert generation_of(for_generation(v1, 0.34)).release == "0.34"
    assert generation_of(for_generation(v1, "0.34")).release == "0.34"
    with pytest.raises(ValueError, match="unknown"):
        for_generation(v1, 0.35)
