"""The import rule of docs/architecture.md: a layer imports only the layers below it.

Every ``import`` and ``from ... import`` in the package is parsed (function-local ones too),
so a lazy import cannot hide a dependency that points upwards.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "cgdispatch"

# subpackage -> subpackages it may import (besides itself); docs/architecture.md
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "capture": {"core"},
    "models": {"core", "capture"},
    "estimate": {"core", "capture", "models"},
    "measure": {"core", "capture", "models", "estimate"},
    "workload": {"core"},
    "sweep": {"core", "capture", "models", "estimate", "measure"},
    "plan": {"core", "workload", "estimate"},
    "views": {"core", "capture", "models", "estimate", "measure", "sweep", "workload", "plan"},
    "cli": {
        "core",
        "capture",
        "models",
        "estimate",
        "measure",
        "sweep",
        "workload",
        "plan",
        "views",
    },
}
# third-party packages a layer must not import at all (core stays importable without them)
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {"core": {"torch", "pandas", "numpy", "matplotlib"}}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "cgdispatch" or parts[1] == "__main__":
        return None
    return parts[1]


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, package_root: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, absolute module) for every import statement in ``path``."""
    here = _module_name(path, package_root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
                if node.module is None:  # from . import x: x may be a module
                    found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
                    continue
            else:
                target = node.module or ""
            found.append((node.lineno, target))
    return found


def module_level_imports(path: Path) -> list[tuple[int, str]]:
    """Third-party imports that run when the module is imported (not inside functions and
    not under ``if TYPE_CHECKING``): a lazy import inside one function is allowed."""
    found = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.append((node.lineno, node.module or ""))
    return found


_MODULE_STRING = re.compile(r"^cgdispatch(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?$")
_IMPORT_CALLS = {"import_module", "__import__", "find_spec"}


def string_imports_of(path: Path, package_root: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, absolute module) for every module named by a string: a constant that is a
    dotted ``cgdispatch.`` path (``"cgdispatch.plan.planner:plan"``, as a registry entry
    loaded later by ``importlib`` would be), and the string argument of an
    ``import_module`` / ``__import__`` / ``find_spec`` call, relative ones resolved against
    the module's package. The import statements are ``imports_of``'s."""
    here = _module_name(path, package_root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _MODULE_STRING.match(node.value):
                found.append((node.lineno, node.value.partition(":")[0]))
        elif isinstance(node, ast.Call) and node.args:
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            first = node.args[0]
            if name in _IMPORT_CALLS and isinstance(first, ast.Constant):
                target = str(first.value)
                if target.startswith("."):
                    level = len(target) - len(target.lstrip("."))
                    base = package[: len(package) - level + 1]
                    target = ".".join([*base, target.lstrip(".")]).rstrip(".")
                found.append((node.lineno, target))
    return found


def layer_violations(package: Path = PACKAGE) -> list[str]:
    bad = []
    for path in sorted(package.rglob("*.py")):
        own = _layer(_module_name(path, package))
        if own is None:  # cgdispatch/__init__.py and __main__.py sit above every layer
            continue
        if own not in ALLOWED:
            bad.append(f"{path}: module outside every layer ({own})")
            continue
        for line, target in imports_of(path, package):
            other = _layer(target)
            if other is not None and other != own and other not in ALLOWED[own]:
                bad.append(f"{path}:{line}: {own} imports {target} ({other})")
            if other is None and target.split(".")[0] == "cgdispatch":
                bad.append(f"{path}:{line}: {own} imports the package root ({target})")
        for line, target in string_imports_of(path, package):
            other = _layer(target)  # cgdispatch.data holds files (importlib.resources)
            if other in ALLOWED and other != own and other not in ALLOWED[own]:
                bad.append(f"{path}:{line}: {own} names {target} ({other}) in a string")
        for line, target in module_level_imports(path):
            if target.split(".")[0] in FORBIDDEN_THIRD_PARTY.get(own, set()):
                bad.append(f"{path}:{line}: {own} imports {target}")
    return bad


def test_no_layer_imports_a_higher_one():
    assert layer_violations() == []


def test_package_root_holds_only_entry_points_and_subpackages():
    loose = {p.name for p in PACKAGE.glob("*.py")} - {"__init__.py", "__main__.py"}
    assert loose == set()
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"} <= (
        set(ALLOWED) | {"models", "data"}
    )


def test_checker_catches_an_upward_import(tmp_path):
    package = tmp_path / "cgdispatch"
    (package / "core").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "core" / "__init__.py").write_text("")
    (package / "core" / "bad.py").write_text("def f():\n    from ..plan import planner\n")
    (package / "core" / "heavy.py").write_text("import torch\n")
    found = layer_violations(package)
    assert any("core imports cgdispatch.plan (plan)" in line for line in found)
    assert any("core imports torch" in line for line in found)


def test_checker_catches_an_upward_import_by_string(tmp_path):
    """A lower layer naming a higher one in a string that importlib loads later (the
    planner entry core once held) is as upward as an import statement."""
    package = tmp_path / "cgdispatch"
    (package / "core").mkdir(parents=True)
    (package / "plan").mkdir()
    for init in (package, package / "core", package / "plan"):
        (init / "__init__.py").write_text("")
    (package / "core" / "entry.py").write_text('planner = "cgdispatch.plan.planner:plan"\n')
    (package / "core" / "lazy.py").write_text(
        "import importlib\n\ndef f():\n    return importlib.import_module('..plan.dp', "
        "'cgdispatch.core')\n"
    )
    (package / "core" / "fine.py").write_text(
        '"""Docs may cite cgdispatch.plan.planner in prose."""\nown = "cgdispatch.core.x"\n'
    )
    (package / "plan" / "up.py").write_text('core = "cgdispatch.core.generation"\n')
    found = layer_violations(package)
    assert [line.split(": ", 1)[1] for line in found] == [
        "core names cgdispatch.plan.planner (plan) in a string",
        "core names cgdispatch.plan.dp (plan) in a string",
    ]


def test_sources_cite_the_repo_docs_not_outside_files():
    """Users of the package have docs/, not the project's planning files."""
    root = PACKAGE.parent
    offenders = []
    for folder in ("cgdispatch", "tests"):
        for path in (root / folder).rglob("*.py"):
            source = path.read_text()
            if "shared" + "/" in source or "design" + ".md" in source:
                offenders.append(str(path.relative_to(root)))
    assert offenders == []


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> package modules it imports (every import statement: function-local and
    ``TYPE_CHECKING`` ones too); ``from pkg import name`` counts as importing ``pkg``."""
    modules = {_module_name(p, package): p for p in package.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for _, target in imports_of(path, package):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and target != package.name:
                targets.add(target)
        graph[name] = targets
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_file_level_import_cycle():
    """No two package files import each other, even through lazy or type-only imports."""
    assert import_cycles(import_graph()) == []


def test_cycle_checker_finds_a_lazy_cycle(tmp_path):
    package = tmp_path / "cgdispatch"
    (package / "core").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "core" / "__init__.py").write_text("")
    (package / "core" / "a.py").write_text("from .b import x\n")
    (package / "core" / "b.py").write_text("def f():\n    from . import c\n")
    (package / "core" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n"
    )
    (package / "core" / "d.py").write_text("from .a import y\n")
    assert import_cycles(import_graph(package)) == [
        ["cgdispatch.core.a", "cgdispatch.core.b", "cgdispatch.core.c"]
    ]


# the registry, its release table (issue 35: every release mapped to its generation) and
# the release packages
RELEASE_HOMES = ("core/generation.py", "core/release_table.py", "core/v1/", "core/v2/")


def release_string_lines(package: Path, releases: list[str]) -> list[str]:
    """``path:line`` of every quoted release string (``"0.34"``, ``'0.33'``) outside the
    release homes, and of every comparison of ``vllm_version`` with a literal."""
    quoted = re.compile("|".join(rf"""["']{re.escape(r)}["']""" for r in releases))
    compared = re.compile(r"""vllm_version\s*[!=]=\s*["']|["']\s*[!=]=\s*\S*vllm_version""")
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith(RELEASE_HOMES):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if quoted.search(line) or compared.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    return found


def test_release_strings_live_only_in_the_registry_and_the_release_packages():
    """Every other module asks the Generation object (issue 17: one home per release)."""
    from cgdispatch.core.generation import GENERATIONS

    assert release_string_lines(PACKAGE, list(GENERATIONS)) == []


def test_release_string_checker_finds_a_compare(tmp_path):
    package = tmp_path / "cgdispatch"
    (package / "core" / "v2").mkdir(parents=True)
    (package / "core" / "v2" / "config.py").write_text('RELEASE = "0.34"\n')
    (package / "views.py").write_text('if config.vllm_version == "0.9":\n    pass\n')
    (package / "cli.py").write_text("choices = ('0.33', '0.34')\n")
    found = release_string_lines(package, ["0.33", "0.34"])
    assert [line.split(":")[0] for line in found] == ["cli.py", "views.py"]


def test_graph_config_never_writes_into_an_instance():
    """GraphConfig is a value: construction derives before the instance exists, and
    resolve/replace build new ones (no object.__setattr__ in the config or its rules)."""
    for rel in ("core/config.py", "core/v1/config.py", "core/v2/config.py", "core/vllm_io.py"):
        assert "__setattr__" not in (PACKAGE / rel).read_text(), rel
