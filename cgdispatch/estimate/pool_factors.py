"""Graph pools on GPUs other than the fitted H100s: one factor per GPU with runs of its own,
else one per GPU architecture group.

The start-up model's pool terms (a base, kernel nodes, attention inputs) are fitted on 59
H100 start-ups, and nothing in them depends on the GPU. Logged start-ups on other GPUs say
the pool does (issue 28: Ampere and Ada runs, where vLLM's attention backend is
FlashAttention 2 rather than 3, logged 0.4-3.3x what the H100 fit gives), and not by
architecture alone (issue 35: Llama-3.1-8B logs 2.85 GiB of graphs on an A100 40GB and 0.50
on an A100 80GB; vLLM's own profiled estimate agrees with the 40GB runs' logs, so the pool
is real). This module fits, on the runs of the ``"device_fit"`` split
(``cgdispatch/data/reference_vllm_startups_device_fit.csv``) and never on the
``"held_out"`` runs that :mod:`~cgdispatch.estimate.held_out` scores:

- one factor per GPU (``DeviceSpec.name``) with device_fit runs of its own, and
- one per architecture group of :data:`POOL_GROUPS` over all its runs, which a GPU of the
  group without runs of its own (L4, A10G, RTX A5000) carries.

Each factor is the geometric mean of logged / modelled pool over its runs (the
least-squares fit of a common factor on log error, so a run logged at 2x and one at 0.5x
cancel). :data:`~cgdispatch.estimate.startup_pricing.CALIBRATION` carries the fitted factors; a
test refits them. :func:`predict_run` is the one way a logged run of these two splits is
predicted (how ``max_num_seqs`` is read when the log does not give it, which device's rates
price a GPU without a preset).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pandas as pd

from ..core.release_table import release_defaults
from ..core.v1 import RELEASE as V1_RELEASE
from .devices import DEVICE_PRESETS
from .startup import StartupEstimate, estimate_startup
from .startup_data import FLASHINFER_SAMPLER_RUNS, reference_config, reference_startups
from .startup_pricing import CALIBRATION, GIB, StartupCoefficients

__all__ = [
    "POOL_GROUPS",
    "fit_pool_factors",
    "pool_factor_markdown",
    "pool_factor_table",
    "predict_run",
    "run_max_num_seqs",
]

# architecture -> the group that shares one factor: vLLM runs FlashAttention 2 on both
# (FlashAttention 3 is Hopper's), and the logged pools of both sit above the H100 fit
POOL_GROUPS = {"Ampere": "Ampere/Ada", "Ada": "Ampere/Ada"}
# the pool model's inputs do not depend on the GPU: a run on a GPU without a preset is
# traced with this one's (only its graph memory is then used)
TRACE_DEVICE = "H100"


def run_max_num_seqs(row: Any) -> tuple[int, str]:
    """A logged run's max_num_seqs and where it comes from: the log; else the largest FULL
    decode size (vLLM stops FULL decode sizes at max_num_seqs); else its release's
    ``vllm serve`` default for the GPU (:mod:`cgdispatch.core.release_table`: from 0.9, 1024
    on one of 70 GiB or more that is not an A100, else 256). A row without a release
    (``vllm_version``) is read as the newest release that logs like the reference runs."""
    if pd.notna(row["max_num_seqs"]):
        return int(row["max_num_seqs"]), "logged"
    if int(row["full_graphs"]) > 0:
        return int(row["full_largest"]), "largest FULL size"
    device = str(row["device"])
    spec = DEVICE_PRESETS.get(device)
    memory = spec.memory_bytes if spec is not None else 0.0
    release = row.get("vllm_version") if hasattr(row, "get") else None
    defaults = release_defaults(str(release) if pd.notna(release) else V1_RELEASE)
    seqs, _ = defaults.batch_limits(device, memory)
    return seqs, f"vLLM {defaults.release} default for the GPU"


def predict_run(
    row: pd.Series, coefficients: StartupCoefficients | None = None
) -> tuple[StartupEstimate, bool, str]:
    """The model's estimate of a logged run, whether its GPU has a preset (else it was
    traced on :data:`TRACE_DEVICE` and only its graph memory means anything), and where its
    max_num_seqs came from."""
    row = row.copy()
    row["max_num_seqs"], seqs_from = run_max_num_seqs(row)
    device = str(row["device"])
    known = device in DEVICE_PRESETS
    quant = row["quantization"]
    est = estimate_startup(
        row["model"],
        device if known else TRACE_DEVICE,
        reference_config(row),
        tensor_parallel_size=int(row["tensor_parallel_size"]),
        pipeline_parallel_size=int(row["pipeline_parallel_size"]),
        dtype=str(row["dtype"]),
        quantization=None if pd.isna(quant) or quant == "None" else str(quant),
        kv_cache_dtype=str(row["kv_cache_dtype"]),
        gpu_memory_utilization=float(row["gpu_memory_utilization"]),
        coefficients=CALIBRATION if coefficients is None else coefficients,
        vllm_version=str(row["vllm_version"]),  # its KV budget as that release computes it
        flashinfer_installed=row["run"] in FLASHINFER_SAMPLER_RUNS,  # as its log says
    )
    return est, known, seqs_from


def _group(device: str) -> str | None:
    spec = DEVICE_PRESETS.get(device)
    return None if spec is None else POOL_GROUPS.get(spec.architecture)


def fit_pool_factors(
    rows: pd.DataFrame | None = None, base: StartupCoefficients | None = None
) -> StartupCoefficients:
    """``base`` (default :data:`CALIBRATION`'s fitted terms) with ``pool_factors`` fitted on
    ``rows`` (default: the ``"device_fit"`` runs), the model evaluated without any factor:
    per GPU with at least one run (``DeviceSpec.name``), the geometric mean of logged /
    modelled graph memory over its runs; per group of :data:`POOL_GROUPS` with at least one
    run, the same over all the group's runs (the factor of its GPUs without runs). Runs on
    GPUs outside every group are ignored."""
    rows = reference_startups(split="device_fit") if rows is None else rows
    base = CALIBRATION if base is None else base
    plain = dataclasses.replace(base, pool_factors=(), pool_factor_runs=0)
    logs: dict[str, list[float]] = {}
    by_gpu: dict[str, list[float]] = {}
    for _, row in rows.iterrows():
        group = _group(str(row["device"]))
        if group is None:
            continue
        est, _, _ = predict_run(row, plain)
        value = math.log(float(row["graph_memory_gib"]) / (est.graph_memory_bytes / GIB))
        logs.setdefault(group, []).append(value)
        by_gpu.setdefault(DEVICE_PRESETS[str(row["device"])].name, []).append(value)
    factors: list[tuple[str, float]] = []
    for arch, group in POOL_GROUPS.items():
        if group in logs:
            values = logs[group]
            factors.append((arch, math.exp(sum(values) / len(values))))
    for gpu in sorted(by_gpu):
        factors.append((gpu, math.exp(sum(by_gpu[gpu]) / len(by_gpu[gpu]))))
    runs = sum(len(v) for v in logs.values())
    return dataclasses.replace(plain, pool_factors=tuple(factors), pool_factor_runs=runs)


def pool_factor_table(rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each ``"device_fit"`` run: logged pool, the model without and with its group's
    factor (:data:`CALIBRATION`), and the signed errors (docs/calibration.md)."""
    rows = reference_startups(split="device_fit") if rows is None else rows
    plain = dataclasses.replace(CALIBRATION, pool_factors=(), pool_factor_runs=0)
    records: list[dict[str, Any]] = []
    for _, row in rows.iterrows():
        without, _, _ = predict_run(row, plain)
        with_factor, _, _ = predict_run(row)
        logged = float(row["graph_memory_gib"])
        records.append(
            {
                "run": row["run"],
                "device": row["device"],
                "vllm_version": str(row["vllm_version"]),
                "group": _group(str(row["device"])) or "",
                "graph_memory_gib": logged,
                "model_without_factor_gib": without.graph_memory_bytes / GIB,
                "model_gib": with_factor.graph_memory_bytes / GIB,
            }
        )
    table = pd.DataFrame(records)
    if len(table):
        table["error_without_factor"] = (
            table["model_without_factor_gib"] / table["graph_memory_gib"] - 1
        )
        table["error"] = table["model_gib"] / table["graph_memory_gib"] - 1
    return table


def pool_factor_markdown(table: pd.DataFrame | None = None) -> str:
    """The device_fit table of docs/calibration.md: each run's logged pool, the model
    without and with its factor (its GPU's), and the fitted factors (per architecture, the
    factor of the group's GPUs without runs of their own; per GPU)."""
    table = pool_factor_table() if table is None else table
    lines = [
        "| run | GPU | vLLM | graph GiB log | model without factor | error | with factor | error |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in table.to_dict("records"):
        lines.append(
            f"| {r['run']} | {r['device']} | {r['vllm_version']} | {r['graph_memory_gib']:.2f} "
            f"| {r['model_without_factor_gib']:.2f} | {r['error_without_factor']:+.1%} "
            f"| {r['model_gib']:.2f} | {r['error']:+.1%} |"
        )
    factors = ", ".join(f"{a} x{f:.3f}" for a, f in CALIBRATION.pool_factors)
    # an architecture's factor prices the group's GPUs without runs of their own
    lines += ["", f"Fitted factors ({CALIBRATION.pool_factor_runs} runs): {factors}."]
    return "\n".join(lines)
