"""The what-if dashboard's handlers, plain functions tested without a browser.

``whatif_for_box`` replays a trace for the boxes' sizes, ``plan_boxes`` fills the boxes
with a plan, ``metrics_html`` renders the metrics with the exact figures as ``data-*``
attributes. Either generation of vLLM's dispatch: the base config's
``vllm_version`` decides (vLLM 0.34: prefill token sizes and decode request sizes). None of
them raises on a bad entry: they answer ``(None, [message])``.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..core.config import GraphConfig
from ..core.generation import default_release, generation_for, generation_of
from ..core.modes import CUDAGraphMode
from ..plan.costs import CostModel, as_cost_model
from ..plan.gen2_ladder import Gen2Ladder
from ..plan.planner import plan_ladder
from ..plan.whatif import WhatIfResult, evaluate
from .explorer_handlers import build_config, format_sizes
from .numbers import count, duration, duration_s, nbytes

__all__ = ["whatif_for_box", "plan_boxes", "PlannedBoxes", "metrics_html"]


def whatif_for_box(
    base: GraphConfig,
    trace: pd.DataFrame,
    sizes_text: str,
    mode: str | CUDAGraphMode,
    cost_model: CostModel | None = None,
    decode_sizes_text: str | None = None,
) -> tuple[WhatIfResult | None, list[str]]:
    """``evaluate`` the trace under ``base`` with the box's sizes and ``mode``.

    ``base``'s generation decides: V1 takes the box as capture sizes; vLLM 0.34 as prefill
    token sizes, with ``decode_sizes_text`` as decode request sizes (None: vLLM's default).
    Returns ``(result, notes)`` (notes: warnings raised while building the config), or
    ``(None, [message])`` for a bad entry or a failing cost model; it never raises.
    """
    ladders = len(generation_of(base).ladder.ladders)  # a second box only for a second ladder
    decode = decode_sizes_text if ladders > 1 else None
    dispatcher, notes = build_config(base, sizes_text, mode, decode)
    if dispatcher is None:
        return None, notes
    try:
        return evaluate(dispatcher, trace, as_cost_model(cost_model)), notes
    except ValueError as err:
        return None, [str(err)]
    except Exception as err:  # the cost model is user code: report it, never raise
        return None, [f"cost model failed: {type(err).__name__}: {err}"]


@dataclass(frozen=True)
class PlannedBoxes:
    """What "plan" puts in the boxes: the sizes box (V1 capture sizes, or vLLM 0.34's
    prefill token sizes) and, for vLLM 0.34, the decode request sizes box."""

    sizes_text: str
    decode_text: str | None = None


def plan_boxes(
    base: GraphConfig,
    trace: pd.DataFrame,
    mode: str | CUDAGraphMode,
    objective: str,
    max_graphs: int,
    cost_model: CostModel | None,
) -> tuple[PlannedBoxes | None, list[str]]:
    """The plan for ``objective`` (``"padding"`` / ``"time"``) with at most ``max_graphs``
    sizes (both lists together for vLLM 0.34) under ``base`` with ``mode``, as box texts;
    ``(None, [message])`` on a bad entry (it never raises)."""
    try:
        config = base.replace(cudagraph_mode=CUDAGraphMode.parse(mode)).resolve()
        ladder = plan_ladder(
            trace, max_graphs, objective=objective, cost_model=cost_model, config=config
        )
    except ValueError as err:
        return None, [str(err)]
    # an empty ladder (a time plan may take no prefill graph) is "none", which the boxes
    # read back as no sizes: a plan is always an entry its own widget accepts (issue 37)
    if isinstance(ladder, Gen2Ladder):
        return PlannedBoxes(
            format_sizes(ladder.prefill_token_sizes),
            format_sizes(ladder.decode_request_sizes),
        ), []
    return PlannedBoxes(format_sizes(ladder)), []


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _metrics_attrs(
    result: WhatIfResult,
    release: Any,
    sizes: list[int],
    others: list[list[int]],
    eager_steps: int,
    latency: dict | None,
) -> dict[str, Any]:
    """The metrics box's figures as ``data-*`` attributes (the browser tests read them)."""
    s = result.summary
    cfg = result.config
    attrs = {
        "testid": "whatif-metrics",
        "vllm-version": s["vllm_version"],
        "mode": cfg.cudagraph_mode.name,
        "sizes": ",".join(str(x) for x in sizes),  # what the sizes box holds
        "steps": s["steps"],
        "eager-steps": eager_steps,
        "eager-step-share": repr(float(s["eager_step_share"])),
        "step-share-full": repr(float(s["step_share_FULL"])),
        "step-share-piecewise": repr(float(s["step_share_PIECEWISE"])),
        "padding-tokens": s["padding_tokens"],
        "padded-token-ratio": repr(float(s["padded_token_ratio"])),
        "num-graphs": s["num_graphs"],
    }
    for ladder, values in zip(release.ladder.ladders[1:], others):  # "decode-sizes"
        attrs[ladder.flag.replace("_", "-")] = ",".join(str(x) for x in values)
    if "mean_step_ms" in s:
        attrs["mean-step-ms"] = repr(float(s["mean_step_ms"]))
        attrs["source"] = s["source"]
    if "graph_memory_bytes" in s:
        attrs["graph-memory-bytes"] = repr(float(s["graph_memory_bytes"]))
    for key, value in (latency or {}).items():
        attrs[key.replace("_", "-")] = repr(float(value))
    return attrs


def metrics_html(
    result: WhatIfResult, trace_source: str = "trace", *, latency: dict | None = None
) -> str:
    """The metrics box for one what-if result, with the figures as ``data-*`` attributes;
    ``latency`` (:func:`~cgdispatch.plan.ladder_latency.ladder_latency`'s columns) adds a row
    of vLLM's scheduler's latencies."""
    e = html.escape
    s = result.summary
    cfg = result.config
    eager_steps = s["steps"] - s["graph_steps"]
    release = generation_for(s["vllm_version"])
    generation = f"{release.release} ({release.dispatcher_name}, {release.name})"
    sizes, *others = release.ladder.sizes(cfg)  # the first ladder's, then the others'
    config_text = release.ladder.config_text(cfg, s["num_graphs"])
    if release.release == default_release():
        generation += ", the newest"
    rows = [
        ("vLLM", e(generation)),
        ("config", f"{e(str(cfg.cudagraph_mode))}, {config_text}"),
        ("graphs captured", f"{s['num_captured_graphs']} (all modes and LoRA cases)"),
        (
            "steps per runtime mode",
            f"FULL {_pct(s['step_share_FULL'])}, PIECEWISE {_pct(s['step_share_PIECEWISE'])}, "
            f"NONE (eager) {_pct(s['step_share_NONE'])}",
        ),
        (
            "eager fallbacks",
            f'<b data-testid="whatif-eager">{eager_steps}</b> of {s["steps"]} steps '
            f"({_pct(s['eager_step_share'])})",
        ),
        (
            "padding waste",
            f"{s['padding_tokens']} padding tokens, "
            f'<b data-testid="whatif-padding">{_pct(s["padded_token_ratio"])}</b> of the real '
            "tokens of graph-replayed steps",
        ),
    ]
    if "mean_step_ms" in s:
        label = e(str(s["source"]))
        rows.append(("expected step time", f"{duration(s['mean_step_ms'])} mean ({label})"))
        rows.append(("trace total", f"{duration_s(s['total_time_s'])} ({label})"))
    if "capture_s" in s:
        rows.append(("capture time", f"{duration_s(s['capture_s'])} ({e(str(s['source']))})"))
    if "graph_memory_bytes" in s:
        rows.append(
            (
                "graph memory",
                f"{nbytes(s['graph_memory_bytes'])}, one shared pool ({e(str(s['source']))})",
            )
        )
    if latency is not None:
        rows.append(
            (
                "vLLM's scheduler",
                f"TTFT p50 {duration(latency['ttft_p50_ms'])} / p99 "
                f'<b data-testid="whatif-ttft-p99">{duration(latency["ttft_p99_ms"])}</b>, TPOT '
                f"p50 {duration(latency['tpot_p50_ms'])} / p99 "
                f"{duration(latency['tpot_p99_ms'])}, "
                f"{count(latency['throughput_tok_s'])} output tok/s, "
                f"{int(latency['num_preemptions'])} preemptions ({e(str(s.get('source', 'model')))})",
            )
        )
    rows.append(("trace", f"{s['steps']} steps, {e(trace_source)}"))
    body = "".join(f"<tr><td style='padding-right:1em'>{k}</td><td>{v}</td></tr>" for k, v in rows)
    attrs = _metrics_attrs(result, release, sizes, others, eager_steps, latency)
    attr_text = " ".join(f'data-{k}="{e(str(v))}"' for k, v in attrs.items())
    return f"<div {attr_text}><table>{body}</table></div>"
