"""Reliability round 3 (issue 29): each class of failure a hostile user found, as a test that
failed before the fix. Small traces and the toy model keep each run to seconds."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from cgdispatch.__main__ import main

SMALL = ("--model", "toy-tiny", "--num-requests", "120", "--max-num-seqs", "32")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CGDISPATCH_CACHE", str(tmp_path_factory.getbasetemp() / "cost-cache"))


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
    assert "nan" not in text.lower()
    row = next(line for line in text.split("\n") if line.startswith("p99 TPOT"))
    assert row.split()[2:] == ["n/a", "n/a", "n/a"]


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
