"""Figures: built, labelled with their source, and drawing exactly the data they are given."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from cgdispatch import CudagraphDispatcher, GraphConfig
from cgdispatch.views.capture_figures import capture_time_figure, memory_figure
from cgdispatch.views.explain import dispatch_stats, random_batches
from cgdispatch.views.plots import hit_rate_figure, ladder_figure, speedup_figure
from cgdispatch.views.sources import figure_source

MIB = 2**20


def line(fig: Figure, gid: str):
    found = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_gid() == gid]
    assert len(found) == 1, f"expected one line with gid {gid!r}, found {len(found)}"
    return found[0]


def bars(fig: Figure, gid: str) -> list:
    return [p for ax in fig.axes for p in ax.patches if p.get_gid() == gid]


def random_sizes(rng: random.Random) -> list[int]:
    return sorted(rng.sample(range(1, 129), rng.randint(1, 15)))


def test_ladder_step_function_is_the_dispatchers_padding():
    rng = random.Random(21)
    for _ in range(10):
        sizes = random_sizes(rng)
        config = GraphConfig(
            vllm_version="0.33",
            cudagraph_capture_sizes=sizes,
            max_num_seqs=8,
            max_num_batched_tokens=sizes[-1] + rng.randint(8, 64),
        )
        dispatcher = CudagraphDispatcher(config)
        fig = ladder_figure(config)
        assert isinstance(fig, Figure)
        padded = line(fig, "padded-size")
        x, y = padded.get_xdata(), padded.get_ydata()
        assert list(x) == list(range(1, sizes[-1] + 1))
        assert list(y) == [dispatcher.padded_size(int(n)) for n in x]
        assert list(y) == [min(s for s in sizes if s >= n) for n in x]  # by hand
        markers = line(fig, "capture-sizes")
        assert list(markers.get_xdata()) == sizes == list(markers.get_ydata())
        waste = line(fig, "waste")
        n_all = waste.get_xdata()
        pad_all = np.array([min([s for s in sizes if s >= n] or [n]) for n in n_all])
        np.testing.assert_allclose(waste.get_ydata(), 100 * (pad_all - n_all) / pad_all)
        if n_all[-1] > sizes[-1]:  # above the ladder: eager at its own size
            eager = line(fig, "eager")
            assert list(eager.get_xdata()) == list(eager.get_ydata())
            assert eager.get_xdata()[0] == sizes[-1] + 1


def test_every_figure_is_labelled_with_its_source():
    config = GraphConfig(
        vllm_version="0.33",
        cudagraph_capture_sizes=[1, 2, 4, 8],
        max_num_seqs=8,
        max_num_batched_tokens=16,
    )
    assert "config" in figure_source(ladder_figure(config))
    assert figure_source(ladder_figure(config, source="model")) == "model"
    stats = dispatch_stats(config, random_batches(config, 100, seed=0))
    assert (
        figure_source(hit_rate_figure(stats, source="synthetic (seed 0)")) == "synthetic (seed 0)"
    )
    assert figure_source(Figure()) is None
    for bad in ("", "  ", None):
        with pytest.raises(ValueError, match="source"):
            ladder_figure(config, source=bad)


def test_hit_rate_bars_equal_the_stats():
    rng = random.Random(22)
    sizes = random_sizes(rng)
    config = GraphConfig(
        vllm_version="0.33",
        cudagraph_capture_sizes=sizes,
        max_num_seqs=32,
        max_num_batched_tokens=sizes[-1] * 2,
    )
    stats = dispatch_stats(config, random_batches(config, 3000, seed=5))
    fig = hit_rate_figure(stats, source="synthetic")
    by_mode = stats.groupby("runtime_mode")["calls"].sum()
    heights = {p.get_x(): p.get_height() for p in bars(fig, "calls-by-mode")}
    assert sorted(heights.values()) == sorted(float(v) for v in by_mode)
    for mode in ("FULL", "PIECEWISE"):
        rows = stats[stats["runtime_mode"] == mode]
        drawn = [p.get_height() for p in bars(fig, f"calls-{mode}")]
        if rows.empty:
            assert not drawn or sum(drawn) == 0
            continue
        assert sum(drawn) == rows["calls"].sum()
        labels = [t.get_text() for t in fig.axes[1].get_xticklabels()]
        want = dict(zip(rows["padded_size"].astype(str), rows["calls"].astype(float)))
        for p in bars(fig, f"calls-{mode}"):
            label = labels[round(p.get_x() + p.get_width() / 2)]
            assert p.get_height() == want.get(label, 0.0), (mode, label)
    eager = bars(fig, "calls-NONE")
    assert [p.get_height() for p in eager] == [float(by_mode.get("NONE", 0))]


def test_hit_rate_needs_the_stats_columns():
    with pytest.raises(ValueError, match="lacks"):
        hit_rate_figure(pd.DataFrame({"mode": ["FULL"], "calls": [1]}), source="x")


def sweep_frame(rng: random.Random, source: str = "measured (CPU)") -> pd.DataFrame:
    """A tidy sweep-like frame with repeated (mode, num_tokens) rows and a failed row."""
    rows = []
    for mode in ("FULL", "PIECEWISE", "FULL_AND_PIECEWISE"):
        for ladder in ("vllm", "pow2"):
            for n in (1, 2, 4, 8, 16, 32):
                for _ in range(2):
                    rows.append(
                        {
                            "mode": mode,
                            "ladder": ladder,
                            "num_tokens": n,
                            "speedup_x": rng.uniform(0.8, 4),
                            "pool_bytes": rng.randint(1, 500) * MIB,
                            "capture_s": rng.uniform(0.01, 2),
                            "status": "ok",
                            "source": source,
                        }
                    )
    rows.append(
        {
            "mode": "FULL",
            "ladder": "vllm",
            "num_tokens": 64,
            "speedup_x": 1e9,
            "pool_bytes": 10**15,
            "capture_s": 1e9,
            "status": "failed",
            "source": source,
        }
    )
    return pd.DataFrame(rows)


def test_speedup_lines_are_the_mean_per_mode_and_size():
    frame = sweep_frame(random.Random(23))
    fig = speedup_figure(frame)
    assert figure_source(fig) == "measured (CPU)"
    ok = frame[frame["status"] == "ok"]
    for mode in ok["mode"].unique():
        ln = line(fig, f"speedup-{mode}")
        for n, y in zip(ln.get_xdata(), ln.get_ydata()):
            values = [r.speedup_x for r in ok.itertuples() if r.mode == mode and r.num_tokens == n]
            assert y == pytest.approx(sum(values) / len(values))
        assert 64 not in list(ln.get_xdata())  # the failed row is not drawn


def test_speedup_keeps_uniform_decode_and_mixed_batches_apart():
    rng = random.Random(27)
    frame = pd.concat(
        [
            sweep_frame(rng).assign(uniform_decode=False),
            sweep_frame(rng).assign(uniform_decode=True),
        ]
    )
    fig = speedup_figure(frame)
    ok = frame[frame["status"] == "ok"]
    for mode in ok["mode"].unique():
        for uniform in (False, True):
            ln = line(fig, f"speedup-{mode} (uniform_decode={uniform})")
            assert ln.get_linestyle() == ("--" if uniform else "-")
            rows = ok[(ok["mode"] == mode) & (ok["uniform_decode"] == uniform)]
            want = [rows[rows["num_tokens"] == n]["speedup_x"].mean() for n in ln.get_xdata()]
            assert list(ln.get_ydata()) == pytest.approx(want)


def test_speedup_needs_a_source():
    frame = sweep_frame(random.Random(24)).drop(columns=["source"])
    with pytest.raises(ValueError, match="source"):
        speedup_figure(frame)
    assert figure_source(speedup_figure(frame, source="model")) == "model"
    with pytest.raises(ValueError, match="speedup_x"):
        speedup_figure(frame.drop(columns=["speedup_x"]), source="model")


def test_mixed_sources_are_all_named():
    rng = random.Random(25)
    frame = pd.concat([sweep_frame(rng, "measured (CPU)"), sweep_frame(rng, "model")])
    assert figure_source(speedup_figure(frame)) == "measured (CPU); model"


def test_memory_and_capture_bars_equal_the_aggregates():
    frame = sweep_frame(random.Random(26), "reference data (H200, 2026-12-01)")
    ok = frame[frame["status"] == "ok"]
    mem = memory_figure(frame)
    cap = capture_time_figure(frame)
    assert figure_source(mem) == figure_source(cap) == "reference data (H200, 2026-12-01)"
    for ladder in ("vllm", "pow2"):
        modes = list(dict.fromkeys(ok["mode"]))
        want_mem = [
            ok[(ok["mode"] == m) & (ok["ladder"] == ladder)]["pool_bytes"].max() / MIB
            for m in modes
        ]
        want_cap = [
            ok[(ok["mode"] == m) & (ok["ladder"] == ladder)]["capture_s"].sum() for m in modes
        ]
        assert [p.get_height() for p in bars(mem, f"bars-{ladder}")] == pytest.approx(want_mem)
        assert [p.get_height() for p in bars(cap, f"bars-{ladder}")] == pytest.approx(want_cap)
    summed = memory_figure(frame, agg="sum", group=None)
    want = [ok[ok["mode"] == m]["pool_bytes"].sum() / MIB for m in dict.fromkeys(ok["mode"])]
    assert [p.get_height() for p in bars(summed, "bars-pool_bytes")] == pytest.approx(want)


def test_figures_render_as_png_for_notebooks():
    config = GraphConfig(
        vllm_version="0.33",
        cudagraph_capture_sizes=[1, 2, 4, 8],
        max_num_seqs=8,
        max_num_batched_tokens=16,
    )
    png = ladder_figure(config)._repr_png_()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def gen2_config(rng: random.Random, mode: str = "FULL_AND_PIECEWISE", spec: int = 0):
    prefill = sorted(rng.sample(range(1, 129), rng.randint(1, 8)))
    decode = sorted(rng.sample(range(1, 17), rng.randint(1, 5)))
    return GraphConfig(
        vllm_version="0.34",
        cudagraph_mode=mode,
        max_num_seqs=16,
        max_num_batched_tokens=max(prefill[-1], 16 * (1 + spec)) + rng.randint(8, 64),
        num_speculative_tokens=spec,
        prefill_cudagraph_capture_token_sizes=prefill,
        decode_cudagraph_capture_request_sizes=decode,
    )


@pytest.mark.parametrize("spec", [0, 1])
def test_generation_2_ladders_are_the_managers_padding(spec):
    """Under vLLM 0.34: the prefill (token) ladder and the decode (request) ladder, each
    step function equal to CudaGraphManager.dispatch and, for FULL_AND_PIECEWISE, to the
    smallest captured size at or above the batch, worked out by hand."""
    from cgdispatch.core.v2.cudagraph_manager import CudaGraphManager

    rng = random.Random(23 + spec)
    q = 1 + spec
    for _ in range(6):
        config = gen2_config(rng, spec=spec)
        manager = CudaGraphManager(config)
        prefill = list(config.prefill_cudagraph_capture_token_sizes)
        decode = list(config.decode_cudagraph_capture_request_sizes)
        fig = ladder_figure(config)
        assert "vLLM 0.34" in fig.axes[0].get_title()
        markers = line(fig, "capture-sizes")
        assert list(markers.get_xdata()) == prefill == list(markers.get_ydata())
        assert list(line(fig, "decode-sizes").get_xdata()) == [q * r for r in decode]
        mixed = line(fig, "padded-size")
        x, y = mixed.get_xdata(), mixed.get_ydata()
        assert list(x) == list(range(1, prefill[-1] + 1))  # graphed up to the largest size
        assert list(y) == [manager.dispatch(1, int(n), None, 0).num_tokens for n in x]
        assert list(y) == [min(s for s in prefill if s >= n) for n in x]  # by hand
        dec = line(fig, "decode-padded-size")
        x, y = dec.get_xdata(), dec.get_ydata()
        assert all(n % q == 0 for n in x) and x[0] == q
        assert list(y) == [manager.dispatch(int(n) // q, int(n), q, 0).num_tokens for n in x]
        for n, padded in zip(x, y):  # by hand: a decode graph, else a PIECEWISE token graph
            reqs = n // q
            fits = [q * r for r in decode if r >= reqs]
            assert padded == (min(fits) if fits else min(s for s in prefill if s >= n))
        waste = line(fig, "decode-waste")
        pad = np.array(waste.get_ydata())
        assert (pad >= 0).all() and (pad < 100).all()
        assert figure_source(fig) == "computed from the config (dispatcher padding table)"


def test_generation_2_ladder_draws_every_mode_with_graphs():
    """Each mode's two step functions are the manager's answers; eager runs at its own size;
    FULL_DECODE_ONLY has no token-keyed graph, so every mixed batch is eager."""
    from cgdispatch.core.v2.cudagraph_manager import CudaGraphManager

    rng = random.Random(24)
    for mode in ("FULL", "PIECEWISE", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        config = gen2_config(rng, mode)
        manager = CudaGraphManager(config)
        fig = ladder_figure(config, source="model")
        assert figure_source(fig) == "model" and mode in fig.axes[0].get_title()
        for prefix, uniform in (("", None), ("decode-", 1)):
            graphed = line(fig, f"{prefix}padded-size")
            for n, padded in zip(graphed.get_xdata(), graphed.get_ydata()):
                reqs = int(n) if uniform else 1
                answer = manager.dispatch(reqs, int(n), uniform, 0)
                assert answer.cg_mode.name != "NONE" and answer.num_tokens == padded
            eager = [ln for ln in fig.axes[0].get_lines() if ln.get_gid() == f"{prefix}eager"]
            for ln in eager:  # eager batches run at their own size
                assert list(ln.get_xdata()) == list(ln.get_ydata())
        if mode == "FULL_DECODE_ONLY":
            assert len(line(fig, "padded-size").get_xdata()) == 0
            assert len(line(fig, "capture-sizes").get_xdata()) == 0


def test_speedup_lines_that_coincide_are_drawn_once_and_named_together():
    rng = np.random.default_rng(30)
    sizes = [1, 2, 4, 8, 16]
    full = rng.uniform(1.5, 3.5, len(sizes))
    series = {
        "FULL": full,
        "FULL_AND_PIECEWISE": full * (1 + rng.uniform(-1e-3, 1e-3, len(sizes))),  # within 0.5%
        "PIECEWISE": full * 0.8,
        "FULL_DECODE_ONLY": np.ones(len(sizes)),
        "NONE": np.ones(len(sizes)),
    }
    frame = pd.DataFrame(
        [
            {"mode": mode, "num_tokens": n, "speedup_x": float(x), "source": "model"}
            for mode, values in series.items()
            for n, x in zip(sizes, values)
        ]
    )
    fig = speedup_figure(frame)
    labels = [ln.get_label() for ln in fig.axes[0].get_lines() if ln.get_gid()]
    assert labels == ["FULL = FULL_AND_PIECEWISE", "PIECEWISE", "FULL_DECODE_ONLY = NONE"]
    assert list(line(fig, "speedup-FULL_DECODE_ONLY = NONE").get_ydata()) == [1.0] * len(sizes)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "FULL_DECODE_ONLY = NONE" in legend  # the reader sees which modes sit at 1x
