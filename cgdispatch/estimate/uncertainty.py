"""How far a modelled figure may be off: the errors of the models on data they were not
fitted to, as relative bands that ``tune`` prints beside each figure and judges a plan by.

* graph memory, capture time and KV-cache tokens: the start-up model's leave-one-family-out
  errors on the logged vLLM start-ups (:func:`~cgdispatch.estimate.startup_fit.calibration_table`),
  the :data:`QUANTILE` of ``|predicted - logged| / logged``;
* step time, two parts: ``step_kernels``, the error of whole steps' kernel work against
  kernels measured on a GPU whose tables were never fitted
  (:func:`~cgdispatch.estimate.step_errors.step_errors`: H200, decode, prefill and mixed
  steps; an absolute time, what a mean step, a TTFT or a TPOT carries); and ``step_time``,
  the mode part: the device model's errors on published step-time ratios it was not fitted
  to (:func:`~cgdispatch.estimate.published_steps.published_step_comparison`: eager / graph
  and PIECEWISE / FULL ratios on H100), the same quantile of ``|error|``.

:data:`MODEL_ERRORS` holds the numbers (computing them re-fits the start-up model once per
family, about 30 s); :func:`model_errors` computes them from the shipped data and a test
checks that the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "ModelErrors",
    "MODEL_ERRORS",
    "OTHER_GPU_ERRORS",
    "QUANTILE",
    "errors_for",
    "model_errors",
    "other_gpu_errors",
]

QUANTILE = 0.9  # a band that holds on 9 of 10 runs not fitted


@dataclass(frozen=True)
class ModelErrors:
    """Relative errors (fractions) of the modelled figures at :data:`QUANTILE`."""

    graph_memory: float
    capture: float
    kv_tokens: float
    step_time: float
    runs: int  # start-up runs behind the first three
    ratios: int  # published step-time ratios behind step_time (the mode part)
    basis: str = "leave one family out"  # how the start-up runs were kept out of the fit
    step_kernels: float = 0.0  # whole steps' kernel time against measured kernels
    kernel_steps: int = 0  # measured steps behind step_kernels
    kernel_basis: str = "H200, tables never fitted"

    @property
    def source(self) -> str:
        return (
            f"{QUANTILE:.0%} of model errors on data not fitted: {self.runs} vLLM start-ups "
            f"({self.basis}), {self.kernel_steps} steps of measured kernels "
            f"({self.kernel_basis}), {self.ratios} published step-time ratios"
        )


def model_errors() -> ModelErrors:
    """:class:`ModelErrors` computed from the shipped reference data (slow: see above)."""
    from .published_steps import published_step_comparison
    from .startup_fit import calibration_table
    from .step_errors import kernel_step_errors

    table = calibration_table()
    capture = (table["capture_error_s_cv"].abs() / table["capture_s"]).to_numpy()
    steps = published_step_comparison()["error"].abs().to_numpy()

    def q(values: np.ndarray) -> float:
        return round(float(np.quantile(values[np.isfinite(values)], QUANTILE)), 4)

    return ModelErrors(
        graph_memory=q(table["graph_memory_error_cv"].abs().to_numpy()),
        capture=q(capture),
        kv_tokens=q(table["kv_tokens_error_cv"].abs().to_numpy()),
        step_time=q(steps),
        runs=len(table),
        ratios=len(steps),
        **kernel_step_errors(("H200",), QUANTILE),
    )


# model_errors() on the shipped data (tests/estimate/test_uncertainty.py recomputes it)
MODEL_ERRORS = ModelErrors(
    graph_memory=0.2048, capture=0.4946, kv_tokens=0.0116, step_time=0.1936, runs=59, ratios=7,
    step_kernels=0.1096, kernel_steps=216,
)  # fmt: skip

# the architecture of the GPUs the start-up model is fitted on: its leave-one-family-out
# errors hold there; elsewhere the held-out runs' errors do
FITTED_ARCHITECTURE = "Hopper"


def other_gpu_errors() -> ModelErrors:
    """:class:`ModelErrors` on GPUs of another architecture than the fitted runs': the
    :data:`QUANTILE` of the start-up model's errors on the held-out runs logged there
    (:func:`~cgdispatch.estimate.held_out.held_out_errors`; each quantity on the runs
    where it is evaluated); step kernels on the measured A100 steps (its kernel tables
    were fitted, its whole steps never); the mode part as :data:`MODEL_ERRORS`."""
    from .devices import DEVICE_PRESETS
    from .held_out import held_out_errors
    from .step_errors import kernel_step_errors

    errors = held_out_errors()
    arch = [DEVICE_PRESETS[d].architecture if d in DEVICE_PRESETS else "" for d in errors["device"]]
    other = errors[[a != FITTED_ARCHITECTURE for a in arch]]

    def q(column: str) -> float:
        values = other[column].abs().dropna().to_numpy(float)
        return round(float(np.quantile(values, QUANTILE)), 4)

    return ModelErrors(
        graph_memory=q("graph_memory_error"),
        capture=q("capture_error"),
        kv_tokens=q("kv_tokens_error"),
        step_time=MODEL_ERRORS.step_time,
        runs=len(other),
        ratios=MODEL_ERRORS.ratios,
        basis="held out, logged on GPUs other than the fitted H100s",
        **kernel_step_errors(("A100",), QUANTILE, "A100, steps never fitted"),
    )


# other_gpu_errors() on the shipped data (tests/estimate/test_uncertainty.py recomputes it)
OTHER_GPU_ERRORS = ModelErrors(
    graph_memory=0.7093, capture=0.7171, kv_tokens=0.0639, step_time=0.1936, runs=13, ratios=7,
    basis="held out, logged on GPUs other than the fitted H100s",
    step_kernels=0.2397, kernel_steps=216, kernel_basis="A100, steps never fitted",
)  # fmt: skip


def errors_for(device: object) -> ModelErrors:
    """The errors a figure on ``device`` (a preset name or a DeviceSpec) carries:
    :data:`MODEL_ERRORS` on the fitted runs' architecture (Hopper), else
    :data:`OTHER_GPU_ERRORS` (an unknown architecture counts as another)."""
    from .devices import device_spec

    arch = device_spec(device).architecture  # type: ignore[arg-type]
    return MODEL_ERRORS if arch == FITTED_ARCHITECTURE else OTHER_GPU_ERRORS
