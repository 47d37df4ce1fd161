"""The device model's step-time ratios against published measurements it was not fitted to:
pairs of the same model run in two modes (eager and graphs, PIECEWISE and FULL), from
``cgdispatch/data/published_step_times.csv`` with their sources."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pandas as pd

from ..core.modes import CUDAGraphMode
from .device_model import DEVICE_PRESETS, device_cost_model

__all__ = ["published_step_comparison", "RATIO_TOLERANCE"]

RATIO_TOLERANCE = 0.25  # issue 18: published ratios reproduced within +-25%


def _published() -> pd.DataFrame:
    with resources.files("cgdispatch.data").joinpath("published_step_times.csv").open() as f:
        return pd.read_csv(f)


def published_step_comparison(device_if_unstated: str = "H100") -> pd.DataFrame:
    """One row per published pair of the same model in two modes whose model the registry
    has (a set of three modes: each slower one against the fastest): the published ratio
    (slower over faster: eager over graphs, PIECEWISE over FULL) and the device model's at
    the same batch size, on the pair's GPU (or
    ``device_if_unstated`` when the source does not say, flagged). Throughputs are turned
    into times per step (1 / throughput) before dividing."""
    rows = []
    data = _published()
    data = data[data["cgdispatch_model"].notna()]
    for pair, part in data.groupby("pair", sort=True):
        if len(part) < 2:
            continue
        first = part.iloc[0]
        model = str(first["cgdispatch_model"])
        try:
            cm = device_cost_model(
                model, first["gpu"] if first["gpu"] in DEVICE_PRESETS else device_if_unstated
            )
        except ValueError:
            continue  # a model the registry does not hold
        batch = int(first["batch_size"])
        times = {}
        for _, r in part.iterrows():
            value = float(r["value"])
            times[r["mode"]] = 1.0 / value if r["metric"].endswith("per_s") else value
        modelled = {
            m: float(cm.step_time_ms(CUDAGraphMode.parse(m), np.array([batch]))[0]) for m in times
        }
        fast = min(times, key=times.get)  # every other mode of the pair against the fastest
        for slow in sorted((m for m in times if m != fast), key=times.get, reverse=True):
            published_ratio = times[slow] / times[fast]
            model_ratio = modelled[slow] / modelled[fast]
            rows.append(
                {
                    "pair": pair,
                    "model": first["model"],
                    "engine": first["engine"],
                    "gpu": first["gpu"],
                    "gpu_stated": bool(first["gpu_stated"]),
                    "batch_size": batch,
                    "ratio": f"{slow} / {fast}",
                    "published": published_ratio,
                    "model_ratio": model_ratio,
                    "error": model_ratio / published_ratio - 1,
                    "within_25pct": abs(model_ratio / published_ratio - 1) <= RATIO_TOLERANCE,
                    "source": first["source"],
                }
            )
    return pd.DataFrame(rows)
