"""Where a sweep report may be written: into a folder of its own (new, empty, or one it wrote
before), never over files it did not write, and never through a symlink."""

from __future__ import annotations

from pathlib import Path

__all__ = ["REPORT_MARKER", "claim_report_folder", "target", "refuse_link"]

# A report folder carries this file; cgdispatch writes only into a new or empty folder or
# one holding it, so that `report --out` never replaces a summary.md it did not write.
REPORT_MARKER = ".cgdispatch-report"
_REPORT_FILES = {"summary.md", "speedup.png", "capture.png", "speedup_model.png", "memory.png",
                 "memory_per_key.png"}  # fmt: skip


def claim_report_folder(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ValueError(f"report folder {out} is a file: give a folder as --out")
    if out.is_dir() and not (out / REPORT_MARKER).is_file():
        others = sorted(p.name for p in out.iterdir())
        legacy = _older_report(out, others)
        if others and not legacy:
            raise ValueError(
                f"report folder {out} holds {others[:3]} that cgdispatch did not write: give a "
                "new or empty folder as --out (reports go into a folder of their own)"
            )
    out.mkdir(parents=True, exist_ok=True)
    for name in (REPORT_MARKER, *_REPORT_FILES):  # before any chart is drawn
        refuse_link(out / name)
    (out / REPORT_MARKER).write_text(
        "written by cgdispatch report: it may replace its files here\n"
    )


def _older_report(out: Path, names: list[str]) -> bool:
    """A report of an older cgdispatch (before the marker): its summary.md starts with the
    report's title and everything else is a chart."""
    summary = out / "summary.md"
    if "summary.md" not in names or summary.is_symlink() or not summary.is_file():
        return False
    with open(summary, encoding="utf-8", errors="replace") as fh:
        title = fh.readline().strip()
    return title == "# cgdispatch sweep report" and all(
        n == "summary.md" or n.endswith(".png") for n in names
    )


def target(out: Path, name: str) -> Path:
    path = out / name
    refuse_link(path)
    return path


def refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise ValueError(f"{path} is a symlink: cgdispatch does not write through links; remove it")
