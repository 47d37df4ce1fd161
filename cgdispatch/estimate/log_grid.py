"""Multilinear interpolation of measured kernel times on a grid, in log-log space.

Kernel times measured on a grid of sizes (GEMM ``m, n, k``; attention batch and sequence
length) are close to piecewise power laws: flat while a kernel is latency-bound, then
proportional to the work. So :class:`LogGrid` interpolates ``log(time)`` linearly in
``log(size)`` along every axis, which returns each measured value exactly at its grid point
and is monotone between two grid points whenever the measurements are.

Outside the measured range it extrapolates, never returns NaN: below an axis the edge
cell's log-log slope is carried on; above it, a fixed slope where the grid was given one
(``upper_slopes``: 1.0 for a size the work grows in proportion to, such as a GEMM's ``n`` or
a batch of independent requests), else again the nearest segment's slope.
:meth:`LogGrid.inside` says whether a point was inside. Holes in the grid (a table that
measured only ``batch * seq <= limit``, a few GEMM shapes that failed) are filled the same
way when the grid is built, axis by axis, from the measured points of each line.

It knows nothing of kernels; :mod:`cgdispatch.estimate.aic_tables` builds one per table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["LogGrid"]


def _fill_line(log_y: np.ndarray, log_x: np.ndarray, upper_slope: float | None) -> np.ndarray:
    """``log_y`` with its NaNs filled by log-log interpolation between measured points and,
    beyond them, by the slope of the nearest measured segment (flat if only one point), or
    by ``upper_slope`` above the last measured point when it is given."""
    known = ~np.isnan(log_y)
    if known.all() or known.sum() == 0:
        return log_y
    x, y = log_x[known], log_y[known]
    out = np.interp(log_x, x, y)
    if len(x) >= 2:
        low, high = log_x < x[0], log_x > x[-1]
        out[low] = y[0] + (log_x[low] - x[0]) * (y[1] - y[0]) / (x[1] - x[0])
        out[high] = y[-1] + (log_x[high] - x[-1]) * (y[-1] - y[-2]) / (x[-1] - x[-2])
    if upper_slope is not None:
        high = log_x > x[-1]
        out[high] = y[-1] + (log_x[high] - x[-1]) * upper_slope
    return out


@dataclass(frozen=True)
class LogGrid:
    """Measured times on the product of sorted positive ``axes``, interpolated in log-log.

    ``log_ms[i, j, ...]`` is ``log(time_ms)`` at ``(axes[0][i], axes[1][j], ...)``; every
    cell is finite (holes were filled when the grid was built: :meth:`from_frame`)."""

    names: tuple[str, ...]  # one name per axis, e.g. ("m", "n", "k")
    axes: tuple[np.ndarray, ...]  # sorted measured values of each axis (> 0)
    log_ms: np.ndarray  # log(time in ms), shape = lengths of the axes
    measured: np.ndarray  # bool, same shape: True where the cell was measured, not filled
    upper_slopes: tuple[float | None, ...]  # log-log slope above each axis (None: nearest)

    @classmethod
    def from_frame(
        cls,
        frame: pd.DataFrame,
        names: Sequence[str],
        value: str,
        upper_slopes: Sequence[float | None] | None = None,
    ) -> LogGrid:
        """The grid of ``frame[value]`` (ms) over the columns ``names``; duplicate points are
        averaged, holes filled along the first axis, then the second, and so on (each pass
        leaves a line alone that has no measured point). ValueError if a time is not > 0."""
        names = tuple(names)
        slopes = tuple(upper_slopes) if upper_slopes is not None else (None,) * len(names)
        if len(slopes) != len(names):
            raise ValueError(
                f"upper_slopes={slopes!r} must give one slope (or None) per axis of {names}"
            )
        if len(frame) == 0:
            raise ValueError(f"no measured rows to build a grid over {names}")
        times = frame[value].to_numpy(dtype=float)
        if not np.all(times > 0):
            raise ValueError(f"measured {value} must be > 0 ms: the table has {times.min()}")
        keys = [frame[n].astype(float) for n in names]
        mean = frame[value].groupby(keys).mean()
        axes = tuple(np.sort(k.unique()) for k in keys)
        if any(a[0] <= 0 for a in axes):
            raise ValueError(f"grid axes {names} must be > 0 for a log-log grid")
        index = pd.MultiIndex.from_product(axes) if len(axes) > 1 else pd.Index(axes[0])
        full = mean.reindex(index)
        log_ms = np.log(full.to_numpy(dtype=float)).reshape([len(a) for a in axes])
        measured = ~np.isnan(log_ms)
        for axis, values in enumerate(axes):
            log_ms = np.apply_along_axis(_fill_line, axis, log_ms, np.log(values), slopes[axis])
        if np.isnan(log_ms).any():
            raise ValueError(f"grid over {names} has holes no measured line reaches")
        return cls(names, axes, log_ms, measured, slopes)

    def inside(self, *point: float) -> bool:
        """Whether ``point`` lies within the measured range of every axis."""
        return all(a[0] <= p <= a[-1] for a, p in zip(self.axes, point, strict=True))

    def __call__(self, *point: float) -> float:
        """The time (ms) at ``point``: multilinear in log-log inside the grid, the edge
        cell's log-log slope carried on outside it (see the module docstring)."""
        if len(point) != len(self.axes):
            raise ValueError(
                f"give {len(self.axes)} coordinates ({', '.join(self.names)}), not {len(point)}"
            )
        corners_idx, weights, beyond = [], [], 0.0
        for name, a, p, slope in zip(self.names, self.axes, point, self.upper_slopes, strict=True):
            if not p > 0:
                raise ValueError(f"{name}={p!r} is invalid: it must be > 0")
            if slope is not None and p > a[-1]:
                beyond += slope * (np.log(p) - np.log(a[-1]))
                p = a[-1]
            if len(a) == 1:
                corners_idx.append((0, 0))
                weights.append(0.0)
                continue
            i = int(np.clip(np.searchsorted(a, p) - 1, 0, len(a) - 2))
            lo, hi = np.log(a[i]), np.log(a[i + 1])
            corners_idx.append((i, i + 1))
            weights.append((np.log(p) - lo) / (hi - lo))
        total = beyond
        for corner in range(1 << len(self.axes)):
            index, weight = [], 1.0
            for axis, (pair, t) in enumerate(zip(corners_idx, weights, strict=True)):
                upper = (corner >> axis) & 1
                index.append(pair[upper])
                weight *= t if upper else 1.0 - t
            if weight != 0.0:
                total += weight * self.log_ms[tuple(index)]
        return float(np.exp(total))
