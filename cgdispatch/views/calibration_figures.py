"""The calibrated costs shown against the data they answer to.

- :func:`calibration_figure`: predicted against logged graph memory, capture time and
  KV-cache tokens for every reference vLLM start-up (leave-one-family-out predictions, each
  run predicted by constants fitted without its family), vLLM's own graph-memory estimate
  beside them;
- :func:`step_ratio_figure` (of :func:`~cgdispatch.estimate.published_steps.published_step_comparison`): the device model's step-time
  ratios (eager over graphs, PIECEWISE over FULL) against published pairs measured on one
  model in both modes (``cgdispatch/data/published_step_times.csv``);
- :func:`mode_step_figure`: step time by mode of one model on one device, as the
  dispatcher routes each mode (model).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..core.modes import CUDAGraphMode
from ..estimate.device_model import device_cost_model
from ..estimate.published_steps import RATIO_TOLERANCE
from .sources import SourcedFigure, label_source, legend_outside

__all__ = [
    "calibration_figure",
    "step_ratio_figure",
    "mode_step_figure",
]

_REFERENCE = "reference data (H100 80GB, 2026-04-22)"
_ERRORS = {
    "graph_memory_gib": "graph_memory_error_cv",
    "capture_s": "capture_error_s_cv",
    "kv_cache_tokens": "kv_tokens_error_cv",
}
_PANELS = (
    ("graph_memory_gib", "graph memory (GiB)", 1.0),
    ("capture_s", "capture time (s)", 1.0),
    ("kv_cache_tokens", "KV-cache tokens (millions)", 1e-6),
)


def calibration_figure(table: pd.DataFrame) -> Figure:
    """Predicted (y) against logged (x) per reference run, one panel per quantity, from a
    :func:`~cgdispatch.estimate.startup_fit.calibration_table`: cross-validated predictions
    filled, vLLM's own graph-memory estimate hollow; the line y = x."""
    need = {f"{c}_cv" for c, _, _ in _PANELS} | {c for c, _, _ in _PANELS}
    missing = sorted(need - set(table.columns))
    if missing:
        raise ValueError(
            f"table lacks {missing}: pass cgdispatch.calibration_table() (cross_validate=True)"
        )
    fig = SourcedFigure(figsize=(14, 4.2), layout="constrained")
    axes = fig.subplots(1, len(_PANELS))
    for ax, (column, label, scale) in zip(axes, _PANELS):
        x = table[column].to_numpy(float) * scale
        y = table[f"{column}_cv"].to_numpy(float) * scale
        for family, part in table.groupby("family", sort=True):
            sel = table.index.isin(part.index)
            ax.scatter(x[sel], y[sel], s=22, label=family, zorder=3)
        if column == "graph_memory_gib":
            ax.scatter(
                x, table["vllm_estimate_gib"], s=26, facecolors="none", edgecolors="0.3",
                label="vLLM's own estimate", zorder=2,
            )  # fmt: skip
        top = float(np.nanmax([x.max(), np.nanmax(y)])) * 1.08
        ax.plot([0, top], [0, top], color="0.5", lw=1, ls="--", label="y = x")
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel(f"logged {label}")
        ax.set_ylabel(f"model {label}")
        err = table[_ERRORS[column]]
        unit = "s" if column == "capture_s" else "%"
        med = err.median() * (1 if unit == "s" else 100)
        short = label.split(" (")[0]
        ax.set_title(f"{short}: median |error| {med:.1f} {unit}", fontsize=9)
    legend_outside(axes[-1], *axes[0].get_legend_handles_labels(), fontsize=7)
    fig.suptitle(
        f"Calibrated start-up model against {len(table)} logged vLLM start-ups "
        "(each run predicted by constants fitted without its model family)",
        fontsize=10,
    )
    return label_source(fig, f"model (H100) vs {_REFERENCE}")


def step_ratio_figure(comparison: pd.DataFrame) -> Figure:
    """Published against modelled step-time ratios per pair (horizontal bars, one row per
    pair, named on one line), the ±25% band around each published ratio; pairs whose GPU
    is unstated are hatched."""
    if comparison.empty:
        raise ValueError("no published pair to compare: the registry holds none of their models")
    fig = SourcedFigure(figsize=(9, 1.6 + 0.42 * len(comparison)), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(comparison))
    pub = comparison["published"].to_numpy(float)
    ax.barh(y - 0.2, pub, 0.4, color="0.6", label="published")
    for i, (value, stated) in enumerate(zip(comparison["model_ratio"], comparison["gpu_stated"])):
        ax.barh(
            i + 0.2, value, 0.4, color="tab:blue", hatch=None if stated else "//",
            label="model" if i == 0 else None,
        )  # fmt: skip
    ax.errorbar(
        pub, y - 0.2, xerr=RATIO_TOLERANCE * pub, fmt="none", color="k", capsize=3,
        label="published ±25%",
    )  # fmt: skip
    ax.axvline(1.0, color="0.4", lw=0.8)
    labels = [
        f"{p} {r}: {e}, bs {b}"
        for p, r, e, b in zip(
            comparison["pair"], comparison["ratio"], comparison["engine"], comparison["batch_size"]
        )
    ]
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()  # the first pair on top, as in the table
    ax.set_xlabel("slower mode's step time / faster mode's")
    ax.set_title("Step-time ratios: device model against published pairs (hatched: GPU unstated)")
    legend_outside(ax)
    return label_source(fig, "model (H100) vs reference data (published, see the sources)")


def mode_step_figure(model: str = "llama-3.1-8b", device: str = "H100") -> Figure:
    """Modelled step time by mode of ``model`` on ``device`` for decode batches of 1-256
    tokens: FULL, PIECEWISE and eager (NONE), FULL_DECODE_ONLY and FULL_AND_PIECEWISE as the
    dispatcher routes a uniform decode of each size."""
    cm = device_cost_model(model, device)
    n = np.unique(np.geomspace(1, 256, 24).astype(int))
    fig = SourcedFigure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.subplots()
    M = CUDAGraphMode
    styles = {
        M.NONE: "--",
        M.PIECEWISE: "-",
        M.FULL: "-",
        M.FULL_DECODE_ONLY: ":",
        M.FULL_AND_PIECEWISE: "-.",
    }
    for mode, style in styles.items():
        ax.plot(n, cm.step_time_ms(mode, n), ls=style, marker=".", label=mode.name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("uniform decode batch (tokens)")
    ax.set_ylabel("step time (ms)")
    full, piece, eager = (
        float(cm.step_time_ms(m, np.array([1]))[0]) for m in (M.FULL, M.PIECEWISE, M.NONE)
    )
    ax.set_title(
        f"{model} on {device}: at 1 token FULL {full:.2f} ms, "
        f"PIECEWISE {100 * (piece / full - 1):+.1f}%, eager {eager / full:.2f}x",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    return label_source(fig, cm.source)
