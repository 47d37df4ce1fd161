"""The offline report's ``index.html``: per notebook its title, the question it answers, its
conclusion (the text the executed notebook printed), status, run time and page; the ``tune``
verdict (notebook 04's last output, the same :func:`~cgdispatch.plan.tune.tune` the CLI
runs); and a link to the sweep report.

It reads executed notebooks (JSON, as papermill writes them) and writes HTML, every piece
of notebook text escaped; it executes nothing (``scripts/run_notebooks.py`` does).
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .numbers import duration_s

__all__ = [
    "NotebookSummary",
    "summarise_notebook",
    "index_html",
    "scroll_wide_outputs",
    "WIDE_OUTPUT_CSS",
    "HEADLINE_FILE",
]

_QUESTION = "**The question:**"
# a notebook page's wide outputs (pandas tables, long lines) scroll sideways instead of
# being cut off at the page's right edge; text wraps at spaces, never mid-word
WIDE_OUTPUT_CSS = (
    "<style>.jp-OutputArea-output{overflow-x:auto;max-width:100%}"
    ".jp-OutputArea-output table{display:block;overflow-x:auto;max-width:100%}"
    ".jp-OutputArea-output pre{white-space:pre-wrap;overflow-wrap:normal;word-break:normal}"
    "</style>"
)
_WHAT_IF = "what-if"  # in a verdict's source line: judged on a notebook's what-if setting
_VERDICT = "recommendation:"  # verdict_text's first line (notebook 04's conclusion)


@dataclass(frozen=True)
class NotebookSummary:
    """One row of the index: what a notebook asks and what its executed copy concluded."""

    name: str  # file stem, also the name of its HTML page
    status: str  # "ok" or "failed: ..."
    seconds: float  # wall time of its execution
    title: str = ""  # the first markdown heading, without '#'
    question: str = ""  # the text after "**The question:**"
    conclusion: str = ""  # what its last printing cell printed ("" when it printed none)


def summarise_notebook(path: Path, name: str, status: str, seconds: float) -> NotebookSummary:
    """Title, question and conclusion of the executed notebook at ``path`` (blank where it
    is missing or unreadable: a failed run may leave none)."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        cells = []
    markdown = [_text(c.get("source", "")) for c in cells if c.get("cell_type") == "markdown"]
    title = question = ""
    for text in markdown:
        for line in text.splitlines():
            if not title and line.startswith("# "):
                title = line[2:].strip()
            if not question and line.startswith(_QUESTION):
                question = line[len(_QUESTION) :].strip()
    return NotebookSummary(name, status, seconds, title, question, _conclusion(cells))


def _text(value: str | list[str]) -> str:
    return value if isinstance(value, str) else "".join(value)


def _conclusion(cells: list[dict]) -> str:
    """The printed text of the last code cell that printed any (each notebook ends with one
    that prints its conclusion, see cgdispatch/views/conclusions.py)."""
    for cell in reversed(cells):
        if cell.get("cell_type") != "code":
            continue
        printed = "".join(
            _text(o.get("text", ""))
            for o in cell.get("outputs", [])
            if o.get("output_type") == "stream" and o.get("name") == "stdout"
        ).strip()
        if printed:
            return printed
    return ""


def scroll_wide_outputs(page: str) -> str:
    """``page`` (an nbconvert HTML page) with :data:`WIDE_OUTPUT_CSS` as the last style
    of its head, so that it wins over nbconvert's own."""
    head_end = page.lower().rfind("</head>")
    if head_end < 0:
        raise ValueError("page has no </head>: give an HTML page as nbconvert writes it")
    return page[:head_end] + WIDE_OUTPUT_CSS + page[head_end:]


HEADLINE_FILE = "headline.txt"  # `make run` writes the README's tune verdict here


def index_html(rows: list[NotebookSummary], report_dir: Path, sweep_index: Path | None) -> str:
    """The page: a table of ``rows``, the README's tune verdict (``HEADLINE_FILE`` in
    ``report_dir``, when `make run` wrote it), the notebooks' tune verdict and the sweep
    report's link (relative to ``report_dir``, or "not built" when ``sweep_index`` does not
    exist)."""
    e = html.escape
    try:
        headline = (report_dir / HEADLINE_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        headline = ""
    headline_part = (
        "<h2>the decision: tune on the README's settings</h2>"
        f"<pre>{e(headline)}</pre><p>(<code>python -m cgdispatch tune</code> as the README "
        "runs it; written by <code>make run</code>)</p>"
        if headline.startswith(_VERDICT)
        else ""
    )
    body = "\n".join(
        f'<tr><td><a href="{e(r.name)}.html">{e(r.title or r.name)}</a></td>'
        f"<td>{e(r.question) or '-'}</td>"
        f"<td><pre>{e(r.conclusion) or 'no conclusion printed'}</pre></td>"
        f"<td>{e(r.status)}</td><td>{duration_s(r.seconds)}</td></tr>"
        for r in rows
    )
    verdict = next((r for r in rows if r.conclusion.startswith(_VERDICT)), None)
    what_if = (
        "<p><b>a what-if, not the headline:</b> this verdict is for the setting its second "
        "line names (a what-if of the notebook), not for <code>tune</code>'s defaults</p>"
        if verdict is not None and _WHAT_IF in verdict.conclusion
        else ""
    )
    verdict_part = (
        f"{what_if}<pre>{e(verdict.conclusion)}</pre><p>from {e(verdict.title or verdict.name)} "
        "(<code>cgdispatch.plan.tune</code>, as <code>python -m cgdispatch tune</code>)</p>"
        if verdict is not None
        else "<p>no verdict: the notebook that runs <code>tune</code> did not print one</p>"
    )
    if sweep_index is not None and sweep_index.is_file():
        link = Path(os.path.relpath(sweep_index, report_dir)).as_posix()
        sweep_part = f'<p><a href="{e(link)}">sweep report</a> ({e(link)})</p>'
    else:
        shown = e(str(sweep_index)) if sweep_index is not None else "none given"
        sweep_part = f"<p>sweep report: not built ({shown})</p>"
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>cgdispatch notebooks</title>"
        "<style>td{vertical-align:top}pre{white-space:pre-wrap;margin:0;overflow-wrap:normal;"
        "word-break:normal}.wide{overflow-x:auto;max-width:100%}</style></head>"
        f"<body><h1>cgdispatch notebooks</h1>{headline_part}<div class='wide'><table><tr>"
        "<th>notebook</th><th>question</th><th>conclusion</th><th>status</th><th>wall time</th>"
        f"</tr>\n{body}\n</table></div>"
        f"<h2>tune verdict</h2>{verdict_part}<h2>sweep report</h2>{sweep_part}</body></html>"
    )
