"""Notebooks stay on the public API: no CLI module, no private helper; every ``cg.<name>`` a
notebook uses is in ``cgdispatch.__all__`` (the one-screen API), and every other name comes
from the module that is its home, where it is public (docs/architecture.md)."""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

import cgdispatch

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9]*.ipynb"))


def code_of(path: Path) -> ast.Module:
    cells = json.loads(path.read_text())["cells"]
    lines = [
        line
        for cell in cells
        if cell["cell_type"] == "code"
        for line in "".join(cell["source"]).splitlines()
        if not line.lstrip().startswith(("%", "!"))  # IPython magics are not Python
    ]
    return ast.parse("\n".join(lines), str(path))


def problems(tree: ast.Module) -> list[str]:
    found = []
    aliases = {"cgdispatch"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("cgdispatch"):
                    aliases.add(alias.asname or alias.name)
                    if alias.name != "cgdispatch":
                        found.append(f"imports the module {alias.name}: use cgdispatch.<name>")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cgdispatch"):
            found += [f"imports the private {a.name}" for a in node.names if a.name.startswith("_")]
            if node.module == "cgdispatch":
                continue
            if node.module.startswith("cgdispatch.cli") or "._" in node.module:
                found.append(f"imports from {node.module}: a command-line or private module")
                continue
            public = getattr(importlib.import_module(node.module), "__all__", [])
            found += [
                f"imports {a.name} from {node.module}, where it is not public"
                for a in node.names
                if not a.name.startswith("_") and a.name not in public
            ]
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr not in cgdispatch.__all__
        ):
            found.append(f"uses {node.value.id}.{node.attr}, which is not a public name")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_uses_only_public_names(path: Path) -> None:
    assert problems(code_of(path)) == []


def test_the_check_catches_cli_modules_private_helpers_and_submodules() -> None:
    tree = ast.parse(
        "import cgdispatch as cg\nfrom cgdispatch.cli.capture import build_runner\n"
        "from cgdispatch import _LAZY\ncg.capture_tour.device_source(1)\ncg.GraphConfig()\n"
        "from cgdispatch.views.plots import speedup_figure, _coinciding\n"
        "from cgdispatch.plan.tune import np\ncg.speedup_figure(1)"
    )
    got = problems(tree)
    assert len(got) == 6
    for needle in ("cgdispatch.cli.capture", "_LAZY", "_coinciding", "np from cgdispatch.plan.tune",
                   "cg.capture_tour", "cg.speedup_figure"):  # fmt: skip
        assert sum(needle in g for g in got) == 1, (needle, got)
