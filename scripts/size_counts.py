"""The package's size counts that issue 38 holds to: functions over 80 lines (the def line to
the last, docstring included), public names (``cgdispatch.__all__``), files that keep an
``lru_cache``/``functools.cache`` (the one cache layer is ``core/cache.py``) and the files of
``views/``. Run: ``PYTHONPATH=. python scripts/size_counts.py``. Duplicated code is counted by
the ``duplicates`` tool of the workplace (``cd cgdispatch && duplicates``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cgdispatch"
LONG = 80


def long_functions() -> list[tuple[int, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONG:
                    found.append(
                        (lines, f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}")
                    )
    return sorted(found, reverse=True)


def main() -> None:
    import cgdispatch

    long = long_functions()
    print(f"functions over {LONG} lines: {len(long)}")
    for lines, where in long:
        print(f"  {lines:4d}  {where}")
    print(f"public names (cgdispatch.__all__): {len(cgdispatch.__all__)}")
    pattern = re.compile(r"lru_cache|functools\.cache\b")
    caches = [p for p in PACKAGE.rglob("*.py") if pattern.search(p.read_text())]
    print(
        f"files holding an lru_cache: {len(caches)} ({', '.join(str(p.relative_to(PACKAGE)) for p in caches)})"
    )
    views = sorted(p.name for p in (PACKAGE / "views").glob("*.py") if p.name != "__init__.py")
    print(f"views/ files: {len(views)}")


if __name__ == "__main__":
    main()
