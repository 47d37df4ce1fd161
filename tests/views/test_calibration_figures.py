"""The calibration views: the published step-time comparison (against the CSV and the device
model computed here) and the figures' data and source labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import cgdispatch as cg
from cgdispatch.core.modes import CUDAGraphMode
from cgdispatch.views.sources import figure_source

CSV = "cgdispatch/data/published_step_times.csv"


def test_published_pairs_are_compared_with_the_device_model() -> None:
    table = cg.published_step_comparison()
    data = pd.read_csv(CSV)
    # every pair of a registry model is there, a three-mode set as two rows
    covered = data[data["cgdispatch_model"].isin(["llama-3.1-8b", "qwen2.5-1.5b"])]
    assert sorted(set(table["pair"])) == sorted(set(covered["pair"]))
    assert len(table) == sum(len(p) - 1 for _, p in covered.groupby("pair"))
    # one row recomputed by hand: p08, PIECEWISE over the fastest (FULL_AND_PIECEWISE)
    p08 = data[data["pair"] == "p08"].set_index("mode")["value"]
    row = table[(table["pair"] == "p08") & table["ratio"].str.startswith("PIECEWISE")].iloc[0]
    assert row["published"] == pytest.approx(p08["PIECEWISE"] / p08["FULL_AND_PIECEWISE"])
    cm = cg.device_cost_model("qwen2.5-1.5b", "H100")
    one = np.array([1])
    want = cm.step_time_ms(CUDAGraphMode.PIECEWISE, one) / cm.step_time_ms(
        CUDAGraphMode.FULL_AND_PIECEWISE, one
    )
    assert row["model_ratio"] == pytest.approx(float(want[0]))
    assert row["error"] == pytest.approx(row["model_ratio"] / row["published"] - 1)
    # the target: published ratios within +-25% (all but plain PyTorch eager, p01)
    assert set(table.loc[~table["within_25pct"], "pair"]) <= {"p01"}
    # throughputs become times per step before dividing (ratios are slower over faster)
    assert (table["published"] >= 1).all()


def test_the_figures_carry_their_sources(tmp_path) -> None:  # noqa: ANN001
    comparison = cg.published_step_comparison()
    fig = cg.step_ratio_figure(comparison)
    assert figure_source(fig).startswith("model (H100) vs reference data")
    assert len(fig.axes[0].patches) == 2 * len(comparison)
    fig = cg.mode_step_figure("llama-3.1-8b", "H100")
    assert figure_source(fig) == "model (H100 SXM)"
    lines = {line.get_label(): line for line in fig.axes[0].lines}
    assert set(lines) == {"NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"}
    # FULL_AND_PIECEWISE routes uniform decodes to FULL: the two lines coincide
    np.testing.assert_allclose(lines["FULL"].get_ydata(), lines["FULL_AND_PIECEWISE"].get_ydata())
    assert np.all(lines["PIECEWISE"].get_ydata() > lines["FULL"].get_ydata())


def test_the_calibration_figure_plots_every_run_and_refuses_a_bare_table() -> None:
    rng = np.random.default_rng()
    n = 6
    logged = rng.uniform(0.5, 2.0, n)
    table = pd.DataFrame(
        {
            "run": [f"r{i}" for i in range(n)],
            "family": ["Llama", "Qwen"] * 3,
            "graph_memory_gib": logged,
            "graph_memory_gib_cv": logged * rng.uniform(0.8, 1.2, n),
            "vllm_estimate_gib": logged * rng.uniform(0.7, 1.5, n),
            "capture_s": rng.integers(2, 15, n).astype(float),
            "capture_s_cv": rng.uniform(2, 15, n),
            "kv_cache_tokens": rng.uniform(1e5, 2e6, n),
            "kv_cache_tokens_cv": rng.uniform(1e5, 2e6, n),
        }
    )
    table["graph_memory_error_cv"] = (table["graph_memory_gib_cv"] / logged - 1).abs()
    table["capture_error_s_cv"] = (table["capture_s_cv"] - table["capture_s"]).abs()
    table["kv_tokens_error_cv"] = (table["kv_cache_tokens_cv"] / table["kv_cache_tokens"] - 1).abs()
    fig = cg.calibration_figure(table)
    assert figure_source(fig) == "model (H100) vs reference data (H100 80GB, 2026-04-22)"
    memory_axes = fig.axes[0]
    points = np.concatenate([c.get_offsets() for c in memory_axes.collections])
    assert len(points) == 2 * n  # every run's prediction and vLLM's estimate
    median = 100 * table["graph_memory_error_cv"].median()
    assert f"{median:.1f} %" in memory_axes.get_title()
    with pytest.raises(ValueError, match="calibration_table"):
        cg.calibration_figure(table.drop(columns=["capture_s_cv"]))
