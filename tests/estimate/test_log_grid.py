"""LogGrid: log-log multilinear interpolation of measured times, checked on random grids."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from cgdispatch.estimate.log_grid import LogGrid


def _power_law_frame(rng, exponents, scale):
    """A full grid of ``scale * prod(x_i ** e_i)`` on random sorted axes."""
    axes = [np.unique(np.round(np.exp(rng.uniform(0, 8, size=5)), 3)) for _ in exponents]
    rows = []
    for point in itertools.product(*axes):
        rows.append(
            (*point, scale * np.prod([x**e for x, e in zip(point, exponents, strict=True)]))
        )
    return axes, pd.DataFrame(rows, columns=[*(f"x{i}" for i in range(len(axes))), "ms"])


def test_grid_points_return_the_measured_values():
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(
        [(a, b, rng.uniform(0.01, 5.0)) for a in (1, 4, 16, 64) for b in (2, 3, 100)],
        columns=["a", "b", "ms"],
    )
    grid = LogGrid.from_frame(frame, ("a", "b"), "ms")
    for a, b, ms in frame.itertuples(index=False):
        assert grid(a, b) == pytest.approx(ms, rel=1e-12)
        assert grid.inside(a, b)


def test_a_product_of_power_laws_is_reproduced_anywhere_inside_and_beyond():
    """Log-log multilinear is exact for ``c * x**e * y**f``, and so is its extrapolation."""
    rng = np.random.default_rng(2)
    exponents = rng.uniform(0.2, 2.0, size=3)
    axes, frame = _power_law_frame(rng, exponents, scale=0.01)
    grid = LogGrid.from_frame(frame, ("x0", "x1", "x2"), "ms")
    for _ in range(50):
        point = [np.exp(rng.uniform(np.log(a[0]) - 1, np.log(a[-1]) + 1)) for a in axes]
        want = 0.01 * np.prod([x**e for x, e in zip(point, exponents, strict=True)])
        assert grid(*point) == pytest.approx(want, rel=1e-9)


def test_monotone_between_grid_points_when_the_measurements_are():
    rng = np.random.default_rng(3)
    sizes = np.array([1, 2, 8, 32, 33, 512, 4096])
    times = np.sort(rng.uniform(0.01, 3.0, size=len(sizes)))
    grid = LogGrid.from_frame(pd.DataFrame({"m": sizes, "ms": times}), ("m",), "ms")
    points = np.exp(np.linspace(0, np.log(4096), 400))
    values = [grid(p) for p in points]
    assert np.all(np.diff(values) >= -1e-12)
    for lo, hi, t_lo, t_hi in zip(sizes[:-1], sizes[1:], times[:-1], times[1:], strict=True):
        mid = np.sqrt(lo * hi)
        assert t_lo <= grid(mid) <= t_hi


def test_upper_slope_fixes_the_extrapolation_and_fills_holes():
    """Above the grid a given slope wins over the last segment's; a hole (a point the table
    did not measure) is filled along the first axis with the same rule."""
    frame = pd.DataFrame(
        {"batch": [1, 2, 4, 1, 2], "seq": [10, 10, 10, 20, 20], "ms": [1.0, 1.5, 4.0, 2.0, 3.0]}
    )  # (batch 4, seq 20) missing
    grid = LogGrid.from_frame(frame, ("batch", "seq"), "ms", upper_slopes=(1.0, None))
    assert not grid.measured[2, 1] and grid.measured[2, 0]
    assert grid(4, 20) == pytest.approx(3.0 * 2)  # from (2, 20) with slope 1 in batch
    assert grid(8, 10) == pytest.approx(4.0 * 2)
    assert not grid.inside(8, 10)
    free = LogGrid.from_frame(frame, ("batch", "seq"), "ms")
    slope = np.log(4.0 / 1.5) / np.log(2)  # the last measured segment of seq 10
    assert free(8, 10) == pytest.approx(4.0 * 2**slope)


def test_bad_input_raises_naming_it():
    frame = pd.DataFrame({"m": [1, 2], "ms": [0.1, 0.0]})
    with pytest.raises(ValueError, match="must be > 0 ms"):
        LogGrid.from_frame(frame, ("m",), "ms")
    grid = LogGrid.from_frame(pd.DataFrame({"m": [1, 2], "ms": [0.1, 0.2]}), ("m",), "ms")
    with pytest.raises(ValueError, match="m=0 is invalid"):
        grid(0)
    with pytest.raises(ValueError, match="give 1 coordinates"):
        grid(1, 2)
