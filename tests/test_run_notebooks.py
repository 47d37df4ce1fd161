"""scripts/run_notebooks.py: papermill execution with parameters, HTML report, failures kept apart."""

from __future__ import annotations

import json
import random
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from cgdispatch import CudagraphDispatcher, GraphConfig
from tests.load_script import load_script

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "run_notebooks.py"


def load_runner():
    return load_script(SCRIPT)


def write_notebook(path: Path, cells: list[str]) -> None:
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


def outputs_text(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))


def test_parse_value_reads_literals_and_keeps_strings():
    runner = load_runner()
    assert runner.parse_value("4") == 4
    assert runner.parse_value("[1, 2, 8]") == [1, 2, 8]
    assert runner.parse_value("None") is None
    assert runner.parse_value("FULL_AND_PIECEWISE") == "FULL_AND_PIECEWISE"


def test_runs_notebooks_with_parameters_and_writes_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "")  # restored after the test; the runner prepends the repo
    runner = load_runner()
    rng = random.Random(41)
    n, sizes = rng.randint(1, 64), sorted(rng.sample(range(1, 65), 5))
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    write_notebook(
        nbdir / "01_ok.ipynb",
        [
            "num_tokens = 1\nsizes = [1, 2]",
            "import cgdispatch as cg\nd = cg.CudagraphDispatcher(cg.GraphConfig(cudagraph_capture_sizes=sizes, vllm_version='0.33'))\n"
            "d.initialize_cudagraph_keys()\nprint('padded', d.padded_size(num_tokens))",
        ],
    )
    write_notebook(nbdir / "02_fails.ipynb", ["x = 1", "raise ValueError('boom')"])
    write_notebook(nbdir / "scratch.ipynb", ["x = 1"])  # not numbered: not run
    out, report = tmp_path / "out", tmp_path / "report"
    code = runner.main(
        [
            "--notebook-dir",
            str(nbdir),
            "--out",
            str(out),
            "--report",
            str(report),
            "-p",
            "num_tokens",
            str(n),
            "-p",
            "sizes",
            json.dumps(sizes),
        ]
    )
    assert code == 1  # one notebook failed
    assert sorted(p.name for p in out.iterdir()) == ["01_ok.ipynb", "02_fails.ipynb"]
    want = CudagraphDispatcher(
        GraphConfig(cudagraph_capture_sizes=sizes, vllm_version="0.33")
    ).padded_size(n)
    assert f"padded {want}" in outputs_text(out / "01_ok.ipynb")
    assert "boom" in (out / "02_fails.ipynb").read_text()
    assert (report / "01_ok.html").stat().st_size > 1000 and (report / "02_fails.html").exists()
    index = (report / "index.html").read_text()
    assert "01_ok" in index and "02_fails" in index and "failed: " in index and ">ok<" in index


def test_missing_notebooks_are_an_error(tmp_path, capsys):
    runner = load_runner()
    assert runner.main(["--notebook-dir", str(tmp_path)]) == 2
    assert runner.main([str(tmp_path / "nope.ipynb")]) == 2
    assert "not found" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["01_a.ipynb", "10_b.ipynb"])
def test_find_notebooks_takes_numbered_ones(tmp_path, name):
    runner = load_runner()
    (tmp_path / name).write_text("{}")
    (tmp_path / "untitled.ipynb").write_text("{}")
    assert [p.name for p in runner.find_notebooks(tmp_path)] == [name]


def test_every_committed_notebook_is_found_and_takes_parameters():
    runner = load_runner()
    folder = SCRIPT.parent.parent / "notebooks"
    found = runner.find_notebooks(folder)
    assert [p.name for p in found] == sorted(p.name for p in folder.glob("[0-9][0-9]_*.ipynb"))
    assert {"01_dispatch_tour.ipynb", "02_capture_and_replay.ipynb", "04_what_if.ipynb"} <= {
        p.name for p in found
    }
    for path in found:
        cells = nbformat.read(path, as_version=4).cells
        tagged = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: papermill needs one cell tagged 'parameters'"


def test_the_offline_report_shows_a_widgets_static_snapshot(tmp_path, monkeypatch):
    """A dashboard in a notebook reaches the HTML report as its snapshot (its decision text
    inline), not as a widget view that needs a CDN's widget manager and a kernel."""
    monkeypatch.setenv("PYTHONPATH", "")
    runner = load_runner()
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    write_notebook(
        nbdir / "01_widget.ipynb",
        [
            "num_tokens = 5",
            "import cgdispatch as cg\n"
            "cg.dispatch_explorer(cg.GraphConfig(vllm_version='0.33', cudagraph_capture_sizes=[1, 2, 8]),"
            " num_tokens=num_tokens)",
        ],
    )
    out, report = tmp_path / "out", tmp_path / "report"
    assert (
        runner.main(["--notebook-dir", str(nbdir), "--out", str(out), "--report", str(report)]) == 0
    )
    executed = (out / "01_widget.ipynb").read_text()
    assert runner.WIDGET_VIEW in executed and "static snapshot" in executed  # both forms kept
    page = (report / "01_widget.html").read_text()
    assert "static snapshot of an interactive widget" in page
    assert 'data-testid="dispatch-decision"' in page and "data-padded-size=" in page
    assert runner.WIDGET_VIEW not in page.split("<body", 1)[1]


def test_static_html_renders_boxes_values_and_images():
    import ipywidgets as w

    from cgdispatch.views.snapshots import static_html

    box = w.VBox(
        [
            w.HBox([w.IntSlider(value=7, description="num_tokens"), w.Button(description="plan")]),
            w.HTML("<b id='m'>metrics</b>"),
            w.Image(value=b"\x89PNG..", format="png"),
        ]
    )
    text = static_html(box)
    assert "num_tokens: <b>7</b>" in text and "<b id='m'>metrics</b>" in text
    assert "data:image/png;base64,iVBORy4u" in text and "plan" not in text


def _executed(path: Path, heading: str, question: str, printed: str) -> None:
    """A small fake executed notebook: a markdown heading and question, a printing cell."""
    from nbformat.v4 import new_markdown_cell, new_output

    cell = new_code_cell("print(conclusion)")
    cell.outputs = [new_output("stream", name="stdout", text=printed + "\n")]
    intro = new_markdown_cell(f"# {heading}\n\n**The question:** {question}\n\nMore text.")
    nbformat.write(new_notebook(cells=[intro, new_code_cell("x = 1"), cell]), path)


def test_the_index_shows_questions_conclusions_the_verdict_and_the_sweep_link(tmp_path):
    runner = load_runner()
    executed, report = tmp_path / "build" / "notebooks", tmp_path / "build" / "report"
    executed.mkdir(parents=True)
    report.mkdir()
    _executed(executed / "01_tour.ipynb", "01 · Tour <i>", "which steps run as <graphs> & why?",
              "Conclusion: 27 graphs, padding 3.5% <b>")  # fmt: skip
    _executed(executed / "04_what_if.ipynb", "04 · What if", "which sizes?",
              "recommendation: keep vLLM's default (30 sizes)\nflags: --max-num-seqs 64")  # fmt: skip
    rows = [("01_tour", "ok", 3.25), ("04_what_if", "ok", 20.0), ("05_gone", "failed: boom", 1.0)]
    sweep = tmp_path / "build" / "smoke" / "report" / "summary.md"
    page = runner.write_index(report, rows, executed, sweep).read_text()
    assert "sweep report: not built" in page and "summary.md" in page
    assert "01 · Tour &lt;i&gt;" in page and "<i>" not in page
    assert "which steps run as &lt;graphs&gt; &amp; why?" in page
    assert "Conclusion: 27 graphs, padding 3.5% &lt;b&gt;" in page and "<b>" not in page
    assert '<a href="01_tour.html">' in page and "3.25 s" in page
    assert "failed: boom" in page and "no conclusion printed" in page  # no executed copy
    verdict = page.split("<h2>tune verdict</h2>")[1]
    assert (
        "recommendation: keep vLLM&#x27;s default (30 sizes)\nflags: --max-num-seqs 64" in verdict
    )
    sweep.parent.mkdir(parents=True)
    sweep.write_text("# sweep\n")
    page = runner.write_index(report, rows, executed, sweep).read_text()
    assert '<a href="../smoke/report/summary.md">' in page and "not built" not in page
    assert (report / "../smoke/report/summary.md").resolve() == sweep.resolve()


def test_a_run_of_one_notebook_keeps_the_other_rows_of_the_index(tmp_path):
    """Issue 37: the README's single-notebook command updates its own row, not the index."""
    runner = load_runner()
    executed, report = tmp_path / "notebooks", tmp_path / "report"
    executed.mkdir()
    report.mkdir()
    rng = random.Random()
    names = sorted(f"{i:02d}_nb{rng.randint(0, 99)}" for i in range(1, rng.randint(3, 6)))
    for name in names:
        _executed(executed / f"{name}.ipynb", name, "q?", f"Conclusion of {name}")
    first = [(name, "ok", rng.uniform(1, 99)) for name in names]
    runner.write_index(report, first, executed)
    again = rng.choice(names)
    page = runner.write_index(report, [(again, "failed: boom", 1.0)], executed).read_text()
    for name in names:
        assert f"Conclusion of {name}" in page
    assert page.count("failed: boom") == 1 and page.count(">ok<") == len(names) - 1
    kept = json.loads((report / runner.ROWS_FILE).read_text())
    assert [row[0] for row in kept] == names


def test_a_notebook_page_scrolls_wide_tables_and_a_what_if_verdict_is_labelled(tmp_path):
    from cgdispatch.views.notebook_index import WIDE_OUTPUT_CSS, scroll_wide_outputs

    page = scroll_wide_outputs("<html><head><style>a{}</style></head><body></body></html>")
    assert page.index(WIDE_OUTPUT_CSS) > page.index("a{}") and "overflow-x:auto" in page
    with pytest.raises(ValueError, match="no </head>"):
        scroll_wide_outputs("<p>")
    runner = load_runner()
    executed, report = tmp_path / "notebooks", tmp_path / "report"
    executed.mkdir()
    report.mkdir()
    text = "recommendation: keep vLLM's default\nm on d; KV cache: what-if budget 1.2 GiB"
    _executed(executed / "04_what_if.ipynb", "04", "q?", text)
    page = runner.write_index(report, [("04_what_if", "ok", 1.0)], executed).read_text()
    assert "a what-if, not the headline" in page
    _executed(executed / "04_what_if.ipynb", "04", "q?", "recommendation: keep vLLM's default")
    page = runner.write_index(report, [("04_what_if", "ok", 1.0)], executed).read_text()
    assert "what-if" not in page


def test_the_readmes_decision_heads_the_index_and_make_run_writes_it(tmp_path):
    """Issue 37: `make run` ends with the README's tune command, whose verdict heads the
    offline report (the notebooks' own verdict follows, labelled as theirs)."""
    import re
    import shlex

    from cgdispatch.views.notebook_index import HEADLINE_FILE

    root = SCRIPT.parent.parent
    readme = (root / "README.md").read_text()
    command = re.search(r"```bash\n\.venv/bin/python -m cgdispatch tune ([^\n]*)\n```", readme)
    makefile = (root / "Makefile").read_text()
    flags = re.search(r"^README_TUNE \?= (.*)$", makefile, re.M)
    assert shlex.split(flags.group(1)) == shlex.split(command.group(1))
    assert f"$(PY) -m cgdispatch tune $(README_TUNE) > build/report/{HEADLINE_FILE}" in makefile
    runner = load_runner()
    report = tmp_path / "report"
    report.mkdir()
    gain = random.uniform(0.1, 9.0)
    (report / HEADLINE_FILE).write_text(f"recommendation: keep vLLM's default: {gain:.2f} ms\n")
    page = runner.write_index(report, [], tmp_path).read_text()
    head = page.split("<div class='wide'>")[0]
    assert "the decision: tune on the README" in head and f"{gain:.2f} ms" in head
    (report / HEADLINE_FILE).write_text("Traceback: something broke\n")
    assert "the decision" not in runner.write_index(report, [], tmp_path).read_text()
