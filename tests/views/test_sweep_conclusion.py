"""Notebook 03's conclusion names every mode that ties for fastest, not the first of them
(issue 30): modes within ``TIE_RTOL`` of the best modelled speed-up tie."""

from __future__ import annotations

import numpy as np
import pandas as pd

import cgdispatch as cg
from cgdispatch.views.conclusions import TIE_RTOL

UNITS = pd.DataFrame(
    {
        "mode": ["FULL", "PIECEWISE"],
        "ok": [8, 8],
        "failed": [0, 0],
        "source": ["measured (CPU)"] * 2,
    }
)


def modelled(speedups: dict[str, float], rng: np.random.Generator) -> pd.DataFrame:
    """A 1-token decode at ``speedups``, and larger decodes and mixed batches that differ."""
    rows = []
    for mode, x in speedups.items():
        rows.append({"mode": mode, "num_tokens": 1, "uniform_decode": True, "speedup_x": x})
        for n in (8, 64):
            for uniform in (True, False):
                rows.append({"mode": mode, "num_tokens": n, "uniform_decode": uniform,
                             "speedup_x": float(rng.uniform(0.9, 4.0))})  # fmt: skip
    return pd.DataFrame(rows).assign(source="model (H200 SXM)")


def test_three_modes_within_the_tolerance_all_tie_as_fastest() -> None:
    rng = np.random.default_rng(30)
    best = float(rng.uniform(2.0, 4.0))
    speedups = {
        "PIECEWISE": best * 0.8,
        "FULL": best,
        "FULL_DECODE_ONLY": best * (1 - TIE_RTOL / 2),
        "FULL_AND_PIECEWISE": best * (1 - TIE_RTOL / 3),
    }
    text = cg.sweep_conclusion(UNITS, modelled(speedups, rng))
    clause = text.split("; ")[-1]
    assert clause == (
        "FULL, FULL_AND_PIECEWISE and FULL_DECODE_ONLY tie as fastest there "
        f"(within 1% of {best:.2f}x)."
    )  # PIECEWISE, 20% behind, is not among them


def test_one_mode_ahead_by_more_than_the_tolerance_is_the_fastest() -> None:
    rng = np.random.default_rng(31)
    best = float(rng.uniform(2.0, 4.0))
    speedups = {"FULL": best * (1 - 2 * TIE_RTOL), "PIECEWISE": best, "NONE": 1.0}
    text = cg.sweep_conclusion(UNITS, modelled(speedups, rng))
    assert text.endswith("the fastest mode there is PIECEWISE.")
    assert "tie" not in text
