"""Fitting a :class:`~cgdispatch.estimate.setup_profile.CalibrationProfile` on one setup's
own vLLM logs: ``python -m cgdispatch calibrate``'s logic (the CLI parses and prints).

Every start-up log is replayed through the start-up model
(:func:`~cgdispatch.estimate.startup.estimate_startup`) with the settings it printed: its
capture sizes and mode (V1's keys, as the logged releases capture), ``max_num_seqs``,
``max_num_batched_tokens``, dtype, quantization, KV dtype and memory share. Then, in order:

1. ``pool_factor``: the geometric mean over runs of logged / modelled graph pool;
2. ``capture_factor``: the same for capture time;
3. ``non_torch_gib``: with those two applied, the mean over runs of the non-torch memory
   that makes the modelled KV budget hold exactly the logged KV tokens, held at >= 0 (the
   least-squares fit of one constant under that bound: memory is never negative); each
   run's KV budget is computed as its own logged release computes it (from 0.20 the
   graph-memory estimate comes off it, :mod:`cgdispatch.core.release_table`);
4. ``step_scale`` (when step times are given): the geometric mean of measured / modelled
   step time at each :class:`~cgdispatch.estimate.step_measurements.StepPoint`.

Residuals are those of the calibrated model on the same runs, (model - logged) / logged;
with one run they are zero by construction. All logs must be of ONE setup: the same model,
GPU and TP size (:func:`~cgdispatch.estimate.setup_profile.check_same_setup` refuses
another, naming both).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import GraphConfig
from ..core.modes import AttentionCGSupport, CUDAGraphMode
from ..core.release_table import release_defaults
from ..core.v1 import RELEASE as V1_RELEASE
from .devices import DeviceSpec, device_label, device_spec
from .setup_profile import CalibrationProfile, LoggedFile, published_id
from .startup import StartupEstimate, estimate_startup
from .startup_pricing import CALIBRATION, GIB, StartupCoefficients
from .step_measurements import StepPoint
from .vllm_logs import VllmStartupLog

__all__ = ["LoggedRun", "fit_setup", "run_config", "estimate_run", "file_sha256", "log_release"]

KV_BLOCK_TOKENS = 16  # vLLM's default block_size (the logged runs use it)


@dataclass(frozen=True)
class LoggedRun:
    """A start-up log and the file it was read from."""

    path: str
    sha256: str
    log: VllmStartupLog


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _mode(log: VllmStartupLog) -> str:
    if log.cudagraph_mode:
        return log.cudagraph_mode
    if log.full_graphs and log.piecewise_graphs:
        return "FULL_AND_PIECEWISE"
    return "FULL" if log.full_graphs else "PIECEWISE"


def log_release(log: VllmStartupLog) -> str:
    """The release a log was printed by (``"0.19.0"``), else V1's (a log that does not
    print one is read as the newest release that logs like the reference runs)."""
    if log.vllm_version:
        try:
            return release_defaults(log.vllm_version).release
        except ValueError:
            pass  # not a release string this table reads (a dev build): V1's
    return V1_RELEASE


def run_config(path: str, log: VllmStartupLog, device: str | DeviceSpec) -> GraphConfig:
    """The :class:`GraphConfig` that captures what ``log`` captured, under the logged
    release (:func:`log_release`: its generation's keys, its KV budget rule),
    ``max_num_seqs`` as :func:`~cgdispatch.estimate.pool_factors.run_max_num_seqs` reads a
    run that does not print it."""
    from .pool_factors import run_max_num_seqs

    if not log.capture_sizes or log.max_num_batched_tokens is None:
        raise ValueError(
            f"{path} prints no cudagraph_capture_sizes or max_num_batched_tokens: give the "
            "log from the server's start (its 'Initializing a V1 LLM engine' line)"
        )
    seqs, _ = run_max_num_seqs(
        {
            "max_num_seqs": log.max_num_seqs if log.max_num_seqs else float("nan"),
            "full_graphs": log.full_graphs,
            "full_largest": log.full_largest or max(log.capture_sizes),
            "device": device_label(device),
            "vllm_version": log.vllm_version or float("nan"),
        }  # fmt: skip
    )
    config = GraphConfig(
        cudagraph_mode=_mode(log),
        cudagraph_capture_sizes=list(log.capture_sizes),
        max_num_seqs=seqs,
        max_num_batched_tokens=log.max_num_batched_tokens,
        tensor_parallel_size=log.tensor_parallel_size,
        vllm_version=log_release(log),
    )
    no_full = log.full_graphs == 0 and log.piecewise_graphs > 0
    return config.resolve(AttentionCGSupport.NEVER if no_full else AttentionCGSupport.ALWAYS)


def estimate_run(
    run: LoggedRun, model: str, device: str | DeviceSpec, coefficients: StartupCoefficients
) -> StartupEstimate:
    """The start-up model's estimate of one logged run, with ``coefficients``."""
    log = run.log
    quant = None if log.quantization in (None, "None") else log.quantization
    return estimate_startup(
        model,
        device,
        run_config(run.path, log, device),
        tensor_parallel_size=log.tensor_parallel_size,
        pipeline_parallel_size=log.pipeline_parallel_size,
        dtype=log.dtype,
        quantization=quant,
        kv_cache_dtype=log.kv_cache_dtype or "auto",
        gpu_memory_utilization=log.gpu_memory_utilization,
        coefficients=coefficients,
        vllm_version=log_release(log),  # its KV budget as the logged release computes it
    )


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 1.0


def _resolution(value: float | None, step: float) -> float:
    """Half the printed step relative to ``value`` (0 when absent)."""
    return 0.5 * step / value if value else 0.0


def fit_setup(
    name: str,
    model: str,
    device: str | DeviceSpec,
    runs: Sequence[LoggedRun],
    *,
    steps: Sequence[tuple[LoggedFile, list[StepPoint]]] = (),
    cost_model: Callable[[], Any] | None = None,
    base: StartupCoefficients = CALIBRATION,
) -> tuple[CalibrationProfile, list[dict[str, Any]]]:
    """The profile of ``runs`` (start-up logs of ``model`` on ``device``) and step points,
    and one row per run and per step point: logged, modelled (shipped) and calibrated.
    ``cost_model()`` builds the cost model the step points are priced by (only called when
    there are any)."""
    if not runs:
        raise ValueError("no start-up log given: calibrate needs at least one vLLM start-up log")
    model = published_id(model)
    tp = runs[0].log.tensor_parallel_size
    plain = [estimate_run(r, model, device, base) for r in runs]
    pools = [(r.log.graph_memory_gib, e.graph_memory_bytes / GIB) for r, e in zip(runs, plain)]
    captures = [(r.log.capture_s, e.capture_s) for r, e in zip(runs, plain)]
    spec = device_spec(device)
    draft = CalibrationProfile(
        name=name, model=model, device=device_label(device), architecture=spec.architecture,
        tensor_parallel_size=tp, runs=len(runs), files=(),
        pool_factor=_geomean([a / m for a, m in pools if a and m]),
        capture_factor=_geomean([a / m for a, m in captures if a and m]),
        non_torch_gib=0.0, step_scale=None, step_points=0, graph_memory_residuals=(),
        capture_residuals=(), kv_tokens_residuals=(), step_residuals=(),
    )  # fmt: skip
    scaled = [estimate_run(r, model, device, draft.coefficients(base)) for r in runs]
    draft = dataclasses.replace(draft, non_torch_gib=_non_torch_need(runs, scaled))
    fitted = [estimate_run(r, model, device, draft.coefficients(base)) for r in runs]
    rows = [_run_row(r, p, f) for r, p, f in zip(runs, plain, fitted)]

    def rel(key: str) -> tuple[float, ...]:
        return tuple(r[f"{key}_residual"] for r in rows if r.get(f"{key}_residual") is not None)

    points = [p for _, ps in steps for p in ps]
    scale, step_rows = _step_fit(points, cost_model)
    rows += step_rows
    files = tuple(LoggedFile(r.path, r.sha256, "startup log") for r in runs)
    files += tuple(f for f, _ in steps)
    resolutions = (
        ("graph_memory", max(_resolution(r.log.graph_memory_gib, 0.01) for r in runs)),
        ("capture", max(_resolution(r.log.capture_s, _capture_step(r.log.capture_s))
                        for r in runs)),
    )  # fmt: skip
    profile = dataclasses.replace(
        draft, files=files, step_scale=scale, step_points=len(points),
        graph_memory_residuals=rel("graph_memory"), capture_residuals=rel("capture"),
        kv_tokens_residuals=rel("kv_tokens"),
        step_residuals=tuple(r["step_residual"] for r in step_rows),
        resolutions=resolutions,
    )  # fmt: skip
    return profile, rows


def _capture_step(value: float | None) -> float:
    """The printed step of a capture time: whole seconds when it is whole (vLLM prints
    ``finished in 3 secs``), else hundredths."""
    return 1.0 if value is not None and float(value).is_integer() else 0.01


def _non_torch_need(runs: Sequence[LoggedRun], scaled: list[StartupEstimate]) -> float:
    """The mean over runs of the non-torch memory (GiB) that makes each estimate's KV
    budget hold the logged KV tokens (else the logged KV GiB), at least 0 (the constrained
    least-squares value: a negative need means the model's other terms take too much, not
    that the process frees memory); the estimates' own when no run logs either."""
    needs = []
    for r, e in zip(runs, scaled):
        if r.log.kv_cache_tokens:  # half a block above: the block count floors
            target = (r.log.kv_cache_tokens + KV_BLOCK_TOKENS / 2) * e.kv_bytes_per_token
        elif r.log.kv_cache_gib:
            target = r.log.kv_cache_gib * GIB
        else:
            continue
        needs.append(e.non_torch_bytes / GIB + (e.kv_cache_bytes - target) / GIB)
    return max(float(np.mean(needs)), 0.0) if needs else scaled[0].non_torch_bytes / GIB


def _step_fit(
    points: list[StepPoint], cost_model: Callable[[], Any] | None
) -> tuple[float | None, list[dict[str, Any]]]:
    """(geometric mean of measured / modelled step, a row per point with its residual);
    (None, []) without points."""
    if not points:
        return None, []
    if cost_model is None:
        raise ValueError("step times were given but no cost model to price them")
    costs, rows = cost_model(), []
    for p in points:
        mode = CUDAGraphMode.parse(p.runtime_mode)
        modelled = float(costs.step_time_ms(mode, np.array([p.num_tokens]))[0])
        rows.append({"run": p.what, "step_ms": p.measured_ms, "step_ms_model": modelled})
    scale = _geomean([r["step_ms"] / r["step_ms_model"] for r in rows])
    for r in rows:
        r["step_ms_calibrated"] = r["step_ms_model"] * scale
        r["step_residual"] = r["step_ms"] / r["step_ms_calibrated"] - 1.0
    return scale, rows


def _run_row(run: LoggedRun, plain: StartupEstimate, fitted: StartupEstimate) -> dict[str, Any]:
    log = run.log

    def residual(model: float, logged: float | None) -> float | None:
        return None if not logged else model / logged - 1.0

    return {
        "run": Path(run.path).name,
        "graph_memory_gib": log.graph_memory_gib,
        "graph_memory_gib_model": plain.graph_memory_bytes / GIB,
        "graph_memory_gib_calibrated": fitted.graph_memory_bytes / GIB,
        "graph_memory_residual": residual(fitted.graph_memory_bytes / GIB, log.graph_memory_gib),
        "capture_s": log.capture_s,
        "capture_s_model": plain.capture_s,
        "capture_s_calibrated": fitted.capture_s,
        "capture_residual": residual(fitted.capture_s, log.capture_s),
        "kv_cache_tokens": log.kv_cache_tokens,
        "kv_cache_tokens_model": plain.kv_cache_tokens,
        "kv_cache_tokens_calibrated": fitted.kv_cache_tokens,
        "kv_tokens_residual": residual(fitted.kv_cache_tokens, log.kv_cache_tokens),
    }
