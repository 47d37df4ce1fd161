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
        # a report of an older cgdispatch (before the marker): only its own files, charts too
        legacy = set(others) <= _REPORT_FILES and "speedup.png" in others
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


def target(out: Path, name: str) -> Path:
    path = out / name
    refuse_link(path)
    return path


def refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise ValueError(f"{path} is a symlink: cgdispatch does not write through links; remove it")
