"""The shipped production traces (Azure LLM inference 2023, CC-BY 4.0; cgdispatch/data/README.md)
load by name as the raw CSV says, and feed the planner's callers."""

from __future__ import annotations

import csv
from datetime import datetime

import pytest

from cgdispatch.workload.files import load_requests
from cgdispatch.workload.sources import PRODUCTION_TRACES, trace_path, workload_requests


@pytest.mark.parametrize("name, rows", [("azure-conv", 19_366), ("azure-code", 8_819)])
def test_a_production_trace_loads_as_its_raw_csv_says(name: str, rows: int) -> None:
    with open(trace_path(name), newline="") as handle:
        raw = list(csv.DictReader(handle))
    assert len(raw) == rows
    stamps = [datetime.fromisoformat(r["TIMESTAMP"][:26]) for r in raw]
    table = workload_requests(name)
    assert table is not None and len(table) == rows
    assert table["prompt_tokens"].tolist() == [int(r["ContextTokens"]) for r in raw]
    assert table["output_tokens"].tolist() == [int(r["GeneratedTokens"]) for r in raw]
    span = (max(stamps) - min(stamps)).total_seconds()
    assert table["arrival_s"].min() == 0 and abs(table["arrival_s"].max() - span) < 1e-3
    assert load_requests(trace_path(name)).equals(table)


def test_every_production_trace_is_shipped() -> None:
    for name in PRODUCTION_TRACES:
        assert trace_path(name).is_file(), name
