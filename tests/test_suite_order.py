"""The repository conftest.py's queue order for ``--dist loadfile``: the long files first, in
their listed order, then notebooks and files with slow or browser tests, then the rest, each
file's tests kept together and in their own order."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.load_script import load_script

ROOT = Path(__file__).resolve().parent.parent


def _root_conftest():
    # loaded by path: "conftest" in sys.modules may be tests/conftest.py
    return load_script(ROOT / "conftest.py", "root_conftest")


@dataclass
class FakeMark:
    name: str


@dataclass
class FakeItem:
    nodeid: str
    marks: list[str] = field(default_factory=list)

    def iter_markers(self):
        return [FakeMark(m) for m in self.marks]


def test_every_listed_long_file_exists():
    for path in _root_conftest().LONG_FILES:
        assert (ROOT / path).is_file(), f"{path} is in LONG_FILES but gone: drop or rename it"


def test_long_files_first_then_slow_ones_then_the_rest():
    conftest = _root_conftest()
    rng = random.Random()
    long_files = list(conftest.LONG_FILES)
    chosen = sorted(rng.sample(long_files, 4), key=long_files.index)
    others = [f"tests/x/test_{i}.py" for i in range(6)]
    slow = {others[1]: "slow", others[4]: "browser"}
    items = []
    notebook = "notebooks/99_new.ipynb"
    collected = [*others[:3], chosen[2], notebook, *others[3:], *chosen[::-1]]
    for path in collected:
        n = rng.randint(1, 4)  # the mark on the file's last test only
        marks = [slow[path]] if path in slow else []
        items += [FakeItem(f"{path}::t{k}", marks if k == n - 1 else []) for k in range(n)]
    before = list(items)
    conftest.pytest_collection_modifyitems(None, items)
    order = list(dict.fromkeys(item.nodeid.split("::")[0] for item in items))
    second = [p for p in collected if p in slow or p == notebook]  # in collection order
    rest = [p for p in others if p not in slow]
    assert order == [*chosen, *second, *rest]
    for path in order:  # a file's tests stay in their own order
        mine = [i.nodeid for i in before if i.nodeid.startswith(path + "::")]
        assert [i.nodeid for i in items if i.nodeid.startswith(path + "::")] == mine


def test_xdist_keeps_the_collection_order(pytestconfig):
    if not hasattr(pytestconfig.option, "loadscopereorder"):
        pytest.skip("pytest-xdist is not installed")
    if "--loadscope-reorder" not in pytestconfig.invocation_params.args:
        assert pytestconfig.option.loadscopereorder is False
