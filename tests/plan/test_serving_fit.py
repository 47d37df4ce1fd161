"""The serving overhead's fit on published runs: the split, the grid, the refusal of a bad
grid."""

from __future__ import annotations

import numpy as np
import pytest

from cgdispatch.plan.published_runs import published_serving_runs
from cgdispatch.plan.published_serving import (
    SERVING_FIT_GPU,
    fit_serving_overhead,
    median_errors,
    published_serving_comparison,
    serving_fit_split,
)
from cgdispatch.workload.latency import serving_step_time
from cgdispatch.workload.serving_overhead import ServingOverhead


def test_split_is_by_gpu_and_covers_every_run() -> None:
    runs = published_serving_runs()
    fit = serving_fit_split(runs)
    assert fit.dtype == bool and len(fit) == len(runs)
    assert set(runs["gpu"][fit]) == {SERVING_FIT_GPU}
    assert SERVING_FIT_GPU not in set(runs["gpu"][~fit])
    assert fit.any() and (~fit).any()


@pytest.mark.parametrize("grid", [{"front_end": (1.0,)}, {}, {"front_end_ms": ()}])
def test_a_bad_grid_is_refused(grid: dict) -> None:
    with pytest.raises(ValueError, match="grid"):
        fit_serving_overhead(published_serving_runs().head(1), grid)


def test_the_fit_picks_the_grid_point_with_the_least_mean_median_error() -> None:
    rng = np.random.default_rng()
    runs = published_serving_runs()
    light = runs[runs["run_id"].str.contains("dennislee22") & (runs["num_prompts"] <= 20)]
    runs = light.iloc[rng.choice(len(light), 2, replace=False)]
    fronts = sorted(rng.choice([0.0, 10.0, 30.0, 60.0], 2, replace=False).tolist())
    field = str(rng.choice(["front_end_ms", "tokenize_ms"]))  # the shared part or the batches
    best, grid = fit_serving_overhead(runs, {field: fronts, "step_request_ms": (0.1,)})
    assert list(grid[field]) == fronts
    objective = []
    for front in fronts:  # the same figures from a direct comparison
        over = ServingOverhead(**{field: front}, step_request_ms=0.1)
        table = published_serving_comparison(
            runs, step_time_for=lambda c, m, o=over: serving_step_time(c, m, overhead=o)
        )
        objective.append(float(np.nanmean(list(median_errors(table).values()))))
    np.testing.assert_allclose(grid["objective"], objective)
    assert getattr(best, field) == fronts[int(np.argmin(objective))]
    assert best.step_request_ms == 0.1 and best.request_latency_ms == 0.0
