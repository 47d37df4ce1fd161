"""Every loader, fed random bytes and random CSVs, gives a result or one ValueError line
within a time limit: never a hang, a traceback of another kind, or a giant allocation."""

from __future__ import annotations

import string
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgdispatch.sweep.spec import load_spec
from cgdispatch.sweep.store import load_captures, load_results
from cgdispatch.workload.files import (
    load_cudagraph_metrics,
    load_requests,
    load_step_sizes,
    load_trace,
)
from tests.time_limit import time_limit

LOADERS = [
    load_trace, load_requests, load_step_sizes, load_cudagraph_metrics, load_spec,
    load_results, load_captures,
]  # fmt: skip
HEADERS = ["TIMESTAMP", "ContextTokens", "GeneratedTokens", "num_tokens", "count", "uniform",
           "arrival_s", "prompt_tokens", "output_tokens", "lora", "num_reqs", "status", "mode",
           "model", "Unpadded Tokens"]  # fmt: skip
CELLS = st.one_of(
    st.integers(-(10**15), 10**15).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["", "nan", "true", "no", "2024-01-01 10:00", "x", "1e400", "|"]),
    st.text(string.printable, max_size=6).map(lambda t: t.replace(",", "").replace("\n", "")),
)


@st.composite
def random_csv(draw) -> bytes:
    columns = draw(st.lists(st.sampled_from(HEADERS), min_size=1, max_size=5, unique=True))
    rows = draw(st.lists(st.lists(CELLS, min_size=len(columns), max_size=len(columns)),
                         max_size=6))  # fmt: skip
    return "\n".join([",".join(columns), *(",".join(r) for r in rows)]).encode()


def _one_result_or_one_line(path: Path) -> None:
    for loader in LOADERS:
        with time_limit(10):
            try:
                loader(path)
            except ValueError as err:
                text = " ".join(str(err).split())
                assert text and len(text) < 2000, loader.__name__


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=400))
def test_random_bytes_give_a_result_or_one_error_line(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(data)
    _one_result_or_one_line(path)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=random_csv())
def test_random_csvs_give_a_result_or_one_error_line(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(data)
    _one_result_or_one_line(path)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=st.lists(st.tuples(st.integers(-5, 10**13), st.integers(-5, 10**13),
                               st.sampled_from(["FULL", "NONE", "x"]), st.integers(-5, 10**13)),
                     min_size=1, max_size=4))  # fmt: skip
def test_random_metrics_logs_give_a_result_or_one_error_line(tmp_path: Path, rows) -> None:
    lines = [
        "INFO " * 3000,
        "| Unpadded Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count |",
    ]
    lines += [f"| {u} | {p} | 0 | {m} | {c} |" for u, p, m, c in rows]
    path = tmp_path / "engine.log"
    path.write_text("\n".join(lines))
    _one_result_or_one_line(path)


def test_a_directory_given_as_a_trace_is_one_error_line(tmp_path: Path) -> None:
    for loader in LOADERS[:5]:
        with pytest.raises(ValueError, match="directory"):
            loader(tmp_path)


def test_a_blank_timestamp_names_file_row_and_column(tmp_path: Path) -> None:
    path = tmp_path / "req.csv"
    pd.DataFrame({"TIMESTAMP": [0.0, None, 2.0], "ContextTokens": [5, 6, 7],
                  "GeneratedTokens": [2, 3, 4]}).to_csv(path, index=False)  # fmt: skip
    with (
        time_limit(5),
        pytest.raises(ValueError, match=r"req.csv', row 2, column 'TIMESTAMP': found a blank"),
    ):
        load_trace(path)


def test_a_word_among_token_counts_names_file_row_and_column(tmp_path: Path) -> None:
    path = tmp_path / "req.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,2\n1,five,3\n")
    with pytest.raises(
        ValueError, match=r"row 2, column 'prompt_tokens': found 'five', expected an integer"
    ):
        load_requests(path)


def test_a_step_count_of_10_to_the_12_is_refused_before_allocating(tmp_path: Path) -> None:
    path = tmp_path / "steps.csv"
    path.write_text("num_tokens,count\n8,1000000000000\n")
    with time_limit(5), pytest.raises(ValueError, match=r"count.*found 1000000000000"):
        load_trace(path)
    log = tmp_path / "m.log"
    log.write_text("| Unpadded Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count |\n"
                   "| 8 | 8 | 0 | FULL | 9000000 |\n| 4 | 4 | 0 | FULL | 9000000 |\n")  # fmt: skip
    with time_limit(5), pytest.raises(ValueError, match="18_000_000 steps in all"):
        load_trace(log)


def test_a_metrics_log_with_more_than_64_kb_before_its_table_is_read(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("INFO engine started\n" * 10_000
                   + "| Unpadded Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count |\n"
                   "| 3 | 4 | 1 | FULL | 2 |\n")  # fmt: skip
    kind, trace = load_trace(log)
    assert kind == "steps" and trace["num_tokens"].tolist() == [3, 3]
