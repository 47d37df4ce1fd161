"""A release has one home: a test-only release registered here, touching no package file,
runs through config, dispatch, capture and replay, planning, comparison, export and the
keys table. It is vLLM 0.34's Generation with another default prefill grid (powers of two),
so wherever the grids agree (sizes given by the user) its answers must be 0.34's, and
where they differ they must follow its own grid."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest

import cgdispatch as cg
from cgdispatch import GraphConfig
from cgdispatch.capture.runner import GraphRunner
from cgdispatch.core.generation import (
    GENERATIONS,
    NEWEST,
    capture_keys,
    dispatch_step,
    generation_for,
    generation_of,
    make_graph_dispatcher,
    register_generation,
    unregister_generation,
)
from cgdispatch.measure.replay_check import check_replay
from cgdispatch.models.toy import PRESETS, build_toy_model
from cgdispatch.plan.ladder_compare import compare, export_plan
from cgdispatch.plan.planner import plan_ladder
from cgdispatch.views.keys import keys_table
from cgdispatch.workload.trace import make_trace

TEST_RELEASE = "0.99"
BASE = "0.34"
SIZE_FIELDS = (
    "cudagraph_capture_sizes",
    "max_cudagraph_capture_size",
    "prefill_cudagraph_capture_token_sizes",
    "max_prefill_cudagraph_capture_tokens",
)


def _powers_of_two_default(config):
    """0.34's rules, but with no size given the prefill grid is the powers of two up to
    min(max_num_batched_tokens, 512) (0.34's default grid is 1, 2, 4, 8, 16, 24, ...)."""
    base = GENERATIONS[BASE].rules.derive_sizes
    if all(getattr(config, f) is None for f in SIZE_FIELDS):
        top = min(config.max_num_batched_tokens, 512)
        grid = [1 << k for k in range(top.bit_length()) if 1 << k <= top]
        config = config._with(prefill_cudagraph_capture_token_sizes=grid)
    return base(config)


@pytest.fixture
def release():
    """The test release, registered for one test and removed after it."""
    generation = dataclasses.replace(
        GENERATIONS[BASE],
        release=TEST_RELEASE,
        name="test generation",
        label="test",
        rules=dataclasses.replace(GENERATIONS[BASE].rules, derive_sizes=_powers_of_two_default),
    )
    register_generation(generation)
    try:
        yield generation
    finally:
        unregister_generation(TEST_RELEASE)
    assert TEST_RELEASE not in GENERATIONS


def _pair(**fields):
    """(0.34 config, test-release config) of the same fields, both resolved, quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(GraphConfig(vllm_version=v, **fields).resolve() for v in (BASE, TEST_RELEASE))


def _same_fields(a, b):
    skip = {"vllm_version", "_release", "_asked", "_asked_own"}  # the release named
    return {
        f.name: getattr(a, f.name)
        for f in dataclasses.fields(a)
        if f.name not in skip and getattr(a, f.name) != getattr(b, f.name)
    }


GIVEN_SIZES = dict(
    max_num_seqs=16,
    max_num_batched_tokens=256,
    prefill_cudagraph_capture_token_sizes=[4, 8, 24, 64, 200],
    decode_cudagraph_capture_request_sizes=[1, 2, 6, 16],
)


def test_the_registry_knows_the_release_only_while_it_is_registered(release):
    assert GENERATIONS[TEST_RELEASE] is release and generation_for(TEST_RELEASE) is release
    assert list(GENERATIONS)[-1] == TEST_RELEASE  # ordered by release
    assert cg.NEWEST is release  # the newest while registered
    assert NEWEST is GENERATIONS[BASE]  # bound at import: the built-in newest
    with pytest.raises(ValueError, match="registered already"):
        register_generation(release)
    with pytest.raises(ValueError, match=TEST_RELEASE):
        GraphConfig(vllm_version="0.98")  # the error lists the registered releases


def test_config_and_resolve_follow_the_new_default_grid(release):
    config = GraphConfig(vllm_version=TEST_RELEASE, max_num_seqs=32, max_num_batched_tokens=300)
    assert config.generation is release and generation_of(config) is release
    assert config.prefill_cudagraph_capture_token_sizes == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    base = GraphConfig(vllm_version=BASE, max_num_seqs=32, max_num_batched_tokens=300)
    assert (
        base.prefill_cudagraph_capture_token_sizes != config.prefill_cudagraph_capture_token_sizes
    )
    # decode sizes are 0.34's default (the grid changed only for prefill)
    assert (
        config.decode_cudagraph_capture_request_sizes == base.decode_cudagraph_capture_request_sizes
    )
    # replace re-derives from what was asked: the default grid again, for the new limit
    smaller = config.replace(max_num_batched_tokens=100)
    assert smaller.prefill_cudagraph_capture_token_sizes == [1, 2, 4, 8, 16, 32, 64]
    # resolution is 0.34's: NEVER lowers FULL_AND_PIECEWISE to PIECEWISE in both
    for support in cg.AttentionCGSupport:
        try:
            a = base.resolve(support)
        except ValueError:
            with pytest.raises(ValueError):
                config.resolve(support)
            continue
        assert config.resolve(support).cudagraph_mode is a.cudagraph_mode
    # the vLLM JSON round-trips and names the release
    again = GraphConfig.from_vllm(config.to_vllm(), vllm_version=TEST_RELEASE)
    assert (
        again.prefill_cudagraph_capture_token_sizes == config.prefill_cudagraph_capture_token_sizes
    )


def test_given_sizes_give_0_34s_config(release):
    for mode in ("FULL_AND_PIECEWISE", "FULL", "PIECEWISE", "FULL_DECODE_ONLY"):
        base, new = _pair(cudagraph_mode=mode, **GIVEN_SIZES)
        assert _same_fields(base, new) == {}, mode


def test_dispatch_agrees_with_0_34_where_the_grids_agree(release):
    rng = np.random.default_rng(20261204)
    for mode in ("FULL_AND_PIECEWISE", "FULL", "PIECEWISE", "FULL_DECODE_ONLY"):
        base, new = (make_graph_dispatcher(c) for c in _pair(cudagraph_mode=mode, **GIVEN_SIZES))
        assert type(new) is type(base)
        for _ in range(300):
            uniform = bool(rng.random() < 0.5)
            reqs = int(rng.integers(1, 17))
            tokens = reqs if uniform else int(rng.integers(reqs, 257))
            a = dispatch_step(base, tokens, reqs, uniform)
            b = dispatch_step(new, tokens, reqs, uniform)
            assert (a.runtime_mode, a.padded_tokens, a.padded_reqs) == (
                b.runtime_mode,
                b.padded_tokens,
                b.padded_reqs,
            ), (mode, tokens, reqs, uniform)


def test_dispatch_follows_the_new_grid_where_they_differ(release):
    config = GraphConfig(
        vllm_version=TEST_RELEASE, cudagraph_mode="PIECEWISE", max_num_batched_tokens=512
    )
    manager = make_graph_dispatcher(config)
    rng = np.random.default_rng(7)
    for n in rng.integers(1, 513, 200):
        n = int(n)
        answer = dispatch_step(manager, n, 1, False)
        assert answer.runtime_mode is cg.CUDAGraphMode.PIECEWISE
        assert answer.padded_tokens == 1 << (n - 1).bit_length()  # the next power of two


def test_capture_and_replay_on_the_cpu_stand_in(release):
    sizes = dict(
        max_num_seqs=6,
        max_num_batched_tokens=64,
        prefill_cudagraph_capture_token_sizes=[4, 8, 12],
        decode_cudagraph_capture_request_sizes=[1, 3, 6],
    )
    keys = {}
    for version in (BASE, TEST_RELEASE):
        model = build_toy_model(PRESETS["toy-tiny"], seed=3)
        model.fill_kv_cache_(4)
        config = GraphConfig(vllm_version=version, cudagraph_mode="FULL_AND_PIECEWISE", **sizes)
        with GraphRunner(model, config) as runner:
            runner.capture_all(progress=False)
            report = check_replay(runner, seed=5)
            assert report["ok"].all() and report["replayed"].any()
            keys[version] = sorted({repr(k) for _, k in runner.captured_keys})  # once per piece
            assert runner.config.generation.release == version
            assert keys[version] == sorted(repr(k.key) for k in capture_keys(runner.config))
    assert keys[BASE] == keys[TEST_RELEASE]


def _trace(seed=11, n=400):
    rng = np.random.default_rng(seed)
    uniform = rng.random(n) < 0.6
    reqs = rng.integers(1, 17, n)
    tokens = np.where(uniform, reqs, rng.integers(1, 257, n))
    reqs = np.where(uniform, reqs, np.minimum(reqs, tokens))
    return make_trace(tokens, uniform, reqs)


def test_plan_compare_and_export_agree_with_0_34(release):
    trace = _trace()
    base, new = _pair(max_num_seqs=16, max_num_batched_tokens=256)
    a = plan_ladder(trace, 8, config=base)
    b = plan_ladder(trace, 8, config=new)
    assert a == b  # the planner plans from the trace, not from the default grid
    ladders = {"planned": a, "tokens": [8, 32, 128, 256]}
    table_a = compare(trace, ladders, config=base)
    table_b = compare(trace, ladders, config=new)
    assert (table_a["vllm_version"] == BASE).all() and (
        table_b["vllm_version"] == TEST_RELEASE
    ).all()
    cols = [c for c in table_a.columns if c != "vllm_version"]
    assert table_a[cols].astype(str).equals(table_b[cols].astype(str))
    flags_a, flags_b = export_plan(a, base), export_plan(a, new)
    assert flags_a == flags_b
    cc = json.loads(flags_b["vllm_compilation_config"])
    assert cc["prefill_cudagraph_capture_token_sizes"] == list(a.prefill_token_sizes)
    # vLLM's own default row differs: each release's default grid
    default_a = cg.engine_ladders(base)["vllm"].prefill_token_sizes
    default_b = cg.engine_ladders(new)["vllm"].prefill_token_sizes
    assert list(default_b) == [1, 2, 4, 8, 16, 32, 64, 128, 256] and default_a != default_b


def test_the_keys_table_has_the_generations_columns_and_0_34s_rows(release):
    base, new = _pair(cudagraph_mode="FULL_AND_PIECEWISE", **GIVEN_SIZES)
    table_a, table_b = keys_table(base), keys_table(new)
    assert list(table_b.columns) == list(release.graphs.key_columns)
    assert table_a.astype(str).equals(table_b.astype(str)) and len(table_b) > 0


def test_a_release_is_declared_as_one_class_of_few_fields():
    """Generation.from_class: the built-in packages round-trip; a missing field is named."""
    from cgdispatch.core import v1, v2
    from cgdispatch.core.generation import Generation

    assert len(dataclasses.fields(Generation)) < 10
    assert Generation.from_class(v2.Gen2) == GENERATIONS[BASE]
    assert Generation.from_class(v1.V1) == GENERATIONS["0.33"]
    declared = type(
        "Declared",
        (),
        {f.name: getattr(GENERATIONS[BASE], f.name) for f in dataclasses.fields(Generation)},
    )
    del declared.ladder, declared.scheduler
    with pytest.raises(ValueError, match="lacks ladder, scheduler"):
        Generation.from_class(declared)
    with pytest.raises(ValueError, match="pass a Generation"):
        register_generation(declared)
    with pytest.raises(ValueError, match="not registered"):
        unregister_generation("0.98")
