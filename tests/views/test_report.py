"""Report: charts and summary from sweep rows, every number labelled with its source;
the estimate-memory and report commands."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cgdispatch import GraphConfig
from cgdispatch.__main__ import main
from cgdispatch.estimate.graph_memory import estimate_graph_memory
from cgdispatch.models.toy import build_toy_model
from cgdispatch.sweep.run import SweepSpec, run_sweep
from cgdispatch.sweep.store import ResultStore, load_captures
from cgdispatch.views.capture_figures import capture_per_key_figure, memory_per_key_figure
from cgdispatch.views.report import draw_report, modelled_rows, write_report
from cgdispatch.views.sources import figure_source
from cgdispatch.views.sweepviews import (
    graph_memory_table,
    memory_estimates,
    modelled_speedup,
    unit_table,
)

SPEC = SweepSpec(
    name="rep",
    model="toy-tiny",
    modes=("FULL", "FULL_AND_PIECEWISE"),
    ladders={"pow2": None, "few": [4, 8]},
    max_capture_size=8,
    num_tokens=(2, 8, 20),  # 20 decode requests do not fit toy-tiny's 16 KV slots: failed points
    max_num_seqs=16,
    repeats=2,
    warmup=1,
    input_sets=2,
)


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rep")
    run_sweep(SPEC, store=out, progress=False)
    return out


def test_estimates_match_a_direct_estimate(swept: Path) -> None:
    rows = ResultStore(swept).load()
    est = memory_estimates(rows)
    assert len(est) == len(SPEC.units()) and (est["est_source"] == "model").all()
    model = build_toy_model("toy-tiny", device="meta")
    for r in est.itertuples():
        sizes = [int(s) for s in r.capture_sizes.split(",")]
        direct = estimate_graph_memory(
            model,
            GraphConfig(cudagraph_mode=r.mode, cudagraph_capture_sizes=sizes, max_num_seqs=16),
        )
        assert (r.est_pool_bytes, r.est_separate_bytes) == (
            direct.shared_pool_bytes,
            direct.separate_pools_bytes,
        )


def bar_heights(fig) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for patch in fig.axes[0].patches:
        out.setdefault(str(patch.get_gid()).removeprefix("bars-"), []).append(patch.get_height())
    return out


def test_report_figures_are_the_views_charts_of_the_rows(swept: Path) -> None:
    rows = ResultStore(swept).load()
    drawn = draw_report(rows, load_captures(swept))
    assert set(drawn.figures) >= {
        "speedup",
        "speedup_model",
        "capture",
        "capture_per_key",
        "memory",
    }
    assert "memory_per_key" not in drawn.figures  # no pool measured on CPU
    sources = {name: figure_source(fig) for name, fig in drawn.figures.items()}
    assert sources["speedup"] == "measured (CPU)" and sources["capture"] == "measured (CPU)"
    assert sources["speedup_model"] == "model (H200 SXM)" and sources["memory"] == "model"
    # one line per (unit, batch kind), at the mean speed-up of its ok rows
    ok = rows[rows["status"] == "ok"]
    lines = {ln.get_label(): ln for ln in drawn.figures["speedup"].axes[0].get_lines()}
    for (mode, ladder, uniform), part in ok.groupby(["mode", "ladder", "uniform_decode"]):
        line = lines[f"{mode} / {ladder} / measured (CPU) (uniform_decode={uniform})"]
        want = part.groupby("num_tokens")["speedup_x"].mean()
        assert list(line.get_xdata()) == list(want.index)
        assert line.get_ydata() == pytest.approx(want.to_numpy())
    # capture bars: each unit's capture time; memory bars: the shared-pool estimate
    units = unit_table(rows)
    heights = bar_heights(drawn.figures["capture"])
    for ladder, part in units.groupby("ladder"):
        assert heights[ladder] == pytest.approx(list(part["capture_s"]))
    memory = graph_memory_table(rows)
    heights = bar_heights(drawn.figures["memory"])
    shared = memory[memory["pool"] == "shared pool"]
    for bar, part in shared.groupby("bar"):
        assert heights[bar] == pytest.approx(list(part["pool_bytes"] / 2**20))


def test_modelled_rows_are_modelled_speedup_of_what_was_swept(swept: Path) -> None:
    rows = ResultStore(swept).load()
    frame = modelled_rows(rows, "A100")
    assert set(frame["ladder"]) == set(SPEC.ladders) and set(frame["mode"]) == set(SPEC.modes)
    want = modelled_speedup(
        SPEC.replace(ladders={"few": [4, 8]}), device="A100", num_tokens=SPEC.num_tokens
    )
    got = frame[frame["ladder"] == "few"].drop(columns=["model", "dtype"])
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want)
    assert modelled_rows(rows.assign(model="hf-llama-tiny")).empty  # no toy model: no rows


def test_per_key_figures_draw_each_key_and_name_both_sources(swept: Path) -> None:
    rng = random.Random(7)
    rows, captures = ResultStore(swept).load(), load_captures(swept)
    fig = capture_per_key_figure(captures)
    assert figure_source(fig) == "measured (CPU)"
    assert sum(len(ln.get_xdata()) for ln in fig.axes[0].get_lines()) == len(captures)
    per_key = memory_estimates(rows).attrs["per_key"]
    # capture records as a GPU run would write them (test data, not shipped)
    gpu = captures.assign(
        device="cuda",
        source="measured (TestGPU)",
        pool_bytes=[rng.randint(1, 64) << 20 for _ in range(len(captures))],
    )
    fig = memory_per_key_figure(gpu, per_key)
    assert figure_source(fig) == "measured (TestGPU); model"
    both = gpu.merge(per_key, on=["mode", "ladder", "runtime_mode", "num_tokens", "uniform"])
    points = np.concatenate([c.get_offsets() for c in fig.axes[0].collections])
    want = np.column_stack([both["pool_increment_bytes"], both["pool_bytes"]]) / 2**20
    assert sorted(map(tuple, points.round(9))) == sorted(map(tuple, want.round(9)))
    with pytest.raises(ValueError, match="no key has both"):
        memory_per_key_figure(captures, per_key)  # CPU records carry no pool bytes


def test_write_report_and_cli(swept: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # one report, written through the CLI (`report` calls write_report with its defaults:
    # one run proves both the files and the command)
    out = tmp_path / "r2"
    assert main(["report", str(swept), "--out", str(out), "--no-progress"]) == 0
    summary = out / "summary.md"
    assert capsys.readouterr().out == f"report: {summary} and its charts in {out}\n"
    assert {p.name for p in summary.parent.iterdir()} >= {
        "speedup.png",
        "memory.png",
        "capture.png",
        "summary.md",
    }
    text = summary.read_text()
    assert (
        "measured (CPU)" in text and "model" in text and "KV slots" in text
    )  # failed points listed
    assert (
        main(
            [
                "estimate-memory",
                "--model",
                "toy-tiny",
                "--mode",
                "FULL",
                "--sizes",
                "1,4,8",
                "--no-progress",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    est = estimate_graph_memory(
        build_toy_model("toy-tiny", device="meta"),
        GraphConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=[1, 4, 8]),
    )
    assert est.summary() in printed and "[model]" in printed
    assert main(["estimate-memory", "--model", "toy-huge", "--no-progress"]) == 2  # ValueError
    capsys.readouterr()
    assert main(["estimate-memory", "--model", "toy-tiny", "--mode", "PIECEWISE", "--sizes", "4,8",
                 "--per-graph", "--no-progress"]) == 0  # fmt: skip
    lines = [
        ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("PIECEWISE")
    ]
    assert len(lines) == 2 * 3  # 2 keys x (2 layers + 1) pieces


def test_report_of_a_missing_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="results"):
        write_report(tmp_path / "nothing")
