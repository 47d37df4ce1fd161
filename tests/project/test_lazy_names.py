"""Every public name resolves lazily to the object its module defines, whatever was imported
first; no public name shadows a submodule (importing a submodule rebinds that attribute)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import cgdispatch

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_no_public_name_equals_a_submodule_name():
    submodules = {m.name for m in pkgutil.iter_modules(cgdispatch.__path__)}
    assert not set(cgdispatch.__all__) & submodules


def test_every_lazy_name_resolves_to_its_module_object():
    from cgdispatch.core.compat_names import COMPAT_NAMES

    for name, module in {**cgdispatch._LAZY, **COMPAT_NAMES}.items():
        value = getattr(cgdispatch, name)
        assert getattr(value, "__module__", f"cgdispatch.{module}") in (
            f"cgdispatch.{module}",
            "typing",  # constants such as LENGTH_PRESETS carry no module of their own
        ) or not callable(value), name


def test_functions_survive_their_modules_being_imported_first():
    code = (
        "import cgdispatch.plan.ladder_compare, cgdispatch.plan.whatif\n"
        "import cgdispatch as cg\n"
        "assert callable(cg.compare) and cg.compare.__module__ == 'cgdispatch.plan.ladder_compare'\n"
        "assert callable(cg.evaluate)\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
