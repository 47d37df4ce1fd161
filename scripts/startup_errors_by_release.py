"""Held-out start-up errors by vLLM release and by ladder size: the committed model against
the model before issue 35's refit (pool factors per architecture group only, the fitted TP
non-torch memory on every GPU) and against the fit with a free fixed base, all refitted in
this run.

    PYTHONPATH=. python scripts/startup_errors_by_release.py

Held-out runs (``reference_startups(split="held_out")``) are never fitted; the
``device_fit`` runs fit only the graph-pool factor and are shown apart (the only runs with
ladders of 1-8 sizes). Errors are |model / log - 1| (model figures against logged ones).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from unittest import mock

import pandas as pd

from cgdispatch.estimate import held_out, startup, startup_fit
from cgdispatch.estimate.pool_factors import fit_pool_factors
from cgdispatch.estimate.startup_data import reference_startups
from cgdispatch.estimate.startup_pricing import CALIBRATION


def _free_base_model():  # noqa: ANN202
    rows = reference_startups()
    features = startup_fit._feature_frame(rows)
    plain = startup_fit._fit(features, rows, caps=(math.inf, math.inf))
    return _group_factors_only(
        fit_pool_factors(base=dataclasses.replace(plain, pool_factors=(), pool_factor_runs=0))
    )


def _group_factors_only(c):  # noqa: ANN001, ANN202
    """``c`` without its per-GPU pool factors (its architecture groups' only)."""
    from cgdispatch.estimate.pool_factors import POOL_GROUPS

    return dataclasses.replace(
        c, pool_factors=tuple(f for f in c.pool_factors if f[0] in POOL_GROUPS)
    )


def _show(title: str, table: pd.DataFrame, by: str) -> None:
    cols = [by, "runs", "graph median", "graph max", "graph within 35%", "capture n"]
    cols += ["capture median", "KV n", "KV median", "KV within 5%"]
    print(f"\n{title}")
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.1%}"))


def main() -> None:
    models = {
        "committed (per-GPU pool factors, TP non-torch by NVLink SHARP)": (CALIBRATION, False),
        "before (group pool factors, TP non-torch everywhere)": (
            _group_factors_only(CALIBRATION),
            True,
        ),
        "free fixed base (before issue 35)": (_free_base_model(), True),
    }
    for name, (c, nvls_everywhere) in models.items():
        factors = ", ".join(f"{a} x{f:.2f}" for a, f in c.pool_factors)
        print(
            f"\n=== {name}: pool base {c.pool_base_gib:.3f} GiB + {c.pool_per_key_gib:.4f} "
            f"GiB/key, capture base {c.capture_base_s:.2f} s + {c.capture_per_key_s:.4f} "
            f"s/key, pool factors {factors}"
        )
        # the model before: every TP group carries the fitted TP non-torch memory
        patch = mock.patch.object(startup, "has_nvlink_sharp", lambda device: True)
        with patch if nvls_everywhere else contextlib.nullcontext():
            errors = held_out.held_out_errors(coefficients=c)
            device_fit = held_out.held_out_errors(reference_startups(split="device_fit"), c)
        print(held_out.held_out_targets(errors).to_string(index=False))
        _show(
            "held out, by vLLM release (model figures vs logged)",
            held_out.held_out_table(errors, by="vllm_version"),
            "vllm_version",
        )
        _show("held out, by ladder size", held_out.held_out_table(errors, by="ladder"), "ladder")
        _show(
            "device_fit runs (pool factors fitted on them), by ladder size",
            held_out.held_out_table(device_fit, by="ladder"),
            "ladder",
        )


if __name__ == "__main__":
    main()
