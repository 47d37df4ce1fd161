"""How far a modelled figure may be off: the errors of the models on data they were not
fitted to, as relative bands that ``tune`` prints beside each figure and judges a plan by.

* graph memory, capture time and KV-cache tokens: the start-up model's leave-one-family-out
  errors on the logged vLLM start-ups (:func:`~cgdispatch.estimate.startup.calibration_table`),
  the :data:`QUANTILE` of ``|predicted - logged| / logged``;
* step time: the device model's errors on published step-time ratios it was not fitted to
  (:func:`~cgdispatch.estimate.published_steps.published_step_comparison`: eager / graph and
  PIECEWISE / FULL ratios on H100), the same quantile of ``|error|``.

:data:`MODEL_ERRORS` holds the numbers (computing them re-fits the start-up model once per
family, about 30 s); :func:`model_errors` computes them from the shipped data and a test
checks that the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ModelErrors", "MODEL_ERRORS", "QUANTILE", "model_errors"]

QUANTILE = 0.9  # a band that holds on 9 of 10 runs not fitted


@dataclass(frozen=True)
class ModelErrors:
    """Relative errors (fractions) of the modelled figures at :data:`QUANTILE`."""

    graph_memory: float
    capture: float
    kv_tokens: float
    step_time: float
    runs: int  # start-up runs behind the first three
    ratios: int  # published step-time ratios behind the last

    @property
    def source(self) -> str:
        return (
            f"{QUANTILE:.0%} of model errors on data not fitted: {self.runs} vLLM start-ups "
            f"(leave one family out), {self.ratios} published step-time ratios"
        )


def model_errors() -> ModelErrors:
    """:class:`ModelErrors` computed from the shipped reference data (slow: see above)."""
    from .published_steps import published_step_comparison
    from .startup import calibration_table

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
    )


# model_errors() on the shipped data (tests/estimate/test_uncertainty.py recomputes it)
MODEL_ERRORS = ModelErrors(
    graph_memory=0.1986, capture=0.5362, kv_tokens=0.0116, step_time=0.2347, runs=59, ratios=7
)
