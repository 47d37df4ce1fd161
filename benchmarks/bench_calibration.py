"""The start-up model's errors on the logged vLLM start-ups, beside vLLM's own estimate.

Targets (issue 18), on every reference run whose model has a published config here:
graph memory median |error| <= 10% and max <= 30% (cross-validated, leaving each model family
out of the fit in turn); capture time median |error| <= max(1 s, 25%); KV-cache tokens within
5% of the log. The baseline measured in the same run is vLLM 0.19's own graph-memory
estimate, which profiles on the GPU itself: the ratio line says how many times smaller the
model's errors are than vLLM's.

Data: ``cgdispatch/data/reference_vllm_startups.csv`` (llm-d-planner's H100 logs). Every
figure printed is ``model (H100)`` against ``reference data (H100 80GB, 2026-04-22)``.
Then the held-out runs (issue 28: ``reference_vllm_startups_held_out.csv``, other GPUs and
releases, never fitted): their errors by GPU and by release, each against its own log.

Run: ``PYTHONPATH=. python benchmarks/bench_calibration.py`` (about 20 s on 2 cores).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
from targets import Targets  # beside this script

from cgdispatch.estimate.held_out import held_out_errors, held_out_table, held_out_targets
from cgdispatch.estimate.startup_data import reference_startups
from cgdispatch.estimate.startup_fit import calibration_table, error_summary


def main() -> int:
    targets = Targets()
    start = time.perf_counter()
    runs = reference_startups()
    table = calibration_table(runs)
    summary = error_summary(table)
    pd.set_option("display.width", 160)
    print(
        f"{len(runs)} of {len(reference_startups(covered_only=False))} reference start-ups "
        f"covered ({runs['model'].nunique()} models, families: "
        f"{', '.join(sorted(runs['family'].unique()))})"
    )
    shown = summary.copy()
    for column in ("median", "max"):
        shown[column] = [
            f"{v:.1%}" if "relative" in q else f"{v:.2f} s"
            for q, v in zip(shown["quantity"], shown[column])
        ]
    shown["within target"] = shown["within target"].map("{:.0%}".format)
    print(shown.to_string(index=False))
    cv, vllm = table["graph_memory_error_cv"], table["vllm_estimate_error"]
    print(
        f"graph memory, cross-validated vs vLLM's own estimate: median {cv.median():.1%} vs "
        f"{vllm.median():.1%} ({vllm.median() / cv.median():.2f}x smaller), max {cv.max():.1%} "
        f"vs {vllm.max():.1%} ({vllm.max() / cv.max():.2f}x smaller)"
    )
    worst = table.nlargest(3, "graph_memory_error_cv")[
        ["run", "graph_memory_gib", "graph_memory_gib_cv", "graph_memory_error_cv"]
    ]
    print("largest cross-validated graph-memory errors:")
    print(worst.to_string(index=False))
    tolerance = np.maximum(1.0, 0.25 * table["capture_s"])
    met = {
        "graph memory (CV median <= 10%, max <= 30%)": cv.median() <= 0.10 and cv.max() <= 0.30,
        "capture (CV median <= max(1 s, 25%))": table["capture_error_s_cv"].median()
        <= np.median(tolerance),
        "KV tokens (within 5%)": (table["kv_tokens_error_fit"] <= 0.05).mean(),
    }
    for name, value in met.items():
        judged = isinstance(value, (bool, np.bool_))  # the KV share is printed, not judged
        text = str(value) if judged else f"{value:.0%} of runs"
        print(f"target {name}: {text}")
        if judged:
            targets.check(name, bool(value))
    print_held_out(targets)
    print(f"({time.perf_counter() - start:.1f} s)")
    return targets.exit_code()


def print_held_out(targets: Targets) -> None:
    """The committed constants on the runs kept out of the fit (|relative error|)."""
    errors = held_out_errors()
    print(f"\nheld out (never fitted): {len(errors)} runs, {errors['device'].nunique()} GPUs")
    for by in ("device", "vllm_version"):
        table = held_out_table(errors, by=by)
        for column in (
            "graph median",
            "graph max",
            "graph within 35%",
            "capture median",
            "KV median",
            "KV within 5%",
        ):
            table[column] = table[column].map(lambda v: "-" if pd.isna(v) else f"{v:.1%}")
        print(table.to_string(index=False))
    shown = errors[["run", "graph_memory_error", "capture_error", "kv_tokens_error", "skipped"]]
    print(shown.to_string(index=False, float_format="{:+.1%}".format))
    for r in held_out_targets(errors).to_dict("records"):
        verdict = "not evaluated" if r["met"] is None else ("met" if r["met"] else "missed")
        print(f"held-out target {r['target']} (bound {r['bound']:.0%}): {verdict}")
        targets.check(f"held-out {r['target']}", r["met"] is not False)


if __name__ == "__main__":
    raise SystemExit(main())
