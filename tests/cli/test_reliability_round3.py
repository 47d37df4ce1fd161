"""Reliability round 3 (issue 29): each class of failure a hostile user found, as a test that
failed before the fix. Small traces and the toy model keep each run to seconds."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from cgdispatch.__main__ import main
from cgdispatch.workload.synthetic import synthetic_requests

SMALL = ("--model", "toy-tiny", "--num-requests", "120", "--max-num-seqs", "32")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CGDISPATCH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cost-cache"))


def _one_token_requests(path, n=160, seed=0):
    """Requests that all stop after their first output token: no time per output token."""
    rng = np.random.default_rng(seed)
    pd.DataFrame(
        {
            "timestamp": np.cumsum(rng.exponential(1 / 8, n)),
            "prompt_tokens": rng.integers(20, 800, n),
            "output_tokens": np.ones(n, dtype=int),
        }
    ).to_csv(path, index=False)
    return path


def _strict_loads(text: str):
    """json.loads that refuses NaN / Infinity, as every non-Python parser does."""

    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


# 1. invalid output ----------------------------------------------------------------------


def test_tune_json_is_strict_json_with_reasons_for_undefined_figures(tmp_path, capsys):
    trace = _one_token_requests(tmp_path / "one.csv")
    assert main(["tune", *SMALL, "--trace", str(trace), "--json"]) == 0
    out = _strict_loads(capsys.readouterr().out)
    assert out["held_out"]["planned"]["p99_tpot_ms"] is None
    reason = out["null_reasons"]["held_out.planned.p99_tpot_ms"]
    assert "output token" in reason
    assert main(["tune", *SMALL, "--trace", str(trace)]) == 0
    text = capsys.readouterr().out
    assert "nan" not in text.lower() and "p99 TTFT" in text


def test_plan_latency_json_is_strict_json(tmp_path, capsys):
    trace = _one_token_requests(tmp_path / "one.csv")
    argv = ["plan", "--trace", str(trace), "--latency", "--json", "--model", "toy-tiny"]
    argv += ["--max-graphs", "6"]
    assert main(argv) == 0
    out = _strict_loads(capsys.readouterr().out)
    assert all(row["tpot_p99_ms"] is None for row in out["ladders"])
    assert out["null_reasons"]


def test_strict_json_walks_numpy_and_keeps_finite_numbers():
    from cgdispatch.core.jsonout import strict_json

    rng = np.random.default_rng()
    values = rng.normal(size=5)
    text = strict_json({"a": values, "b": {"c": np.float32(np.inf), "d": [1, np.nan]}})
    out = _strict_loads(text)
    assert out["a"] == pytest.approx(values.tolist())
    assert out["b"] == {"c": None, "d": [1, None]}
    assert set(out["null_reasons"]) == {"b.c", "b.d[1]"}


# 2. held-out split of histograms and metrics logs ---------------------------------------


def _histogram(rows, path):
    pd.DataFrame(rows, columns=["num_tokens", "count", "uniform_decode"]).to_csv(path, index=False)
    return path


def test_histogram_split_does_not_depend_on_row_order(tmp_path, capsys):
    rng = np.random.default_rng()
    sizes = np.unique(rng.integers(1, 4000, 14))
    rows = [(int(n), int(rng.integers(5, 300)), int(n <= 256)) for n in sizes]
    verdicts = []
    for i in range(3):
        order = rng.permutation(len(rows)) if i else np.arange(len(rows))
        path = _histogram([rows[j] for j in order], tmp_path / f"h{i}.csv")
        assert main(["tune", *SMALL, "--trace", str(path), "--json"]) == 0
        out = _strict_loads(capsys.readouterr().out)
        verdicts.append((out["recommendation"], out["deltas"]["mean_step_pct"], out["sizes"]))
    assert verdicts[1] == verdicts[0] and verdicts[2] == verdicts[0]


def test_orderless_split_takes_each_sizes_share_of_its_count():
    from cgdispatch.workload.files import TIME_ORDERED
    from cgdispatch.workload.sources import split_holdout
    from cgdispatch.workload.trace import make_trace

    rng = np.random.default_rng()
    counts = {int(n): int(c) for n, c in zip(rng.integers(1, 9000, 8), rng.integers(1, 50, 8))}
    sizes = np.repeat(list(counts), list(counts.values()))
    trace = make_trace(rng.permutation(sizes), False)
    trace.attrs[TIME_ORDERED] = False
    train, test = split_holdout(trace, 0.3)
    got = train["num_tokens"].value_counts().to_dict()
    total = pd.Series(sizes).value_counts().to_dict()
    for size, count in total.items():
        assert got.get(size, 0) == math.floor(0.7 * count + 0.5)
    assert len(train) + len(test) == len(trace)


def test_metrics_log_is_split_by_count(tmp_path):
    from cgdispatch.workload.files import TIME_ORDERED, load_trace

    log = tmp_path / "metrics.log"
    log.write_text(
        "INFO CUDA graph metrics\n"
        "| Unpadded Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count |\n"
        "|---|---|---|---|---|\n"
        "| 3 | 4 | 1 | FULL | 20 |\n"
        "| 100 | 104 | 4 | PIECEWISE | 7 |\n"
    )
    kind, trace = load_trace(log)
    assert kind == "steps" and trace.attrs[TIME_ORDERED] is False


# 3. short or bursty traces: split by arrivals -------------------------------------------


@pytest.mark.parametrize("extra", [["--rate", "400"], ["--max-num-seqs", "1"]])
def test_bursty_or_serial_traffic_still_has_a_held_out_part(extra, capsys):
    argv = ["tune", "--model", "toy-tiny", "--num-requests", "80", *extra, "--json"]
    assert main(argv) == 0
    out = _strict_loads(capsys.readouterr().out)
    assert out["steps_held_out"] > 0 and out["steps_planned"] > 0


def test_arrival_cut_holds_out_the_last_share_of_requests():
    from cgdispatch.workload.sources import arrival_cut

    rng = np.random.default_rng()
    arrivals = rng.permutation(np.cumsum(rng.exponential(1.0, 101)))
    cut = arrival_cut(arrivals, 0.25)
    assert (arrivals >= cut).sum() == 101 - math.ceil(0.75 * 101)
    with pytest.raises(ValueError, match="arrive at the same time"):
        arrival_cut(np.zeros(10), 0.5)


# 4. bounds at the edge ------------------------------------------------------------------


@pytest.mark.parametrize("bad", [10**12, -3, 0, 2.5, np.nan])
def test_cost_model_refuses_impossible_step_sizes(bad):
    from cgdispatch.estimate.device_model import device_cost_model

    model = device_cost_model("toy-tiny", "H200")
    ok = np.random.default_rng().integers(1, 4096, 5)
    assert np.all(np.isfinite(model.step_time_ms("FULL", ok)))
    for call in (
        lambda: model.step_time_ms("FULL", [1, bad]),
        lambda: model.graph_memory_bytes("FULL", [bad]),
        lambda: model.capture_time_s("PIECEWISE", np.array([bad])),
    ):
        with pytest.raises(ValueError, match="step size must be a whole number"):
            call()


def test_a_trace_over_the_row_bound_is_refused_before_parsing(tmp_path, capsys):
    from cgdispatch.core.validate import MAX_REQUESTS, MAX_STEPS

    path = tmp_path / "steps.csv"
    rows = max(MAX_REQUESTS, MAX_STEPS) + 1
    with open(path, "wb") as f:  # one column of sizes: 10**7 + 1 rows, about 20 MB
        f.write(b"num_tokens\n" + b"1\n" * rows)
    assert main(["tune", *SMALL, "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{rows:_} rows" in err and "10_000_000" in err


def test_a_prompt_longer_than_the_kv_cache_is_rejected_and_counted_not_the_trace(tmp_path, capsys):
    """Issue 40: vLLM starts with a max_model_len its KV cache holds and rejects the one
    request whose prompt reaches it; the other requests are tuned, the header counts it."""
    rng = np.random.default_rng()
    req = synthetic_requests(40, "sharegpt", rate_per_s=6, seed=int(rng.integers(1000)))
    req.loc[int(rng.integers(40)), "prompt_tokens"] = 3_000_000
    path = tmp_path / "long.csv"
    req.rename(columns={"arrival_s": "timestamp"}).to_csv(path, index=False)
    assert main(["tune", "--trace", str(path)]) == 0  # llama-3.1-8b on H200: ~0.9M tokens
    header = capsys.readouterr().out.split("\n")[1]
    assert "; 1 request rejected as vLLM would (prompt >= max_model_len " in header


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--context-len", "100000000000"), ("--num-requests", "10000000000"),
     ("--max-num-seqs", "100000000"), ("--max-graphs", "100000000")],
)  # fmt: skip
def test_integer_flags_are_bounded(flag, value, capsys):
    assert main(["tune", flag, value]) == 2
    err = capsys.readouterr().err
    assert f"{flag}={value}" in err and "at most" in err


# 5. shifted columns ---------------------------------------------------------------------


def test_rows_with_more_fields_than_the_header_are_refused(tmp_path, capsys):
    rng = np.random.default_rng()
    path = tmp_path / "shifted.csv"
    rows = [f"{t:.3f},{p},{o},{x}" for t, p, o, x in zip(
        np.cumsum(rng.exponential(0.1, 30)), rng.integers(10, 500, 30),
        rng.integers(1, 300, 30), rng.integers(0, 9, 30))]  # fmt: skip
    path.write_text("timestamp,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    assert main(["tune", *SMALL, "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert "row 1 has 4 fields but the header names 3 columns" in err


# 6. steps over the budget, prefill-only traces ------------------------------------------


def test_steps_over_the_token_budget_are_refused(tmp_path, capsys):
    path = _histogram([(100_000, 5, 0), (12, 50, 1)], tmp_path / "over.csv")
    for command in (["tune", *SMALL], ["plan", "--model", "toy-tiny", "--max-graphs", "4"]):
        assert main([*command, "--trace", str(path)]) == 2
        err = capsys.readouterr().err
        assert "5 steps over max_num_batched_tokens=8,192" in err and "100,000" in err


def test_a_prefill_only_trace_plans_the_prefill_list(tmp_path, capsys):
    from cgdispatch.plan.ladder_compare import export_plan

    trace = _one_token_requests(tmp_path / "one.csv")
    assert main(["tune", *SMALL, "--trace", str(trace), "--json"]) == 0
    out = _strict_loads(capsys.readouterr().out)
    assert out["sizes"]["planned"]["decode_cudagraph_capture_request_sizes"] == []
    assert out["sizes"]["planned"]["prefill_cudagraph_capture_token_sizes"]
    assert "decode_cudagraph_capture_request_sizes" not in out["flags"]
    from cgdispatch import GraphConfig
    from cgdispatch.plan.gen2_ladder import Gen2Ladder

    config = GraphConfig(vllm_version="0.34").resolve()
    flags = export_plan(Gen2Ladder((300, 600), ()), config)  # both above max_num_seqs
    assert "sglang" not in flags and "no planned size is a decode batch" in flags["left_at_default"]


# 9. encoding ----------------------------------------------------------------------------


def test_a_latin1_file_name_prints_escaped(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    folder = os.fsencode(tmp_path)
    name = folder + b"/caf\xe9.csv"
    req = synthetic_requests(80, "alpaca", rate_per_s=6, seed=3)
    req.rename(columns={"arrival_s": "timestamp"}).to_csv(os.fsdecode(name), index=False)
    repo = Path(__file__).resolve().parents[2]
    # the cache folder of this file's tests (_cache above): the cost model the in-process
    # runs built is read, not built again in the child (~4 s of CPU)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(repo)}
    argv = [sys.executable, "-m", "cgdispatch", "tune", *SMALL, "--trace", os.fsdecode(name)]
    done = subprocess.run(argv, env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-500:]
    assert "requests from caf\\xe9.csv" in done.stdout.decode()


def test_report_into_a_latin1_folder_writes_the_whole_summary(tmp_path):
    import os

    from cgdispatch.sweep.exports import write_text_file

    folder = tmp_path / os.fsdecode(b"r\xe9p")
    folder.mkdir()
    text = f"# report\n\nresults in {folder}\n" + "row\n" * 50
    write_text_file(folder / "summary.md", text)
    written = (folder / "summary.md").read_bytes().decode("utf-8")
    assert written.startswith("# report") and written.count("row\n") == 50
    assert "r\\xe9p" in written or "r\\udce9p" in written


# 11. messages -----------------------------------------------------------------------------


def test_utc_offsets_across_a_clock_change_are_read(tmp_path):
    from cgdispatch.workload.files import load_requests

    path = tmp_path / "tz.csv"
    path.write_text(
        "timestamp,prompt_tokens,output_tokens\n"
        "2023-03-26T01:59:58+01:00,10,5\n"
        "2023-03-26T03:00:01+02:00,20,6\n"
        "2023-03-26T03:00:05+02:00,30,7\n"
    )
    assert load_requests(path)["arrival_s"].tolist() == [0.0, 3.0, 7.0]


@pytest.mark.parametrize(
    ("header", "row"),
    [("timestamp,prompt_tokens,output_tokens", "0.{i},1{i},{i}"), ("num_tokens,count", "{i},3")],
)
def test_a_repeated_header_is_named_at_its_row(header, row, tmp_path, capsys):
    rng = np.random.default_rng()
    at = int(rng.integers(2, 6))
    lines = [row.format(i=i + 1) for i in range(8)]
    lines.insert(at, header)
    path = tmp_path / "joined.csv"
    path.write_text(header + "\n" + "\n".join(lines) + "\n")
    assert main(["tune", *SMALL, "--trace", str(path)]) == 2
    assert f"row {at + 1} repeats the header" in capsys.readouterr().err


def test_a_truncated_metrics_table_is_refused(tmp_path, capsys):
    path = tmp_path / "metrics.log"
    path.write_text(
        "| Unpadded Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count |\n"
        "|---|---|---|---|---|\n"
        "| 3 | 4 | 1 | FULL | 20 |\n"
        "| 100 | 104 | 4 | PIECEW"
    )
    assert main(["tune", *SMALL, "--trace", str(path)]) == 2
    assert "line 4" in (err := capsys.readouterr().err) and "cut short" in err


@pytest.mark.parametrize("bad", [None, ["H100"], 3])
def test_wrong_types_are_value_errors_naming_the_value(bad):
    import cgdispatch as cg

    with pytest.raises(ValueError, match="is invalid|is unknown"):
        cg.reference_config(bad)
    with pytest.raises(ValueError, match="device=.* is unknown"):
        cg.device_cost_model("toy-tiny", bad)
    config = cg.GraphConfig().resolve()
    with pytest.raises(ValueError, match="device=.* is unknown"):
        cg.estimate_startup("meta-llama/Llama-3.1-8B-Instruct", bad, config)


def test_notebook_checker_refuses_the_holdout_the_notebook_refuses():
    from cgdispatch.views.notebook_params import NOTEBOOK_PARAMETERS, check_notebook_parameters

    check = NOTEBOOK_PARAMETERS["04_what_if"]["holdout"]
    with pytest.raises(ValueError, match=r"holdout=1.0 is invalid: give a number in \(0.0, 1.0\)"):
        check("holdout", 1.0)
    assert check("holdout", 0.99) == 0.99
    defaults = {name: None for name in NOTEBOOK_PARAMETERS["04_what_if"]}
    with pytest.raises(ValueError, match="holdout=1.0"):
        check_notebook_parameters("04_what_if", {**defaults, "holdout": 1.0})
