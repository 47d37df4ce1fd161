"""Execute the notebooks headless with papermill and write an HTML report with nbconvert.

    python scripts/run_notebooks.py                       # every notebooks/NN_*.ipynb
    python scripts/run_notebooks.py -p mode FULL -p max_num_seqs 32 notebooks/01_dispatch_tour.ipynb

Executed notebooks go to ``build/notebooks/`` and HTML pages plus an ``index.html`` to
``build/report/`` (each notebook's question and printed conclusion, the tune verdict, and a
link to the sweep report ``--sweep-report``); each is written as soon as its notebook finishes, so a failure late in
the run keeps the earlier results. A run of named notebooks updates their rows of the index
and keeps the others' (``index.json`` beside it holds every row); a run of the whole folder
starts the index afresh. A notebook that fails still gets its executed copy and
page (papermill marks the failing cell); the exit status is 1 if any failed. The kernel
imports this checkout's ``cgdispatch`` (the repository root is put on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def parse_value(text: str) -> object:
    """A ``-p`` value: a Python literal when it parses as one (``4``, ``[1, 2]``), else the string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def find_notebooks(folder: Path) -> list[Path]:
    """The tested notebooks of a folder, in name order (scratch and checkpoint files skipped)."""
    return sorted(p for p in folder.glob("*.ipynb") if p.name[:1].isdigit())


def to_html(notebook: Path, target: Path) -> None:
    import nbconvert
    import nbformat

    exporter = nbconvert.HTMLExporter()
    node = nbformat.read(notebook, as_version=4)
    offline_widgets(node)
    body, _ = exporter.from_notebook_node(node)
    from cgdispatch.views.notebook_index import scroll_wide_outputs

    target.write_text(scroll_wide_outputs(body), encoding="utf-8")


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def offline_widgets(node: Any) -> int:
    """Show each widget's static snapshot (its ``text/html`` form, see
    cgdispatch/views/snapshots.py) instead of a view that needs a widget manager from a CDN
    and a live kernel; returns how many outputs changed."""
    changed = 0
    for cell in node.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data and "text/html" in data:
                del data[WIDGET_VIEW]
                changed += 1
    return changed


def write_index(
    report_dir: Path,
    rows: list[tuple[str, str, float]],
    executed_dir: Path | None = None,
    sweep_index: Path | None = None,
) -> Path:
    """``index.html``: per notebook its title, question, conclusion (read from its executed
    copy in ``executed_dir``), status and run time; the tune verdict; the sweep report's link."""
    from cgdispatch.views.notebook_index import index_html, summarise_notebook

    folder = executed_dir if executed_dir is not None else report_dir
    summaries = [
        summarise_notebook(folder / f"{name}.ipynb", name, status, seconds)
        for name, status, seconds in merge_rows(report_dir, rows)
    ]
    index = report_dir / "index.html"
    index.write_text(index_html(summaries, report_dir, sweep_index), encoding="utf-8")
    return index


ROWS_FILE = "index.json"  # every notebook's last (name, status, seconds), beside index.html


def merge_rows(
    report_dir: Path, rows: list[tuple[str, str, float]]
) -> list[tuple[str, str, float]]:
    """``rows`` with the rows of notebooks run before and not now (from ``ROWS_FILE``), by
    name; writes the merged rows back. A missing or unreadable file holds none."""
    path = report_dir / ROWS_FILE
    try:
        kept = {str(n): (str(s), float(t)) for n, s, t in json.loads(path.read_text("utf-8"))}
    except (OSError, ValueError, TypeError):
        kept = {}
    kept.update({name: (status, seconds) for name, status, seconds in rows})
    merged = [(name, *kept[name]) for name in sorted(kept)]
    path.write_text(json.dumps(merged, indent=1), encoding="utf-8")
    return merged


def run_notebooks(
    notebooks: list[Path],
    out_dir: Path,
    report_dir: Path,
    parameters: dict[str, object],
    kernel_name: str | None = None,
    timeout_s: int = 600,
    sweep_index: Path | None = None,
    keep_others: bool = False,
) -> list[tuple[str, str, float]]:
    """Run each notebook; returns (name, "ok" | "failed: ...", seconds) per notebook.
    ``keep_others``: the index keeps the rows of notebooks not run now (a run of named
    notebooks); else it lists only these."""
    import papermill
    from tqdm.auto import tqdm

    out_dir.mkdir(parents=True, exist_ok=True)
    report_dir.mkdir(parents=True, exist_ok=True)
    if not keep_others:
        (report_dir / ROWS_FILE).unlink(missing_ok=True)
    # the kernel is a child process: it inherits this, so it imports this checkout's package
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
    )
    rows: list[tuple[str, str, float]] = []
    bar = tqdm(notebooks, desc="notebooks", unit="nb")
    for nb in bar:
        bar.set_postfix_str(nb.name)
        target = out_dir / nb.name
        start = time.perf_counter()
        try:
            papermill.execute_notebook(
                str(nb),
                str(target),
                parameters=parameters,
                kernel_name=kernel_name,
                cwd=str(nb.parent),
                progress_bar=False,
                execution_timeout=timeout_s,
            )
            status = "ok"
        except Exception as err:  # keep going: report every notebook, fail at the end
            status = f"failed: {type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}"
        seconds = time.perf_counter() - start
        if target.exists():
            to_html(target, report_dir / f"{nb.stem}.html")
        rows.append((nb.stem, status, seconds))
        write_index(report_dir, rows, out_dir, sweep_index)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "notebooks", nargs="*", type=Path, help="notebooks to run (default: notebooks/NN_*.ipynb)"
    )
    parser.add_argument("--notebook-dir", type=Path, default=REPO_ROOT / "notebooks")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "notebooks")
    parser.add_argument("--report", type=Path, default=REPO_ROOT / "build" / "report")
    parser.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="papermill parameter for every notebook (a Python literal or a string)",
    )
    parser.add_argument(
        "--sweep-report",
        type=Path,
        default=REPO_ROOT / "build" / "smoke" / "report" / "summary.md",
        help="the sweep report to link (python -m cgdispatch report writes summary.md)",
    )
    parser.add_argument("--kernel", default=None, help="kernel name (default: the notebook's)")
    parser.add_argument("--timeout-s", type=int, default=600, help="per-cell timeout")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or find_notebooks(args.notebook_dir)
    if not notebooks:
        print(f"error: no notebooks found in {args.notebook_dir}", file=sys.stderr)
        return 2
    missing = [str(p) for p in notebooks if not p.is_file()]
    if missing:
        print(f"error: notebooks not found: {missing}", file=sys.stderr)
        return 2
    params = {name: parse_value(value) for name, value in args.parameter}
    rows = run_notebooks(
        notebooks,
        args.out,
        args.report,
        params,
        args.kernel,
        args.timeout_s,
        args.sweep_report,
        keep_others=bool(args.notebooks),  # named notebooks: the others' rows stay
    )
    for name, status, seconds in rows:
        print(f"{name:<32} {status:<10} {seconds:6.1f} s")
    print(f"report: {args.report / 'index.html'}")
    return 0 if all(status == "ok" for _, status, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
