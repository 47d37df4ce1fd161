"""Fitting the device model to measurements, and timing a toy LM under a config with it.

:func:`calibrate` fits a :class:`~cgdispatch.estimate.device_model.DeviceSpec`'s launch
costs and efficiencies to measured sweep rows; :func:`predict_config` dispatches each batch
as the runner would and times it with the (fitted or datasheet) model. Every number is
``model (<device>)``, never a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from .device_model import predict_step
from .devices import MIN_EFFICIENCY, DeviceSpec
from .kernels import StepProfile, toy_profiles

__all__ = ["calibrate", "calibrate_rows", "predict_config"]

_FIT = ("kernel_launch_us", "graph_launch_us", "flop_efficiency", "bw_efficiency", "kernel_min_us")


def calibrate(
    measurements: pd.DataFrame,
    profiles: Mapping[int, StepProfile],
    spec: DeviceSpec,
    *,
    fit: Sequence[str] = _FIT,
    rounds: int = 60,
) -> DeviceSpec:
    """Fit launch costs and efficiencies to measured rows; returns a new spec.

    ``measurements`` has ``runtime_mode``, ``num_tokens``, ``padded_size``, ``eager_ms``
    and ``graph_ms`` columns (sweep rows with ``status == "ok"``); ``profiles`` maps each
    num_tokens / padded size to its kernel profile. Minimises the squared log error of
    both times by coordinate search in log space (no SciPy needed).
    """
    need = {"runtime_mode", "num_tokens", "padded_size", "eager_ms", "graph_ms"}
    missing = need - set(measurements.columns)
    if missing:
        raise ValueError(
            f"measurements lack columns {sorted(missing)}: pass sweep rows from run_sweep"
        )
    unknown = [f for f in fit if f not in _FIT]
    if unknown:
        raise ValueError(f"fit={unknown} is invalid: fit a subset of {list(_FIT)}")
    rows = measurements.dropna(subset=["eager_ms", "graph_ms"])
    cases = []
    for r in rows.itertuples():
        for size, mode, ms in (
            (r.num_tokens, "NONE", r.eager_ms),
            (r.padded_size, r.runtime_mode, r.graph_ms),
        ):
            if int(size) not in profiles:
                raise ValueError(f"no profile for {int(size)} tokens: add it to profiles")
            cases.append((profiles[int(size)], mode, math.log(ms)))
    if not cases:
        raise ValueError("measurements have no row with eager_ms and graph_ms: nothing to fit")

    def loss(s: DeviceSpec) -> float:
        return sum((math.log(predict_step(p, m, s)["step_ms"]) - y) ** 2 for p, m, y in cases)

    best, best_loss, step = spec, loss(spec), 1.0
    for _ in range(rounds):
        improved = False
        for name in fit:
            for factor in (math.exp(step), math.exp(-step)):
                value = getattr(best, name) * factor
                if name.endswith("efficiency"):
                    value = min(max(value, MIN_EFFICIENCY), 1.0)  # DeviceSpec's range
                trial = best.replace(**{name: value})
                trial_loss = loss(trial)
                if trial_loss < best_loss:
                    best, best_loss, improved = trial, trial_loss, True
        if not improved:
            step /= 2
            if step < 1e-3:
                break
    return best.replace(name=f"{spec.name} (calibrated)")


def calibrate_rows(rows: pd.DataFrame, spec: DeviceSpec, **kwargs: Any) -> DeviceSpec:
    """:func:`calibrate` on sweep rows of one toy-model preset (``status == "ok"``), with
    kernel profiles built on meta tensors at every num_tokens and padded size."""
    from ..models.toy import build_toy_model

    ok = rows[rows["status"] == "ok"].dropna(subset=["eager_ms", "graph_ms"])
    presets = ok[["model", "dtype"]].drop_duplicates()
    if len(presets) != 1:
        raise ValueError(
            f"rows hold {len(presets)} (model, dtype) pairs with ok timings: calibrate on the "
            "rows of one model and dtype (filter the frame first)"
        )
    name, dtype = presets.iloc[0]
    model = build_toy_model(name, device="meta", dtype=dtype)
    sizes = sorted({int(n) for n in ok["num_tokens"]} | {int(n) for n in ok["padded_size"]})
    return calibrate(ok, toy_profiles(model, sizes), spec, **kwargs)


def predict_config(
    model: Any,
    config: Any,
    num_tokens: Sequence[int],
    spec: DeviceSpec,
    *,
    uniform_decode: bool = False,
) -> pd.DataFrame:
    """Modelled step time of a toy LM under a :class:`~cgdispatch.core.config.GraphConfig`: each
    batch is dispatched (runtime mode, padding) as the runner would, then timed by the model.

    Columns: num_tokens, runtime_mode, padded_size, eager_ms, graph_ms, speedup_x, source.
    """
    from ..core.generation import dispatch_step, make_graph_dispatcher

    config = config.resolve(model.attention_cg_support)
    dispatcher = make_graph_dispatcher(config, record_stats=False)
    answers = [dispatch_step(dispatcher, int(n), None, uniform_decode) for n in num_tokens]
    plan = [(int(n), a.runtime_mode, a.key) for n, a in zip(num_tokens, answers)]
    q = config.uniform_decode_query_len if uniform_decode else 1
    sizes = {n for n, _, _ in plan} | {d.num_tokens for _, _, d in plan}
    profiles = toy_profiles(model, sorted(sizes), uniform=uniform_decode, q=q)
    rows = []
    for n, mode, desc in plan:
        eager = predict_step(profiles[n], "NONE", spec)["step_ms"]
        graph = predict_step(profiles[desc.num_tokens], mode, spec)["step_ms"]
        rows.append(
            {
                "num_tokens": n,
                "runtime_mode": str(mode),
                "padded_size": desc.num_tokens,
                "eager_ms": eager,
                "graph_ms": graph,
                "speedup_x": eager / graph,
                "source": f"model ({spec.name})",
            }
        )
    return pd.DataFrame(rows)
