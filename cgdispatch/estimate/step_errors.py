"""How far the built-in step cost is from measured kernels: whole steps priced by
:class:`~cgdispatch.estimate.step_cost.StepPricer` against the sum of the kernels NVIDIA
measured with vLLM (``aiconfigurator-core`` 0.12.0, summed per step by
:mod:`cgdispatch.estimate.aic_steps`; the fixture ``tests/data/aic_reference_steps.csv``
holds 648 such steps: decode, prefill and mixed, TP 1-8, dense, GQA and MoE models, on
H100, H200 and A100).

Both sides are device work only (no launches, no host time: the measured sums have none),
so the comparison is of the fitted kernel formulas. The H200 tables were never fitted
(``scripts/fit_kernel_model.py``); the H100 and A100 ones were fitted per kernel on their
shape grids, never on whole steps. :func:`step_errors` is what ``benchmarks/bench_step_costs.py``
prints and what the step band of :mod:`~cgdispatch.estimate.uncertainty` is read from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..core import cache
from ..core.step_content import StepContent

__all__ = [
    "REFERENCE_STEPS",
    "priced_reference",
    "step_errors",
    "error_table",
    "kernel_step_errors",
]

# the fixture of measured steps (a file of the repository, not of the installed package)
REFERENCE_STEPS = Path(__file__).resolve().parents[2] / "tests" / "data" / "aic_reference_steps.csv"
HELD_OUT_DEVICES = ("H200",)  # no kernel table of these GPUs was fitted


def _content(row: pd.Series) -> StepContent:
    decodes = [int(row.decode_context)] * int(row.num_decode)
    chunks = [(int(row.cached_tokens), int(row.prompt_tokens))] * int(row.num_prompts)
    return StepContent.of(decodes, chunks)


def priced_reference(path: str | Path = REFERENCE_STEPS) -> pd.DataFrame:
    """The measured steps with the built-in model's device work beside them (``model_ms``)
    and the relative error ``error`` (model / measured - 1); a fresh copy each call."""
    return _priced(Path(path)).copy()


@cache.memo(maxsize=4, key=lambda path: cache.source_digest(path))  # a file by its bytes
def _priced(path: Path) -> pd.DataFrame:
    from .device_model import device_cost_model

    steps = pd.read_csv(path, comment="#")
    out = []
    for (device, model, tp), group in steps.groupby(["device", "model", "tp"], sort=False):
        pricer = device_cost_model(model, device, tensor_parallel_size=int(tp)).pricer()
        group = group.copy()
        # the tables ran each kernel over and over: a small KV cache stayed in L2
        group["model_ms"] = [
            pricer.device_ms(_content(r), l2_warm=True) for r in group.itertuples()
        ]
        out.append(group)
    frame = pd.concat(out, ignore_index=True)
    frame["error"] = frame["model_ms"] / frame["measured_ms"] - 1
    frame["held_out"] = np.where(frame["device"].isin(HELD_OUT_DEVICES), "GPU", "steps")
    return frame


def error_table(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Median and 90th percentile of ``|error|`` and the share within 20%, per group."""
    grouped = frame.assign(abs_error=frame["error"].abs()).groupby(by)["abs_error"]
    return pd.DataFrame(
        {
            "steps": grouped.size(),
            "median": grouped.median(),
            "p90": grouped.quantile(0.9),
            "within_20": grouped.apply(lambda e: float((e <= 0.2).mean())),
        }
    )


def step_errors(path: str | Path = REFERENCE_STEPS, quantile: float = 0.9) -> dict[str, float]:
    """The ``quantile`` of ``|error|`` per step kind (decode, prefill, mixed) and over all
    steps, on the GPU whose tables were never fitted (H200)."""
    frame = priced_reference(path)
    held = frame[frame["held_out"] == "GPU"]
    out = {k: float(np.quantile(g["error"].abs(), quantile)) for k, g in held.groupby("kind")}
    out["all"] = float(np.quantile(held["error"].abs(), quantile))
    return {k: round(v, 4) for k, v in out.items()}


def kernel_step_errors(
    devices: tuple[str, ...], quantile: float, basis: str = "H200, tables never fitted"
) -> dict[str, object]:
    """``step_kernels`` (the ``quantile`` of ``|error|`` over the measured steps on
    ``devices``), ``kernel_steps`` and ``kernel_basis``: the fields of
    :class:`~cgdispatch.estimate.uncertainty.ModelErrors` this data gives."""
    frame = priced_reference()
    errors = frame.loc[frame["device"].isin(devices), "error"].abs().to_numpy()
    return {
        "step_kernels": round(float(np.quantile(errors, quantile)), 4),
        "kernel_steps": len(errors),
        "kernel_basis": basis,
    }
