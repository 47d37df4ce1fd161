"""Load a file of the repository that is not in a package (a script under ``scripts/`` or
``benchmarks/``, the root ``conftest.py``) as a module, by its path: importing it by name
would need it on ``sys.path``, and a name already loaded (``conftest``) would shadow it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(path: str | Path, name: str | None = None) -> ModuleType:
    """The module ``path`` (relative to the repository root, or absolute) defines, run
    afresh under ``name`` (default: the file's stem)."""
    path = ROOT / path
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be loaded as a module: give a .py file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
