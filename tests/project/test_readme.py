"""The README's Python examples run as written (the dask/process-pool one is documentation)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
RUNNABLE = [b for b in BLOCKS if "dask" not in b]


def test_readme_has_examples():
    assert len(RUNNABLE) >= 3


@pytest.mark.parametrize("code", RUNNABLE, ids=[f"block{i}" for i in range(len(RUNNABLE))])
def test_readme_example_runs(code, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
