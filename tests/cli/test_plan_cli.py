"""``python -m cgdispatch plan`` end to end on small files."""

import json

import numpy as np
import pandas as pd
import pytest

from cgdispatch import SchedulerLimits, replay_scheduler
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
        main(
            [
                *("plan", "--trace", str(path), "--max-graphs", "6", "--max-num-seqs", "64"),
                *("--vllm-version", "0.33", "--json"),
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in out["ladders"]}
    assert {"planned", "vllm", "sglang", "trtllm", "pow2", "every"} <= set(rows)
    for row in rows.values():
        assert {"name", "sizes", "num_graphs", "padded_token_ratio", "eager_step_share"} <= set(row)
        assert row["num_graphs"] == len(row["sizes"])
    # the same replay as the command: vLLM 0.33's scheduler, 64 sequences
    trace = simulate_steps(req, SchedulerLimits(vllm_version="0.33", max_num_seqs=64))
    assert rows["planned"]["sizes"] == plan_capture_sizes(trace, 6)
    assert rows["planned"]["padded_token_ratio"] <= rows["pow2"]["padded_token_ratio"]


def test_plan_plans_on_the_replay_under_the_same_kv_blocks_as_its_latency(tmp_path, capsys):
    """``--num-gpu-blocks`` is part of the one limits value: the planning trace is vLLM's
    scheduler under that KV cache (here small enough to preempt), not an unlimited one."""
    rng = np.random.default_rng()
    req = synthetic_requests(150, "sharegpt", rate_per_s=60, seed=int(rng.integers(1 << 20)))
    path = tmp_path / "req.csv"
    req.to_csv(path, index=False)
    longest = int((req["prompt_tokens"] + req["output_tokens"]).max())
    blocks = -(-longest // 16) + 1 + int(rng.integers(5, 40))  # the longest fits, little more
    limits = SchedulerLimits(vllm_version="0.33", max_num_seqs=64, num_gpu_blocks=blocks)
    steps = replay_scheduler(req, limits)
    assert steps["num_preempted"].sum() > 0  # the KV cache binds
    argv = ["plan", "--trace", str(path), "--max-graphs", "6", "--max-num-seqs", "64"]
    argv += ["--vllm-version", "0.33", "--num-gpu-blocks", str(blocks), "--json"]
    assert main(argv) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["ladders"]}
    assert rows["planned"]["sizes"] == plan_capture_sizes(steps, 6)


def test_plan_table_from_steps(tmp_path, capsys):
    path = tmp_path / "steps.csv"
    rng = np.random.default_rng(0)
    pd.DataFrame({"num_tokens": rng.integers(1, 90, 300)}).to_csv(path, index=False)
    for version in ("0.33", "0.34"):
        assert (
            main(["plan", "--trace", str(path), "--max-graphs", "4", "--vllm-version", version])
            == 0
        )
        text = capsys.readouterr().out
        assert "planned" in text and "--cuda-graph-bs" in text and "cuda_graph_config" in text
        assert text.startswith(f"vLLM {version}")


def test_plan_defaults_to_vllm_034_and_plans_both_lists(tmp_path, capsys):
    from cgdispatch import GraphConfig
    from cgdispatch.plan.gen2_ladder import Gen2Ladder, gen2_config
    from cgdispatch.plan.planner_v2 import plan_gen2_capture_sizes
    from cgdispatch.plan.whatif import evaluate
    from cgdispatch.workload.sources import workload_trace

    path, _ = _requests_csv(tmp_path, seed=5)
    args = ["plan", "--trace", str(path), "--max-graphs", "7", "--max-num-seqs", "64"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert text.startswith("vLLM 0.34 (the newest; default)")
    assert (
        "prefill_cudagraph_capture_token_sizes" in text and 'cudagraph_capture_sizes"' not in text
    )
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["vllm_version"] == "0.34"
    rows = {r["name"]: r for r in out["ladders"]}
    for row in rows.values():
        assert {"prefill_sizes", "decode_sizes"} <= set(row) and row["vllm_version"] == "0.34"
    # independently: the same trace and plan through the library, scored by evaluate
    config = GraphConfig(vllm_version="0.34", max_num_seqs=64).resolve()
    trace, _ = workload_trace(path, max_num_seqs=64)
    ladder = plan_gen2_capture_sizes(trace, 7, config=config)
    planned = rows["planned"]
    assert planned["prefill_sizes"] == list(ladder.prefill_token_sizes)
    assert planned["decode_sizes"] == list(ladder.decode_request_sizes)
    assert planned["num_graphs"] <= 7
    summary = evaluate(gen2_config(config, ladder), trace).summary
    assert planned["padding_tokens"] == summary["padding_tokens"]
    # no other ladder of as many sizes reaching the same tops pads less
    rng = np.random.default_rng(0)
    top_p, top_d = ladder.prefill_token_sizes[-1], ladder.decode_request_sizes[-1]
    for _ in range(20):
        n_d = int(rng.integers(1, 7))
        other = Gen2Ladder(
            (*rng.choice(top_p - 1, 6 - n_d, replace=False) + 1, top_p),
            (*rng.choice(top_d - 1, n_d - 1, replace=False) + 1, top_d),
        )
        padding = evaluate(gen2_config(config, other), trace).summary["padding_tokens"]
        assert planned["padding_tokens"] <= padding


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
        "--vllm-version",
        "0.33",
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
    args += ["--vllm-version", "0.33"]
    with pytest.warns(UserWarning, match="not multiples of tensor_parallel_size=4"):
        assert main([*args, "--sequence-parallel", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["ladders"]}
    assert all(s % 4 == 0 for s in rows["planned"]["sizes"])
    assert all(s % 4 == 0 for s in rows["vllm"]["sizes"])  # the config drops the others


def _requests_csv(tmp_path, n=300, rate=20.0, seed=4):
    req = synthetic_requests(n, "sharegpt", rate_per_s=rate, seed=seed)
    path = tmp_path / f"req{seed}.csv"
    req.to_csv(path, index=False)
    return path, req


JSON_FIELDS = {
    "name",
    "num_graphs",
    "padded_token_ratio",
    "mean_step_ms",
    "source",
    "graph_memory_mib",
    "capture_s",
    "eager_step_share",
    "evaluated_on",
}


def test_plan_holdout_time_objective_reports_every_ladder_on_the_later_half(tmp_path, capsys):
    from cgdispatch import GraphConfig
    from cgdispatch.estimate.device_model import device_cost_model
    from cgdispatch.plan.ladder_compare import compare
    from cgdispatch.workload.sources import split_holdout, workload_trace

    path, _ = _requests_csv(tmp_path)
    args = ["plan", "--trace", str(path), "--max-graphs", "8", "--objective", "time"]
    args += ["--vllm-version", "0.33"]
    # the calibrated pool of llama-3.1-8b: 244 MiB fixed plus a few MiB per graph
    assert main([*args, "--holdout", "0.5", "--memory-budget-mib", "400", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in out["ladders"]}
    assert {"planned", "vllm", "sglang", "trtllm", "pow2", "every"} <= set(rows)
    for row in rows.values():
        assert set(row) >= JSON_FIELDS and row["source"].startswith(
            "model (H200 SXM, no logged start-ups on this GPU"
        )
        assert row["evaluated_on"].startswith("held out: last 0.5")
    planned = rows["planned"]
    assert planned["num_graphs"] <= 8 and planned["graph_memory_mib"] <= 400
    # independently: the same trace, split, plan and scoring through the library
    trace, _ = workload_trace(path)
    train, test = split_holdout(trace, 0.5)
    assert train["time_s"].max() < test["time_s"].min()
    cm = device_cost_model("llama-3.1-8b", "H200")
    config = GraphConfig().resolve()
    sizes = plan_capture_sizes(
        train, 8, objective="time", cost_model=cm, config=config, memory_budget_bytes=400 * 2**20
    )
    assert planned["sizes"] == sizes
    want = compare(test, {"p": sizes}, config=config, cost_model=cm).iloc[0]
    assert planned["mean_step_ms"] == pytest.approx(want["mean_step_ms"])
    assert planned["graph_memory_mib"] == pytest.approx(want["graph_memory_bytes"] / 2**20)
    assert planned["capture_s"] == pytest.approx(want["capture_s"])


def test_plan_evaluate_on_other_trace_and_same_sizes_as_the_notebook_path(tmp_path, capsys):
    from cgdispatch import GraphConfig, SchedulerLimits
    from cgdispatch.plan.planner import plan_multiple_of
    from cgdispatch.workload.sources import workload_trace

    path, _ = _requests_csv(tmp_path, seed=1)
    other, _ = _requests_csv(tmp_path, seed=2)
    args = ["plan", "--trace", str(path), "--max-graphs", "6", "--num-speculative-tokens", "1"]
    args += ["--vllm-version", "0.33"]
    assert main([*args, "--max-num-seqs", "64", "--evaluate-on", str(other), "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["ladders"]}
    assert rows["planned"]["evaluated_on"].startswith("other trace: requests from req2.csv")
    # notebook 04 / dashboard path: workload_trace + plan_capture_sizes(config=...)
    config = GraphConfig(max_num_seqs=64, num_speculative_tokens=1).resolve()
    # the steps of vLLM 0.33's scheduler, the release the command was given
    trace, _ = workload_trace(
        path, max_num_seqs=64, num_speculative_tokens=1, limits=SchedulerLimits(vllm_version="0.33")
    )
    assert plan_multiple_of(config) == 2
    assert rows["planned"]["sizes"] == plan_capture_sizes(trace, 6, config=config)


BAD_PLAN_FLAGS = [
    (["--max-graphs", "0"], "--max-graphs=0 is invalid"),
    (["--max-graphs", "x"], "invalid int value"),
    (["--max-graphs", "4", "--holdout", "1.5"], "--holdout=1.5 is invalid"),
    (["--max-graphs", "4", "--model", "gpt-9"], "--model 'gpt-9' is unknown"),
    (["--max-graphs", "4", "--device", "B300"], "invalid choice: 'B300'"),
    (["--max-graphs", "4", "--memory-budget-mib", "-1"], "--memory-budget-mib=-1.0 is"),
    (["--max-graphs", "4", "--objective", "speed"], "invalid choice: 'speed'"),
    (
        ["--max-graphs", "4", "--vllm-version", "0.35"],
        "'0.35' is unknown: newer than vLLM 0.34",
    ),
    (["--max-graphs", "4", "--sequence-parallel"], "--sequence-parallel filters sizes in V1"),
    (["--max-graphs", "4", "--mode", "NONE"], "--mode NONE captures nothing"),
]


@pytest.mark.parametrize("extra, message", BAD_PLAN_FLAGS)
def test_bad_flags_fail_at_once_with_one_line(tmp_path, monkeypatch, capsys, extra, message):
    """In process, with the trace loader and the cost model made to fail the test if they
    are reached: each flag is refused before any simulation or cost model (the real
    command line is run once, below)."""
    from cgdispatch.estimate import device_model
    from cgdispatch.workload import sources

    def reached(*args, **kwargs):
        raise AssertionError("a bad flag reached the trace or the cost model")

    monkeypatch.setattr(sources, "read_workload", reached, raising=False)  # where it exists
    monkeypatch.setattr(sources, "workload_trace", reached)
    monkeypatch.setattr(device_model, "device_cost_model", reached)
    path = tmp_path / "huge.csv"  # never read: flags are checked first
    path.write_text("num_tokens\n" + "5\n" * 10)
    try:
        code = main(["plan", "--trace", str(path), *extra])
    except SystemExit as stop:  # argparse's own refusals
        code = stop.code
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err


def test_a_bad_flag_fails_at_once_with_one_line_from_the_command_line(tmp_path):
    """The same refusal through ``python -m cgdispatch``, for one flag drawn at random."""
    import random
    import subprocess
    import sys
    import time

    extra, message = random.choice(BAD_PLAN_FLAGS)
    path = tmp_path / "huge.csv"  # never read: flags are checked first
    path.write_text("num_tokens\n" + "5\n" * 10)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "cgdispatch", "plan", "--trace", str(path), *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], (extra, proc.stderr)
    assert time.perf_counter() - start < 20  # no simulation, no cost model


def test_split_holdout_cuts_by_time_or_by_rows():
    from cgdispatch.workload.sources import split_holdout
    from cgdispatch.workload.trace import make_trace

    rng = np.random.default_rng(6)
    trace = make_trace(rng.integers(1, 50, 200)).assign(time_s=np.sort(rng.random(200) * 10))
    first, last = split_holdout(trace, 0.3)
    assert len(first) + len(last) == 200 and first["time_s"].max() < 7.0 <= last["time_s"].min()
    rows_first, rows_last = split_holdout(trace.drop(columns="time_s"), 0.25)
    assert (
        len(rows_first) == 150
        and rows_last["num_tokens"].tolist() == (trace["num_tokens"].tolist()[150:])
    )
    with pytest.raises(ValueError, match="holdout=1 is invalid"):
        split_holdout(trace, 1)
    with pytest.raises(ValueError, match="leaves an empty part"):
        split_holdout(trace.head(1), 0.5)


def test_plan_gen2_time_objective_with_budget_and_max_size(tmp_path, capsys):
    from cgdispatch import GraphConfig
    from cgdispatch.estimate.device_model import device_cost_model
    from cgdispatch.plan.planner_v2 import plan_gen2_capture_sizes
    from cgdispatch.workload.sources import split_holdout, workload_trace

    path, _ = _requests_csv(tmp_path, seed=7)
    args = ["plan", "--trace", str(path), "--max-graphs", "10", "--objective", "time"]
    args += ["--max-size", "1024", "--memory-budget-mib", "330", "--holdout", "0.5", "--json"]
    args += ["--capture-budget-s", "1.8"]
    assert main(args) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["ladders"]}
    planned = rows["planned"]
    trace, _ = workload_trace(path)
    train, _ = split_holdout(trace, 0.5)
    ladder = plan_gen2_capture_sizes(
        train,
        10,
        objective="time",
        cost_model=device_cost_model("llama-3.1-8b", "H200"),
        config=GraphConfig(vllm_version="0.34").resolve(),
        max_prefill_tokens=1024,
        memory_budget_bytes=330 * 2**20,
        capture_budget_s=1.8,
    )
    assert planned["prefill_sizes"] == list(ladder.prefill_token_sizes)
    assert planned["decode_sizes"] == list(ladder.decode_request_sizes)
    assert planned["prefill_sizes"][-1] == 1024 and planned["graph_memory_mib"] <= 330
    assert planned["capture_s"] <= 1.8 + 1e-9  # scored on the held-out half: same graphs
