"""How sure ``tune`` can be that a plan beats vLLM's default: the band around each held-out
difference, and the ladders no other ladder beats on every figure.

Both ladders are priced by the same model, so its errors largely cancel in their
difference; what does not cancel is the part of the difference that comes from what the
model may have wrong. Per held-out step the difference ``c(plan) - c(default)`` splits into
a padding part (the plan's mode at its padded size against the same mode at the default's
padded size: the per-token cost) and a mode part (the plan's mode against the default's at
the same size: graph versus eager or PIECEWISE versus FULL overheads). The padding part is
kernel work: it may be off by the kernel model's error on measured steps it was not fitted
to (``u_k``); the mode part is launch overhead: it may be off by the model's error on
published eager / graph ratios (``u_m``); either in either direction, so the model band on
the mean difference is ``(u_k * |sum pad| + u_m * |sum mode|) / N``:
when the plan trades padding for fewer eager steps and the two nearly cancel, the band
exceeds the gain. The statistical band is two standard errors of the mean difference over
:data:`BLOCKS` consecutive blocks of held-out steps (traffic varies along a trace).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..core.config import GraphConfig
from ..core.modes import CUDAGraphMode
from .costs import CostModel
from .whatif import MODE_CODES, evaluate

__all__ = ["StepBand", "step_band", "ScaledCostModel", "pareto_set", "BLOCKS", "PARETO_FIGURES"]

BLOCKS = 20
# the figures the Pareto set compares, lower is better for each
PARETO_FIGURES = ("mean_step_ms", "p99_ttft_ms", "graph_memory_bytes", "capture_s")


@dataclass(frozen=True)
class StepBand:
    """The held-out mean step difference (plan - default, ms) and its bands (ms)."""

    delta_ms: float
    padding_ms: float  # the part of delta_ms that padding makes
    mode_ms: float  # the part that the runtime modes make
    model_ms: float  # step-time model error on both parts
    noise_ms: float  # two standard errors over BLOCKS blocks of steps

    @property
    def band_ms(self) -> float:
        return self.model_ms + self.noise_ms


def step_band(
    trace: pd.DataFrame,
    planned: GraphConfig,
    default: GraphConfig,
    cost_model: CostModel,
    step_error: float,
    mode_error: float | None = None,
) -> StepBand:
    """:class:`StepBand` of ``planned`` against ``default`` on the steps of ``trace``.
    ``step_error``: the kernel work's relative error (the padding part); ``mode_error``:
    the launch overheads' (the mode part; default ``step_error``)."""
    mode_error = step_error if mode_error is None else mode_error
    plan = evaluate(planned, trace, cost_model)
    base = evaluate(default, trace, cost_model)
    c_plan, c_base = plan.step_time_ms, base.step_time_ms
    crossed = np.empty(len(trace))  # the plan's mode at the default's padded size
    for mode, code in MODE_CODES.items():
        sel = plan.runtime_mode == code
        if sel.any():
            crossed[sel] = cost_model.step_time_ms(mode, base.padded_tokens[sel])
    n = len(trace)
    padding = float((c_plan - crossed).sum()) / n
    mode = float((crossed - c_base).sum()) / n
    diff = c_plan - c_base
    blocks = [b.mean() for b in np.array_split(diff, min(BLOCKS, n)) if len(b)]
    noise = 2 * float(np.std(blocks, ddof=1)) / np.sqrt(len(blocks)) if len(blocks) > 1 else 0.0
    return StepBand(
        delta_ms=float(diff.mean()),
        padding_ms=padding,
        mode_ms=mode,
        model_ms=step_error * abs(padding) + mode_error * abs(mode),
        noise_ms=noise,
    )


@dataclass(frozen=True)
class ScaledCostModel:
    """``model`` with every step ``factor`` times as long (graph prices unchanged): the plan
    priced as the step-time model's error would price it at worst."""

    model: Any
    factor: float
    label: str = ""  # the source to report instead of the model's (a calibrated scale)

    @property
    def source(self) -> str:
        return self.label or str(getattr(self.model, "source", "model"))

    @property
    def step_scale(self) -> float:
        """The factor a step priced from what it holds takes too (workload.latency)."""
        return self.factor * float(getattr(self.model, "step_scale", 1.0))

    def step_time_ms(self, mode: CUDAGraphMode, num_tokens: np.ndarray, *args: Any) -> np.ndarray:
        return self.factor * np.asarray(self.model.step_time_ms(mode, num_tokens, *args))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def pareto_set(figures: dict[str, dict[str, Any]]) -> list[str]:
    """The names (in ``figures``' order) that no other name beats on every figure of
    :data:`PARETO_FIGURES` both have (lower is better), being strictly better on one."""
    names = list(figures)
    keys = [k for k in PARETO_FIGURES if all(_finite(figures[n].get(k)) for n in names)]

    def beats(a: str, b: str) -> bool:
        fa, fb = figures[a], figures[b]
        return all(fa[k] <= fb[k] for k in keys) and any(fa[k] < fb[k] for k in keys)

    return [b for b in names if not any(beats(a, b) for a in names if a != b)]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and np.isfinite(value)
