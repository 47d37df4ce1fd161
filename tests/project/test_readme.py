"""The README's and the usage docs' Python examples run as written (the dask/process-pool
one is documentation), and the README's `tune` output is what the command prints."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("usage_*.md"))]
# (doc, code, the output printed under it in a text block right after, or None)
BLOCKS = [
    (path.name, code, shown or None)
    for path in DOCS
    for code, shown in re.findall(
        r"```python\n(.*?)```(?:\n\n```text\n(.*?)```)?", path.read_text(), flags=re.S
    )
]
RUNNABLE = [(name, b, shown) for name, b, shown in BLOCKS if "dask" not in b]
# the README's tune example: a bash block with the command, then a text block with its output
TUNE = re.search(
    r"```bash\n(\.venv/bin/python -m cgdispatch tune [^\n]*)\n```\n\n```text\n(.*?)```",
    README,
    re.S,
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

    argv = shlex.split(TUNE.group(1))[3:]  # after ".venv/bin/python -m cgdispatch"
    assert main(argv) == 0
    assert capsys.readouterr().out == TUNE.group(2)


@pytest.mark.parametrize(
    "code,shown",
    [(b, shown) for _, b, shown in RUNNABLE],
    ids=[f"{n}-block{i}" for i, (n, _, _) in enumerate(RUNNABLE)],
)
def test_readme_example_runs(code, shown, tmp_path):
    """Each example runs; one followed by a text block prints exactly that."""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    if shown is not None:
        assert proc.stdout == shown


def test_readme_snippet_shows_the_default_release():
    """The README's first Python example shows the newest release's own size fields, not
    the deprecated ``cudagraph_capture_sizes``."""
    from cgdispatch.core.generation import NEWEST

    _, code, shown = next(b for b in RUNNABLE if b[0] == "README.md")
    assert shown is not None and "vllm_version" not in code
    words = shlex.split(shown)
    sizes = set(json.loads(words[words.index("--compilation-config") + 1])) - {"cudagraph_mode"}
    assert sizes and sizes <= set(NEWEST.compilation_keys)
