"""scripts/gpu_check.py on CPU: where it writes, when it writes, and when it fails."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.load_script import load_script

ROOT = Path(__file__).resolve().parents[2]
CHEAP = ["--device", "cpu", "--model", "toy-tiny", "--sizes", "1,2", "--modes", "FULL"]
CHEAP += ["--iters", "1", "--repeats", "1"]


@pytest.fixture
def gpu_check():
    return load_script("scripts/gpu_check.py")


def test_default_output_is_results_gpu(gpu_check, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def stop(*_):  # the pool phase: stop the run there, after the step CSVs
        raise KeyboardInterrupt

    monkeypatch.setattr(gpu_check, "pool_rows", stop)
    with pytest.raises(KeyboardInterrupt):
        gpu_check.main(CHEAP)
    # written as soon as ready: the step times and captures survive a later failure
    steps = pd.read_csv(tmp_path / "results" / "gpu" / "gpu_check.csv")
    captures = pd.read_csv(tmp_path / "results" / "gpu" / "gpu_check_captures.csv")
    assert set(steps["mode"]) == {"FULL"} and sorted(set(steps["num_tokens"])) == [1, 2]
    assert set(captures["config_mode"]) == {"FULL"}


def test_out_in_a_missing_folder_is_made_at_start(gpu_check, tmp_path, monkeypatch):
    out = tmp_path / "a" / "b" / "run.csv"

    def build_runner(ns):  # fails before any GPU work: the folder must exist already
        assert out.parent.is_dir()
        raise RuntimeError("stop")

    monkeypatch.setattr(gpu_check, "build_runner", build_runner)
    with pytest.raises(RuntimeError, match="stop"):
        gpu_check.main([*CHEAP, "--out", str(out)])


def test_a_replay_mismatch_exits_1_with_the_rule_in_the_checks_csv(
    gpu_check, tmp_path, monkeypatch
):
    real = gpu_check.check_replay

    def one_bad(runner, seed):
        checks = real(runner, seed=seed)
        checks.loc[checks.index[0], "ok"] = False
        return checks

    monkeypatch.setattr(gpu_check, "check_replay", one_bad)
    out = tmp_path / "run.csv"
    assert gpu_check.main([*CHEAP, "--out", str(out)]) == 1
    checks = pd.read_csv(tmp_path / "run_checks.csv")
    failed = checks[~checks["ok"]]
    assert list(zip(failed["check"], failed["subject"])) == [("replay", "FULL")]
    pools = pd.read_csv(tmp_path / "run_pools.csv")
    for column in ("device_MiB", "reserved_MiB", "allocated_MiB", "predicted_MiB"):
        assert column in pools.columns


def test_no_replay_check_in_a_mode_exits_1(gpu_check, tmp_path, monkeypatch):
    real = gpu_check.check_replay
    monkeypatch.setattr(gpu_check, "check_replay", lambda r, seed: real(r, seed=seed).iloc[0:0])
    assert gpu_check.main([*CHEAP, "--out", str(tmp_path / "run.csv")]) == 1
    checks = pd.read_csv(tmp_path / "run_checks.csv")
    assert set(checks.loc[~checks["ok"], "check"]) == {"checked"}
