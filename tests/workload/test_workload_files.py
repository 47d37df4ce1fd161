"""Loaders: request CSVs, step-size CSVs, vLLM --cudagraph-metrics logs, auto-detection."""

import numpy as np
import pandas as pd
import pytest

from cgdispatch.workload.files import (
    load_cudagraph_metrics,
    load_requests,
    load_step_sizes,
    load_trace,
)


def test_requests_production_layout_with_dates(tmp_path):
    path = tmp_path / "azure.csv"
    pd.DataFrame(
        {
            "TIMESTAMP": [
                "2023-11-16 18:15:46.500",
                "2023-11-16 18:15:46.000",
                "2023-11-16 18:15:49.250",
            ],
            "ContextTokens": [374, 396, 879],
            "GeneratedTokens": [44, 109, 20],
        }
    ).to_csv(path, index=False)
    req = load_requests(path)
    assert req["arrival_s"].tolist() == [0.0, 0.5, 3.25]  # sorted, shifted to the first
    assert req["prompt_tokens"].tolist() == [396, 374, 879]
    assert req["output_tokens"].tolist() == [109, 44, 20]


def test_requests_numeric_layout_in_ms():
    frame = pd.DataFrame(
        {"timestamp": [1000, 1500], "prompt_tokens": [5, 6], "output_tokens": [7, 8]}
    )
    req = load_requests(frame, time_unit="ms")
    assert req["arrival_s"].tolist() == [0.0, 0.5]


def test_requests_missing_columns_are_named():
    frame = pd.DataFrame({"timestamp": [0.0], "prompt_tokens": [5]})
    with pytest.raises(ValueError, match=r"\['output_tokens'\].*GeneratedTokens|generatedtokens"):
        load_requests(frame)


LOG = """INFO 06-28 10:00:00 [cuda_graph.py:120] CUDAGraph Config Settings:
- Mode: FULL_AND_PIECEWISE
CUDAGraph Stats:
| Unpadded Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count |
|-----------------|---------------|--------------|--------------|-------|
| 6               | 8             | 2            | FULL         | 31    |
| 415             | 415           | 0            | NONE         | 1     |
| 100             | 104           | 4            | PIECEWISE    | 3     |
INFO 06-28 10:00:10 more log
| Unpadded Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count |
| 3               | 4             | 1            | FULL         | 2     |
"""


def test_cudagraph_metrics_tables(tmp_path):
    path = tmp_path / "vllm.log"
    path.write_text(LOG)
    trace = load_cudagraph_metrics(path)
    assert len(trace) == 31 + 1 + 3 + 2
    assert (trace["num_tokens"] == 6).sum() == 31 and (trace["num_tokens"] == 3).sum() == 2
    assert trace.loc[trace["num_tokens"] == 6, "uniform_decode"].all()
    assert not trace.loc[trace["num_tokens"] == 100, "uniform_decode"].any()
    assert (trace.loc[trace["num_tokens"] == 100, "logged_padded_tokens"] == 104).all()
    last = load_cudagraph_metrics(path, tables="last")
    assert last["num_tokens"].tolist() == [3, 3]
    with pytest.raises(ValueError, match="no cudagraph metrics table"):
        load_cudagraph_metrics("just\ntext\n")


def test_step_sizes_with_counts_and_headerless(tmp_path):
    a = tmp_path / "a.csv"
    pd.DataFrame({"batch_size": [4, 9], "count": [3, 2], "uniform": [True, False]}).to_csv(
        a, index=False
    )
    trace = load_step_sizes(a)
    assert trace["num_tokens"].tolist() == [4, 4, 4, 9, 9]
    assert trace["uniform_decode"].tolist() == [True] * 3 + [False] * 2
    b = tmp_path / "b.csv"
    b.write_text("7\n3\n7\n")
    assert load_step_sizes(b)["num_tokens"].tolist() == [7, 3, 7]
    with pytest.raises(ValueError, match="step-size column"):
        load_step_sizes(pd.DataFrame({"foo": [1]}))


def test_load_trace_detects_kind(tmp_path):
    req = tmp_path / "r.csv"
    pd.DataFrame({"timestamp": [0.0, 1.0], "input_tokens": [3, 4], "output_tokens": [1, 2]}).to_csv(
        req, index=False
    )
    assert load_trace(req)[0] == "requests"
    steps = tmp_path / "s.csv"
    pd.DataFrame({"num_tokens": np.arange(1, 6)}).to_csv(steps, index=False)
    kind, trace = load_trace(steps)
    assert kind == "steps" and trace["num_tokens"].tolist() == [1, 2, 3, 4, 5]
    log = tmp_path / "v.log"
    log.write_text(LOG)
    assert load_trace(log)[0] == "steps"
    bad = tmp_path / "x.csv"
    pd.DataFrame({"a": [1], "b": [2]}).to_csv(bad, index=False)
    with pytest.raises(ValueError, match="neither requests"):
        load_trace(bad)
    with pytest.raises(ValueError, match="does not exist"):
        load_trace(tmp_path / "missing.csv")


def test_requests_lora_column_names_become_ids():
    frame = pd.DataFrame(
        {
            "timestamp": [0.0, 1.0, 2.0, 3.0],
            "prompt_tokens": [5, 6, 7, 8],
            "output_tokens": [1, 2, 3, 4],
            "adapter": ["sql", None, "chat", "sql"],
        }
    )
    req = load_requests(frame)
    assert req["lora_id"].tolist() == [1, -1, 0, 1]
    assert "lora_id" not in load_requests(frame.drop(columns="adapter"))
