"""sweepviews: preset overrides, per-unit tables, graph-memory bars, modelled speed-up per mode."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from cgdispatch.core.config import GraphConfig
from cgdispatch.sweep.spec import SWEEP_PRESETS, SweepSpec
from cgdispatch.views.sweepviews import graph_memory_table, modelled_speedup, sweep_spec, unit_table


def test_sweep_spec_applies_only_given_overrides():
    base = SWEEP_PRESETS["smoke"]
    assert sweep_spec("smoke", modes=None, repeats=None) == base
    spec = sweep_spec("smoke", modes=["PIECEWISE"], repeats=3, device=None)
    assert spec.modes == ("PIECEWISE",) and spec.repeats == 3
    assert spec.ladders == base.ladders and spec.device == base.device
    with pytest.raises(ValueError, match="nope"):
        sweep_spec("nope")


def _fake_rows(seed: int) -> pd.DataFrame:
    """Sweep-shaped rows with random timings: two units, some failed points."""
    rng = random.Random(seed)
    rows = []
    for mode, ladder in (("FULL", "pow2"), ("FULL_DECODE_ONLY", "coarse")):
        graphs, capture = rng.randint(1, 9), rng.uniform(0.1, 2)
        for n in (1, 3, 8):
            for uniform in (True, False):
                ok = rng.random() > 0.2
                rows.append(
                    dict(
                        model="toy-tiny",
                        mode=mode,
                        ladder=ladder,
                        capture_sizes="1,2,4,8" if ladder == "pow2" else "4,16",
                        max_num_seqs=16,
                        dtype="float32",
                        resolved_mode=mode,
                        num_graphs=graphs,
                        capture_s=capture,
                        graph_capture_s=capture / 2,
                        pool_bytes=None,
                        num_tokens=n,
                        uniform_decode=uniform,
                        status="ok" if ok else "failed",
                        speedup_x=rng.uniform(0.5, 3) if ok else None,
                        source="measured (CPU)",
                    )
                )
    return pd.DataFrame(rows)


def test_unit_table_matches_a_loop_over_the_rows():
    rows = _fake_rows(3)
    table = unit_table(rows)
    assert list(zip(table["mode"], table["ladder"])) == [
        ("FULL", "pow2"),
        ("FULL_DECODE_ONLY", "coarse"),
    ]
    for unit in table.itertuples():
        mine = [
            r
            for r in rows.to_dict("records")
            if (r["mode"], r["ladder"]) == (unit.mode, unit.ladder)
        ]
        ok = [r for r in mine if r["status"] == "ok"]
        assert unit.ok == len(ok) and unit.failed == len(mine) - len(ok)
        assert unit.capture_s == mine[0]["capture_s"] and unit.num_graphs == mine[0]["num_graphs"]
        for col, uniform in (("decode_speedup_x", True), ("mixed_speedup_x", False)):
            values = [r["speedup_x"] for r in ok if r["uniform_decode"] is uniform]
            want = float(np.median(values)) if values else float("nan")
            assert getattr(unit, col) == pytest.approx(want, nan_ok=True)


def test_graph_memory_table_is_the_estimate_on_cpu_and_adds_measured_bytes():
    from cgdispatch.estimate.graph_memory import estimate_graph_memory
    from cgdispatch.models.toy import build_toy_model

    rows = _fake_rows(5)
    table = graph_memory_table(rows)
    assert set(table["source"]) == {"model"}
    assert set(table["pool"]) == {"shared pool", "separate pools"}
    model = build_toy_model("toy-tiny", device="meta")
    for (mode, ladder, sizes), _ in rows.groupby(["mode", "ladder", "capture_sizes"]):
        config = GraphConfig(
            vllm_version="0.33",
            cudagraph_mode=mode,
            cudagraph_capture_sizes=[int(s) for s in sizes.split(",")],
            max_num_seqs=16,
        ).resolve(model.attention_cg_support)
        est = estimate_graph_memory(model, config)
        mine = table[(table["mode"] == mode) & (table["ladder"] == ladder)].set_index("pool")
        assert mine.loc["shared pool", "pool_bytes"] == est.shared_pool_bytes
        assert mine.loc["separate pools", "pool_bytes"] == est.separate_pools_bytes
        assert mine.loc["shared pool", "bar"] == f"{ladder}: shared pool"
    measured = rows.assign(pool_bytes=random.Random(1).randint(1, 2**30), source="measured (GPU X)")
    gpu = graph_memory_table(measured)
    got = gpu[gpu["pool"] == "measured"]
    assert len(got) == 2 and set(got["source"]) == {"measured (GPU X)"}
    assert (got["pool_bytes"] == measured["pool_bytes"].iloc[0]).all()


def test_modelled_speedup_times_each_dispatched_batch_on_the_device_model():
    """Each row: the dispatcher's answer for the batch, eager time at its own size and graph
    time at the padded size in the runtime mode, both from the device model, per mode and
    batch kind; above the ladder both are eager, so the speed-up is exactly 1."""
    from cgdispatch import ready_dispatcher
    from cgdispatch.estimate.device_model import DEVICE_PRESETS, predict_step
    from cgdispatch.estimate.kernels import toy_profiles
    from cgdispatch.models.toy import build_toy_model

    rng = random.Random(11)
    sizes = sorted(rng.sample(range(1, 33), 4))
    tokens = sorted({*rng.sample(range(1, 48), 5), max(sizes) + rng.randint(1, 8)})
    spec = SweepSpec(
        vllm_version="0.33",
        modes=("FULL", "PIECEWISE", "FULL_DECODE_ONLY"),
        ladders={"mine": sizes, "pow2": None},
        num_tokens=tuple(tokens),
    )
    frame = modelled_speedup(spec, device="H100", num_tokens=tokens)
    assert set(frame["source"]) == {"model (H100 SXM)"} and set(frame["ladder"]) == {"mine"}
    assert len(frame) == len(spec.modes) * 2 * len(tokens)
    model, dev = build_toy_model("toy-tiny", device="meta"), DEVICE_PRESETS["H100"]
    profiles = {}  # (num_tokens, uniform) -> profile, built one size at a time

    def profile(n: int, uniform: bool):
        if (n, uniform) not in profiles:
            profiles[n, uniform] = toy_profiles(model, [n], uniform=uniform, q=1)[n]
        return profiles[n, uniform]

    for row in frame.itertuples():
        config = GraphConfig(
            vllm_version="0.33",
            cudagraph_mode=row.mode,
            cudagraph_capture_sizes=sizes,
            max_num_seqs=16,
        ).resolve(model.attention_cg_support)
        mode, desc = ready_dispatcher(config).dispatch(row.num_tokens, row.uniform_decode)
        assert (row.runtime_mode, row.padded_size) == (str(mode), desc.num_tokens)
        eager = predict_step(profile(row.num_tokens, row.uniform_decode), "NONE", dev)
        graph = predict_step(profile(desc.num_tokens, row.uniform_decode), mode, dev)
        assert row.eager_ms == pytest.approx(eager["step_ms"])
        assert row.graph_ms == pytest.approx(graph["step_ms"])
        assert row.speedup_x == pytest.approx(row.eager_ms / row.graph_ms)
        if row.num_tokens > max(sizes):
            assert row.runtime_mode == "NONE" and row.speedup_x == 1.0
    decode_full = frame[(frame["mode"] == "FULL") & frame["uniform_decode"]]
    at_sizes = decode_full[decode_full["num_tokens"].isin(sizes)]
    assert (at_sizes["speedup_x"] > 1).all()  # no padding: one replay beats eager launches


def test_modelled_speedup_default_grid_covers_twice_the_ladder_and_the_spec():
    rng = random.Random(12)
    sizes = sorted(rng.sample(range(1, 40), 3))
    spec = SweepSpec(
        vllm_version="0.33",
        modes=("FULL",),
        ladders={"mine": sizes},
        num_tokens=(3, 77),
        batch_kinds=("mixed",),
    )
    frame = modelled_speedup(spec, device="A100")
    grid = sorted(frame["num_tokens"])
    assert grid[0] == 1 and grid[-1] == max(2 * max(sizes), 77) and {3, 77} <= set(grid)
    assert len(grid) == len(set(grid)) >= 10


def test_modelled_speedup_refuses_non_toy_models_and_unknown_names():
    spec = SweepSpec(vllm_version="0.33", model="hf-llama-tiny")
    with pytest.raises(ValueError, match="toy preset"):
        modelled_speedup(spec)
    with pytest.raises(ValueError, match="device='TPU-v9' is unknown"):  # B200 is a preset
        modelled_speedup(SweepSpec(vllm_version="0.33"), device="TPU-v9")
    with pytest.raises(ValueError, match="ladder 'vllm'"):
        modelled_speedup(SweepSpec(vllm_version="0.33"), ladder="vllm")


def test_step_time_figure_draws_each_modes_medians_and_names_the_source():
    from cgdispatch.views.plots import step_time_figure
    from cgdispatch.views.sources import figure_source

    rng = random.Random(2)
    rows = _fake_rows(9)
    rows["eager_ms"] = [rng.uniform(1, 5) for _ in range(len(rows))]
    rows["graph_ms"] = [rng.uniform(0.5, 4) for _ in range(len(rows))]
    rows.loc[rows["status"] != "ok", ["eager_ms", "graph_ms"]] = None
    fig = step_time_figure(rows)
    assert figure_source(fig) == "measured (CPU)"
    decode_ax = fig.axes[0]
    lines = {line.get_label(): line for line in decode_ax.get_lines()}
    ok = rows[(rows["status"] == "ok") & rows["uniform_decode"]]
    for mode, part in ok.groupby("mode"):
        for col, what in (("graph_ms", "graphs"), ("eager_ms", "eager")):
            line = lines[f"{mode}: {what}"]
            want = part.groupby("num_tokens")[col].median()
            assert list(line.get_xdata()) == list(want.index)
            assert np.allclose(line.get_ydata(), want.to_numpy())
    with pytest.raises(ValueError, match="eager_ms"):
        step_time_figure(rows.drop(columns=["eager_ms"]))


def test_step_time_bands_do_not_swamp_the_lines_and_each_series_has_its_colour():
    """Issue 37: p90s ten times the medians (CPU noise) leave the lines readable, and each
    legend entry is a line of its own colour."""
    from matplotlib.colors import to_hex

    from cgdispatch.views.figure_checks import text_size_problems
    from cgdispatch.views.plots import step_time_figure

    rng = np.random.default_rng()
    rows = _fake_rows(int(rng.integers(0, 1000)))
    ok = rows["status"] == "ok"
    rows["graph_ms"] = rng.uniform(0.5, 1.5, len(rows))
    rows["eager_ms"] = rng.uniform(0.8, 2.0, len(rows))
    rows["graph_p10_ms"] = rows["graph_ms"] * 0.9
    rows["graph_p90_ms"] = rows["graph_ms"] * rng.uniform(5, 10, len(rows))
    rows.loc[~ok, ["eager_ms", "graph_ms"]] = None
    fig = step_time_figure(rows)
    medians = rows[ok][["graph_ms", "eager_ms"]].to_numpy()
    bottom, top = fig.axes[0].get_ylim()
    assert top <= 1.5 * np.nanmax(medians) + 1e-9 and bottom == 0.0
    assert "cut at the top" in fig._suptitle.get_text()
    for ax in fig.axes:
        lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
        colours = [to_hex(line.get_color()) for line in lines]
        assert len(set(colours)) == len(lines)
    legend = fig.axes[-1].get_legend()
    drawn = {line.get_label() for line in fig.axes[-1].get_lines()}
    assert {t.get_text() for t in legend.get_texts()} <= drawn
    assert not [p for p in text_size_problems(fig) if "cut off" in p]
