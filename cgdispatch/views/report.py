"""Sweep report: the figures of :mod:`cgdispatch.views` saved as PNG next to a Markdown summary.

:func:`write_report` reads a result store and draws the same charts the notebooks show
(:func:`~cgdispatch.views.plots.speedup_figure`,
:func:`~cgdispatch.views.capture_figures.capture_time_figure`,
:func:`~cgdispatch.views.capture_figures.memory_figure`, ...), each labelled with its
source (``measured (CPU)``, ``measured (<GPU>)``, ``reference data (<GPU>, <date>)``,
``model``, ``model (H200 SXM)``). It draws no chart of its own. Graph-memory estimates
come from :func:`cgdispatch.views.sweepviews.memory_estimates` on a meta-device model (no
memory used) and are labelled ``model``; measured pool bytes appear only when the rows
come from a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from ..sweep.exports import write_text_file
from ..sweep.spec import SweepSpec
from ..sweep.store import load_captures, load_reference, load_results
from .capture_figures import (
    capture_per_key_figure,
    capture_time_figure,
    memory_figure,
    memory_per_key_figure,
)
from .numbers import number
from .plots import speedup_figure
from .report_folder import claim_report_folder, refuse_link, target
from .sources import frame_source
from .sweepviews import graph_memory_table, memory_estimates, modelled_speedup, unit_table

__all__ = ["modelled_rows", "ReportFigures", "draw_report", "write_report"]

MIB = 1 << 20


def _sources(frame: pd.DataFrame) -> str:
    """The frame's sources for the summary's prose (``no data`` when it names none)."""
    return frame_source(frame, None) if frame["source"].notna().any() else "no data"


def _lines(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """``frame`` with a ``line`` column naming each line of a speed-up chart."""
    label = frame[columns[0]].astype(str)
    for column in columns[1:]:
        label = label + " / " + frame[column].astype(str)
    return frame.assign(line=label)


def modelled_rows(rows: pd.DataFrame, device: str = "H200") -> pd.DataFrame:
    """:func:`~cgdispatch.views.sweepviews.modelled_speedup` for what a sweep ran: each toy
    model and dtype in ``rows``, their modes, every ladder, the swept num_tokens and batch
    kinds. Rows of other models are skipped (the device model profiles the toy LM); the
    frame is empty when none is left. Columns as ``modelled_speedup`` plus model, dtype."""
    from ..models.toy import PRESETS

    toy = rows[rows["model"].isin(list(PRESETS)) & rows["capture_sizes"].notna()]
    frames = []
    for (model, dtype), part in toy.groupby(["model", "dtype"], sort=False):
        ladders = {
            str(name): [int(s) for s in str(sizes).split(",")]
            for name, sizes in part[["ladder", "capture_sizes"]].drop_duplicates("ladder").values
        }
        uniform = part["uniform_decode"].astype(bool)
        spec = SweepSpec(
            model=str(model),
            dtype=str(dtype),
            modes=tuple(dict.fromkeys(part["mode"].astype(str))),
            ladders=ladders,
            num_tokens=tuple(sorted({int(n) for n in part["num_tokens"]})),
            batch_kinds=tuple(
                k for k, u in (("decode", True), ("mixed", False)) if (uniform == u).any()
            ),
            max_num_seqs=int(part["max_num_seqs"].dropna().iloc[0]),
        )
        for ladder in ladders:
            frame = modelled_speedup(spec, device=device, ladder=ladder, num_tokens=spec.num_tokens)
            frames.append(frame.assign(model=model, dtype=dtype))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


@dataclass
class ReportFigures:
    """What :func:`write_report` draws: figures by file stem, and the frames the summary quotes."""

    figures: dict[str, Figure] = field(default_factory=dict)  # "speedup" -> speedup.png
    estimates: pd.DataFrame = field(default_factory=pd.DataFrame)  # memory_estimates(rows)
    reference: pd.DataFrame | None = None  # shipped reference rows, if any


def draw_report(
    rows: pd.DataFrame,
    captures: pd.DataFrame,
    *,
    estimate: bool = True,
    progress: bool = False,
    device: str = "H200",
) -> ReportFigures:
    """The report's figures for sweep ``rows`` and their per-key ``captures``; a chart with
    nothing to draw (no ok rows, no toy model, no GPU pool bytes) is left out."""
    out = ReportFigures(reference=load_reference())
    ok = rows[rows["status"] == "ok"]
    plotted = ok if out.reference is None else pd.concat([ok, out.reference], ignore_index=True)
    if len(plotted):
        lines = _lines(plotted, "mode", "ladder", "source")
        out.figures["speedup"] = speedup_figure(lines, by="line")
    modelled = modelled_rows(rows, device) if len(rows) else pd.DataFrame()
    if len(modelled):
        out.figures["speedup_model"] = speedup_figure(_lines(modelled, "mode", "ladder"), by="line")
    units = unit_table(rows)
    if len(units) and units["capture_s"].notna().any():
        out.figures["capture"] = capture_time_figure(units)
    if len(captures) and captures["capture_s"].notna().any():
        out.figures["capture_per_key"] = capture_per_key_figure(captures)
    if estimate and len(rows):
        out.estimates = memory_estimates(rows, progress=progress)
    memory = graph_memory_table(rows, estimates=out.estimates) if len(rows) else pd.DataFrame()
    if len(memory):
        out.figures["memory"] = memory_figure(memory, group="bar")
    gpu_keys = captures[captures["pool_bytes"].notna()] if len(captures) else captures
    if len(out.estimates) and len(gpu_keys):
        out.figures["memory_per_key"] = memory_per_key_figure(
            gpu_keys, out.estimates.attrs["per_key"]
        )
    return out


def _markdown(frame: pd.DataFrame) -> str:
    """A pipe table (pandas' to_markdown needs tabulate, which is not a dependency)."""

    def cell(v: Any) -> str:
        return number(v) if isinstance(v, float) else str(v)  # no 1.2e+03 in a report

    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def _memory_estimate_lines(estimates: pd.DataFrame) -> list[str]:
    """The report's graph-memory estimate section (``model``), none without estimates."""
    if not len(estimates):
        return []
    return [
        "## Graph memory (estimate: `model`)",
        "",
        _markdown(
            estimates.assign(
                est_pool_MiB=estimates["est_pool_bytes"] / MIB,
                est_separate_MiB=estimates["est_separate_bytes"] / MIB,
            )[
                [
                    "model",
                    "mode",
                    "ladder",
                    "est_graphs",
                    "est_pool_MiB",
                    "est_separate_MiB",
                    "est_source",
                ]
            ]
        ),
        "",
    ]


def write_report(
    results: str | Path,
    out: str | Path | None = None,
    *,
    estimate: bool = True,
    progress: bool = False,
) -> Path:
    """Write the figures of :func:`draw_report` as PNG (``speedup.png``, ``memory.png``,
    ``capture.png``, ...) and ``summary.md`` to ``out`` (default ``RESULTS_DIR/report``);
    returns the summary's path. Reference rows shipped in ``cgdispatch/data`` are plotted
    alongside, labelled as reference data."""
    results = Path(results)
    rows = load_results(results)
    out = (
        Path(out)
        if out is not None
        else (results if results.is_dir() else results.parent) / "report"
    )
    claim_report_folder(out)
    drawn = draw_report(rows, load_captures(results), estimate=estimate, progress=progress)
    for name, fig in drawn.figures.items():
        fig.savefig(target(out, f"{name}.png"), dpi=110)
    estimates, reference = drawn.estimates, drawn.reference

    def image(name: str, alt: str) -> list[str]:
        return [f"![{alt}]({name}.png)", ""] if name in drawn.figures else []

    ok, failed = rows[rows["status"] == "ok"], rows[rows["status"] != "ok"]
    lines = [
        "# cgdispatch sweep report",
        "",
        f"Rows: {len(rows)} ({len(ok)} ok, {len(failed)} failed) from `{results}`. "
        f"Sources: {_sources(rows)}; torch {', '.join(sorted(rows['torch_version'].dropna().astype(str).unique()))}.",
        "Timings labelled `measured (CPU)` come from the CPU replay stand-in: they show that the "
        "flow works, not what graphs gain on a GPU.",
        "",
        "## Speed-up by mode and ladder (median over shapes)",
        "",
    ]
    if len(ok):
        summary = ok.groupby(["mode", "ladder", "uniform_decode", "source"], as_index=False).agg(
            points=("speedup_x", "size"),
            median_speedup_x=("speedup_x", "median"),
            median_graph_ms=("graph_ms", "median"),
            capture_s=("capture_s", "max"),
        )
        lines += [_markdown(summary), ""]
    lines += image("speedup", "speed-up")
    if "speedup_model" in drawn.figures:
        lines += [
            "## Modelled speed-up on an H200 (source: `model (H200 SXM)`, not a measurement)",
            "",
            *image("speedup_model", "modelled speed-up"),
        ]
    lines += ["## Capture time", "", *image("capture", "capture time")]
    lines += image("capture_per_key", "capture time per key")
    lines += _memory_estimate_lines(estimates)
    lines += image("memory", "graph memory") + image("memory_per_key", "graph memory per key")
    if len(failed):
        errors = failed.groupby(["mode", "ladder", "error"], as_index=False).size()
        lines += ["## Failed points", "", _markdown(errors), ""]
    if reference is not None:
        lines += [f"Reference rows plotted: {_sources(reference)}.", ""]
    path = out / "summary.md"
    refuse_link(path)
    write_text_file(path, "\n".join(lines))
    return path
