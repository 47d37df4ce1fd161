"""Issue 37, one verdict per setting: the README's `tune` example, notebook 04 with its
default parameters (its headline cell, the notebook's own code), the tune dashboard as
`make dashboard` opens it (notebooks/dashboard.ipynb's code) and the offline report's
headline (the Makefile's README_TUNE through the CLI into the report's index page) print
the same verdict line and the same `vllm serve` flags. Each path is run here; none is
compared with a stored output."""

from __future__ import annotations

import contextlib
import html
import io
import json
import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def unwrapped(text: str) -> list[str]:
    """``text``'s lines with the wrapping of ``verdict_text(width=...)`` undone: an indented
    line continues the one above, a shell ``\\`` joins a `vllm serve` command's pieces."""
    lines: list[str] = []
    for line in text.splitlines():
        if lines and (line.startswith(" ") or lines[-1].endswith(" \\")):
            lines[-1] = lines[-1].removesuffix(" \\").rstrip() + " " + line.strip()
        else:
            lines.append(line.rstrip())
    return lines


def decision(text: str) -> tuple[str, str]:
    """The verdict line and the `vllm serve` line of a printed verdict."""
    lines = unwrapped(text)
    verdict = [line for line in lines if line.startswith("recommendation:")]
    serve = [line for line in lines if line.startswith("vllm serve ")]
    assert len(verdict) == 1 and len(serve) == 1, text
    return verdict[0], serve[0]


def readme_args() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.findall(r"```bash\n\.venv/bin/python -m cgdispatch (tune [^\n]*)\n```", readme)
    assert len(found) == 1, "the README's tune example was not found once"
    return shlex.split(found[0])


def cli(argv: list[str]) -> str:
    from cgdispatch.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def code_cells(name: str) -> list[dict]:
    notebook = json.loads((REPO / "notebooks" / name).read_text(encoding="utf-8"))
    return [c for c in notebook["cells"] if c["cell_type"] == "code"]


def notebook_04_headline() -> str:
    """What notebook 04's headline cell prints with the parameters cell as committed."""
    from cgdispatch.views.notebook_params import check_notebook_parameters

    cells = code_cells("04_what_if.ipynb")
    params = next(c for c in cells if "parameters" in c["metadata"].get("tags", []))
    headline = [c for c in cells if "headline" in c["metadata"].get("tags", [])]
    assert len(headline) == 1, "notebook 04 has no single cell tagged 'headline'"
    prints = re.compile(r"\b(verdict_text|headline_verdict)\(")  # a cell printing a verdict
    first_verdict = next(i for i, c in enumerate(cells) if prints.search("".join(c["source"])))
    assert cells.index(headline[0]) == first_verdict, "the headline is not the first verdict"
    namespace: dict = {}
    exec("".join(params["source"]), namespace)  # noqa: S102 - the notebook's own code
    namespace.update(check_notebook_parameters("04_what_if", namespace))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec("".join(headline[0]["source"]), namespace)  # noqa: S102
    return out.getvalue()


def dashboard_default() -> str:
    """The verdict the served dashboard shows first: notebooks/dashboard.ipynb's code."""
    cells = ["".join(c["source"]) for c in code_cells("dashboard.ipynb")]
    namespace: dict = {}
    for source in cells[:-1]:
        exec(source, namespace)  # noqa: S102
    *body, last = cells[-1].strip().splitlines()
    exec("\n".join(body), namespace)  # noqa: S102
    dash = eval(last, namespace)  # noqa: S307 - the notebook's last expression, shown
    assert dash.result is not None, dash.message.value
    shown = dash.verdict.value.replace("</pre>", "</pre>\n")  # the command: a line below
    text = html.unescape(re.sub(r"<[^>]+>", "", shown))
    # the shell command it shows for its settings is the README's
    readme = shlex.join(["python", "-m", "cgdispatch", *readme_args()])
    assert text.rstrip().endswith(f"the same from a shell: {readme}"), text[-300:]
    return text


def report_headline(tmp_path: Path) -> str:
    """The report's headline: the Makefile's README_TUNE run as `make run` runs it, into
    the index page's headline block."""
    from cgdispatch.views.notebook_index import HEADLINE_FILE, index_html

    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    args = re.search(r"^README_TUNE \?= (.*)$", makefile, re.M)
    assert args is not None and "$(README_TUNE)" in makefile
    assert shlex.split(args.group(1)) == readme_args()[1:], "Makefile and README differ"
    (tmp_path / HEADLINE_FILE).write_text(cli(["tune", *shlex.split(args.group(1))]))
    page = index_html([], tmp_path, None)
    block = re.search(r"<h2>the decision[^<]*</h2><pre>(.*?)</pre>", page, re.S)
    assert block is not None, "the report has no headline"
    return html.unescape(block.group(1))


def test_readme_notebook_04_dashboard_and_report_print_one_verdict(tmp_path: Path) -> None:
    readme = decision(cli(readme_args()))
    paths = {
        "notebook 04": decision(notebook_04_headline()),
        "dashboard": decision(dashboard_default()),
        "report": decision(report_headline(tmp_path)),
    }
    for name, got in paths.items():
        assert got == readme, name
    # the README's printed output is this run's too (its text block after the command)
    text = (REPO / "README.md").read_text(encoding="utf-8")
    shown = text.split(shlex.join(["-m", "cgdispatch", *readme_args()]), 1)[1]
    shown = shown.split("```text\n", 1)[1].split("```", 1)[0]
    assert decision(shown) == readme


def test_notebook_04s_headline_command_is_the_readmes() -> None:
    from cgdispatch.views.notebook_params import check_notebook_parameters
    from cgdispatch.views.tune_headline import notebook_tune_settings, tune_command

    params = next(
        c for c in code_cells("04_what_if.ipynb") if "parameters" in c["metadata"]["tags"]
    )
    namespace: dict = {}
    exec("".join(params["source"]), namespace)  # noqa: S102
    settings = notebook_tune_settings(check_notebook_parameters("04_what_if", namespace))
    assert shlex.split(tune_command(settings))[3:] == readme_args()
