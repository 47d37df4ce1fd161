"""Sweep report: matplotlib figures and a Markdown summary from a result store.

Each figure function takes sweep rows (the :data:`~cgdispatch.sweep.store.SWEEP_COLUMNS`
schema) and returns a ``matplotlib.figure.Figure`` whose title or legend names the source
of every number (``measured (CPU)``, ``measured (<GPU>)``, ``reference data (<GPU>,
<date>)``, ``model``). :func:`write_report` saves them as PNG next to ``summary.md``.
Graph-memory estimates come from :func:`cgdispatch.estimate.graph_memory.estimate_graph_memory` on a
meta-device model (no memory used) and are labelled ``model``; measured pool bytes
appear only when the rows come from a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure  # pyplot-free: no backend is touched, notebooks keep theirs

from ..sweep.store import load_captures, load_reference, load_results
from .report_folder import claim_report_folder, refuse_link, target

__all__ = [
    "speedup_figure",
    "model_speedup_figure",
    "memory_figure",
    "memory_per_key_figure",
    "capture_figure",
    "memory_estimates",
    "write_report",
]

MIB = 1 << 20


def _sources(frame: pd.DataFrame) -> str:
    return ", ".join(sorted(frame["source"].dropna().astype(str).unique())) or "no data"


def speedup_figure(rows: pd.DataFrame) -> Figure:
    """Speed-up (eager / graph step time) vs num_tokens, one line per (mode, ladder, source);
    uniform-decode and mixed batches side by side."""
    ok = rows[rows["status"] == "ok"]
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, uniform, title in (
        (axes[0], True, "uniform decode"),
        (axes[1], False, "mixed batches"),
    ):
        part = ok[ok["uniform_decode"] == uniform]
        for (mode, ladder, source), group in part.groupby(["mode", "ladder", "source"], sort=True):
            group = group.sort_values("num_tokens")
            ax.plot(
                group["num_tokens"],
                group["speedup_x"],
                marker="o",
                label=f"{mode} / {ladder} [{source}]",
            )
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("num_tokens")
        ax.set_title(title)
        if len(part):
            ax.legend(fontsize=7)
    axes[0].set_ylabel("speed-up (eager / graph), x")
    fig.suptitle(f"Step speed-up by mode and ladder — source: {_sources(ok)}")
    return fig


def memory_estimates(rows: pd.DataFrame, *, progress: bool = False) -> pd.DataFrame:
    """Estimated shared-pool and separate-pools bytes per (model, dtype, mode, ladder) (model).

    ``.attrs["per_key"]`` holds each unit's per-key estimate (``MemoryEstimate.per_key``
    plus mode and ladder). Rows of non-toy models (the Hugging Face adapter) are skipped:
    the estimate runs the toy LM's dummy step."""
    from ..core.config import GraphConfig
    from ..estimate.graph_memory import estimate_graph_memory
    from ..models.toy import PRESETS, build_toy_model

    rows = rows[rows["model"].isin(list(PRESETS))]

    cols = ["model", "dtype", "mode", "ladder", "capture_sizes", "max_num_seqs"]
    out, keys = [], []
    units = rows[cols].drop_duplicates()
    models: dict[tuple[str, str], Any] = {}
    for unit in units.itertuples(index=False):
        key = (unit.model, unit.dtype)
        if key not in models:
            models[key] = build_toy_model(unit.model, device="meta", dtype=unit.dtype)
        seqs = 256 if pd.isna(unit.max_num_seqs) else int(unit.max_num_seqs)
        sizes = [int(s) for s in str(unit.capture_sizes).split(",")]
        config = GraphConfig(
            cudagraph_mode=unit.mode, cudagraph_capture_sizes=sizes, max_num_seqs=seqs
        )
        est = estimate_graph_memory(
            models[key], config.resolve(models[key].attention_cg_support), progress=progress
        )
        keys.append(est.per_key.assign(mode=unit.mode, ladder=unit.ladder))
        out.append(
            {
                **unit._asdict(),
                "est_pool_bytes": est.shared_pool_bytes,
                "est_separate_bytes": est.separate_pools_bytes,
                "est_graphs": len(est.graphs),
                "est_source": "model",
            }
        )
    frame = pd.DataFrame(out)
    frame.attrs["per_key"] = pd.concat(keys, ignore_index=True) if keys else pd.DataFrame()
    return frame


def memory_figure(rows: pd.DataFrame, estimates: pd.DataFrame) -> Figure:
    """Graph memory by mode and ladder: the model's estimate (shared pool and separate
    pools) and, for GPU rows, the measured pool bytes."""
    measured = rows[(rows["device"] == "cuda") & rows["pool_bytes"].notna()]
    measured = measured.groupby(["mode", "ladder"], as_index=False)["pool_bytes"].max()
    table = estimates.merge(measured, on=["mode", "ladder"], how="left")
    labels = [f"{m}\n{ladder}" for m, ladder in zip(table["mode"], table["ladder"])]
    fig = Figure(figsize=(max(6, 1.3 * len(table) + 2), 4.2), layout="constrained")
    ax = fig.subplots()
    x = range(len(table))
    w = 0.27
    ax.bar(
        [i - w for i in x],
        table["est_pool_bytes"] / MIB,
        w,
        label="shared pool, largest first [model]",
    )
    ax.bar(list(x), table["est_separate_bytes"] / MIB, w, label="separate pools, no reuse [model]")
    if len(measured):
        src = _sources(rows[rows["device"] == "cuda"])
        ax.bar(
            [i + w for i in x],
            table["pool_bytes"].astype(float) / MIB,
            w,
            label=f"pool bytes [{src}]",
        )
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.set_ylabel("graph memory, MiB")
    ax.legend(fontsize=7)
    ax.set_title(
        "Graph memory by mode and ladder — estimate: model"
        + (f"; measured: {_sources(rows[rows['device'] == 'cuda'])}" if len(measured) else "")
    )
    return fig


def capture_figure(rows: pd.DataFrame, captures: pd.DataFrame | None = None) -> Figure:
    """Capture time per (mode, ladder) (all keys, warm-ups included) and, when the sweep
    stored per-key capture reports, the capture time of each key vs its num_tokens."""
    ok = rows[rows["capture_s"].notna()]
    table = ok.groupby(["mode", "ladder", "source"], as_index=False).agg(
        capture_s=("capture_s", "max"), num_graphs=("num_graphs", "max")
    )
    per_key = captures is not None and len(captures) > 0
    fig = Figure(figsize=(12 if per_key else max(6, 1.2 * len(table) + 2), 4), layout="constrained")
    axes = fig.subplots(1, 2 if per_key else 1, squeeze=False)[0]
    labels = [
        f"{m}\n{ladder}\n{int(n)} graphs"
        for m, ladder, n in zip(table["mode"], table["ladder"], table["num_graphs"])
    ]
    axes[0].bar(range(len(table)), table["capture_s"], color="tab:orange")
    axes[0].set_xticks(range(len(table)), labels, fontsize=7)
    axes[0].set_ylabel("capture time, s")
    axes[0].set_title("all keys of a (mode, ladder)", fontsize=9)
    if per_key:
        for (mode, ladder, kind), part in captures.groupby(["mode", "ladder", "runtime_mode"]):
            part = part.sort_values("num_tokens")
            axes[1].plot(
                part["num_tokens"],
                part["capture_s"] * 1e3,
                marker=".",
                label=f"{mode} / {ladder}: {kind} keys",
            )
        axes[1].set_xlabel("num_tokens of the key")
        axes[1].set_ylabel("graph capture, ms")
        axes[1].set_title("each key (graph capture only)", fontsize=9)
        axes[1].legend(fontsize=7)
    fig.suptitle(f"Capture time — source: {_sources(ok)}")
    return fig


def memory_per_key_figure(captures: pd.DataFrame, per_key: pd.DataFrame) -> Figure:
    """Per-key pool growth measured on a GPU against the estimate (``model``): one point per
    key, the diagonal is a perfect estimate."""
    cols = ["mode", "ladder", "runtime_mode", "num_tokens", "uniform"]
    measured = captures[(captures["device"] == "cuda") & captures["pool_bytes"].notna()]
    both = measured.merge(per_key, on=cols, how="inner")
    fig = Figure(figsize=(5.5, 5), layout="constrained")
    ax = fig.subplots()
    for (mode, ladder), part in both.groupby(["mode", "ladder"]):
        ax.scatter(
            part["pool_increment_bytes"] / MIB,
            part["pool_bytes"] / MIB,
            s=12,
            label=f"{mode} / {ladder}",
        )
    top = (
        max(float(both[["pool_increment_bytes", "pool_bytes"]].max().max()) / MIB, 1e-3)
        if len(both)
        else 1
    )
    ax.plot([0, top], [0, top], color="grey", lw=0.8, ls="--")
    ax.set_xlabel("estimated pool growth per key, MiB [model]")
    ax.set_ylabel(f"measured pool growth per key, MiB [{_sources(measured)}]")
    ax.legend(fontsize=7)
    ax.set_title("Graph memory per key: estimate vs measurement", fontsize=10)
    return fig


def model_speedup_figure(rows: pd.DataFrame, device: str = "H200") -> Figure:
    """Speed-up the analytic device model predicts for the swept model and sizes on a GPU
    preset (``model (<device>)``): what the CPU measurements cannot show. Toy models only
    (the device model profiles the toy LM); other models' rows are skipped."""
    from ..estimate.device_model import DEVICE_PRESETS, predict_frame, toy_profiles
    from ..models.toy import PRESETS, build_toy_model

    rows = rows[rows["model"].isin(list(PRESETS))]

    spec = DEVICE_PRESETS[device]
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.subplots()
    for (name, dtype), group in rows.groupby(["model", "dtype"]):
        model = build_toy_model(name, device="meta", dtype=dtype)
        sizes = sorted(int(n) for n in group["num_tokens"].dropna().unique())
        frame = predict_frame(toy_profiles(model, sizes), spec, modes=["FULL", "PIECEWISE"])
        for mode, part in frame.groupby("mode"):
            ax.plot(
                part["num_tokens"],
                part["speedup_x"],
                marker="o",
                ls="--",
                label=f"{name} {dtype} {mode} [model ({spec.name})]",
            )
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("num_tokens")
    ax.set_ylabel("speed-up (eager / graph), x")
    if len(rows):  # no toy rows: an empty chart, no legend
        ax.legend(fontsize=7)
    ax.set_title(
        f"Modelled speed-up on {spec.name}\nsource: model (datasheet rates, assumed launch costs)",
        fontsize=10,
    )
    return fig


def _markdown(frame: pd.DataFrame) -> str:
    """A pipe table (pandas' to_markdown needs tabulate, which is not a dependency)."""

    def cell(v: Any) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def write_report(
    results: str | Path,
    out: str | Path | None = None,
    *,
    estimate: bool = True,
    progress: bool = False,
) -> Path:
    """Write ``speedup.png``, ``memory.png``, ``capture.png`` and ``summary.md`` to ``out``
    (default ``RESULTS_DIR/report``); returns the summary's path. Reference rows shipped
    in ``cgdispatch/data`` are plotted alongside, labelled as reference data."""
    results = Path(results)
    rows = load_results(results)
    out = (
        Path(out)
        if out is not None
        else (results if results.is_dir() else results.parent) / "report"
    )
    claim_report_folder(out)
    reference = load_reference()
    plotted = rows if reference is None else pd.concat([rows, reference], ignore_index=True)
    speedup_figure(plotted).savefig(target(out, "speedup.png"), dpi=110)
    captures = load_captures(results)
    capture_figure(rows, captures).savefig(target(out, "capture.png"), dpi=110)
    if len(rows):
        model_speedup_figure(rows).savefig(target(out, "speedup_model.png"), dpi=110)
    estimates = (
        memory_estimates(rows, progress=progress) if estimate and len(rows) else pd.DataFrame()
    )
    if len(estimates):
        memory_figure(rows, estimates).savefig(target(out, "memory.png"), dpi=110)
    gpu_keys = captures[(captures["device"] == "cuda") & captures["pool_bytes"].notna()]
    if len(estimates) and len(gpu_keys):
        memory_per_key_figure(captures, estimates.attrs["per_key"]).savefig(
            target(out, "memory_per_key.png"), dpi=110
        )
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
    lines += [
        "![speed-up](speedup.png)",
        "",
        "## Modelled speed-up on an H200 (source: `model`, not a measurement)",
        "",
        "![modelled speed-up](speedup_model.png)",
        "",
        "## Capture time",
        "",
        "![capture time](capture.png)",
        "",
    ]
    if len(estimates):
        lines += [
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
            "![graph memory](memory.png)",
            "",
        ]
        if len(gpu_keys):
            lines += ["![graph memory per key](memory_per_key.png)", ""]
    if len(failed):
        errors = failed.groupby(["mode", "ladder", "error"], as_index=False).size()
        lines += ["## Failed points", "", _markdown(errors), ""]
    if reference is not None:
        lines += [f"Reference rows plotted: {_sources(reference)}.", ""]
    path = out / "summary.md"
    refuse_link(path)
    path.write_text("\n".join(lines))
    return path
