"""``python -m cgdispatch plan`` end to end on small files."""

import json

import numpy as np
import pandas as pd
import pytest

from cgdispatch.__main__ import main
from cgdispatch.plan.planner import plan_capture_sizes
from cgdispatch.workload.synthetic import synthetic_requests
from cgdispatch.workload.trace import simulate_steps


def test_plan_json_from_requests(tmp_path, capsys):
    req = synthetic_requests(120, "alpaca", rate_per_s=20, seed=4)
    path = tmp_path / "req.csv"
    req.rename(
        columns={
            "arrival_s": "TIMESTAMP",
            "prompt_tokens": "ContextTokens",
            "output_tokens": "GeneratedTokens",
        }
    ).to_csv(path, index=False)
    assert (
        main(["plan", "--trace", str(path), "--max-graphs", "6", "--max-num-seqs", "64", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in out["ladders"]}
    assert {"planned", "vllm", "sglang", "trtllm", "pow2", "every"} <= set(rows)
    for row in rows.values():
        assert {"name", "sizes", "num_graphs", "padded_token_ratio", "eager_step_share"} <= set(row)
        assert row["num_graphs"] == len(row["sizes"])
    trace = simulate_steps(req, max_num_seqs=64)  # same simulation as the command
    assert rows["planned"]["sizes"] == plan_capture_sizes(trace, 6)
    assert rows["planned"]["padded_token_ratio"] <= rows["pow2"]["padded_token_ratio"]


def test_plan_table_from_steps(tmp_path, capsys):
    path = tmp_path / "steps.csv"
    rng = np.random.default_rng(0)
    pd.DataFrame({"num_tokens": rng.integers(1, 90, 300)}).to_csv(path, index=False)
    assert main(["plan", "--trace", str(path), "--max-graphs", "4"]) == 0
    text = capsys.readouterr().out
    assert "planned" in text and "--cuda-graph-bs" in text and "cuda_graph_config" in text


def test_plan_reports_missing_columns(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    pd.DataFrame({"TIMESTAMP": [0.0], "ContextTokens": [3]}).to_csv(path, index=False)
    assert main(["plan", "--trace", str(path), "--max-graphs", "4"]) == 2
    assert "lacks a column for ['output_tokens']" in capsys.readouterr().err


def test_plan_spec_decode_sizes_are_multiples_of_q(tmp_path, capsys):
    path = tmp_path / "steps.csv"
    rng = np.random.default_rng(3)
    pd.DataFrame({"num_tokens": rng.integers(1, 200, 400)}).to_csv(path, index=False)
    args = [
        "plan",
        "--trace",
        str(path),
        "--max-graphs",
        "5",
        "--num-speculative-tokens",
        "2",
        "--json",
    ]
    assert main(args) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["ladders"]}
    assert all(s % 3 == 0 for s in rows["planned"]["sizes"]) and len(rows["planned"]["sizes"]) <= 5


def test_plan_sequence_parallel_sizes_are_multiples_of_tp(tmp_path, capsys):
    path = tmp_path / "steps.csv"
    pd.DataFrame({"num_tokens": np.random.default_rng(4).integers(1, 300, 400)}).to_csv(
        path, index=False
    )
    args = ["plan", "--trace", str(path), "--max-graphs", "6", "--tensor-parallel-size", "4"]
    with pytest.warns(UserWarning, match="not multiples of tensor_parallel_size=4"):
        assert main([*args, "--sequence-parallel", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["ladders"]}
    assert all(s % 4 == 0 for s in rows["planned"]["sizes"])
    assert all(s % 4 == 0 for s in rows["vllm"]["sizes"])  # the config drops the others
