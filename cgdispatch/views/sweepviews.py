"""Sweep results as notebook views: a preset with overrides, one row per unit, graph memory
per unit (measured on a GPU, estimated otherwise), the device model's speed-up per mode, and
step time eager vs graphs.

Notebooks 03 and 05 are built on these. They read sweep rows (the
:data:`~cgdispatch.sweep.store.SWEEP_COLUMNS` schema) and return frames with a ``source`` column
that :mod:`cgdispatch.views.plots` draws (``measured (CPU)``, ``measured (<GPU>)``, ``model``,
``model (H200 SXM)``); :func:`step_time_figure` draws its own, labelled likewise. They do
not run sweeps (:func:`cgdispatch.sweep.run.run_sweep` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..sweep.spec import SWEEP_PRESETS, SweepSpec

__all__ = [
    "sweep_spec",
    "unit_table",
    "graph_memory_table",
    "modelled_speedup",
    "step_time_figure",
]

_UNIT = ["mode", "ladder"]


def sweep_spec(preset: str, **overrides: Any) -> SweepSpec:
    """The sweep preset ``preset`` with every override that is not None applied.

    Notebook parameters left at None keep the preset's value: ``sweep_spec("smoke",
    modes=None, repeats=3)`` is the smoke preset with 3 repeats."""
    if preset not in SWEEP_PRESETS:
        raise ValueError(f"sweep preset {preset!r} is unknown: use one of {sorted(SWEEP_PRESETS)}")
    changes = {k: v for k, v in overrides.items() if v is not None}
    for name in ("modes", "num_tokens", "batch_kinds"):
        if name in changes:
            changes[name] = tuple(changes[name])
    return SWEEP_PRESETS[preset].replace(**changes) if changes else SWEEP_PRESETS[preset]


def unit_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (mode, ladder) unit of a sweep: what it captured and what it gained.

    Columns: mode, ladder, resolved_mode, num_graphs, capture_s, graph_capture_s,
    pool_bytes (CUDA only), ok and failed points, median speed-up of the unit's ok
    uniform-decode and mixed points (NaN when none), source. Units keep sweep order."""
    rows = rows.reset_index(drop=True)
    out = []
    for (mode, ladder), part in rows.groupby(_UNIT, sort=False):
        ok = part[part["status"] == "ok"]
        first = part.iloc[0]
        out.append(
            {
                "mode": mode,
                "ladder": ladder,
                "resolved_mode": first["resolved_mode"],
                "num_graphs": part["num_graphs"].max(),
                "capture_s": part["capture_s"].max(),
                "graph_capture_s": part["graph_capture_s"].max(),
                "pool_bytes": part["pool_bytes"].max(),
                "ok": len(ok),
                "failed": len(part) - len(ok),
                "decode_speedup_x": ok.loc[ok["uniform_decode"], "speedup_x"].median(),
                "mixed_speedup_x": ok.loc[~ok["uniform_decode"].astype(bool), "speedup_x"].median(),
                "source": first["source"],
            }
        )
    return pd.DataFrame(out)


def graph_memory_table(rows: pd.DataFrame, *, progress: bool = False) -> pd.DataFrame:
    """Graph memory of every unit as bars: columns mode, ladder, pool, bar, pool_bytes, source.

    ``pool`` is ``measured`` for units whose rows carry pool bytes (a CUDA sweep; source:
    the rows' own), and ``shared pool`` / ``separate pools`` for the estimate of
    :func:`cgdispatch.estimate.graph_memory.estimate_graph_memory` (source ``model``; toy models only, the
    estimate runs their dummy step on meta tensors). ``bar`` is ``"<ladder>: <pool>"``."""
    from ..models.toy import PRESETS
    from .report import memory_estimates

    out: list[dict[str, Any]] = []
    units = unit_table(rows)
    for unit in units[units["pool_bytes"].notna()].itertuples():
        out.append(
            dict(
                mode=unit.mode,
                ladder=unit.ladder,
                pool="measured",
                pool_bytes=int(unit.pool_bytes),
                source=unit.source,
            )
        )
    toy = rows[rows["model"].isin(list(PRESETS)) & rows["capture_sizes"].notna()]
    estimates = memory_estimates(toy, progress=progress) if len(toy) else pd.DataFrame()
    for est in estimates.itertuples():
        for pool, value in (
            ("shared pool", est.est_pool_bytes),
            ("separate pools", est.est_separate_bytes),
        ):
            out.append(
                dict(
                    mode=est.mode,
                    ladder=est.ladder,
                    pool=pool,
                    pool_bytes=int(value),
                    source=est.est_source,
                )
            )
    frame = pd.DataFrame(out, columns=["mode", "ladder", "pool", "pool_bytes", "source"])
    return frame.assign(bar=frame["ladder"] + ": " + frame["pool"])


def modelled_speedup(
    spec: SweepSpec,
    *,
    device: str = "H200",
    ladder: str | None = None,
    num_tokens: Sequence[int] | None = None,
    model: str | None = None,
) -> pd.DataFrame:
    """Step speed-up the analytic device model predicts for each of ``spec``'s modes.

    Each batch is dispatched as the runner would (runtime mode, padding to the ``ladder``,
    default the spec's first) and timed by :mod:`cgdispatch.estimate.device_model` on the ``device``
    preset, for the spec's batch kinds. ``model``: a toy preset (default the spec's);
    ``num_tokens``: default 16 sizes from 1 to twice the largest capture size plus the
    spec's. Columns as :func:`~cgdispatch.estimate.device_model.predict_config` plus mode, ladder,
    uniform_decode; source ``model (<device name>)``. Not a measurement."""
    from ..core.config import GraphConfig
    from ..core.dispatcher import CudagraphDispatcher
    from ..estimate.device_model import DEVICE_PRESETS, predict_step
    from ..estimate.kernels import toy_profiles
    from ..models.toy import PRESETS, build_toy_model

    name = spec.model if model is None else model
    if name not in PRESETS:
        raise ValueError(
            f"model {name!r} is not a toy preset: the device model profiles toy LMs only; "
            f"pass model= one of {sorted(PRESETS)}"
        )
    if device not in DEVICE_PRESETS:
        raise ValueError(f"device {device!r} is unknown: use one of {sorted(DEVICE_PRESETS)}")
    ladder = next(iter(spec.ladders)) if ladder is None else ladder
    if ladder not in spec.ladders:
        raise ValueError(f"ladder {ladder!r} is not in the spec: use one of {list(spec.ladders)}")
    sizes = spec.ladder_sizes(ladder)
    if num_tokens is None:
        grid = np.geomspace(1, 2 * max(sizes), 16).round().astype(int)
        num_tokens = sorted({*map(int, grid), *spec.num_tokens})
    dev = DEVICE_PRESETS[device]
    toy = build_toy_model(name, device="meta", dtype=spec.dtype)
    rows = []
    for kind in spec.batch_kinds:
        uniform = kind == "decode"
        plans = {}
        for mode in spec.modes:
            config = GraphConfig(
                cudagraph_mode=mode,
                cudagraph_capture_sizes=list(sizes),
                max_num_seqs=spec.max_num_seqs,
            ).resolve(toy.attention_cg_support)
            dispatcher = CudagraphDispatcher(config, record_stats=False)
            dispatcher.initialize_cudagraph_keys()
            plans[mode] = [(int(n), *dispatcher.dispatch(int(n), uniform)) for n in num_tokens]
        needed = {n for plan in plans.values() for n, _, d in plan} | {
            d.num_tokens for plan in plans.values() for _, _, d in plan
        }
        profiles = toy_profiles(toy, sorted(needed), uniform=uniform, q=1)
        for mode, plan in plans.items():
            for n, runtime_mode, desc in plan:
                eager = predict_step(profiles[n], "NONE", dev)["step_ms"]
                graph = predict_step(profiles[desc.num_tokens], runtime_mode, dev)["step_ms"]
                rows.append(
                    {
                        "mode": mode,
                        "ladder": ladder,
                        "uniform_decode": uniform,
                        "num_tokens": n,
                        "runtime_mode": str(runtime_mode),
                        "padded_size": desc.num_tokens,
                        "eager_ms": eager,
                        "graph_ms": graph,
                        "speedup_x": eager / graph,
                        "source": f"model ({dev.name})",
                    }
                )
    return pd.DataFrame(rows)


def step_time_figure(rows: pd.DataFrame, *, source: str | None = None) -> Any:
    """Median step time vs num_tokens of the ok rows: graphs (solid) and eager (dashed) per
    mode, with the p10-p90 band of the graph runs; one panel per batch kind present.
    ``source`` defaults to the rows' ``source`` column (e.g. ``measured (CPU)``)."""
    from .plots import MODE_COLORS, SourcedFigure, _frame_source, _label_source, _require

    cols = ["mode", "num_tokens", "uniform_decode", "eager_ms", "graph_ms"]
    ok = _require(rows, cols, "step_time_figure")
    label = _frame_source(ok, source)
    kinds = [k for k in (True, False) if (ok["uniform_decode"] == k).any()]
    fig = SourcedFigure(figsize=(5 + 3.5 * len(kinds), 4.2), layout="constrained")
    axes = fig.subplots(1, len(kinds), squeeze=False, sharey=True)[0]
    for ax, uniform in zip(axes, kinds):
        part = ok[ok["uniform_decode"] == uniform]
        for mode, group in part.groupby("mode", sort=False):
            group = group.groupby("num_tokens").median(numeric_only=True).sort_index()
            x, color = group.index.to_numpy(), MODE_COLORS.get(str(mode))
            ax.plot(x, group["graph_ms"], marker="o", ms=3, color=color, label=f"{mode}: graphs")
            ax.plot(x, group["eager_ms"], ls="--", marker=".", color=color, label=f"{mode}: eager")
            if {"graph_p10_ms", "graph_p90_ms"} <= set(group.columns):
                ax.fill_between(
                    x, group["graph_p10_ms"], group["graph_p90_ms"], color=color, alpha=0.15
                )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("num_tokens (tokens)")
        ax.set_title("uniform decode" if uniform else "mixed batches", fontsize=10)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("step time, median (ms)")
    fig.suptitle("step time: eager vs graphs")
    return _label_source(fig, label)
