"""scripts/gpu_measure_check.sh: data before tests, every step runs, any failure fails."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_measure_check.sh"


def run_script(tmp_path: Path, fail_on: str = "", env_py: bool = True):
    """Runs the script with a fake interpreter that logs each command and fails the one
    whose arguments contain ``fail_on``."""
    log = tmp_path / "calls.log"
    fake = tmp_path / "fakepy"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> "{log}"\n'
        f'if [ -n "{fail_on}" ] && [[ "$*" == *"{fail_on}"* ]]; then exit 3; fi\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": os.environ["PATH"], "OUT": str(tmp_path / "out")}
    if env_py:
        env["PY"] = str(fake)
    else:  # no PY: python3 is looked up on PATH
        (tmp_path / "python3").symlink_to(fake)
        env["PATH"] = f"{tmp_path}:{env['PATH']}"
    proc = subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return proc, calls


def _kinds(calls: list[str]) -> list[str]:
    names = ("scripts/gpu_check.py", "cgdispatch sweep", "cgdispatch report", "pytest")
    return [next(n for n in names if n in c) for c in calls]


def test_data_is_collected_before_the_cuda_tests(tmp_path):
    proc, calls = run_script(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _kinds(calls) == [
        "scripts/gpu_check.py", "cgdispatch sweep", "cgdispatch report", "pytest"
    ]  # fmt: skip
    assert f"--out {tmp_path / 'out'}/gpu_check.csv" in calls[0]
    assert "--strict" in calls[1]  # a failed sweep point fails the sweep step


@pytest.mark.parametrize(
    "fail_on", ["scripts/gpu_check.py", "cgdispatch sweep", "cgdispatch report", "pytest"]
)
def test_any_failing_step_fails_the_script_and_the_others_still_run(tmp_path, fail_on):
    proc, calls = run_script(tmp_path, fail_on)
    assert proc.returncode != 0
    assert len(calls) == 4  # nothing after the failing step was skipped
    assert "FAILED (exit 3)" in proc.stderr and fail_on in proc.stderr


def test_python3_is_the_default_interpreter(tmp_path):
    proc, calls = run_script(tmp_path, env_py=False)
    assert proc.returncode == 0, proc.stderr
    assert len(calls) == 4
