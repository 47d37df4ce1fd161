"""The start-up model on logged vLLM start-ups it was never fitted on (issue 28).

The held-out runs (``cgdispatch/data/reference_vllm_startups_held_out.csv``) come from other
sources than the fitted ones: other GPUs, other vLLM releases, other capture sizes and modes,
each row with the URL of its log. :func:`held_out_errors` predicts each with the committed
:data:`~cgdispatch.estimate.startup_pricing.CALIBRATION` (fitted on the ``"fit"`` split only) and
:func:`held_out_table` groups the errors by GPU or by release; :func:`held_out_markdown`
writes the tables docs/calibration.md quotes (a test checks they agree).

What is evaluated where: the graph-pool model has no device term (kernel nodes and
attention inputs only), so graph memory is predicted for every held-out run; capture time
needs the device's rates and KV tokens its memory, so those are predicted only for GPUs in
:data:`~cgdispatch.estimate.devices.DEVICE_PRESETS` (and
:data:`~cgdispatch.estimate.startup.DEVICE_MEMORY_BYTES`). A run on a GPU without a preset
counts for those quantities as soon as a preset of its name is added. This module does not
fit anything.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .pool_factors import predict_run
from .startup import DEVICE_MEMORY_BYTES
from .startup_data import reference_startups
from .startup_pricing import CALIBRATION, GIB, StartupCoefficients

__all__ = [
    "LADDER_BINS",
    "TARGETS",
    "held_out_errors",
    "held_out_markdown",
    "held_out_table",
    "held_out_targets",
    "ladder_bin",
]

# issue 28's targets on runs not fitted: |relative error| statistic -> bound
TARGETS = {
    "graph memory median": 0.10,
    "graph memory max": 0.30,
    "KV tokens within 5%, share of runs": 0.90,
    "capture median": 0.25,
}
KV_TOLERANCE = 0.05


def _keys(row: pd.Series) -> str:
    parts = [f"{int(row['piecewise_graphs'])} PW"] if int(row["piecewise_graphs"]) else []
    if int(row["full_graphs"]):
        parts.append(f"{int(row['full_graphs'])} FULL")
    return " + ".join(parts)


def held_out_errors(
    rows: pd.DataFrame | None = None, coefficients: StartupCoefficients | None = None
) -> pd.DataFrame:
    """One row per held-out run: logged and modelled graph memory, capture seconds and KV
    tokens, and the signed relative error of each (NaN where not evaluated: ``skipped``
    says why). ``rows`` defaults to every covered held-out run; ``coefficients`` to
    :data:`CALIBRATION`."""
    rows = reference_startups(split="held_out") if rows is None else rows
    c = CALIBRATION if coefficients is None else coefficients
    records = []
    for _, row in rows.iterrows():
        device = str(row["device"])
        est, known, seqs_from = predict_run(row, c)
        record = {
            "run": row["run"],
            "model": row["model"],
            "device": device,
            "vllm_version": str(row["vllm_version"]),
            "mode": row["cudagraph_mode"],
            "keys": _keys(row),
            "ladder": ladder_bin(len(str(row["cudagraph_capture_sizes"]).split())),
            "max_num_seqs_from": seqs_from,
            "graph_memory_gib": row["graph_memory_gib"],
            "graph_memory_gib_model": est.graph_memory_bytes / GIB,
            "capture_s": row["capture_s"],
            "capture_s_model": est.capture_s if known else np.nan,
            "kv_cache_tokens": row["kv_cache_tokens"],
            "kv_cache_tokens_model": (
                est.kv_cache_tokens if known and device in DEVICE_MEMORY_BYTES else np.nan
            ),
            "skipped": "" if known else f"capture, KV tokens: no {device} preset",
            "source": row["source"],
        }
        records.append(record)
    table = pd.DataFrame(records)
    for name, logged, model in (
        ("graph_memory_error", "graph_memory_gib", "graph_memory_gib_model"),
        ("capture_error", "capture_s", "capture_s_model"),
        ("kv_tokens_error", "kv_cache_tokens", "kv_cache_tokens_model"),
    ):
        if table.empty:
            table[name] = pd.Series(dtype=float)
            continue
        table[name] = table[model].astype(float) / table[logged].astype(float) - 1
    return table


# ladder-size groups (issue 35): capture sizes in the run's list
LADDER_BINS = ((1, 8, "1-8"), (9, 64, "9-64"), (65, None, "65+"))


def ladder_bin(num_sizes: int) -> str:
    """The group of a ladder of ``num_sizes`` capture sizes: ``"1-8"``, ``"9-64"`` or
    ``"65+"``."""
    if isinstance(num_sizes, bool) or not isinstance(num_sizes, int) or num_sizes < 1:
        raise ValueError(f"num_sizes={num_sizes!r} is invalid: a ladder has >= 1 size")
    for low, high, label in LADDER_BINS:
        if num_sizes >= low and (high is None or num_sizes <= high):
            return label
    raise AssertionError("unreachable")


def _version_key(version: str) -> tuple[int, ...]:
    """0.9.2 before 0.11.0 (numeric, not text, order)."""
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def _stats(errors: pd.DataFrame) -> dict[str, Any]:
    graph = errors["graph_memory_error"].dropna().abs()
    capture = errors["capture_error"].dropna().abs()
    kv = errors["kv_tokens_error"].dropna().abs()
    return {
        "runs": len(errors),
        "graph n": len(graph),
        "graph median": graph.median() if len(graph) else np.nan,
        "graph max": graph.max() if len(graph) else np.nan,
        "capture n": len(capture),
        "capture median": capture.median() if len(capture) else np.nan,
        "KV n": len(kv),
        "KV median": kv.median() if len(kv) else np.nan,
        "KV within 5%": float((kv <= KV_TOLERANCE).mean()) if len(kv) else np.nan,
    }


def held_out_table(errors: pd.DataFrame | None = None, *, by: str = "device") -> pd.DataFrame:
    """|relative error| statistics of the held-out runs per ``by`` (``"device"``,
    ``"vllm_version"`` or ``"ladder"``, the ladder-size groups of :data:`LADDER_BINS`),
    with an ``all`` row last; each quantity counts only the runs where it was evaluated
    (``... n``)."""
    if by not in ("device", "vllm_version", "ladder"):
        raise ValueError(f"by={by!r} is invalid: group by 'device', 'vllm_version' or 'ladder'")
    errors = held_out_errors() if errors is None else errors
    order = {"vllm_version": _version_key, "ladder": [b[2] for b in LADDER_BINS].index}
    keys = sorted(set(errors[by]), key=order.get(by, str))
    out = [{by: key, **_stats(errors[errors[by] == key])} for key in keys]
    out.append({by: "all", **_stats(errors)})
    return pd.DataFrame(out)


def held_out_targets(errors: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each of :data:`TARGETS` on the held-out runs: value, runs counted, met (None where
    no run could be evaluated)."""
    errors = held_out_errors() if errors is None else errors
    s = _stats(errors)
    values = {
        "graph memory median": (s["graph median"], s["graph n"]),
        "graph memory max": (s["graph max"], s["graph n"]),
        "KV tokens within 5%, share of runs": (s["KV within 5%"], s["KV n"]),
        "capture median": (s["capture median"], s["capture n"]),
    }
    rows = []
    for name, bound in TARGETS.items():
        value, n = values[name]
        met = None
        if n:
            met = bool(value >= bound) if name.startswith("KV") else bool(value <= bound)
        rows.append({"target": name, "bound": bound, "value": value, "runs": n, "met": met})
    return pd.DataFrame(rows)


def _pct(value: float, signed: bool = False) -> str:
    if pd.isna(value):
        return "–"
    return f"{value:+.1%}" if signed else f"{value:.1%}"


def _group_markdown(table: pd.DataFrame, by: str, title: str) -> list[str]:
    lines = [
        f"| {title} | runs | graph memory n | median | max | capture n | median "
        "| KV tokens n | median | within 5% |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in table.to_dict("records"):
        lines.append(
            f"| {r[by]} | {r['runs']} | {r['graph n']} | {_pct(r['graph median'])} "
            f"| {_pct(r['graph max'])} | {r['capture n']} | {_pct(r['capture median'])} "
            f"| {r['KV n']} | {_pct(r['KV median'])} | {_pct(r['KV within 5%'])} |"
        )
    return lines


def held_out_markdown(errors: pd.DataFrame | None = None) -> str:
    """The held-out tables of docs/calibration.md: by GPU, by release, by ladder size, the
    targets and
    every run (signed errors; ``–`` where not evaluated)."""
    errors = held_out_errors() if errors is None else errors
    lines = ["By GPU:", ""]
    lines += _group_markdown(held_out_table(errors, by="device"), "device", "GPU")
    lines += ["", "By vLLM release:", ""]
    lines += _group_markdown(held_out_table(errors, by="vllm_version"), "vllm_version", "vLLM")
    lines += ["", "By ladder size (capture sizes in the run's list):", ""]
    lines += _group_markdown(held_out_table(errors, by="ladder"), "ladder", "sizes")
    lines += ["", "Targets on runs not fitted:", ""]
    lines += ["| target | bound | held-out value | runs | met |", "| --- | --- | --- | --- | --- |"]
    for r in held_out_targets(errors).to_dict("records"):
        met = "not evaluated" if r["met"] is None else ("yes" if r["met"] else "no")
        lines.append(
            f"| {r['target']} | {r['bound']:.0%} | {_pct(r['value'])} | {r['runs']} | {met} |"
        )
    lines += ["", "Every run (signed error: model / log - 1):", ""]
    lines += [
        "| run | GPU | vLLM | keys | graph GiB log / model | error | capture s log / model "
        "| error | KV tokens log / model | error |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in errors.to_dict("records"):
        capture = "–" if pd.isna(r["capture_s_model"]) else f"{r['capture_s_model']:.1f}"
        kv = "–" if pd.isna(r["kv_cache_tokens_model"]) else f"{int(r['kv_cache_tokens_model']):,}"
        lines.append(
            f"| {r['run']} | {r['device']} | {r['vllm_version']} | {r['keys']} "
            f"| {r['graph_memory_gib']:.2f} / {r['graph_memory_gib_model']:.2f} "
            f"| {_pct(r['graph_memory_error'], True)} "
            f"| {r['capture_s']:g} / {capture} | {_pct(r['capture_error'], True)} "
            f"| {int(r['kv_cache_tokens']):,} / {kv} | {_pct(r['kv_tokens_error'], True)} |"
        )
    return "\n".join(lines)
