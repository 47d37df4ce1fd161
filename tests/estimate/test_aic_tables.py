"""aiconfigurator's measured tables, read and summed: needs ``pip install 'cgdispatch[aic]'``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("aiconfigurator_core")

from cgdispatch.estimate.aic_data import aic_data_dir, aic_table  # noqa: E402
from cgdispatch.estimate.aic_reference import (  # noqa: E402
    BREAKDOWN_COLUMNS,
    fixture_op_samples,
    fixture_reference_steps,
    op_samples,
)
from cgdispatch.estimate.aic_steps import (  # noqa: E402
    aic_model,
    measured_step_breakdown,
)
from cgdispatch.estimate.aic_tables import AicTables, aic_tables  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
RNG = np.random.default_rng(7)


def _rows(frame: pd.DataFrame, n: int) -> pd.DataFrame:
    return frame.iloc[RNG.choice(len(frame), min(n, len(frame)), replace=False)]


def test_data_dir_is_found_and_overridable(monkeypatch, tmp_path):
    found = aic_data_dir()
    assert (found / "h100_sxm" / "gemm").is_dir()
    monkeypatch.setenv("CGDISPATCH_AIC_DATA", str(found))
    assert aic_data_dir() == found
    with pytest.raises(ValueError, match="does not exist"):
        aic_data_dir(tmp_path / "nowhere")


def test_newest_version_folder_is_read():
    source, frame = aic_table("H100", "custom_allreduce")
    versions = [p.name for p in (aic_data_dir() / "h100_sxm" / "comm" / "vllm").iterdir()]
    newest = max(versions, key=lambda v: tuple(int(x) for x in v.split(".")))
    assert source.version == newest and set(frame["version"]) == {newest}


@pytest.mark.parametrize("device", ["H100", "A100"])
def test_grid_points_return_the_tables_own_values(device):
    tables = AicTables(device)
    gemm = aic_table(device, "gemm")[1]
    for row in _rows(gemm[gemm["gemm_dtype"] == "bfloat16"], 40).itertuples():
        assert tables.gemm_ms(row.m, row.n, row.k) == pytest.approx(row.latency, rel=1e-9)
    for op, lookup in (
        ("generation_attention", tables.generation_attention_ms),
        ("context_attention", tables.context_attention_ms),
    ):
        rows = op_samples(device, op)
        rows = rows[
            (rows["dtype"] == "bfloat16")
            & (rows["kernel_source"] == rows["kernel_source"].mode()[0])
        ]
        # a shape timed twice (some A100 rows) is read as the mean of its timings
        rows = rows.groupby(["batch", "seq", "heads", "kv_heads", "head_dim"], as_index=False)[
            "measured_ms"
        ].mean()
        for row in _rows(rows, 40).itertuples():
            got = lookup(row.batch, row.seq, row.heads, row.kv_heads, row.head_dim)
            assert got == pytest.approx(row.measured_ms, rel=1e-9), row
    for row in _rows(op_samples(device, "custom_allreduce"), 20).itertuples():
        assert tables.allreduce_ms(row.elements, row.tp) == pytest.approx(row.measured_ms, rel=1e-9)
    for row in _rows(op_samples(device, "nccl").query("dtype == 'half'"), 20).itertuples():
        assert tables.allreduce_ms(row.elements, row.tp, kind="nccl") == pytest.approx(
            row.measured_ms, rel=1e-9
        )
    moe = op_samples(device, "moe")
    moe = moe[(moe["dtype"] == "bfloat16") & (moe["distribution"] == "power_law_1.2")]
    for row in _rows(moe, 20).itertuples():
        got = tables.moe_ms(row.tokens, row.hidden, row.inter, row.topk, row.experts, row.tp)
        assert got == pytest.approx(row.measured_ms, rel=1e-9)


def test_fp8_gemm_takes_the_fastest_kernel_timed_at_a_shape():
    gemm = aic_table("H100", "gemm")[1]
    fastest = gemm[gemm["gemm_dtype"] == "fp8_block"].groupby(["m", "n", "k"])["latency"].min()
    for (m, n, k), ms in fastest.iloc[RNG.choice(len(fastest), 30, replace=False)].items():
        assert aic_tables("H100").gemm_ms(m, n, k, dtype="fp8_block") == pytest.approx(ms, rel=1e-9)


def test_interpolation_is_monotone_between_increasing_grid_points():
    tables = aic_tables("H100")
    gemm = aic_table("H100", "gemm")[1]
    line = gemm[
        (gemm["gemm_dtype"] == "bfloat16") & (gemm["n"] == 4096) & (gemm["k"] == 4096)
    ].sort_values("m")
    ms, times = line["m"].to_numpy(), line["latency"].to_numpy()
    for lo, hi, t_lo, t_hi in zip(ms[:-1], ms[1:], times[:-1], times[1:], strict=True):
        inner = [tables.gemm_ms(m, 4096, 4096) for m in np.linspace(lo, hi, 6)]
        if t_hi >= t_lo:
            assert np.all(np.diff(inner) >= -1e-12), (lo, hi)
        assert min(t_lo, t_hi) - 1e-12 <= min(inner) and max(inner) <= max(t_lo, t_hi) + 1e-12


def test_step_is_the_sum_of_its_kernels_recomputed_independently():
    """A random decode + prefill step of Llama-3.1-8B at TP 2, priced kernel by kernel here."""
    tables = aic_tables("H100")
    m = aic_model("llama-3.1-8b")
    for _ in range(5):
        decodes = [int(c) for c in RNG.integers(16, 8000, size=int(RNG.integers(1, 200)))]
        prompt = int(RNG.integers(16, 4000))
        tokens = len(decodes) + prompt
        step = measured_step_breakdown(
            "llama-3.1-8b",
            "H100",
            decode_contexts=decodes,
            prompt_chunks=[prompt],
            tensor_parallel_size=2,
        )
        parts = [getattr(step, c) for c in BREAKDOWN_COLUMNS]
        assert step.total_ms == pytest.approx(sum(parts), rel=1e-12)
        h, i = 4096, 14336 // 2
        gemm = 32 * sum(
            tables.gemm_ms(tokens, n, k)
            for n, k in ((24 * 128, h), (h, 16 * 128), (2 * i, h), (h, i))
        )
        assert step.gemm_ms == pytest.approx(gemm, rel=1e-12)
        assert step.attn_decode_ms == pytest.approx(
            32 * tables.generation_attention_ms(len(decodes), np.mean(decodes), 16, 4, 128),
            rel=1e-9,
        )
        assert step.attn_prefill_ms == pytest.approx(
            32 * tables.context_attention_ms(1, prompt, 16, 4, 128), rel=1e-9
        )
        assert step.allreduce_ms == pytest.approx(
            65 * tables.allreduce_ms(tokens * h, 2), rel=1e-12
        )
        assert step.lm_head_ms == pytest.approx(
            tables.gemm_ms(len(decodes) + 1, m.padded_vocab(2) // 2, h), rel=1e-12
        )


def test_cached_prefix_costs_the_new_rows_share_of_the_full_prompt():
    tables = aic_tables("H100")
    step = measured_step_breakdown("llama-3.1-8b", "H100", prompt_chunks=[(512, 1536)])
    share = 1536 * (512 + 768) / (2048**2 / 2)
    assert step.attn_prefill_ms == pytest.approx(
        32 * tables.context_attention_ms(1, 2048, 32, 8, 128) * share
    )
    short = measured_step_breakdown("llama-3.1-8b", "H100", prompt_chunks=[(8000, 16)])
    alone = measured_step_breakdown("llama-3.1-8b", "H100", prompt_chunks=[16])
    assert short.attn_prefill_ms >= alone.attn_prefill_ms


# aiconfigurator's own engine (EngineHandle.compile("meta-llama/Meta-Llama-3.1-8B",
# "<gpu>", "vllm"), decode_step_latency(b, 1024, 2), predict_prefill_latency(1, isl)), as
# quoted in the lead's issue. A100: our log-log GEMM interpolation across its sparse n grid
# (no n between 16384 and 65536) prices the gate/up GEMM below the engine's, up to 5.1% off.
ISSUE_FIGURES = [
    ("H100", "decode", 1, 6.18, 0.03),
    ("H100", "decode", 64, 10.34, 0.03),
    ("H100", "decode", 256, 19.55, 0.03),
    ("H100", "prefill", 512, 12.0, 0.03),
    ("H100", "prefill", 2048, 43.5, 0.03),
    ("H100", "prefill", 8192, 199.7, 0.03),
    ("A100", "decode", 1, 11.86, 0.06),
    ("A100", "decode", 64, 17.82, 0.06),
    ("A100", "decode", 256, 43.71, 0.06),
    ("A100", "prefill", 512, 36.0, 0.06),
    ("A100", "prefill", 2048, 125.2, 0.06),
    ("A100", "prefill", 8192, 557.0, 0.06),
]


@pytest.mark.parametrize(("device", "kind", "size", "want_ms", "rel"), ISSUE_FIGURES)
def test_issue_figures_for_llama_8b(device, kind, size, want_ms, rel):
    step = {"decode_contexts": [1024] * size} if kind == "decode" else {"prompt_chunks": [size]}
    assert measured_step_breakdown("llama-3.1-8b", device, **step).total_ms == pytest.approx(
        want_ms, rel=rel
    )


def test_llama_70b_tp8_all_reduce_matches_the_issue():
    low = measured_step_breakdown(
        "llama-3.1-70b", "H100", decode_contexts=[1024], tensor_parallel_size=8
    )
    high = measured_step_breakdown(
        "llama-3.1-70b", "H100", decode_contexts=[1024] * 64, tensor_parallel_size=8
    )
    assert low.allreduce_ms == pytest.approx(0.85, rel=0.02) and high.allreduce_ms == pytest.approx(
        2.4, rel=0.02
    )


def test_fixtures_agree_with_a_fresh_computation():
    steps = pd.read_csv(DATA / "aic_reference_steps.csv", comment="#")
    fresh = fixture_reference_steps()
    pd.testing.assert_frame_equal(steps, fresh, check_dtype=False, rtol=1e-5)
    samples = pd.read_csv(DATA / "aic_op_samples.csv", comment="#")
    fresh = fixture_op_samples()
    for column in (
        "op",
        "device",
        "kernel_source",
        "measured_ms",
        "m",
        "seq",
        "elements",
        "tokens",
    ):
        pd.testing.assert_series_equal(
            samples[column], fresh[column].reset_index(drop=True), check_dtype=False, rtol=1e-5
        )


def test_unmeasured_requests_raise_naming_the_value():
    with pytest.raises(ValueError, match="device='L4'"):
        AicTables("L4")
    with pytest.raises(ValueError, match="gemm_dtype='fp8' is not measured"):
        aic_tables("A100").gemm_ms(16, 4096, 4096, dtype="fp8")
    with pytest.raises(ValueError, match="num_key_value_heads=3 is not measured"):
        aic_tables("H100").generation_attention_ms(4, 1024, 12, 3, 128)
    with pytest.raises(ValueError, match="the step is empty"):
        measured_step_breakdown("llama-3.1-8b", "H100")
    with pytest.raises(ValueError, match="prompt chunk"):
        measured_step_breakdown("llama-3.1-8b", "H100", prompt_chunks=[0])
    with pytest.raises(ValueError, match="prompt chunk"):
        measured_step_breakdown("llama-3.1-8b", "H100", prompt_chunks=[(512, 0)])
    with pytest.raises(ValueError, match="does not divide"):
        measured_step_breakdown(
            "llama-3.1-8b", "H100", decode_contexts=[10], tensor_parallel_size=3
        )


def test_moe_step_prices_router_and_experts_and_estimates_memory_ops():
    """Qwen3-30B-A3B (48 MoE layers, QK-norm): kernels and the memory-op formula by hand."""
    tables = aic_tables("H100")
    decodes = [int(c) for c in RNG.integers(64, 4000, size=int(RNG.integers(2, 100)))]
    prompt = int(RNG.integers(64, 3000))
    tokens = len(decodes) + prompt
    step = measured_step_breakdown(
        "qwen3-30b-a3b", "H100", decode_contexts=decodes, prompt_chunks=[prompt]
    )
    h = 2048
    assert step.moe_ms == pytest.approx(48 * tables.moe_ms(tokens, h, 768, 8, 128), rel=1e-12)
    gemm = sum(tables.gemm_ms(tokens, n, k) for n, k in ((40 * 128, h), (h, 32 * 128), (128, h)))
    assert step.gemm_ms == pytest.approx(48 * gemm, rel=1e-12)

    # aiconfigurator's memory-op formula from systems/h100_sxm.yaml: 3.35 TB/s x 0.8, + 3 us
    def op_ms(bytes_):
        return (bytes_ / (3.35e12 * 0.8) + 3e-6) * 1e3

    want = op_ms(tokens * h * 2) + 2 * 48 * op_ms(tokens * 4 * h * 2) + 48 * (0.0132 + 0.0264)
    assert step.elementwise_ms == pytest.approx(want, rel=1e-9)
