"""The fit of the start-up model's constants and the tables of its errors on the reference
runs.

The constants are fitted by (non-negative) least squares: graph memory on relative error,
the others on absolute error. :data:`~cgdispatch.estimate.startup_pricing.CALIBRATION` holds
them as fitted on every covered reference run; :func:`fit_startup_model` refits and
:func:`calibration_table` reports each run's errors in-sample and with leave-one-family-out
cross-validation (:func:`error_summary` condenses them). Runs from other sources are kept
out of the fit (``reference_startups(split="held_out")``) and scored by
:mod:`cgdispatch.estimate.held_out`. The fit reads the reference runs
(:mod:`~cgdispatch.estimate.startup_data`) and predicts with the estimate
(:mod:`~cgdispatch.estimate.startup`); neither imports it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..models.published import published_model
from .startup import activation_features, estimate_startup
from .startup_data import reference_config, reference_startups, run_args
from .startup_pricing import (
    CAPTURE_BASE_CAP_S,
    GIB,
    POOL_BASE_CAP_GIB,
    StartupCoefficients,
    graph_pricing,
    startup_features,
)

__all__ = ["FAMILIES", "fit_startup_model", "calibration_table", "error_summary"]

# the model families of the leave-one-family-out cross-validation (issue 18)
FAMILIES = (
    "Llama",
    "Qwen",
    "Gemma",
    "Mistral/Mixtral",
    "Granite",
    "Phi",
    "DeepSeek",
    "gpt-oss",
    "Kimi",
)


def _feature_frame(rows: pd.DataFrame) -> pd.DataFrame:
    out = []
    for _, row in rows.iterrows():
        args = run_args(row)
        pricing = graph_pricing(
            row["model"],
            row["device"],
            tensor_parallel_size=args["tensor_parallel_size"],
            pipeline_parallel_size=args["pipeline_parallel_size"],
            dtype=args["dtype"],
        )
        f = startup_features(pricing, reference_config(row))
        pm = published_model(row["model"])
        f.update(
            activation_features(
                pm,
                args["tensor_parallel_size"],
                args["dtype"],
                int(row["max_num_seqs"]),
                int(row["max_num_batched_tokens"]),
            )
        )
        out.append(f)
    return pd.DataFrame(out, index=rows.index)


def _nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (Lawson-Hanson active set)."""
    n = a.shape[1]
    x, passive = np.zeros(n), np.zeros(n, dtype=bool)
    for _ in range(3 * n + 10):
        gradient = a.T @ (b - a @ x)
        free = ~passive & (gradient > 1e-12 * max(1.0, np.abs(gradient).max()))
        if not free.any():
            break
        passive[np.argmax(np.where(free, gradient, -np.inf))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            bad = passive & (z <= 0)
            step = np.min(x[bad] / (x[bad] - z[bad]))
            x = x + step * (z - x)
            passive &= x > 1e-15
    return x


_POOL = ("one", "keys", "nodes", "boundary_gib")
_CAPTURE = ("one", "keys", "nodes", "eager_s", "moe_keys")
_ACTIVATION = ("one", "logits_gib", "mlp_gib", "moe")


def _capped_base(a: np.ndarray, b: np.ndarray, cap: float, scale: np.ndarray) -> np.ndarray:
    """Non-negative least squares of ``a @ x ~ b`` whose first column (the fixed base,
    ``scale`` its per-row weight) is at most ``cap``: fitted freely, and when it comes out
    above the cap, held there and the rest refitted (issue 35: the reference runs, ladders of
    51-166 keys, put into a fixed base what a small ladder does not pay)."""
    x = _nonnegative_lstsq(a, b)
    if x[0] <= cap:
        return x
    rest = _nonnegative_lstsq(a[:, 1:], b - cap * scale)
    return np.concatenate([[cap], rest])


def _fit(
    features: pd.DataFrame,
    rows: pd.DataFrame,
    caps: tuple[float, float] = (POOL_BASE_CAP_GIB, CAPTURE_BASE_CAP_S),
) -> StartupCoefficients:
    """The constants fitted on ``rows``; ``caps``: the most the fixed pool (GiB) and
    capture (s) bases may be (``(inf, inf)``: free, the fit before issue 35)."""
    x = features.assign(one=1.0)
    y = rows["graph_memory_gib"].to_numpy(float)
    a = x[list(_POOL)].to_numpy(float)
    pool = _capped_base(a / y[:, None], np.ones_like(y), caps[0], 1 / y)  # relative error
    cap = _capped_base(
        x[list(_CAPTURE)].to_numpy(float),
        rows["capture_s"].to_numpy(float),
        caps[1],
        np.ones_like(y),
    )
    act = _nonnegative_lstsq(
        x[list(_ACTIVATION)].to_numpy(float), rows["activation_peak_gib"].to_numpy(float)
    )
    tp = rows["tensor_parallel_size"].to_numpy() > 1
    pp = (rows["pipeline_parallel_size"].to_numpy() > 1) & ~tp
    regimes = np.column_stack([~tp & ~pp, tp, pp]).astype(float)  # single GPU, TP, PP
    nt = rows["non_torch_increase_gib"].to_numpy(float)
    non_torch = [float(nt[r == 1].mean()) if (r == 1).any() else 0.0 for r in regimes.T]
    return StartupCoefficients(
        pool_base_gib=float(pool[0]),
        pool_per_node_gib=float(pool[2]),
        pool_per_boundary=float(pool[3]),
        capture_base_s=float(cap[0]),
        capture_per_node_s=float(cap[2]),
        capture_per_eager=float(cap[3]),
        capture_per_moe_key_s=float(cap[4]),
        activation_base_gib=float(act[0]),
        activation_per_logits=float(act[1]),
        activation_per_mlp=float(act[2]),
        activation_moe_gib=float(act[3]),
        non_torch_single_gib=non_torch[0],
        non_torch_tp_gib=non_torch[1],
        non_torch_pp_gib=non_torch[2],
        fitted_on=len(rows),
        pool_per_key_gib=float(pool[1]),
        capture_per_key_s=float(cap[1]),
    )


def fit_startup_model(rows: pd.DataFrame | None = None) -> StartupCoefficients:
    """Fit every constant on ``rows`` (default: every covered reference run)."""
    rows = reference_startups() if rows is None else rows
    if not len(rows):
        raise ValueError("rows is empty: fit on at least one reference run")
    return _fit(_feature_frame(rows), rows)


def calibration_table(
    rows: pd.DataFrame | None = None, *, cross_validate: bool = True
) -> pd.DataFrame:
    """One row per reference run: logged and predicted graph memory, capture seconds and KV
    tokens, in-sample (fitted on all rows) and, with ``cross_validate``, predicted by
    constants fitted without the run's family; with vLLM's own graph-memory estimate."""
    rows = reference_startups() if rows is None else rows.reset_index(drop=True)
    features = _feature_frame(rows)
    fits = {"in_sample": _fit(features, rows)}
    families = rows["family"].to_numpy()
    if cross_validate:
        for family in dict.fromkeys(families):
            held = families == family
            fits[family] = _fit(features[~held], rows[~held])
    records = []
    for _, row in rows.iterrows():
        config = reference_config(row)
        record = {
            "run": row["run"],
            "model": row["model"],
            "family": row["family"],
            "graph_memory_gib": row["graph_memory_gib"],
            "vllm_estimate_gib": row["graph_memory_gib_vllm_estimate"],
            "capture_s": row["capture_s"],
            "kv_cache_tokens": row["kv_cache_tokens"],
        }
        for label, key in (("fit", "in_sample"), ("cv", row["family"])):
            if key not in fits:
                continue
            est = estimate_startup(
                row["model"], row["device"], config, coefficients=fits[key], **run_args(row)
            )
            record[f"graph_memory_gib_{label}"] = est.graph_memory_bytes / GIB
            record[f"capture_s_{label}"] = est.capture_s
            record[f"kv_cache_tokens_{label}"] = est.kv_cache_tokens
        records.append(record)
    table = pd.DataFrame(records)
    table["vllm_estimate_error"] = (
        table["vllm_estimate_gib"] / table["graph_memory_gib"] - 1
    ).abs()
    for label in ("fit", "cv"):
        if f"graph_memory_gib_{label}" not in table:
            continue
        table[f"graph_memory_error_{label}"] = (
            table[f"graph_memory_gib_{label}"] / table["graph_memory_gib"] - 1
        ).abs()
        table[f"capture_error_s_{label}"] = (table[f"capture_s_{label}"] - table["capture_s"]).abs()
        table[f"kv_tokens_error_{label}"] = (
            table[f"kv_cache_tokens_{label}"] / table["kv_cache_tokens"] - 1
        ).abs()
    return table


def error_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median and max error per quantity and fit (the numbers the issue's targets name)."""
    rows = []
    for label, name in (("fit", "in-sample"), ("cv", "leave one family out")):
        if f"graph_memory_error_{label}" not in table:
            continue
        cap = table[f"capture_error_s_{label}"]
        tolerance = np.maximum(1.0, 0.25 * table["capture_s"])
        rows += [
            {
                "quantity": "graph memory |error| (relative)",
                "fit": name,
                "median": table[f"graph_memory_error_{label}"].median(),
                "max": table[f"graph_memory_error_{label}"].max(),
                "within target": float((table[f"graph_memory_error_{label}"] <= 0.30).mean()),
            },
            {
                "quantity": "capture |error| (s)",
                "fit": name,
                "median": cap.median(),
                "max": cap.max(),
                "within target": float((cap <= tolerance).mean()),
            },
            {
                "quantity": "KV tokens |error| (relative)",
                "fit": name,
                "median": table[f"kv_tokens_error_{label}"].median(),
                "max": table[f"kv_tokens_error_{label}"].max(),
                "within target": float((table[f"kv_tokens_error_{label}"] <= 0.05).mean()),
            },
        ]
    vllm = table["vllm_estimate_error"]
    rows.append(
        {
            "quantity": "graph memory |error| (relative)",
            "fit": "vLLM's own estimate (profiled on the GPU)",
            "median": vllm.median(),
            "max": vllm.max(),
            "within target": float((vllm <= 0.30).mean()),
        }
    )
    return pd.DataFrame(rows)
