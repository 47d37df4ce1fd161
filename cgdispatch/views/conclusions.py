"""The conclusion of each shipped notebook, as text built from that notebook's own results.

Each notebook ends with one code cell that prints one of these: the numbers in it are read
from the frames the notebook computed above (never typed in), and each says where they come
from (synthetic steps, measured on this machine, or model). Notebook 04 ends with
:func:`~cgdispatch.views.tune_verdict.verdict_text`.
"""

from __future__ import annotations

import pandas as pd

from ..core.config import GraphConfig
from ..core.generation import capture_keys, generation_of

__all__ = [
    "generation_line",
    "dispatch_tour_conclusion",
    "capture_conclusion",
    "sweep_conclusion",
    "byom_conclusion",
]


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "0%"


def _generation(config: GraphConfig) -> str:
    generation = generation_of(config)
    return f"vLLM {generation.release} ({generation.dispatcher_name})"


def generation_line(vllm_version: str) -> str:
    """The first line a notebook prints: which generation of vLLM's graph dispatch it models."""
    from ..core.generation import GENERATIONS, default_release, generation_for
    from ..core.ladder_shape import TOKEN_LADDER

    generation = generation_for(vllm_version)
    newest = ", the newest" if generation.release == default_release() else ""
    head = f"modelling vLLM {generation.release} ({generation.dispatcher_name}{newest})"
    # another shape points to the newest release of one token ladder (V1), if any
    one_list = [g for g in GENERATIONS.values() if g.ladder is TOKEN_LADDER]
    other = (
        f"; -p vllm_version {one_list[-1].release} for {one_list[-1].name}"
        if one_list and generation.ladder is not TOKEN_LADDER
        else ""
    )
    return f"{head}: {generation.ladder.keyed_by}{other}"


def dispatch_tour_conclusion(config: GraphConfig, stats: pd.DataFrame, source: str) -> str:
    """Notebook 01: what the configured mode captures and what the run's steps replayed.

    ``stats``: :func:`~cgdispatch.views.explain.dispatch_stats` of the run (columns
    runtime_mode, calls, real_tokens, padding_tokens); ``source`` names the steps."""
    keys = capture_keys(config)
    by_mode = pd.Series([str(k.runtime_mode) for k in keys]).value_counts()
    graphs = ", ".join(f"{n} {mode}" for mode, n in by_mode.items()) or "none"
    widest = max((k.num_tokens for k in keys), default=0)
    calls = stats.groupby("runtime_mode")["calls"].sum()
    total = float(calls.sum())
    shares = ", ".join(
        f"{_pct(float(calls.get(mode, 0)), total)} {mode}" for mode in ("FULL", "PIECEWISE", "NONE")
    )
    real, padding = float(stats["real_tokens"].sum()), float(stats["padding_tokens"].sum())
    return (
        f"Conclusion: {_generation(config)} in {config.cudagraph_mode} captures {len(keys)} "
        f"graphs ({graphs}), the widest {widest} tokens; wider steps run eagerly. Of "
        f"{int(total):,} steps ({source}), {shares} (eager); padding added "
        f"{_pct(padding, real)} to the real tokens."
    )


def capture_conclusion(summary: pd.DataFrame, reports: pd.DataFrame, source: str) -> str:
    """Notebook 02: whether every mode replays as eager, and what each captured.

    ``summary``: ``ModeCaptures.summary`` (config_mode, graphs, checks, all_ok);
    ``reports``: ``ModeCaptures.reports`` (config_mode, num_graphs)."""
    ok = summary[summary["all_ok"].astype(bool)]
    bad = summary[~summary["all_ok"].astype(bool)]["config_mode"].tolist()
    graphs = reports.groupby("config_mode", sort=False)["num_graphs"].sum()
    per_mode = ", ".join(f"{mode} {int(n)}" for mode, n in graphs.items())
    verdict = (
        f"all {len(summary)} modes replay exactly as the eager model within tolerance "
        f"({int(summary['checks'].sum())} checks)"
        if not bad
        else f"{len(ok)} of {len(summary)} modes replay as eager; NOT: {', '.join(bad)}"
    )
    return (
        f"Conclusion: {verdict}. Graphs captured per mode: {per_mode} (PIECEWISE captures one "
        f"graph per piece and size, FULL one per size and batch kind). Step times above are "
        f"{source}: on a CPU they show the runner's overhead, not a GPU's speed-up."
    )


def sweep_conclusion(units: pd.DataFrame, modelled: pd.DataFrame) -> str:
    """Notebook 03: what the sweep ran and what the device model predicts per mode.

    ``units``: :func:`~cgdispatch.views.sweepviews.unit_table` (mode, ok, failed, source);
    ``modelled``: :func:`~cgdispatch.views.sweepviews.modelled_speedup` (mode, num_tokens,
    uniform_decode, speedup_x, source)."""
    ran = int(units["ok"].sum())
    failed = int(units["failed"].sum())
    measured = ", ".join(sorted(set(units["source"].astype(str))))
    decode = modelled[modelled["uniform_decode"].astype(bool)]
    smallest = decode[decode["num_tokens"] == decode["num_tokens"].min()]
    best = smallest.sort_values("speedup_x", ascending=False)
    ranking = ", ".join(f"{r.mode} {r.speedup_x:.2f}x" for r in best.itertuples())
    source = ", ".join(sorted(set(modelled["source"].astype(str))))
    return (
        f"Conclusion: the sweep timed {ran} points ({failed} failed) across "
        f"{units['mode'].nunique()} modes, {measured}. Modelled over eager for a "
        f"{int(smallest['num_tokens'].iloc[0])}-token decode ({source}): {ranking}; "
        f"{_fastest(best)}."
    )


TIE_RTOL = 0.01  # speed-ups within 1% of the best are a tie: the model is not that exact


def _fastest(ranked: pd.DataFrame) -> str:
    """The fastest mode of ``ranked`` (mode, speedup_x; best first), or every mode within
    :data:`TIE_RTOL` of it when several are."""
    top = float(ranked["speedup_x"].iloc[0])
    tied = ranked.loc[ranked["speedup_x"] >= top * (1.0 - TIE_RTOL), "mode"].astype(str).tolist()
    if len(tied) == 1:
        return f"the fastest mode there is {tied[0]}"
    names = ", ".join(tied[:-1]) + f" and {tied[-1]}"
    return f"{names} tie as fastest there (within {100 * TIE_RTOL:g}% of {top:.2f}x)"


def byom_conclusion(model_name: str, checks: pd.DataFrame, rows: pd.DataFrame) -> str:
    """Notebook 05: whether the Hugging Face model replays as eager, and its sweep.

    ``checks``: ``ModeCaptures.checks`` (config_mode, ok, replayed); ``rows``: the sweep's
    rows (mode, uniform_decode, status, speedup_x, source)."""
    ok, total = int(checks["ok"].sum()), len(checks)
    modes = ", ".join(dict.fromkeys(checks["config_mode"].astype(str)))
    timed = rows[(rows["status"] == "ok") & rows["uniform_decode"].astype(bool)]
    speed = (
        ", ".join(
            f"{mode} {g['speedup_x'].median():.2f}x"
            for mode, g in timed.groupby("mode", sort=False)
        )
        or "no decode point timed"
    )
    source = ", ".join(sorted(set(rows["source"].astype(str)))) if len(rows) else "no sweep"
    return (
        f"Conclusion: {model_name} captured in {modes}; {ok} of {total} replay checks equal "
        f"the eager model{' (every one replayed a graph)' if checks['replayed'].all() else ''}. "
        f"Median decode speed-up over eager by mode ({source}): {speed}."
    )
