"""No number a person reads is in scientific notation (issue 37): the committed notebooks'
outputs (tables, printed text) are scanned. Regenerate the outputs when this fails after a
change to a notebook or a formatter; the formatter is cgdispatch.views.numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
SCIENTIFIC = re.compile(r"(?<![\w.])\d+(?:\.\d+)?e[+-]\d+\b")
_IMAGES = ("image/png", "image/svg+xml", "application/vnd.jupyter.widget-view+json")


def test_the_pattern_finds_scientific_notation_and_nothing_else() -> None:
    assert SCIENTIFIC.findall("memory 2.949193e+08, err 7.45e-08 and 1e+03 ms") == [
        "2.949193e+08", "7.45e-08", "1e+03",
    ]  # fmt: skip
    assert not SCIENTIFIC.search("281 MiB, 1.61 s, 895,856 tokens, sha 3e4f0a, name v1e-3x")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_outputs_hold_no_scientific_notation(path: Path) -> None:
    found = []
    for index, cell in enumerate(json.loads(path.read_text())["cells"]):
        for output in cell.get("outputs", []):
            texts = [output.get("text", "")]
            texts += [v for k, v in output.get("data", {}).items() if k not in _IMAGES]
            for text in texts:
                text = "".join(text) if isinstance(text, list) else str(text)
                found += [f"cell {index}: {m}" for m in SCIENTIFIC.findall(text)]
    assert not found, f"{path.name}: {found[:5]}"
