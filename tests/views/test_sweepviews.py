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


def test_modelled_speedup_matches_predict_config_per_mode():
    from cgdispatch.estimate.device_model import DEVICE_PRESETS, predict_config
    from cgdispatch.models.toy import build_toy_model

    rng = random.Random(11)
    sizes = sorted(rng.sample(range(1, 33), 4))
    tokens = sorted(rng.sample(range(1, 48), 5))
    spec = SweepSpec(
        modes=("FULL", "PIECEWISE", "FULL_DECODE_ONLY"),
        ladders={"mine": sizes, "pow2": None},
        num_tokens=tuple(tokens),
    )
    frame = modelled_speedup(spec, device="H100", num_tokens=tokens)
    model = build_toy_model("toy-tiny", device="meta")
    assert set(frame["source"]) == {"model (H100 SXM)"} and set(frame["ladder"]) == {"mine"}
    for mode in spec.modes:
        for uniform in (True, False):
            config = GraphConfig(
                cudagraph_mode=mode, cudagraph_capture_sizes=sizes, max_num_seqs=16
            )
            want = predict_config(
                model, config, tokens, DEVICE_PRESETS["H100"], uniform_decode=uniform
            )
            got = frame[(frame["mode"] == mode) & (frame["uniform_decode"] == uniform)]
            cols = ["num_tokens", "runtime_mode", "padded_size", "eager_ms", "graph_ms"]
            pd.testing.assert_frame_equal(
                got[cols].reset_index(drop=True), want[cols].reset_index(drop=True)
            )


def test_modelled_speedup_refuses_non_toy_models_and_unknown_names():
    spec = SweepSpec(model="hf-llama-tiny")
    with pytest.raises(ValueError, match="toy preset"):
        modelled_speedup(spec)
    with pytest.raises(ValueError, match="device 'B200'"):
        modelled_speedup(SweepSpec(), device="B200")
    with pytest.raises(ValueError, match="ladder 'vllm'"):
        modelled_speedup(SweepSpec(), ladder="vllm")


def test_step_time_figure_draws_each_modes_medians_and_names_the_source():
    from cgdispatch.views.plots import figure_source
    from cgdispatch.views.sweepviews import step_time_figure

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
