"""Report: charts and summary from sweep rows, every number labelled with its source;
the estimate-memory and report commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from cgdispatch import GraphConfig
from cgdispatch.__main__ import main
from cgdispatch.estimate.graph_memory import estimate_graph_memory
from cgdispatch.models.toy import build_toy_model
from cgdispatch.sweep.run import SweepSpec, run_sweep
from cgdispatch.sweep.store import ResultStore, load_captures
from cgdispatch.views.report import (
    capture_figure,
    memory_estimates,
    memory_figure,
    model_speedup_figure,
    speedup_figure,
    write_report,
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


def titles(fig) -> str:
    texts = [fig._suptitle.get_text() if fig._suptitle else ""]
    for ax in fig.axes:
        texts.append(ax.get_title())
        legend = ax.get_legend()
        if legend:
            texts += [t.get_text() for t in legend.get_texts()]
    return " ".join(texts)


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


def test_figures_label_their_sources(swept: Path) -> None:
    rows = ResultStore(swept).load()
    speed = speedup_figure(rows)
    ok_decode = rows[(rows["status"] == "ok") & rows["uniform_decode"].astype(bool)]
    units = ok_decode.groupby(["mode", "ladder"]).ngroups
    assert "measured (CPU)" in titles(speed) and len(speed.axes[0].lines) == units + 1  # + y=1
    captures = load_captures(swept)
    capture = capture_figure(rows, captures)
    assert "measured (CPU)" in titles(capture) and len(capture.axes) == 2  # per-key panel
    assert sum(len(line.get_xdata()) for line in capture.axes[1].lines) == len(captures)
    modelled = model_speedup_figure(rows)
    assert "model (H200 SXM)" in titles(modelled) and "measured" not in titles(modelled)
    assert len(modelled.axes[0].lines) == 2 + 1  # FULL and PIECEWISE + y=1
    est = memory_estimates(rows)
    cpu_only = memory_figure(rows, est)
    assert "model" in titles(cpu_only) and "measured" not in titles(
        cpu_only
    )  # no pool measured on CPU
    # rows as a GPU run would write them (test data, not shipped): measured bars appear, labelled
    gpu = rows.assign(device="cuda", source="measured (TestGPU)", pool_bytes=4 << 20)
    with_gpu = memory_figure(gpu, est)
    assert "measured (TestGPU)" in titles(with_gpu)
    heights = [p.get_height() for p in with_gpu.axes[0].patches]
    assert heights[-len(est) :] == [4.0] * len(est)  # MiB


def test_write_report_and_cli(swept: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    summary = write_report(swept, tmp_path / "report")
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
    assert main(["report", str(swept), "--out", str(tmp_path / "r2"), "--no-progress"]) == 0
    assert (tmp_path / "r2" / "summary.md").exists()
    capsys.readouterr()
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
