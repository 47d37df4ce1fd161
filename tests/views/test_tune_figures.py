"""The trade-off figure shows what the verdict judges (issue 37): its y axis is the change in
the objective (p99 TTFT with requests, mean step time for ``objective="step"``), the plan
carries the judged band, every text is at least 10 px and none is cut off by the edge."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.collections import LineCollection

from cgdispatch.core.config import GraphConfig
from cgdispatch.plan.costs import AffineCostModel
from cgdispatch.plan.tune import tune
from cgdispatch.views.figure_checks import figure_text_problems, text_size_problems
from cgdispatch.views.sources import figure_source
from cgdispatch.views.tune_figures import judged_column, tradeoff_figure
from cgdispatch.workload.sources import workload_requests, workload_trace


class MemoryAffine(AffineCostModel):
    """The affine stand-in with graph memory and capture time (a tune needs both)."""

    def capture_time_s(self, mode, n):  # noqa: ANN001, ANN201
        return 0.01 + 1e-4 * np.asarray(n, dtype=np.float64)


def _result(objective: str | None, seed: int):
    config = GraphConfig(vllm_version="0.34", max_num_seqs=24, max_num_batched_tokens=512)
    rate = float(np.random.default_rng(seed).uniform(3.0, 9.0))
    trace, label = workload_trace(
        "sharegpt", num_requests=80, rate_per_s=rate, seed=seed,
        max_num_seqs=24, max_num_batched_tokens=512,
    )  # fmt: skip
    requests = workload_requests("sharegpt", num_requests=80, rate_per_s=rate, seed=seed)
    long_source = "model (a GPU spec with a name long enough to run past a narrow figure) " * 3
    model = MemoryAffine(per_token_ms=float(np.random.default_rng(seed).uniform(0.005, 0.05)))
    result = tune(
        trace, config=config.resolve(), cost_model=model, max_graphs=5, requests=requests,
        objective=objective, trace_label=label,
    )  # fmt: skip
    return result, long_source


@pytest.mark.parametrize(("objective", "column"), [(None, "p99_ttft_ms"), ("step", "mean_step_ms")])
def test_the_y_axis_is_the_judged_objective_with_its_band(objective, column) -> None:
    seed = int(np.random.default_rng().integers(0, 1000))
    result, _ = _result(objective, seed)
    assert judged_column(result) == column
    fig = tradeoff_figure(result)
    held = result.tables["held out"]
    base = float(held.loc[held["ladder"] == "vllm default", column].iloc[0])
    ax = fig.axes[0]
    for name in held["ladder"]:
        row = held[held["ladder"] == name].iloc[0]
        (point,) = [
            c for c in ax.collections if c.get_gid() == f"tradeoff-num_graphs-held out-{name}"
        ]
        ((x, y),) = point.get_offsets()
        assert x == row["num_graphs"] and y == pytest.approx(row[column] - base)
    # in-sample points only where the objective has an in-sample figure
    hollow = [c for c in ax.collections if "in sample" in str(c.get_gid())]
    assert bool(hollow) == (column in result.tables["in sample"].columns)
    if result.band > 0:
        bars = [c for c in ax.collections if isinstance(c, LineCollection)]
        (segment,) = bars[0].get_segments()
        assert abs(segment[1][1] - segment[0][1]) == pytest.approx(2 * result.band)
    name = {"p99_ttft_ms": "p99 TTFT", "mean_step_ms": "mean step time"}[column]
    assert name in ax.get_ylabel() and name in fig.texts[0].get_text() + fig._suptitle.get_text()
    assert figure_source(fig) == result.source


def test_every_text_is_readable_and_a_long_caption_wraps_inside_the_figure() -> None:
    from dataclasses import replace

    seed = int(np.random.default_rng().integers(0, 1000))
    result, long_source = _result(None, seed)
    fig = tradeoff_figure(replace(result, source=long_source))
    assert text_size_problems(fig) == []
    assert figure_text_problems(fig) == []
    assert figure_source(fig) == long_source
    assert not any("e+" in t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))


def test_the_checker_finds_small_and_clipped_texts() -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3, 2), dpi=100)
    fig.text(0.5, 0.5, "tiny", fontsize=6)
    fig.text(0.9, 0.1, "a caption far too long for this figure", fontsize=10)
    problems = text_size_problems(fig)
    assert "text 'tiny' is 8.3 px (at least 10 px)" in problems
    assert "text 'a caption far too long for this figure' is cut off by the figure's edge" in (
        problems
    )
