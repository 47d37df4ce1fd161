"""Sweep results as tables: a preset with overrides, one row per unit, graph memory per unit
(measured on a GPU, estimated otherwise) and the device model's speed-up per mode.

Notebooks 03 and 05 and the sweep report are built on these. They read sweep rows (the
:data:`~cgdispatch.sweep.store.SWEEP_COLUMNS` schema) and return frames with a ``source``
column (``measured (CPU)``, ``measured (<GPU>)``, ``model``, ``model (H200 SXM)``) that the
figures of :mod:`cgdispatch.views.plots` and :mod:`cgdispatch.views.capture_figures` draw.
They do not run sweeps (:func:`cgdispatch.sweep.run.run_sweep` does) and draw nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..core.config import GraphConfig
from ..core.v1 import RELEASE as V1_RELEASE
from ..sweep.spec import SWEEP_PRESETS, SweepSpec

__all__ = [
    "sweep_spec",
    "unit_table",
    "memory_estimates",
    "graph_memory_table",
    "modelled_speedup",
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


def memory_estimates(rows: pd.DataFrame, *, progress: bool = False) -> pd.DataFrame:
    """Estimated shared-pool and separate-pools bytes per (model, dtype, mode, ladder) unit.

    Columns: the unit's model, dtype, mode, ladder, capture_sizes, max_num_seqs, then
    est_pool_bytes, est_separate_bytes, est_graphs and est_source (``model``), from
    :func:`cgdispatch.estimate.graph_memory.estimate_graph_memory` on a meta-device model
    (no memory used). ``.attrs["per_key"]`` holds each unit's per-key estimate
    (``MemoryEstimate.per_key`` plus mode and ladder). Rows of non-toy models (the Hugging
    Face adapter) are skipped: the estimate runs the toy LM's dummy step."""
    from ..estimate.graph_memory import estimate_graph_memory
    from ..models.toy import PRESETS, build_toy_model

    rows = rows[rows["model"].isin(list(PRESETS))]
    cols = ["model", "dtype", "mode", "ladder", "capture_sizes", "max_num_seqs"]
    out, keys = [], []
    models: dict[tuple[str, str], Any] = {}  # one meta model per (preset, dtype)
    for unit in rows[cols].drop_duplicates().itertuples(index=False):
        key = (unit.model, unit.dtype)
        if key not in models:
            models[key] = build_toy_model(unit.model, device="meta", dtype=unit.dtype)
        seqs = 256 if pd.isna(unit.max_num_seqs) else int(unit.max_num_seqs)
        sizes = [int(s) for s in str(unit.capture_sizes).split(",")]
        config = GraphConfig(  # one token ladder per unit: V1's sizes
            vllm_version=V1_RELEASE,
            cudagraph_mode=unit.mode,
            cudagraph_capture_sizes=sizes,
            max_num_seqs=seqs,
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


def graph_memory_table(
    rows: pd.DataFrame, *, estimates: pd.DataFrame | None = None, progress: bool = False
) -> pd.DataFrame:
    """Graph memory of every unit as bars: columns mode, ladder, pool, bar, pool_bytes, source.

    ``pool`` is ``measured`` for units whose rows carry pool bytes (a CUDA sweep; source:
    the rows' own), and ``shared pool`` / ``separate pools`` for the estimate (source
    ``model``): ``estimates`` as :func:`memory_estimates` returns them, computed from the
    rows of toy models when None. ``bar`` is ``"<ladder>: <pool>"``; draw the table with
    ``memory_figure(table, group="bar")``."""
    from ..models.toy import PRESETS

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
    if estimates is None:
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

    :func:`~cgdispatch.estimate.calibration.predict_config` for every (batch kind, mode) of
    the spec: each batch is dispatched as the runner would (runtime mode, padding to the
    ``ladder``, default the spec's first) and timed on the ``device`` preset. ``model``: a
    toy preset (default the spec's); ``num_tokens``: default 16 sizes from 1 to twice the
    largest capture size plus the spec's. Columns as ``predict_config`` plus mode, ladder,
    uniform_decode; source ``model (<device name>)``. Not a measurement."""
    from ..estimate.calibration import predict_config
    from ..estimate.devices import DEVICE_PRESETS, check_device_name
    from ..models.toy import PRESETS, build_toy_model

    name = spec.model if model is None else model
    if name not in PRESETS:
        raise ValueError(
            f"model {name!r} is not a toy preset: the device model profiles toy LMs only; "
            f"pass model= one of {sorted(PRESETS)}"
        )
    check_device_name(device)
    ladder = next(iter(spec.ladders)) if ladder is None else ladder
    if ladder not in spec.ladders:
        raise ValueError(f"ladder {ladder!r} is not in the spec: use one of {list(spec.ladders)}")
    sizes = spec.ladder_sizes(ladder)
    if num_tokens is None:
        grid = np.geomspace(1, 2 * max(sizes), 16).round().astype(int)
        num_tokens = sorted({*map(int, grid), *spec.num_tokens})
    toy = build_toy_model(name, device="meta", dtype=spec.dtype)
    frames = []
    for kind in spec.batch_kinds:
        for mode in spec.modes:
            config = GraphConfig(  # one token ladder: V1's sizes
                vllm_version=V1_RELEASE,
                cudagraph_mode=mode,
                cudagraph_capture_sizes=list(sizes),
                max_num_seqs=spec.max_num_seqs,
            )
            frame = predict_config(
                toy, config, num_tokens, DEVICE_PRESETS[device], uniform_decode=kind == "decode"
            )
            frames.append(frame.assign(mode=mode, ladder=ladder, uniform_decode=kind == "decode"))
    frame = pd.concat(frames, ignore_index=True)
    first = ["mode", "ladder", "uniform_decode"]
    return frame[first + [c for c in frame.columns if c not in first]]
