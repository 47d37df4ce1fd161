"""Held-out start-up errors by vLLM release and by ladder size, the committed model against
the fit with a free fixed base (the model before issue 35), both refitted in this run.

    PYTHONPATH=. python scripts/startup_errors_by_release.py

Held-out runs (``reference_startups(split="held_out")``) are never fitted; the
``device_fit`` runs fit only the graph-pool factor and are shown apart (the only runs with
ladders of 1-8 sizes). Errors are |model / log - 1| (model figures against logged ones).
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd

from cgdispatch.estimate import held_out, startup_fit
from cgdispatch.estimate.pool_factors import fit_pool_factors
from cgdispatch.estimate.startup_data import reference_startups
from cgdispatch.estimate.startup_pricing import CALIBRATION


def _free_base_model():  # noqa: ANN202
    rows = reference_startups()
    features = startup_fit._feature_frame(rows)
    plain = startup_fit._fit(features, rows, caps=(math.inf, math.inf))
    return fit_pool_factors(base=dataclasses.replace(plain, pool_factors=(), pool_factor_runs=0))


def _show(title: str, table: pd.DataFrame, by: str) -> None:
    cols = [by, "runs", "graph median", "graph max", "capture n", "capture median", "KV n"]
    cols += ["KV median", "KV within 5%"]
    print(f"\n{title}")
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.1%}"))


def main() -> None:
    models = {
        "capped base (committed)": CALIBRATION,
        "free fixed base (before)": _free_base_model(),
    }
    for name, c in models.items():
        print(
            f"\n=== {name}: pool base {c.pool_base_gib:.3f} GiB + {c.pool_per_key_gib:.4f} "
            f"GiB/key, capture base {c.capture_base_s:.2f} s + {c.capture_per_key_s:.4f} "
            f"s/key, pool factor Ampere/Ada {dict(c.pool_factors).get('Ampere', 1.0):.3f}"
        )
        errors = held_out.held_out_errors(coefficients=c)
        _show(
            "held out, by vLLM release (model figures vs logged)",
            held_out.held_out_table(errors, by="vllm_version"),
            "vllm_version",
        )
        _show("held out, by ladder size", held_out.held_out_table(errors, by="ladder"), "ladder")
        device_fit = held_out.held_out_errors(reference_startups(split="device_fit"), c)
        _show(
            "device_fit runs (pool factor fitted on them), by ladder size",
            held_out.held_out_table(device_fit, by="ladder"),
            "ladder",
        )


if __name__ == "__main__":
    main()
