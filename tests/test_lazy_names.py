"""A public name equal to its module's name (``compare``) stays the function whatever was
imported first (importing a submodule binds the package attribute to the module)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_compare_is_the_function_after_another_name_of_its_module():
    code = (
        "import cgdispatch as cg\n"
        "cg.engine_ladders\n"  # imports cgdispatch.compare first
        "assert callable(cg.compare) and cg.compare.__module__ == 'cgdispatch.compare', cg.compare\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
