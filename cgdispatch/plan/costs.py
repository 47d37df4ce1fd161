"""The cost-model interface the planner and the what-if engine accept, with three adapters.

A cost model is any object with

* ``step_time_ms(mode: CUDAGraphMode, num_tokens: np.ndarray) -> np.ndarray`` — expected
  latency of one step, vectorised over ``num_tokens`` (int64). ``mode`` is a runtime mode
  (NONE, PIECEWISE, FULL); for graph modes ``num_tokens`` is the padded size (the graph's
  size), for NONE the unpadded step size;
* optionally ``graph_memory_bytes(mode, num_tokens) -> np.ndarray`` — memory of one graph
  of that mode and size (PIECEWISE or FULL); a ladder's pool is the largest of these
  (vLLM keeps weak references to graph outputs, so one shared pool serves every graph);
* optionally ``capture_time_s(mode, num_tokens) -> np.ndarray`` — modelled capture time
  of one graph (warm-up runs included);
* optionally ``source: str`` — where the figures come from (``"model"``,
  ``"measured (NVIDIA H200)"``, ``"reference data (H100, 2025-06)"``); shown next to them.

:func:`as_cost_model` turns a callable or a latency table (DataFrame) into one. The
analytic device model lives in :mod:`cgdispatch.estimate.device_model`
(``DeviceCostModel``); this module only defines what a model must offer and never
invents figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from ..core.modes import CUDAGraphMode

__all__ = ["CostModel", "FunctionCostModel", "TableCostModel", "AffineCostModel", "as_cost_model"]


@runtime_checkable
class CostModel(Protocol):
    """Anything with a vectorised ``step_time_ms(mode, num_tokens)`` (see module doc)."""

    def step_time_ms(self, mode: CUDAGraphMode, num_tokens: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class FunctionCostModel:
    """A cost model from plain callables ``f(mode, num_tokens_array) -> array``."""

    step_time: Callable[[CUDAGraphMode, np.ndarray], Any]
    graph_memory: Callable[[CUDAGraphMode, np.ndarray], Any] | None = None
    source: str = "model"

    def step_time_ms(self, mode: CUDAGraphMode, num_tokens: np.ndarray) -> np.ndarray:
        n = np.asarray(num_tokens, dtype=np.int64)
        return np.broadcast_to(np.asarray(self.step_time(mode, n), dtype=np.float64), n.shape)

    def graph_memory_bytes(self, mode: CUDAGraphMode, num_tokens: np.ndarray) -> np.ndarray:
        if self.graph_memory is None:
            raise ValueError("this cost model has no graph memory: pass graph_memory=")
        n = np.asarray(num_tokens, dtype=np.int64)
        return np.broadcast_to(np.asarray(self.graph_memory(mode, n), dtype=np.float64), n.shape)


@dataclass(frozen=True)
class AffineCostModel:
    """Model: ``base_ms[mode] + per_token_ms * num_tokens``; a stand-in for examples and tests.

    Defaults are illustrative only (graph replay saves launch overhead; FULL saves a bit
    more than PIECEWISE), not measurements of any GPU.
    """

    base_ms: dict[str, float] = field(
        default_factory=lambda: {"NONE": 6.0, "PIECEWISE": 3.0, "FULL": 2.5}
    )
    per_token_ms: float = 0.02
    graph_bytes_per_token: float = 64 * 1024.0
    source: str = "model"

    def step_time_ms(self, mode: CUDAGraphMode, num_tokens: np.ndarray) -> np.ndarray:
        n = np.asarray(num_tokens, dtype=np.float64)
        return self.base_ms[CUDAGraphMode.parse(mode).name] + self.per_token_ms * n

    def graph_memory_bytes(self, mode: CUDAGraphMode, num_tokens: np.ndarray) -> np.ndarray:
        return self.graph_bytes_per_token * np.asarray(num_tokens, dtype=np.float64)


class TableCostModel:
    """Latency (and optionally graph memory) per (mode, num_tokens) from a table.

    Columns: ``mode`` (NONE / PIECEWISE / FULL), ``num_tokens``, ``latency_ms`` and
    optionally ``graph_bytes``. Between rows it interpolates linearly; beyond the first or
    last row it extends the line through the two nearest rows (flat with a single row).
    """

    def __init__(self, table: pd.DataFrame, source: str = "model") -> None:
        need = {"mode", "num_tokens", "latency_ms"}
        missing = sorted(need - set(table.columns))
        if missing:
            raise ValueError(
                f"latency table lacks columns {missing}: it needs mode, num_tokens, latency_ms "
                f"(optional graph_bytes); it has {list(table.columns)}"
            )
        self.source = source
        self._curves: dict[CUDAGraphMode, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}
        modes = table["mode"].map(lambda m: CUDAGraphMode.parse(m) if isinstance(m, str) else m)
        for mode, rows in table.groupby(modes, sort=False):
            rows = rows.groupby("num_tokens").mean(numeric_only=True).sort_index()
            x = rows.index.to_numpy(dtype=np.float64)
            mem = rows["graph_bytes"].to_numpy(dtype=np.float64) if "graph_bytes" in rows else None
            self._curves[mode] = (x, rows["latency_ms"].to_numpy(dtype=np.float64), mem)

    def _curve(self, mode: CUDAGraphMode, column: int) -> tuple[np.ndarray, np.ndarray]:
        if mode not in self._curves:
            raise ValueError(
                f"latency table has no rows for mode {mode}: add rows for {mode} "
                f"(it has {[str(m) for m in self._curves]})"
            )
        x, *ys = self._curves[mode]
        y = ys[column]
        if y is None:
            raise ValueError("latency table has no graph_bytes column: add one for graph memory")
        return x, y

    def step_time_ms(self, mode: CUDAGraphMode, num_tokens: np.ndarray) -> np.ndarray:
        return _interp(np.asarray(num_tokens, dtype=np.float64), *self._curve(mode, 0))

    def graph_memory_bytes(self, mode: CUDAGraphMode, num_tokens: np.ndarray) -> np.ndarray:
        return _interp(np.asarray(num_tokens, dtype=np.float64), *self._curve(mode, 1))


def _interp(n: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = np.interp(n, x, y)
    if len(x) >= 2:
        lo, hi = n < x[0], n > x[-1]
        out[lo] = y[0] + (n[lo] - x[0]) * (y[1] - y[0]) / (x[1] - x[0])
        out[hi] = y[-1] + (n[hi] - x[-1]) * (y[-1] - y[-2]) / (x[-1] - x[-2])
    return out


CostModelLike = CostModel | pd.DataFrame | Callable[[CUDAGraphMode, np.ndarray], Any] | None


def as_cost_model(obj: CostModelLike, source: str = "model") -> CostModel | None:
    """``None`` -> None; a cost model -> itself; a DataFrame -> :class:`TableCostModel`;
    a callable ``f(mode, num_tokens)`` -> :class:`FunctionCostModel`."""
    if obj is None:
        return None
    if callable(getattr(obj, "step_time_ms", None)):
        return obj
    if isinstance(obj, pd.DataFrame):
        return TableCostModel(obj, source=source)
    if callable(obj):
        return FunctionCostModel(obj, source=source)
    raise ValueError(
        f"cost_model={obj!r} is invalid: give an object with step_time_ms(mode, num_tokens), "
        "a callable f(mode, num_tokens), or a DataFrame with mode, num_tokens, latency_ms"
    )


def cost_source(model: CostModel) -> str:
    """The figure-origin label of a cost model (``"model"`` when it does not say)."""
    return str(getattr(model, "source", "model"))
