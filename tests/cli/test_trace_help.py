"""``tune --help`` and ``plan --help`` name every trace a name gives, the shipped production
traces included (issue 30). In process: ``python -m cgdispatch`` itself is run by
tests/cli/test_cli.py."""

import pytest

from cgdispatch.__main__ import main
from cgdispatch.workload.sources import PRODUCTION_TRACES, SYNTHETIC_NAMES


@pytest.mark.parametrize("command", ["tune", "plan"])
def test_help_lists_every_trace_name(command, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")  # wide: names are not wrapped
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    trace_help = " ".join(out.split("--trace TRACE", 2)[-1].split("\n  --")[0].split())
    missing = [name for name in (*SYNTHETIC_NAMES, *PRODUCTION_TRACES) if name not in trace_help]
    assert PRODUCTION_TRACES and missing == []
