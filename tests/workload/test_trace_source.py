"""One resolver decides what a ``--trace`` value names (issue 38 item 3), and each trace is
drawn or read once: by ``tune_for``, by ``plan`` and by the notebooks' parameter check."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pandas as pd
import pytest

import cgdispatch
from cgdispatch.__main__ import main
from cgdispatch.core.modes import CUDAGraphMode
from cgdispatch.plan.tune_run import TuneSettings, tune_for
from cgdispatch.views.notebook_params import NOTEBOOK_PARAMETERS
from cgdispatch.workload import files, sources
from cgdispatch.workload.prefix_presets import PREFIX_PRESETS
from cgdispatch.workload.synthetic import LENGTH_PRESETS, synthetic_requests
from cgdispatch.workload.trace_source import PRODUCTION_TRACES, TraceSource, resolve_trace

DATA = Path(cgdispatch.__file__).resolve().parent / "data"


def _odd_name(rng: random.Random) -> str:
    """A name that is neither a preset nor a shipped trace nor a file here (a letter first:
    a leading '-' reads as a flag to argparse, as it would on a command line)."""
    while True:
        name = rng.choice(string.ascii_lowercase) + "".join(
            rng.choices(string.ascii_lowercase + "-", k=rng.randrange(2, 11))
        )
        if (
            name not in (*LENGTH_PRESETS, *PREFIX_PRESETS, *PRODUCTION_TRACES)
            and not Path(name).exists()
        ):
            return name


def test_names_resolve_to_presets_and_shipped_files() -> None:
    rng = random.Random()
    block = rng.randrange(1, 2048)
    for name in (*LENGTH_PRESETS, *PREFIX_PRESETS):
        got = resolve_trace(name, hash_block_size=block)
        assert got == TraceSource("preset", name, None, "synthetic", block) and got.synthetic
    for name, file in PRODUCTION_TRACES.items():
        got = resolve_trace(name)
        assert got.kind == "production" and not got.synthetic and got.format == "table"
        assert got.path == DATA / file and got.path.is_file()
    assert resolve_trace(got) is got  # a resolved source is taken as it is


def test_files_resolve_with_their_format_and_stdin(tmp_path) -> None:
    rng = random.Random()
    for suffix in rng.sample([".csv", ".jsonl", ".JSONL", ".log", ".txt", ""], 4):
        path = tmp_path / f"{_odd_name(rng)}{suffix}"
        path.write_text("num_tokens\n1\n")
        got = resolve_trace(str(path))
        want = "jsonl" if suffix.lower() == ".jsonl" else "table"
        assert (got.kind, got.name, got.path, got.format) == ("file", str(path), path, want)
    assert resolve_trace("-").path == Path("-")


def test_unknown_names_and_directories_are_refused_naming_every_choice(tmp_path) -> None:
    rng = random.Random()
    name = _odd_name(rng) + rng.choice(["", ".csv", ".jsonl"])
    with pytest.raises(ValueError) as err:
        resolve_trace(name, what="--trace")
    message = str(err.value)
    assert f"--trace {name} does not exist" in message
    for known in (*LENGTH_PRESETS, *PREFIX_PRESETS, *PRODUCTION_TRACES):
        assert repr(known) in message
    with pytest.raises(ValueError, match=r"workload='.*' is a directory, not a file"):
        resolve_trace(str(tmp_path), what="workload")
    check = NOTEBOOK_PARAMETERS["04_what_if"]["workload"]
    with pytest.raises(ValueError, match="neither a synthetic preset"):
        check("workload", name)
    assert check("workload", "azure-code") == "azure-code"  # the name as given


def test_cli_refuses_an_unknown_trace_before_any_work(capsys) -> None:
    name = _odd_name(random.Random())
    assert main(["plan", "--trace", name, "--max-graphs", "4"]) == 2
    assert f"--trace {name} does not exist" in capsys.readouterr().err
    assert main(["tune", "--trace", name]) == 2
    assert "sharegpt" in capsys.readouterr().err


def _count_reads(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = files.load_trace

    def counting(source, **kwargs):
        calls.append(str(source))
        return real(source, **kwargs)

    monkeypatch.setattr(sources, "load_trace", counting)
    return calls


def test_plan_reads_a_requests_file_once_for_its_trace_and_latency(
    tmp_path, monkeypatch, capsys
) -> None:
    rng = random.Random()
    requests = synthetic_requests(rng.randrange(60, 90), "alpaca", rate_per_s=20.0,
                                  seed=rng.randrange(1 << 20))  # fmt: skip
    path = tmp_path / "req.csv"
    requests.to_csv(path, index=False)
    calls = _count_reads(monkeypatch)
    argv = ["plan", "--trace", str(path), "--max-graphs", "4", "--max-num-seqs", "32"]
    assert main([*argv, "--vllm-version", "0.33", "--latency", "--json"]) == 0
    assert calls == [str(path)]
    assert "p99" in capsys.readouterr().out  # the latency replay ran on those requests


def test_tune_for_draws_a_preset_once_and_reads_a_steps_file_once(tmp_path, monkeypatch) -> None:
    rng = random.Random()
    drawn: list[str] = []
    real = sources.preset_requests

    def counting(name, **kwargs):
        drawn.append(name)
        return real(name, **kwargs)

    monkeypatch.setattr(sources, "preset_requests", counting)
    small = {"model": "qwen2.5-7b", "device": "H100", "max_num_seqs": 32,
             "max_num_batched_tokens": 2048}  # fmt: skip
    preset = rng.choice(list(LENGTH_PRESETS))
    tune_for(TuneSettings(trace=preset, num_requests=rng.randrange(60, 90), **small))
    assert drawn == [preset]
    sizes = [rng.randrange(1, 2048) for _ in range(rng.randrange(200, 300))]
    path = tmp_path / "steps.csv"
    pd.DataFrame({"num_tokens": sizes}).to_csv(path, index=False)
    calls = _count_reads(monkeypatch)
    result = tune_for(TuneSettings(trace=str(path), **small))
    assert calls == [str(path)]
    assert result.steps_planned + result.steps_held_out == len(sizes)


def test_tune_settings_keep_the_mode_parsed() -> None:
    rng = random.Random()
    mode = rng.choice(list(CUDAGraphMode))
    name = "".join(c.lower() if rng.random() < 0.5 else c for c in mode.name)
    settings = TuneSettings(cudagraph_mode=name)
    assert settings.cudagraph_mode is mode and TuneSettings(cudagraph_mode=mode) == settings
    assert NOTEBOOK_PARAMETERS["04_what_if"]["mode"]("mode", name) is mode
    with pytest.raises(ValueError, match="cudagraph mode 'sideways' is unknown"):
        TuneSettings(cudagraph_mode="sideways")
