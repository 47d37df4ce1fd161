"""Every notebook opens with the question it answers and ends with a conclusion printed from
its own results by a package function (issue 20); the conclusion functions say what the
frames they are given hold."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import cgdispatch as cg

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("0*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_notebook_opens_with_its_question_and_ends_with_its_conclusion(path: Path) -> None:
    cells = json.loads(path.read_text())["cells"]
    assert cells[0]["cell_type"] == "markdown"
    assert "**The question:**" in "".join(cells[0]["source"]).split("\n\n")[1]
    last = cells[-1]
    source = "".join(last["source"])
    assert last["cell_type"] == "code"
    assert "conclusion(" in source or "verdict_text(" in source  # built, not typed in
    text = "".join(
        "".join(o["text"]) if isinstance(o.get("text"), list) else o.get("text", "")
        for o in last["outputs"]
    )
    assert text.startswith(("Conclusion:", "recommendation:")) and len(text) > 80


def test_dispatch_tour_conclusion_reads_the_stats() -> None:
    config = cg.GraphConfig(vllm_version="0.33", max_num_seqs=8, max_num_batched_tokens=64)
    stats = pd.DataFrame(
        {
            "runtime_mode": ["FULL", "FULL", "PIECEWISE", "NONE"],
            "calls": [30, 10, 40, 20],
            "real_tokens": [100, 50, 300, 400],
            "padding_tokens": [10, 0, 30, 0],
        }
    )
    text = cg.dispatch_tour_conclusion(config, stats, "my steps")
    keys = cg.capture_keys(config)
    assert f"captures {len(keys)} graphs" in text
    assert "40.0% FULL, 40.0% PIECEWISE, 20.0% NONE" in text and "100 steps (my steps)" in text
    assert "padding added 4.7%" in text  # 40 / 850


def test_capture_conclusion_names_a_mode_that_does_not_replay_as_eager() -> None:
    summary = pd.DataFrame(
        {"config_mode": ["FULL", "PIECEWISE"], "checks": [4, 6], "all_ok": [True, False]}
    )
    reports = pd.DataFrame(
        {"config_mode": ["FULL", "PIECEWISE", "PIECEWISE"], "num_graphs": [2, 3, 3]}
    )
    text = cg.capture_conclusion(summary, reports, "measured (CPU)")
    assert "1 of 2 modes replay as eager; NOT: PIECEWISE" in text and "FULL 2, PIECEWISE 6" in text
    summary["all_ok"] = True
    assert "all 2 modes replay exactly" in cg.capture_conclusion(summary, reports, "x")


def test_sweep_and_byom_conclusions_rank_what_the_frames_hold() -> None:
    units = pd.DataFrame(
        {
            "mode": ["FULL", "PIECEWISE"],
            "ok": [5, 4],
            "failed": [0, 1],
            "source": ["measured (CPU)"] * 2,
        }
    )
    modelled = pd.DataFrame(
        {
            "mode": ["FULL", "PIECEWISE", "FULL", "PIECEWISE"],
            "num_tokens": [1, 1, 8, 8],
            "uniform_decode": [True, True, True, True],
            "speedup_x": [2.5, 3.0, 1.2, 1.1],
            "source": ["model (H200 SXM)"] * 4,
        }
    )
    text = cg.sweep_conclusion(units, modelled)
    assert "timed 9 points (1 failed)" in text and "PIECEWISE 3.00x, FULL 2.50x" in text
    assert "fastest mode there is PIECEWISE" in text
    checks = pd.DataFrame(
        {"config_mode": ["FULL", "FULL"], "ok": [True, False], "replayed": [True, True]}
    )
    rows = pd.DataFrame(
        {"mode": ["FULL"] * 3, "uniform_decode": [True, True, False], "status": ["ok"] * 3,
         "speedup_x": [1.0, 3.0, 9.0], "source": ["measured (CPU)"] * 3}
    )  # fmt: skip
    text = cg.byom_conclusion("m", checks, rows)
    assert "1 of 2 replay checks" in text and "FULL 2.00x" in text
