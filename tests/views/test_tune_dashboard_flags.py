"""Issue 37: the dashboard takes what `tune` takes. Every option of the CLI's own parser
(read from argparse, not listed here) sets a TuneSettings field the dashboard has a control
for, and the form filled with what the CLI parsed reads back as the same settings."""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest

from cgdispatch.plan.tune_run import TuneSettings

REPO = Path(__file__).resolve().parents[2]
# options that say how to print, not what to tune: they must change no setting
OUTPUT_ONLY = {"--json"}


def tune_parser() -> argparse.ArgumentParser:
    from cgdispatch.cli.tune import add_parser

    sub = argparse.ArgumentParser(prog="cgdispatch").add_subparsers()
    add_parser(sub)
    return sub.choices["tune"]


class Parsed(Exception):
    def __init__(self, settings: TuneSettings) -> None:
        self.settings = settings


def cli_settings(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> TuneSettings:
    """The TuneSettings ``python -m cgdispatch tune ARGV`` hands to tune_for (not run)."""
    import cgdispatch.plan.tune_run as tune_run

    def capture(settings: TuneSettings, **_: Any) -> Any:
        raise Parsed(settings)

    monkeypatch.setattr(tune_run, "tune_for", capture)
    parser = tune_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except Parsed as parsed:
        return parsed.settings
    raise AssertionError(f"tune {argv} did not reach tune_for")


def other_value(action: argparse.Action, rng: random.Random, tmp_path: Path) -> list[str]:
    """Arguments that give ``action`` a value other than its default (drawn where it can
    be); a new string option needs a value here, and the test says so."""
    flag = max(action.option_strings, key=len)
    if action.nargs == 0:  # store_true / store_false
        return [flag]
    if action.choices:
        return [flag, rng.choice([c for c in action.choices if c != action.default])]
    if action.type is int:
        # None by default: a TP size most models shard over (a power of two) fits every one
        value = rng.choice([2, 4]) if action.default is None else action.default + rng.randint(1, 9)
        return [flag, str(value)]
    if action.type is float:
        if action.default is None:
            return [flag, str(round(rng.uniform(1.0, 9.0), 2))]
        return [flag, str(round(action.default * rng.uniform(0.3, 0.9), 3))]
    spec = tmp_path / "gpu.json"
    if not spec.exists():
        from cgdispatch.estimate.devices import DEVICE_PRESETS

        l40s = DEVICE_PRESETS["L40S"].replace(name="my-gpu")
        spec.write_text(json.dumps(dataclasses.asdict(l40s)))
    strings = {
        "model": str(REPO / "tests" / "data" / "configs" / "qwen2-7b.json"),
        "device_spec": str(spec),
        "trace": rng.choice(["alpaca", "shared-prompt", "azure-conv"]),
        "vllm_version": rng.choice(["0.33", "0.10.1.1", "0.21.0"]),
        "mode": rng.choice(["PIECEWISE", "FULL_DECODE_ONLY", "NONE"]),
        "calibration": "my-profile",
    }
    assert action.dest in strings, f"new tune option {flag}: give it a value in other_value"
    return [flag, strings[action.dest]]


def same(settings: TuneSettings) -> TuneSettings:
    """``settings`` with the TP size as tune reads it (None: the model's own size) and the
    trace resolved (the CLI resolves its --trace; the form holds the text)."""
    from cgdispatch.workload.trace_source import resolve_trace

    trace = resolve_trace(settings.trace, hash_block_size=settings.hash_block_size)
    return dataclasses.replace(settings, tensor_parallel_size=settings.tp_flag(), trace=trace)


@pytest.fixture(scope="module")
def dash() -> Any:
    from cgdispatch import tune_dashboard

    return tune_dashboard(num_requests=60, draw=False)


def test_every_tune_option_has_a_control_that_reads_back_as_the_cli_parsed_it(
    dash: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rng = random.Random()
    fields = [f.name for f in dataclasses.fields(TuneSettings)]
    assert list(dash.controls) == fields  # one control per setting, in TuneSettings' order
    base = cli_settings([], monkeypatch)
    options = [a for a in tune_parser()._actions if a.option_strings and a.dest != "help"]
    assert len(options) >= 20  # the parser was read, not an empty list
    for action in options:
        argv = other_value(action, rng, tmp_path)
        parsed = cli_settings(argv, monkeypatch)
        changed = [f for f in fields if getattr(parsed, f) != getattr(base, f)]
        if argv[0] in OUTPUT_ONLY:
            assert changed == [], argv
            continue
        assert changed, f"tune {argv} changed no setting"
        for name in changed:
            assert name in dash.controls, f"tune {argv[0]} sets {name}: no control"
        dash.load(parsed, run=False)
        assert same(dash.settings()) == same(parsed), argv
    dash.load(base, run=False)
    assert same(dash.settings()) == same(base)


def test_all_options_at_once_read_back(dash: Any, monkeypatch, tmp_path) -> None:
    rng = random.Random()
    argv: list[str] = []
    for action in tune_parser()._actions:
        flag = max(action.option_strings or ["-"], key=len)
        # --device-spec replaces --device: the spec is the one read back
        if action.option_strings and action.dest != "help" and flag not in OUTPUT_ONLY:
            argv += [] if flag == "--device" else other_value(action, rng, tmp_path)
    parsed = cli_settings(argv, monkeypatch)
    dash.load(parsed, run=False)
    assert same(dash.settings()) == same(parsed)
    from cgdispatch.plan.tune import DEFAULT_GRAPHS

    dash.load(TuneSettings(num_requests=60), run=False)  # back to the start: None reads back
    assert same(dash.settings()) == same(TuneSettings(num_requests=60, max_graphs=DEFAULT_GRAPHS))


def test_the_shell_command_the_dashboard_shows_parses_back_to_its_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``tune_command`` (the dashboard's "the same from a shell" line) run through the CLI's
    parser gives the settings it was written for, on random settings."""
    import shlex

    from cgdispatch.plan.tune import DEFAULT_GRAPHS
    from cgdispatch.views.tune_headline import tune_command

    rng = random.Random()
    options = [a for a in tune_parser()._actions if a.option_strings and a.dest != "help"]
    for _ in range(8):
        argv: list[str] = []
        for action in rng.sample(options, rng.randint(0, 8)):
            flag = max(action.option_strings, key=len)
            if flag not in OUTPUT_ONLY and flag != "--device":
                argv += other_value(action, rng, tmp_path)
        settings = cli_settings(argv, monkeypatch)
        spec = argv[argv.index("--device-spec") + 1] if "--device-spec" in argv else ""
        command = tune_command(settings, device_spec=spec)
        again = cli_settings(shlex.split(command)[4:], monkeypatch)
        graphs = {"max_graphs": settings.max_graphs or DEFAULT_GRAPHS}
        assert same(again) == same(dataclasses.replace(settings, **graphs)), (argv, command)
