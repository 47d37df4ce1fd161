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
