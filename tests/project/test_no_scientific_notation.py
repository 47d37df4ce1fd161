"""No number a person reads is in scientific notation (issue 37): the committed notebooks'
outputs (tables, printed text) are scanned. Regenerate the outputs when this fails after a
change to a notebook or a formatter; the formatter is cgdispatch.views.numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.load_script import load_script

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


_NOT_READ = re.compile(
    r"<(style|script|svg)\b.*?</\1>|data:[\w/+.-]+;base64,[A-Za-z0-9+/=]+", re.S | re.I
)


def _visible_text(page: str) -> str:
    """What a person reads on an HTML page: no styles, scripts, inline drawings or embedded
    image bytes, tags removed, entities decoded."""
    import html as html_lib

    return html_lib.unescape(re.sub(r"<[^>]+>", " ", _NOT_READ.sub(" ", page)))


def test_the_built_report_holds_no_scientific_notation(tmp_path: Path) -> None:
    """The offline report as scripts/run_notebooks.py builds it from the committed notebooks:
    every notebook's page and the index, with the README's tune verdict as its headline."""
    root = Path(__file__).resolve().parents[2]
    runner = load_script("scripts/run_notebooks.py")
    from cgdispatch.views.notebook_index import HEADLINE_FILE

    readme = (root / "README.md").read_text(encoding="utf-8")
    blocks = [b.removeprefix("text").lstrip() for b in readme.split("```")]
    verdict = next(b for b in blocks if b.startswith("recommendation:"))
    (tmp_path / HEADLINE_FILE).write_text(verdict, encoding="utf-8")
    rows = []
    for notebook in runner.find_notebooks(root / "notebooks"):
        runner.to_html(notebook, tmp_path / f"{notebook.stem}.html")
        (tmp_path / notebook.name).write_bytes(notebook.read_bytes())
        rows.append((notebook.stem, "ok", 1.0))
    index = runner.write_index(tmp_path, rows)
    assert "the decision: tune on the README's settings" in index.read_text(encoding="utf-8")
    pages = sorted(tmp_path.glob("*.html"))
    assert len(pages) == len(rows) + 1
    found = [
        f"{page.name}: {m}"
        for page in pages
        for m in SCIENTIFIC.findall(_visible_text(page.read_text(encoding="utf-8")))
    ]
    assert not found, found[:5]
    # the scan reads what a page shows: a number in a table cell is found
    assert SCIENTIFIC.findall(_visible_text("<td>2.949193e+08</td><style>a{x:1e+03}</style>"))
