"""``whatif_dashboard(trace)``: edit the capture sizes and see what they would do to a trace.

The dashboard is the dispatch explorer (mode, capture-sizes box, batch-shape picker and the
decision for that shape) plus, for every accepted edit of the sizes or the mode, a replay of
the whole step trace through :func:`cgdispatch.plan.whatif.evaluate`: step share per runtime
mode, padding waste, eager fallbacks and, with a cost model, the expected time per step,
and a hit-rate figure by padded size. The handlers (``whatif_for_box``, ``metrics_html``,
``whatif_figure``) are plain functions tested without a browser; a bad entry shows a
message, never a traceback. The metrics sit in an element with
``data-testid="whatif-metrics"`` whose ``data-*`` attributes carry the exact figures
(``repr`` of the floats), a stable hook for browser tests. Nothing here measures: times
come from the cost model given and are labelled with its ``source``.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
import pandas as pd

from ..core.config import GraphConfig
from ..core.modes import CUDAGraphMode
from ..plan.costs import as_cost_model, cost_source
from ..plan.whatif import WhatIfResult, evaluate
from ..workload.trace import check_trace
from .whatif_plots import whatif_figure
from .widgets import DispatchExplorer, build_config, message_html

__all__ = ["whatif_for_box", "metrics_html", "WhatIfDashboard", "whatif_dashboard"]

_MIB = 2**20


def whatif_for_box(
    base: GraphConfig,
    trace: pd.DataFrame,
    sizes_text: str,
    mode: str | CUDAGraphMode,
    cost_model: Any = None,
) -> tuple[WhatIfResult | None, list[str]]:
    """``evaluate`` the trace under ``base`` with the box's sizes and ``mode``.

    Returns ``(result, notes)`` (notes: warnings raised while building the config), or
    ``(None, [message])`` for a bad entry or a failing cost model; it never raises.
    """
    dispatcher, notes = build_config(base, sizes_text, mode)
    if dispatcher is None:
        return None, notes
    try:
        return evaluate(dispatcher, trace, as_cost_model(cost_model)), notes
    except ValueError as err:
        return None, [str(err)]
    except Exception as err:  # the cost model is user code: report it, never raise
        return None, [f"cost model failed: {type(err).__name__}: {err}"]


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def metrics_html(result: WhatIfResult, trace_source: str = "trace") -> str:
    """The metrics box for one what-if result, with the figures as ``data-*`` attributes."""
    e = html.escape
    s = result.summary
    cfg = result.config
    eager_steps = s["steps"] - s["graph_steps"]
    rows = [
        ("config", f"{e(str(cfg.cudagraph_mode))}, {s['num_graphs']} capture sizes"),
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
        rows.append(("expected step time", f"{s['mean_step_ms']:.3f} ms mean ({label})"))
        rows.append(("trace total", f"{s['total_time_s']:.2f} s ({label})"))
    if "graph_memory_bytes" in s:
        rows.append(
            (
                "graph memory",
                f"{s['graph_memory_bytes'] / _MIB:.1f} MiB, sum over graphs, no pool reuse "
                f"({e(str(s['source']))})",
            )
        )
    rows.append(("trace", f"{s['steps']} steps, {e(trace_source)}"))
    body = "".join(f"<tr><td style='padding-right:1em'>{k}</td><td>{v}</td></tr>" for k, v in rows)
    attrs = {
        "testid": "whatif-metrics",
        "mode": cfg.cudagraph_mode.name,
        "sizes": ",".join(str(x) for x in cfg.cudagraph_capture_sizes),
        "steps": s["steps"],
        "eager-steps": eager_steps,
        "eager-step-share": repr(float(s["eager_step_share"])),
        "step-share-full": repr(float(s["step_share_FULL"])),
        "step-share-piecewise": repr(float(s["step_share_PIECEWISE"])),
        "padding-tokens": s["padding_tokens"],
        "padded-token-ratio": repr(float(s["padded_token_ratio"])),
        "num-graphs": s["num_graphs"],
    }
    if "mean_step_ms" in s:
        attrs["mean-step-ms"] = repr(float(s["mean_step_ms"]))
    attr_text = " ".join(f'data-{k}="{e(str(v))}"' for k, v in attrs.items())
    return f"<div {attr_text}><table>{body}</table></div>"


class WhatIfDashboard(DispatchExplorer):
    """The dispatch explorer plus the what-if metrics and figure of the edited sizes on a trace.

    Every accepted change of the sizes box or the mode re-runs ``evaluate`` on the trace
    (a few array passes, milliseconds for 10^5 steps) and redraws the figure; moving the
    batch-shape controls only asks the dispatcher. A bad entry keeps nothing stale: the
    metrics and figure are cleared and the message says what is wrong.
    """

    def __init__(
        self,
        trace: pd.DataFrame,
        config: GraphConfig | None = None,
        cost_model: Any = None,
        *,
        num_tokens: int | None = None,
        trace_source: str = "trace",
        draw: bool = True,
    ) -> None:
        config = GraphConfig() if config is None else config
        if not isinstance(config, GraphConfig):
            raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig")
        self.trace = check_trace(trace)
        self.trace_source = trace_source
        self.whatif_cost_model = as_cost_model(cost_model)
        self.draw = draw  # False: no figure (tests that only need the numbers)
        self.result: WhatIfResult | None = None
        self.metrics = w.HTML()
        self.plot = w.Image(format="png", layout=w.Layout(max_width="900px"))
        model = self.whatif_cost_model
        super().__init__(
            config.resolve(),
            model,
            num_tokens=num_tokens,
            cost_source="model" if model is None else cost_source(model),
        )
        self.children = [
            w.HBox([self.mode_box]),
            self.sizes_box,
            self.metrics,
            self.plot,
            w.HTML("<b>batch shape</b>: the dispatcher's answer for one step"),
            self.slider,
            w.HBox([self.uniform, self.cascade, self.loras]),
            self.decision,
            self.message,
        ]
        self.update_whatif()

    def _on_config(self, change: dict[str, Any]) -> None:
        super()._on_config(change)
        self.update_whatif()

    def update_whatif(self) -> None:
        """Re-run ``evaluate`` for the box's sizes and mode; show the metrics or the error."""
        result, notes = whatif_for_box(
            self.base_config,
            self.trace,
            self.sizes_box.value,
            self.mode_box.value,
            self.whatif_cost_model,
        )
        self.result = result
        if result is None:
            self.metrics.value, self.plot.value = "", b""
            self.decision.value = ""
            self.message.value = message_html(notes)
            return
        if self.draw:  # the figure first: once the metrics show, the figure is on its way
            self.plot.value = whatif_figure(result, self.trace_source)._repr_png_()
        self.metrics.value = metrics_html(result, self.trace_source)


def whatif_dashboard(
    trace: pd.DataFrame,
    config: GraphConfig | None = None,
    cost_model: Any = None,
    *,
    num_tokens: int | None = None,
    trace_source: str = "trace",
) -> WhatIfDashboard:
    """A dashboard to edit capture sizes and mode and see the what-if result on ``trace``.

    Shows, for the sizes in the box: step share per runtime mode, eager fallbacks, padding
    waste, with a cost model (see :mod:`cgdispatch.plan.costs`) the expected step time, trace
    time and graph memory labelled with its source, and a hit-rate figure; below, the
    batch-shape picker (num_tokens, uniform decode, LoRAs, cascade) with the dispatch
    decision, padded size and predicted step time. ``config`` (default ``GraphConfig()``)
    gives the scheduler limits and the starting sizes and mode; ``trace_source`` names the
    trace in the figure and the table (say ``synthetic`` when it is).
    """
    return WhatIfDashboard(
        trace, config, cost_model, num_tokens=num_tokens, trace_source=trace_source
    )
