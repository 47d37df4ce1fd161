"""A multi-worker sweep's workers die with it (issue 29, class 7): killed with SIGKILL, or
interrupted by Ctrl-C (SIGINT to the process group, once or twice), no process of the
sweep's group is alive 10 s later, and an interrupt prints no worker traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="reads processes from /proc (Linux)"
)

REPO = Path(__file__).resolve().parents[2]


def _group(pgid: int) -> list[tuple[int, int]]:
    """(pid, ppid) of the live (not zombie) processes of process group ``pgid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, ppid, pgrp = stat[stat.rindex(")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            found.append((int(entry), int(ppid)))
    return found


def _has_torch(pid: int) -> bool:
    """Whether process ``pid`` has torch's shared library mapped (it imported torch)."""
    try:
        return "libtorch_cpu" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:  # gone or not readable
        return False


def _ctrl_c_as_in_a_terminal() -> None:
    """SIGINT at its default in the sweep, as a shell in a terminal starts it: a test run in
    the background of a shell without job control inherits SIGINT ignored, and Python then
    keeps ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return predicate()


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT", "SIGINT twice"])
def test_workers_die_with_the_sweep(how, tmp_path):
    argv = [sys.executable, "-m", "cgdispatch", "sweep", "--preset", "smoke", "--workers", "2",
            "--out", str(tmp_path / "store"), "--no-progress", "--repeats", "5000"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        argv, start_new_session=True, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )  # fmt: skip
    try:
        workers = lambda: [pid for pid, ppid in _group(proc.pid) if ppid == proc.pid]  # noqa: E731
        assert _wait(lambda: len(workers()) >= 2, 120), "the sweep started no workers"
        # a worker is in its unit once it has loaded torch (the unit builds the model); the
        # group also holds multiprocessing's resource tracker, which never does
        assert _wait(lambda: sum(map(_has_torch, workers())) >= 2, 120), (
            "the workers never started their units"
        )
        assert proc.poll() is None, "the sweep ended before it could be interrupted"
        started = workers()
        if how == "SIGKILL":
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGINT)
            if how == "SIGINT twice":
                time.sleep(0.3)
                os.killpg(proc.pid, signal.SIGINT)
        assert _wait(lambda: not _group(proc.pid), 120), (
            f"still alive 120 s after {how}: {_group(proc.pid)} (workers were {started})"
        )
        _, err = proc.communicate(timeout=600)
        if how != "SIGKILL":
            text = err.decode(errors="replace")
            assert proc.returncode == 130 and "interrupted:" in text
            assert "Traceback" not in text and "KeyboardInterrupt" not in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid, _ in _group(proc.pid):
            os.kill(pid, signal.SIGKILL)
