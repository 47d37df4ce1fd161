"""Sweeps under generation 2 (vLLM 0.34): units run through the gen-2 runner, rows replay the
graphs the CudaGraphManager names, and the generation is part of each point's identity."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from cgdispatch.capture.wrapper import CUDAGraphWrapper
from cgdispatch.core.v2.cudagraph_manager import CudaGraphManager
from cgdispatch.sweep.run import SweepSpec, run_sweep, unit_config
from cgdispatch.sweep.schema import normalise, point_ids
from cgdispatch.sweep.store import load_captures

LADDER = [2, 4, 8]
MAX_SEQS = 8
SPEC = SweepSpec(
    name="gen2",
    model="toy-tiny",
    modes=("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"),
    ladders={"few": LADDER},
    num_tokens=(1, 3, 8, 13),
    max_num_seqs=MAX_SEQS,
    repeats=2,
    warmup=1,
    input_sets=2,
    vllm_version="0.34",
)


def expected(mode: str, n: int, uniform: bool) -> tuple[str, int]:
    """(runtime mode, padded tokens), from the rules: decode graphs by request count (one
    token per request) up to max_num_seqs, PIECEWISE token graphs for mixed batches."""
    fits = [s for s in LADDER if s >= n]
    if uniform and n <= MAX_SEQS and fits:
        return "FULL", fits[0]
    if not uniform and mode == "FULL_AND_PIECEWISE" and fits:
        return "PIECEWISE", fits[0]
    return "NONE", n


def test_a_generation_2_sweep_replays_the_managers_graphs(tmp_path: Path, monkeypatch) -> None:
    replays: list[int] = []
    reset = CUDAGraphWrapper.reset_graphs

    def count_then_reset(self: CUDAGraphWrapper) -> None:  # the unit's end releases graphs
        replays.append(self.num_replays)
        reset(self)

    monkeypatch.setattr(CUDAGraphWrapper, "reset_graphs", count_then_reset)
    rows = run_sweep(SPEC, store=tmp_path, progress=False)
    assert len(rows) == 2 * 4 * 2 and (rows["status"] == "ok").all(), rows["error"].tolist()
    assert (rows["vllm_version"] == "0.34").all()
    for row in rows.itertuples():
        want = expected(row.mode, row.num_tokens, row.uniform_decode)
        assert (row.runtime_mode, row.padded_size) == want, row
    graph_points = int((rows["runtime_mode"] != "NONE").sum())
    # every graph point replayed on each warm-up and timed run, in each of its wrappers
    assert sum(replays) >= graph_points * (SPEC.warmup + SPEC.repeats)
    # the captured keys are the manager's descriptors, in its capture order
    captures = load_captures(tmp_path)
    assert (captures["vllm_version"].astype(str) == "0.34").all()
    for mode, got in captures.groupby("mode", sort=False):
        config = unit_config(SPEC, mode, LADDER).resolve()
        order = CudaGraphManager(config).capture_order()
        assert got["num_tokens"].tolist() == [d.num_tokens for d in order]
        assert got["runtime_mode"].tolist() == [str(d.cg_mode) for d in order]
        reqs = [None if pd.isna(r) else int(r) for r in got["num_reqs"]]
        assert reqs == [d.num_reqs for d in order]


def test_the_generation_is_part_of_a_points_identity(tmp_path: Path) -> None:
    v1 = SPEC.replace(vllm_version="0.33", modes=("FULL",), num_tokens=(3,))
    frame = normalise(
        pd.DataFrame(
            [
                {"sweep": "s", "mode": "FULL", "num_tokens": 3, "vllm_version": v}
                for v in (None, "0.33", "0.34")
            ]
        )
    )
    old, v1_id, gen2_id = point_ids(frame)
    assert old == v1_id != gen2_id  # rows stored before the column keep their ids
    assert frame["vllm_version"].tolist() == ["0.33", "0.33", "0.34"]
    # one store, both generations: neither run's rows stand in for the other's
    store = str(tmp_path / "both")
    first = run_sweep(v1, store=store, progress=False)
    second = run_sweep(v1.replace(vllm_version="0.34"), store=store, progress=False)
    assert first["vllm_version"].tolist() == ["0.33"] * 2
    assert second["vllm_version"].tolist() == ["0.34"] * 2
    assert set(first["timestamp"]).isdisjoint(second["timestamp"])


def test_a_database_from_before_the_column_resumes_as_version_0_33(tmp_path: Path) -> None:
    spec = SPEC.replace(vllm_version="0.33", modes=("FULL",), num_tokens=(2,))
    rows = run_sweep(spec, store=tmp_path, progress=False)
    with sqlite3.connect(tmp_path / "store.sqlite") as con:  # what an older cgdispatch made
        con.execute('ALTER TABLE rows DROP COLUMN "vllm_version"')
        con.execute('ALTER TABLE captures DROP COLUMN "vllm_version"')
    again = run_sweep(spec, store=tmp_path, progress=False)  # nothing re-run
    assert again["timestamp"].tolist() == rows["timestamp"].tolist()
    assert (again["vllm_version"] == "0.33").all()


def test_an_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError, match=r"vllm_version='0.35' is unknown.*'0.34'"):
        SPEC.replace(vllm_version="0.35")


def test_sweep_command_takes_the_version_and_says_which(tmp_path: Path, capsys) -> None:
    from cgdispatch.__main__ import main

    out = tmp_path / "o"
    argv = ["sweep", "--out", str(out), "--modes", "FULL_DECODE_ONLY", "--repeats", "1"]
    assert main([*argv, "--vllm-version", "0.33", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert (
        "vLLM 0.33 graph dispatch (--vllm-version; --vllm-version 0.34 for generation 2)" in printed
    )
    rows = pd.read_csv(out / "results.csv", dtype={"vllm_version": str})
    assert (rows["vllm_version"] == "0.33").all() and (rows["status"] == "ok").all()
    # the preset's own generation (0.34, the newest) is a different sweep in the same store
    assert main([*argv, "--no-progress"]) == 0
    assert "vLLM 0.34 graph dispatch (the spec's" in capsys.readouterr().out
    both = pd.read_csv(out / "results.csv", dtype={"vllm_version": str})
    assert sorted(both["vllm_version"].unique()) == ["0.33", "0.34"]
    with pytest.raises(SystemExit) as exit_:  # argparse: one line naming the rule
        main([*argv, "--vllm-version", "0.35", "--no-progress"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "'0.35' is unknown: newer than vLLM 0.34" in err
