"""The readable views (cgdispatch.views.explain) against the dispatcher and hand-applied rules."""

from __future__ import annotations

import random
from collections import Counter

import pandas as pd
import pytest

from cgdispatch import CudagraphDispatcher, CUDAGraphMode, GraphConfig, ready_dispatcher
from cgdispatch.views.explain import (
    dispatch_stats,
    dispatch_table,
    explain_dispatch,
    keys_summary,
    keys_table,
    modes_table,
    random_batches,
)

# The truth table of docs/semantics.md (the spec, typed in by hand):
# mode: (decode, mixed, separate_routine, requires_piecewise, has_full, valid_runtime)
SEMANTICS_TABLE = {
    "NONE": ("NONE", "NONE", False, False, False, True),
    "PIECEWISE": ("PIECEWISE", "PIECEWISE", False, True, False, True),
    "FULL": ("FULL", "FULL", False, False, True, True),
    "FULL_DECODE_ONLY": ("FULL", "NONE", True, False, True, False),
    "FULL_AND_PIECEWISE": ("FULL", "PIECEWISE", True, True, True, False),
}


def random_config(rng: random.Random) -> GraphConfig:
    """A random, valid, resolved config: sizes, mode, limits, spec decode, LoRA."""
    mode = rng.choice(list(CUDAGraphMode))
    sizes = sorted(rng.sample(range(1, 97), rng.randint(2, 12)))
    sizes[-1] = -(-sizes[-1] // 12) * 12  # largest size: a multiple of every q used here
    seqs, spec = rng.randint(1, 48), rng.choice([0, 0, 1, 3])
    low = max(sizes[-1], seqs * (1 + spec))  # vLLM refuses fewer tokens (LoRA + spec decode)
    return GraphConfig(
        vllm_version="0.33",
        cudagraph_mode=mode,
        cudagraph_capture_sizes=sizes,
        max_num_seqs=seqs,
        max_num_batched_tokens=rng.randint(low, max(low, 256)),
        num_speculative_tokens=spec,
        max_loras=rng.choice([0, 0, 2, 4]),
        specialize_active_lora=rng.random() < 0.5,
    ).resolve()


def test_modes_table_matches_the_semantics_truth_table():
    table = modes_table().set_index("mode")
    assert sorted(table.index) == sorted(SEMANTICS_TABLE)
    cols = [
        "decode_mode",
        "mixed_mode",
        "separate_routine",
        "requires_piecewise",
        "has_full",
        "valid_runtime_mode",
    ]
    for mode, row in SEMANTICS_TABLE.items():
        assert tuple(table.loc[mode, cols]) == row, mode
        assert table.loc[mode, "value"] == str(CUDAGraphMode[mode].value)


def test_keys_table_lists_every_key_in_capture_order():
    rng = random.Random(11)
    for _ in range(30):
        config = random_config(rng)
        dispatcher = ready_dispatcher(config)
        table = keys_table(config)
        got = {
            (
                r.runtime_mode,
                int(r.num_tokens),
                None if pd.isna(r.num_reqs) else int(r.num_reqs),
                bool(r.uniform),
                bool(r.has_lora),
                int(r.num_active_loras),
            )
            for r in table.itertuples()
        }
        want = {
            (mode.name, d.num_tokens, d.num_reqs, d.uniform, d.has_lora, d.num_active_loras)
            for mode, keys in dispatcher.cudagraph_keys.items()
            for d in keys
        }
        assert got == want and len(table) == len(want)
        modes = list(table["runtime_mode"])
        assert modes == sorted(modes, key=lambda m: m != "PIECEWISE")  # PIECEWISE first
        for mode in ("PIECEWISE", "FULL"):
            tokens = list(table.loc[table["runtime_mode"] == mode, "num_tokens"])
            assert tokens == sorted(tokens, reverse=True)  # largest first within a mode


def test_keys_summary_counts_follow_the_key_rules():
    rng = random.Random(12)
    for _ in range(30):
        config = random_config(rng)
        q, seqs = config.uniform_decode_query_len, config.max_num_seqs
        lora_cases = len(config.lora_cases())
        summary = keys_summary(config).set_index("mode")
        for mode in CUDAGraphMode:
            sizes = config.replace(cudagraph_mode=mode).cudagraph_capture_sizes
            row = summary.loc[mode.name]
            mixed, decode = mode.mixed_mode(), mode.decode_mode()
            want_pw = len(sizes) * lora_cases if mixed is CUDAGraphMode.PIECEWISE else 0
            want_mixed = len(sizes) * lora_cases if mixed is CUDAGraphMode.FULL else 0
            separate = mode.separate_routine() and decode is CUDAGraphMode.FULL
            want_uni = sum(q <= s <= q * seqs for s in sizes) * lora_cases if separate else 0
            assert (row.piecewise, row.full_mixed, row.full_uniform) == (
                want_pw,
                want_mixed,
                want_uni,
            ), mode


def test_keys_summary_reports_a_mode_the_config_cannot_run():
    config = GraphConfig(
        vllm_version="0.33",
        cudagraph_mode="FULL",
        cudagraph_capture_sizes=[1, 2, 4],
        splitting_ops=["cgdispatch::attention"],  # not every attention op: no PIECEWISE
    )
    row = keys_summary(config, modes=["PIECEWISE"]).iloc[0]
    assert row.graphs == 0 and "splitting_ops" in row.note


def test_explain_dispatch_equals_the_dispatcher_on_random_batches():
    rng = random.Random(13)
    for _ in range(40):
        config = random_config(rng)
        reference = CudagraphDispatcher(config)
        reference.initialize_cudagraph_keys()
        dispatcher = ready_dispatcher(config)
        for _ in range(50):
            n = rng.randint(0, config.max_num_batched_tokens)
            uniform, cascade = rng.random() < 0.5, rng.random() < 0.3
            loras = rng.randint(0, config.max_loras)
            got = explain_dispatch(dispatcher, n, uniform, loras, cascade)
            mode, desc = reference.dispatch(
                n,
                uniform_decode=uniform,
                has_lora=loras > 0,
                num_active_loras=loras,
                use_cascade_attn=cascade,
            )
            assert (got["runtime_mode"], got["padded_size"], got["num_reqs"]) == (
                mode.name,
                desc.num_tokens,
                desc.num_reqs,
            )
            assert got["key"] == repr(desc) and got["padding_tokens"] == desc.num_tokens - n
            if mode is not CUDAGraphMode.NONE:  # padded to the smallest capture size that fits
                assert desc.num_tokens == min(s for s in config.cudagraph_capture_sizes if s >= n)
            assert got["reason"] and got["predicted_ms"] is None


def test_explain_dispatch_reasons():
    config = GraphConfig(
        vllm_version="0.33",
        cudagraph_capture_sizes=[1, 2, 4, 8],
        max_num_seqs=8,
        max_num_batched_tokens=64,
    )
    assert "exceed the largest capture size 8" in explain_dispatch(config, 9)["reason"]
    none = config.replace(cudagraph_mode="NONE")
    assert "NONE" in explain_dispatch(none, 3)["reason"]
    full = config.replace(cudagraph_mode="FULL")
    cascaded = explain_dispatch(full, 3, cascade=True)
    assert (
        cascaded["runtime_mode"] == "NONE"
        and "cascade attention excludes FULL" in cascaded["reason"]
    )
    decode_only = config.replace(cudagraph_mode="FULL_DECODE_ONLY")
    assert "runs mixed batches eagerly" in explain_dispatch(decode_only, 3)["reason"]
    assert (
        "FULL graph (uniform-decode key)"
        in explain_dispatch(decode_only, 3, uniform=True)["reason"]
    )
    fap = explain_dispatch(config, 3, cascade=True)
    assert fap["runtime_mode"] == "PIECEWISE" and "cascade" in fap["reason"]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"num_tokens": 65}, "max_num_batched_tokens=64"),
        ({"num_tokens": -1}, "num_tokens=-1"),
        ({"num_tokens": True}, "num_tokens=True"),
        ({"num_tokens": 4, "loras": 1}, "max_loras=0"),
        ({"num_tokens": 4, "loras": -2}, "active LoRAs=-2"),
    ],
)
def test_explain_dispatch_rejects_batches_the_scheduler_never_forms(kwargs, fragment):
    config = GraphConfig(
        vllm_version="0.33",
        cudagraph_capture_sizes=[1, 2, 4, 8],
        max_num_seqs=16,
        max_num_batched_tokens=64,
    )
    with pytest.raises(ValueError, match="invalid") as err:
        explain_dispatch(config, **kwargs)
    assert fragment in str(err.value)


def test_explain_dispatch_uses_the_cost_model_at_the_padded_size():
    rng = random.Random(14)
    base_ms, per_token_ms = rng.uniform(1, 3), rng.uniform(0.01, 0.05)
    factor = {"NONE": 1.0, "PIECEWISE": 0.8, "FULL": 0.6}

    def cost(mode, padded):
        return (base_ms + per_token_ms * padded) * factor[mode.name]

    config = GraphConfig(vllm_version="0.33", max_num_seqs=32, max_num_batched_tokens=512)
    for n in rng.sample(range(1, 200), 20):
        got = explain_dispatch(config, n, cost_model=cost)
        assert got["predicted_ms"] == pytest.approx(
            (base_ms + per_token_ms * got["padded_size"]) * factor[got["runtime_mode"]]
        )


def test_explain_dispatch_takes_a_cost_model_object():
    from cgdispatch.plan.costs import AffineCostModel

    rng = random.Random(17)
    model = AffineCostModel(
        base_ms={m: rng.uniform(1, 6) for m in ("NONE", "PIECEWISE", "FULL")},
        per_token_ms=rng.uniform(0.001, 0.05),
    )
    config = GraphConfig(vllm_version="0.33", max_num_seqs=32, max_num_batched_tokens=512)
    for n in rng.sample(range(1, 512), 20):
        got = explain_dispatch(config, n, rng.random() < 0.5, cost_model=model)
        want = model.base_ms[got["runtime_mode"]] + model.per_token_ms * got["padded_size"]
        assert got["predicted_ms"] == pytest.approx(want)


def test_dispatch_table_has_one_row_per_combination():
    rng = random.Random(15)
    config = random_config(rng)
    sizes = rng.sample(range(0, config.max_num_batched_tokens + 1), 6)
    table = dispatch_table(config, sizes, uniform_decode=[False, True], cascade=[False, True])
    assert len(table) == len(sizes) * 4
    for row in table.itertuples():
        want = explain_dispatch(
            config, row.num_tokens, row.uniform_decode, row.active_loras, row.cascade
        )
        assert (row.runtime_mode, row.padded_size) == (want["runtime_mode"], want["padded_size"])


def test_random_batches_are_seeded_and_within_the_limits():
    config = GraphConfig(
        vllm_version="0.33", max_num_seqs=20, max_num_batched_tokens=300, num_speculative_tokens=2
    )
    a = random_batches(config, 500, decode_fraction=0.7, seed=3)
    assert a == random_batches(config, 500, decode_fraction=0.7, seed=3)
    assert a != random_batches(config, 500, decode_fraction=0.7, seed=4)
    for n, uniform in a:
        assert 1 <= n <= 300
        if uniform:
            assert n % 3 == 0 and n // 3 <= 20
    assert 0.6 < sum(u for _, u in a) / len(a) < 0.8
    with pytest.raises(ValueError, match="decode_fraction"):
        random_batches(config, 5, decode_fraction=1.5)


def test_dispatch_stats_counts_every_batch():
    rng = random.Random(16)
    config = random_config(rng)
    batches = random_batches(config, 400, seed=1)
    stats = dispatch_stats(config, batches)
    reference = CudagraphDispatcher(config, record_stats=False)
    reference.initialize_cudagraph_keys()
    want = Counter()
    for n, uniform in batches:
        mode, desc = reference.dispatch(n, uniform_decode=uniform)
        want[(mode.name, desc.num_tokens)] += 1
    got = {(r.runtime_mode, r.padded_size): r.calls for r in stats.itertuples()}
    assert got == dict(want)


# ----- generation 2 (vLLM 0.34, CudaGraphManager): the same views, checked against the class
def random_gen2_config(rng: random.Random) -> GraphConfig:
    """A random, valid, resolved generation-2 config: mode, limits, spec decode, LoRA."""
    import warnings

    from cgdispatch import AttentionCGSupport

    while True:
        fields = dict(
            vllm_version="0.34",
            cudagraph_mode=rng.choice(list(CUDAGraphMode)),
            max_num_seqs=rng.randint(1, 48),
            max_num_batched_tokens=rng.randint(48, 400),
            num_speculative_tokens=rng.choice([0, 0, 1, 3]),
            max_loras=rng.choice([0, 0, 2, 4]),
            specialize_active_lora=rng.random() < 0.5,
            cudagraph_specialize_lora=rng.random() < 0.5,
        )
        if rng.random() < 0.3:
            fields["decode_cudagraph_capture_request_sizes"] = sorted(
                rng.sample(range(1, fields["max_num_seqs"] + 1), min(3, fields["max_num_seqs"]))
            )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return GraphConfig(**fields).resolve(rng.choice(list(AttentionCGSupport)))
        except ValueError:
            continue  # vLLM refuses it (rule tests cover refusals): draw again


def test_gen2_keys_table_lists_the_managers_descriptors_in_capture_order():
    from cgdispatch import CudaGraphManager

    rng = random.Random(21)
    for _ in range(25):
        config = random_gen2_config(rng)
        table = keys_table(config)
        assert list(table.columns) == [
            "runtime_mode",
            "num_tokens",
            "num_reqs",
            "uniform_token_count",
            "max_query_len",
            "num_active_loras",
            "num_ubatches",
        ]

        def opt(v):
            return None if pd.isna(v) else int(v)

        got = [
            (r.runtime_mode, r.num_tokens, opt(r.num_reqs), opt(r.uniform_token_count),
             opt(r.max_query_len), r.num_active_loras, r.num_ubatches)
            for r in table.itertuples()
        ]  # fmt: skip
        want = [
            (d.cg_mode.name, d.num_tokens, d.num_reqs, d.uniform_token_count, d.max_query_len,
             d.num_active_loras, d.num_ubatches)
            for d in CudaGraphManager(config).capture_order()
        ]  # fmt: skip
        assert got == want


def test_gen2_keys_summary_counts_the_managers_graphs():
    import warnings

    from cgdispatch import CudaGraphManager

    rng = random.Random(22)
    for _ in range(15):
        config = random_gen2_config(rng)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            summary = keys_summary(config).set_index("mode")
        for mode in CUDAGraphMode:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                descs = CudaGraphManager(config.replace(cudagraph_mode=mode)).capture_descs
            full = descs.get(CUDAGraphMode.FULL, [])
            decode = [d for d in full if d.uniform_token_count is not None or d.max_query_len]
            row = summary.loc[mode.name]
            assert (row.piecewise, row.full_mixed, row.full_uniform) == (
                len(descs.get(CUDAGraphMode.PIECEWISE, [])),
                len(full) - len(decode),
                len(decode),
            ), mode


def test_gen2_explain_dispatch_equals_the_manager_on_random_batches():
    from cgdispatch import CudaGraphManager

    rng = random.Random(23)
    for _ in range(30):
        config = random_gen2_config(rng)
        manager = CudaGraphManager(config)
        q = config.uniform_decode_query_len
        for _ in range(40):
            uniform = rng.random() < 0.5
            loras = rng.randint(0, config.max_loras)
            if uniform:
                reqs = rng.randint(1, min(config.max_num_seqs, config.max_num_batched_tokens // q))
                n = reqs * q
            else:
                n = rng.randint(1, config.max_num_batched_tokens)
                reqs = rng.randint(1, min(n, config.max_num_seqs))
            got = explain_dispatch(config, n, uniform, loras, num_reqs=reqs)
            desc = manager.dispatch(reqs, n, q if uniform else None, loras)
            assert (got["runtime_mode"], got["padded_size"], got["num_reqs"]) == (
                desc.cg_mode.name,
                desc.num_tokens,
                desc.num_reqs,
            )
            assert got["key"] == repr(desc) and got["vllm_version"] == "0.34"
            assert got["batch_reqs"] == reqs and got["padding_tokens"] == desc.num_tokens - n
            assert got["reason"].startswith(
                {"FULL": "FULL graph", "PIECEWISE": "PIECEWISE graph", "NONE": ""}[
                    desc.cg_mode.name
                ]
            )
            if uniform:  # the default request count of a uniform decode is n / q
                assert explain_dispatch(config, n, True, loras)["key"] == got["key"]


def test_gen2_reasons_and_refusals():
    config = GraphConfig(
        vllm_version="0.34",
        cudagraph_mode="FULL_AND_PIECEWISE",
        max_num_seqs=8,
        max_num_batched_tokens=64,
        prefill_cudagraph_capture_token_sizes=[4, 16],
        decode_cudagraph_capture_request_sizes=[2, 4],
    )
    decode = explain_dispatch(config, 3, uniform=True)
    assert decode["reason"] == "FULL graph (decode graph: 4 requests of 1 tokens), 1 padding tokens"
    assert (
        "no compatible decode FULL graph for 6 requests"
        in explain_dispatch(config, 6, True)["reason"]
    )
    assert "exceed the widest graph (16 tokens)" in explain_dispatch(config, 17)["reason"]
    only = config.replace(cudagraph_mode="FULL_DECODE_ONLY")
    assert "runs mixed batches eagerly" in explain_dispatch(only, 3)["reason"]
    none = config.replace(cudagraph_mode="NONE")
    assert "NONE" in explain_dispatch(none, 3)["reason"]
    with pytest.raises(ValueError, match="no cascade attention"):
        explain_dispatch(config, 3, cascade=True)
    with pytest.raises(ValueError, match="num_reqs=9 is invalid: .*max_num_seqs=8"):
        explain_dispatch(config, 20, num_reqs=9)
    with pytest.raises(ValueError, match="num_reqs=5 is invalid with num_tokens=4"):
        explain_dispatch(config, 4, num_reqs=5)
    table = dispatch_table(config, [1, 3, 9, 17])
    assert set(table["vllm_version"]) == {"0.34"} and len(table) == 8


def test_dispatch_stats_counts_either_generation():
    from cgdispatch import CudaGraphManager

    rng = random.Random(24)
    v1 = random_config(rng)
    batches = random_batches(v1, 500, seed=2)
    reference = CudagraphDispatcher(v1)
    reference.initialize_cudagraph_keys()
    for n, uniform in batches:
        reference.dispatch(n, uniform_decode=uniform)
    pd.testing.assert_frame_equal(dispatch_stats(v1, batches), reference.stats_frame())

    gen2 = random_gen2_config(rng)
    batches = random_batches(gen2, 500, seed=3)
    manager, q = CudaGraphManager(gen2), gen2.uniform_decode_query_len
    want = Counter()
    for n, uniform in batches:
        desc = manager.dispatch(-(-n // q) if uniform else 1, n, q if uniform else None, 0)
        want[(desc.cg_mode.name, desc.num_tokens)] += 1
    stats = dispatch_stats(gen2, batches)
    assert {(r.runtime_mode, r.padded_size): r.calls for r in stats.itertuples()} == dict(want)
    assert (stats["padding_tokens"] == stats["padded_tokens"] - stats["real_tokens"]).all()
    assert stats["real_tokens"].sum() == sum(n for n, _ in batches)
