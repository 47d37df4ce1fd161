"""docs/bounds.md lists every bound of ``cgdispatch.core.validate.BOUNDS`` with its number,
and every module it says enforces a bound uses that bound's constant (or, for the rules
that are not counts, defines the function it names)."""

from __future__ import annotations

import re
from pathlib import Path

from cgdispatch.core import validate

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "bounds.md").read_text()


def _rows(header: str) -> list[list[str]]:
    table = DOC.split(header, 1)[1].split("\n\n", 1)[0]
    lines = [line for line in table.splitlines() if line.startswith("| ")][1:]  # rule row
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_every_bound_is_listed_with_its_number_and_constant():
    rows = {row[0]: row for row in _rows("| count | constant |")}
    assert set(rows) == set(validate.BOUNDS)
    for name, (bound, _) in validate.BOUNDS.items():
        constant = rows[name][1].strip("`")
        assert getattr(validate, constant) == bound, name
        assert rows[name][2] == f"{bound:_}", name


def test_each_module_named_enforces_the_constant():
    for row in _rows("| count | constant |"):
        constant = row[1].strip("`")
        paths = re.findall(r"`(cgdispatch/[\w/]+\.py)`", row[3])
        assert paths, row[0]
        for path in paths:
            text = (ROOT / path).read_text()
            uses = constant in text or (path.endswith("validate.py"))
            assert uses, f"{path} does not use {constant}"


def test_each_rule_names_a_function_its_module_defines():
    for row in _rows("| rule | enforced in |"):
        for path, name in re.findall(r"`(cgdispatch/[\w/]+\.py)` `(\w+)`", row[1]):
            assert re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.M), (path, name)
