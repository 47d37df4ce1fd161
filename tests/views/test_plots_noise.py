"""CPU stand-in timing charts are titled as CPU runner overhead and draw the noise floor:
NONE's spread (it replays nothing), else the eager runs' p10-p90 spread (issue 20)."""

from __future__ import annotations

import pandas as pd
import pytest

from cgdispatch.views.plots import noise_floor, speedup_figure


def frame(source: str, with_none: bool) -> pd.DataFrame:
    rows = []
    for mode, ratios in (("FULL", [1.5, 1.3]), ("NONE", [0.97, 1.04])):
        if mode == "NONE" and not with_none:
            continue
        for n, r in zip((1, 8), ratios):
            rows.append({"mode": mode, "num_tokens": n, "speedup_x": r, "eager_ms": 2.0,
                         "eager_p10_ms": 1.9, "eager_p90_ms": 2.3, "source": source})  # fmt: skip
    return pd.DataFrame(rows)


def test_cpu_charts_are_runner_overhead_with_nones_spread_as_the_floor() -> None:
    fig = speedup_figure(frame("measured (CPU)", with_none=True))
    ax = fig.axes[0]
    assert ax.get_title().startswith("CPU runner overhead by mode")
    band = [p for p in ax.patches if p.get_gid() == "noise-floor"]
    assert len(band) == 1
    ys = [band[0].get_y(), band[0].get_y() + band[0].get_height()]  # data y, axes x
    assert min(ys) == pytest.approx(0.97) and max(ys) == pytest.approx(1.04)
    assert "noise floor (NONE's spread)" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_without_none_the_eager_spread_is_the_floor_and_gpu_charts_say_speed_up() -> None:
    low, high, what = noise_floor(frame("x", with_none=False))
    assert (low, high) == pytest.approx((0.95, 1.15)) and what == "noise floor (eager p10-p90)"
    fig = speedup_figure(frame("measured (NVIDIA H200)", with_none=False))
    assert fig.axes[0].get_title() == "step speed-up by mode"
    assert noise_floor(pd.DataFrame({"mode": ["FULL"], "speedup_x": [1.0]})) is None
