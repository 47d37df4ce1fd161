"""Command-line mistakes end in one stderr line naming the flag or file and exit status 2;
internal bugs keep their traceback (issue 14)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cgdispatch.__main__ import main, user_error_line


def _one_line(capsys, argv: list[str]) -> str:
    start = time.perf_counter()
    assert main(argv) == 2
    assert time.perf_counter() - start < 20  # checked before any work
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def test_a_directory_as_trace_is_one_line(capsys, tmp_path: Path) -> None:
    assert "is a directory" in _one_line(
        capsys, ["plan", "--trace", str(tmp_path), "--max-graphs", "4"]
    )


def test_a_malformed_or_scalar_yaml_spec_is_one_line(capsys, tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("modes: [FULL\n")
    assert "not valid YAML" in _one_line(
        capsys, ["sweep", "--spec", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "o")]
    )
    (tmp_path / "scalar.yaml").write_text("5\n")
    assert "expected a mapping" in _one_line(
        capsys, ["sweep", "--spec", str(tmp_path / "scalar.yaml"), "--out", str(tmp_path / "o")]
    )
    (tmp_path / "str.yaml").write_text("modes: FULL\n")
    assert "expected a list" in _one_line(
        capsys, ["sweep", "--spec", str(tmp_path / "str.yaml"), "--out", str(tmp_path / "o")]
    )


@pytest.mark.parametrize(
    "flags, says",
    [(["--device", "tpu"], "--device='tpu' is invalid"), (["--repeats", "0"], "--repeats=0 is invalid"),
     (["--modes", ","], "--modes ',' names no mode"), (["--workers", "0"], "--workers=0 is invalid"),
     (["--repeats", str(10**12)], "at most 100_000")],
)  # fmt: skip
def test_bad_sweep_flags_are_one_line_before_any_work(capsys, tmp_path: Path, flags, says) -> None:
    assert says in _one_line(capsys, ["sweep", "--out", str(tmp_path / "o"), *flags])
    assert not (tmp_path / "o").exists()  # refused before the store was opened


def test_demo_with_mode_none_runs(capsys) -> None:
    assert main(["demo", "--mode", "NONE", "--steps", "500"]) == 0
    assert "500 random steps" in capsys.readouterr().out


def test_a_step_count_of_10_to_the_12_is_one_line(capsys) -> None:
    assert "at most 10_000_000" in _one_line(capsys, ["demo", "--steps", str(10**12)])
    assert "at most" in _one_line(capsys, ["dispatch", str(10**30)])


def test_capture_on_a_tpu_is_one_line(capsys) -> None:
    assert "--device='tpu' is invalid" in _one_line(capsys, ["capture", "--device", "tpu"])


def test_a_read_only_output_folder_is_one_line(capsys, monkeypatch, tmp_path: Path) -> None:
    import cgdispatch.sweep.store as store

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "o"))

    monkeypatch.setattr(store.ResultStore, "__init__", refuse)  # root ignores chmod: simulate
    err = _one_line(capsys, ["sweep", "--out", str(tmp_path / "o"), "--no-progress"])
    assert "Permission denied" in err and str(tmp_path / "o") in err


def test_an_internal_bug_keeps_its_traceback(monkeypatch) -> None:
    import cgdispatch.cli.dispatch as dispatch

    def bug(args):
        raise KeyError("a bug, not a user error")

    monkeypatch.setattr(dispatch, "run_dispatch", bug)  # add_parser reads it at parse time
    with pytest.raises(KeyError):
        main(["dispatch", "8"])
    assert user_error_line(KeyError("x")) is None and user_error_line(OSError("x")) is not None


def test_sweep_out_at_a_csv_that_is_not_a_store_is_one_line_and_the_file_stays(
    capsys, tmp_path: Path
) -> None:
    mine = tmp_path / "budget.csv"
    mine.write_text("item,cost\nrent,1200\n")
    assert "is not a cgdispatch store" in _one_line(capsys, ["sweep", "--out", str(mine)])
    assert mine.read_text() == "item,cost\nrent,1200\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["budget.csv"]


def test_report_out_at_a_folder_with_a_summary_of_its_own_is_one_line(capsys, tmp_path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "results.csv").write_text("model,mode,num_tokens,status\nm,FULL,1,ok\n")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "summary.md").write_text("mine")
    argv = ["report", str(tmp_path / "store"), "--out", str(notes), "--no-estimate"]
    assert "cgdispatch did not write" in _one_line(capsys, argv)
    assert (notes / "summary.md").read_text() == "mine"


# ----- issue 21: bounds through the CLI and a spec file, under a memory cap -----------------
def _capped_cli(argv: list[str], cwd: Path, stdin: str | None = None):
    """``python -m cgdispatch ARGV`` with its address space capped at 3 GiB: a count that
    allocates in proportion to itself (10**9 entries) fails the test, not the machine."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]

    def cap() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    return subprocess.run(
        [sys.executable, "-m", "cgdispatch", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        input=stdin,
        preexec_fn=cap,
        env={**os.environ, "PYTHONPATH": str(root)},
    )


@pytest.mark.parametrize(
    "argv, bound",
    [(["dispatch", "5", "--max-loras", "1000000000"], "1_024"),
     (["dispatch", "5", "--sizes", f"1,{2**31 - 1}", "--max-num-batched-tokens", str(2**31 - 1)], "1_048_576"),
     (["dispatch", "5", "--max-num-seqs", "65537", "--max-num-batched-tokens", "100000"], "65_536"),
     (["dispatch", "5", "--num-speculative-tokens", "1000000000"], "128"),
     (["plan", "--trace", "sharegpt", "--max-graphs", "4", "--max-loras", "1000000000"], "1_024")],
)  # fmt: skip
def test_a_count_over_its_bound_at_the_cli_is_one_line_under_a_memory_cap(
    tmp_path: Path, argv: list[str], bound: str
) -> None:
    proc = _capped_cli(argv, tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert bound in proc.stderr


@pytest.mark.parametrize(
    "field, value, bound",
    [("input_sets", 10**9, "1_000"), ("max_capture_size", 10**9, "1_048_576"),
     ("repeats", 10**9, "100_000"), ("max_num_seqs", 10**9, "65_536")],
)  # fmt: skip
def test_a_count_over_its_bound_in_a_spec_file_is_one_line_under_a_memory_cap(
    tmp_path: Path, field: str, value: int, bound: str
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: mine\nmodes: [FULL]\n{field}: {value}\n")
    proc = _capped_cli(["sweep", "--spec", str(spec), "--out", str(tmp_path / "o")], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and bound in proc.stderr, proc.stderr
    assert not (tmp_path / "o").exists()


def test_an_unquoted_yaml_version_reads_as_graph_config_takes_it(tmp_path: Path) -> None:
    from cgdispatch.sweep.spec import load_spec

    spec = tmp_path / "spec.yaml"
    spec.write_text("name: mine\nmodes: [FULL]\nvllm_version: 0.34\n")
    assert load_spec(spec).vllm_version == "0.34"
    spec.write_text("name: mine\nmodes: [FULL]\nvllm_version: 0.35\n")
    with pytest.raises(ValueError, match="vllm_version"):
        load_spec(spec)


def _steps_csv(path: Path, decode: bool, seed: int) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    n = rng.integers(1, 120, 300) if decode else rng.integers(64, 4000, 300)
    lines = ["num_tokens,uniform_decode,num_reqs"]
    lines += [f"{t},{decode},{t if decode else 1}" for t in n]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("version", ["0.34", "0.33"])
def test_plan_on_a_prefill_only_trace_prints_flags_and_names_the_defaults(
    capsys, tmp_path: Path, version: str
) -> None:
    trace = tmp_path / "prefill.csv"
    _steps_csv(trace, decode=False, seed=1)
    assert (
        main(["plan", "--trace", str(trace), "--max-graphs", "4", "--vllm-version", version]) == 0
    )
    out = capsys.readouterr().out
    assert "vllm: --compilation-config" in out
    assert "left at the engines' defaults" in out and "no decode steps" in out
    assert "sglang:" not in out  # SGLang graphs decodes only: nothing planned for it
    if version == "0.34":
        assert "prefill_cudagraph_capture_token_sizes" in out
        assert "decode_cudagraph_capture_request_sizes" not in out  # vLLM keeps its default


def test_plan_on_a_decode_only_trace_leaves_the_prefill_sizes_at_the_default(
    capsys, tmp_path: Path
) -> None:
    import json

    trace = tmp_path / "decode.csv"
    _steps_csv(trace, decode=True, seed=2)
    assert main(["plan", "--trace", str(trace), "--max-graphs", "4", "--json"]) == 0
    flags = json.loads(capsys.readouterr().out)["flags"]
    compilation = json.loads(flags["vllm_compilation_config"])
    assert compilation["decode_cudagraph_capture_request_sizes"]
    assert "prefill_cudagraph_capture_token_sizes" not in compilation
    assert "prefill token sizes" in flags["left_at_default"] and "sglang" in flags


def _stdin_requests() -> str:
    return "timestamp,prompt_tokens,output_tokens\n" + "".join(
        f"{i * 0.05:.2f},{100 + 37 * i % 900},{1 + 13 * i % 60}\n" for i in range(200)
    )


def _assert_planned_with_latency(stdout: str) -> None:
    import json

    rows = json.loads(stdout)["ladders"]
    assert rows[0]["name"] == "planned" and rows[0]["ttft_p50_ms"] > 0


def test_a_trace_on_standard_input_is_read_from_dev_stdin(tmp_path: Path) -> None:
    """A real process whose standard input is a pipe: ``--trace /dev/stdin`` reads it."""
    argv = ["plan", "--trace", "/dev/stdin", "--max-graphs", "4", "--latency", "--json"]
    proc = _capped_cli(argv, tmp_path, _stdin_requests())
    assert proc.returncode == 0, proc.stderr[-2000:]
    _assert_planned_with_latency(proc.stdout)


def test_a_trace_on_standard_input_is_read_from_dash(capsys, monkeypatch) -> None:
    """``--trace -`` reads ``sys.stdin.buffer``: in process, with standard input replaced
    (a real pipe is the /dev/stdin test's process)."""
    import io
    import sys

    import cgdispatch.workload.files as files

    text = _stdin_requests()
    monkeypatch.setattr(files, "_PIPED", {})  # nothing read from "-" before this test
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    argv = ["plan", "--trace", "-", "--max-graphs", "4", "--latency", "--json"]
    assert main(argv) == 0
    piped = capsys.readouterr().out
    _assert_planned_with_latency(piped)
    assert sys.stdin.buffer.read() == b""  # the trace came from standard input


def test_a_bad_notebook_parameter_stops_the_first_cell_with_every_mistake(tmp_path) -> None:
    import papermill

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "04.ipynb"
    start = time.perf_counter()
    with pytest.raises(papermill.PapermillExecutionError) as info:
        papermill.execute_notebook(
            str(root / "notebooks" / "04_what_if.ipynb"),
            str(out),
            parameters={"num_requests": 0, "holdout": 2.0, "device": "TPU"},
            cwd=str(root / "notebooks"),
            progress_bar=False,
            kernel_name="python3",
        )
    assert time.perf_counter() - start < 60
    err = info.value
    for name in ("num_requests", "holdout", "device"):
        assert name in err.evalue
    first_code = 2  # the parameters cell, papermill's injected cell, then the first code cell
    assert err.exec_count <= first_code + 1, err.exec_count


def test_check_notebook_parameters_cleans_and_lists_every_bad_one() -> None:
    import cgdispatch as cg
    from cgdispatch import check_notebook_parameters

    ok = check_notebook_parameters(
        "01_dispatch_tour",
        {"vllm_version": 0.33, "mode": "full", "max_num_seqs": 16, "max_num_batched_tokens": 256,
         "num_speculative_tokens": 0, "capture_sizes": None, "start_tokens": 5},
    )  # fmt: skip
    # the mode is parsed once, at the notebook's edge: cells pass the mode itself on
    assert ok["vllm_version"] == "0.33" and ok["mode"] is cg.CUDAGraphMode.FULL
    with pytest.raises(ValueError) as info:
        check_notebook_parameters("01_dispatch_tour", {"vllm_version": "0.99", "mode": "FAST"})
    text = str(info.value)
    assert "vllm_version" in text and "FAST" in text and "max_num_seqs" in text  # missing too
    with pytest.raises(ValueError, match="notebook='99_x' is unknown"):
        check_notebook_parameters("99_x", {})
