"""``tune --help`` and ``plan --help`` name every trace a name gives, the shipped production
traces included (issue 30)."""

import os
import subprocess
import sys

import pytest

from cgdispatch.workload.sources import PRODUCTION_TRACES, SYNTHETIC_NAMES


@pytest.mark.parametrize("command", ["tune", "plan"])
def test_help_lists_every_trace_name(command):
    out = subprocess.run(
        [sys.executable, "-m", "cgdispatch", command, "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},  # wide: names are not wrapped
    ).stdout
    trace_help = " ".join(out.split("--trace TRACE", 2)[-1].split("\n  --")[0].split())
    missing = [name for name in (*SYNTHETIC_NAMES, *PRODUCTION_TRACES) if name not in trace_help]
    assert PRODUCTION_TRACES and missing == []
