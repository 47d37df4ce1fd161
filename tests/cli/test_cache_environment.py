"""Issue 36 item 6 from the command line: ``tune`` with HOME unset and a uid with no passwd
entry runs, says once where its cache went, and answers as with every cache off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

# the interpreter as a uid with no passwd entry sees it: getpwuid raises KeyError
NO_PASSWD = """
import pwd, sys
def getpwuid(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")
pwd.getpwuid = getpwuid
from cgdispatch.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def _tune(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", NO_PASSWD, "tune", *args],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip


def test_tune_without_a_home_folder_caches_in_a_private_temporary_folder(tmp_path):
    rng = np.random.default_rng()
    args = ["--trace", "alpaca", "--num-requests", str(int(rng.integers(40, 80))),
            "--seed", str(int(rng.integers(1 << 20))), "--vllm-version", "0.34",
            "--max-num-seqs", "32", "--json"]  # fmt: skip
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CGDISPATCH_", "XDG_"))}
    base.update(PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path))
    no_home = {k: v for k, v in base.items() if k != "HOME"}
    off = _tune(
        args, {**base, "CGDISPATCH_CACHE": "0", "CGDISPATCH_CACHE_DIR": str(tmp_path / "x")}
    )
    assert off.returncode == 0, off.stderr[-2000:]
    for _ in range(2):  # cold, then warm from the private folder
        run = _tune(args, no_home)
        assert run.returncode == 0, run.stderr[-2000:]
        assert "Could not determine home directory" not in run.stderr
        assert run.stderr.count("no home folder") == 1
        assert run.stdout == off.stdout
    private = tmp_path / f"cgdispatch-cache-{os.getuid()}"
    assert {"cost", "stage", "steps"} <= {p.name.split("-")[0] for p in private.iterdir()}
    assert not list(private.glob("*.tmp"))
