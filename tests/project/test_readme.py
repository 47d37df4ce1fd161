"""The README's and the usage docs' Python examples run as written (the dask/process-pool
one is documentation), and the README's `tune` output is what the command prints."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("usage_*.md"))]
BLOCKS = [
    (path.name, block)
    for path in DOCS
    for block in re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
]
RUNNABLE = [(name, b) for name, b in BLOCKS if "dask" not in b]
# the README's tune example: a bash block with the command, then a text block with its output
TUNE = re.search(
    r"```bash\n(python -m cgdispatch tune [^\n]*)\n```\n\n```text\n(.*?)```", README, re.S
)


def test_readme_has_examples():
    assert len(RUNNABLE) >= 3


def test_readme_is_short_and_shows_tune_first():
    lines = README.split("\n")
    assert len(lines) <= 150, "the README keeps the first screen; topics go to docs/usage_*.md"
    assert TUNE is not None and README[: TUNE.start()].count("\n") < 60


def test_readme_tune_output_is_real(capsys):
    """The README's tune block is what the command prints now (regenerate it when not)."""
    from cgdispatch.__main__ import main

    argv = shlex.split(TUNE.group(1))[3:]
    assert main(argv) == 0
    assert capsys.readouterr().out == TUNE.group(2)


@pytest.mark.parametrize(
    "code", [b for _, b in RUNNABLE], ids=[f"{n}-block{i}" for i, (n, _) in enumerate(RUNNABLE)]
)
def test_readme_example_runs(code, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
