"""The README's shell commands run exactly as printed, from the repository root, in the
virtualenv that ``make run`` (or ``make test``) made there, and print what the README shows.

Commands are the lines of the README's ```bash / ```sh / ```console blocks (comments and a
``$ `` prompt dropped). Not run here, and said so: ``make run`` and ``make test`` (they make
the virtualenv this test runs in) and the servers ``make lab`` and ``make dashboard`` (they
never exit). A block followed by a ```text block must print exactly that text.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()

# commands not run here -> why
NOT_RUN = {
    "make run": "sets up the virtualenv this test runs in (and runs for minutes)",
    "make test": "sets up the virtualenv and runs this very test",
    "make lab": "a JupyterLab server: it never exits",
    "make dashboard": "a Voila server: it never exits",
}


def shell_blocks(text: str) -> list[tuple[list[str], str | None]]:
    """``(commands, output shown under them or None)`` for each shell block of ``text``."""
    blocks = []
    pattern = r"```(?:bash|sh|console)\n(.*?)```(?:\n\n```text\n(.*?)```)?"
    for body, shown in re.findall(pattern, text, flags=re.S):
        lines = [line.removeprefix("$ ").strip() for line in body.splitlines()]
        commands = [line for line in lines if line and not line.startswith("#")]
        blocks.append((commands, shown or None))
    return blocks


def command_name(command: str) -> str:
    """The command without its trailing comment (``make run    # creates .venv``)."""
    return command.split(" #", 1)[0].strip()


BLOCKS = shell_blocks(README)
RUN = [
    (commands, shown)
    for commands, shown in BLOCKS
    if not all(command_name(c) in NOT_RUN for c in commands)
]


def test_commands_are_found_and_each_is_run_or_skipped_with_a_reason():
    commands = [command_name(c) for block, _ in BLOCKS for c in block]
    assert "make run" in commands and "make test" in commands
    assert any(c.startswith(".venv/bin/python -m cgdispatch tune") for c in commands)
    for block, _ in BLOCKS:  # a block is run whole or not at all
        skipped = [command_name(c) in NOT_RUN for c in block]
        assert all(skipped) or not any(skipped), block


def test_no_command_needs_an_activated_virtualenv():
    """Right after ``make run`` nothing is activated: a bare ``python``/``pip``/``jupyter``
    is the system's, without cgdispatch's dependencies (issue 30: ModuleNotFoundError)."""
    inline = re.findall(r"(?<!`)`((?:python3? |pip3? |jupyter|\.venv/bin/)[^`\n]*)`", README)
    printed = [command_name(c) for block, _ in BLOCKS for c in block] + inline
    bare = [c for c in printed if re.match(r"(python3?|pip3?|jupyter|cgdispatch)\b", c)]
    assert bare == [], "give these as .venv/bin/... (what `make run` installs)"


def test_shell_blocks_are_parsed_as_printed():
    text = (
        "```bash\nmake run  # set up\n# a note\n.venv/bin/python -m x\n```\n\n```text\nok\n```\n"
        "```console\n$ make lab\n```\n"
    )
    assert shell_blocks(text) == [
        (["make run  # set up", ".venv/bin/python -m x"], "ok\n"),
        (["make lab"], None),
    ]


def _virtualenv() -> Path | None:
    """The repository's ``.venv``, else the virtualenv running this test (a checkout that
    shares another's); None outside a virtualenv."""
    if (ROOT / ".venv" / "bin" / "python").exists():
        return ROOT / ".venv"
    if sys.prefix != sys.base_prefix and (Path(sys.prefix) / "bin" / "python").exists():
        return Path(sys.prefix)
    return None


def _working_dir(venv: Path, tmp_path: Path) -> Path:
    """Where ``.venv/...`` resolves to ``venv``: the repository root, or, when the
    repository has no ``.venv`` of its own, a folder of links to its files and to ``venv``."""
    if venv == ROOT / ".venv":
        return ROOT
    shadow = tmp_path / "checkout"
    shadow.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in {".venv", "build", ".git"}:
            (shadow / entry.name).symlink_to(entry)
    (shadow / ".venv").symlink_to(venv)
    return shadow


@pytest.mark.parametrize(
    "commands,shown", RUN, ids=[command_name(block[0])[:60] for block, _ in RUN]
)
def test_readme_commands_run_as_printed(commands, shown, tmp_path):
    venv = _virtualenv()
    if venv is None:
        pytest.skip("no .venv in the repository and no virtualenv running: run `make test`")
    cwd = _working_dir(venv, tmp_path)
    # this checkout's cgdispatch, as the Makefile's notebook kernels get it (a fresh
    # `make run` virtualenv has it installed editable from here anyway)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("VIRTUAL_ENV", None)
    out = []
    for command in commands:
        proc = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert proc.returncode == 0, f"{command}\n{proc.stderr[-3000:]}"
        out.append(proc.stdout)
    if shown is not None:
        assert "".join(out) == shown
