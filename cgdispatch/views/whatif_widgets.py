"""``whatif_dashboard(trace)``: edit the capture sizes and see what they would do to a trace.

The dashboard is the dispatch explorer (mode, capture-sizes box, batch-shape picker and the
decision for that shape) plus, for every accepted edit of the sizes or the mode, a replay of
the whole step trace through :func:`cgdispatch.plan.whatif.evaluate`: step share per runtime
mode, padding waste, eager fallbacks and, with a cost model, the expected time per step,
and a hit-rate figure by padded size. The handlers (``whatif_for_box``, ``metrics_html``,
``whatif_figure``) are plain functions tested without a browser; a bad entry shows a
message, never a traceback. With ``cost_models`` (name -> cost model) a dropdown switches the
model the figures come from, and a planner row (objective, graph count, "plan" button) fills
the sizes box with :func:`~cgdispatch.plan.planner.plan_capture_sizes` for the chosen
objective and model (``plan_boxes``). The metrics sit in an element with
``data-testid="whatif-metrics"`` whose ``data-*`` attributes carry the exact figures
(``repr`` of the floats), a stable hook for browser tests. Nothing here measures: times
come from the cost model given and are labelled with its ``source``.

Both generations of vLLM's graph dispatch are served (the explorer's toggle): with vLLM
0.34 (the default when no config is given: the newest) the sizes box holds the prefill
token sizes, a second box the decode request sizes, and "plan" fills both
(:func:`~cgdispatch.plan.planner_v2.plan_gen2_capture_sizes`).
"""

from __future__ import annotations

from typing import Any

import ipywidgets as w
import pandas as pd

from ..core.config import GraphConfig
from ..plan.costs import CostModel, as_cost_model, cost_source
from ..plan.ladder_latency import ladder_latency
from ..plan.whatif import WhatIfResult
from ..workload.trace import check_trace
from .whatif_handlers import metrics_html, plan_boxes, whatif_for_box
from .whatif_plots import whatif_figure
from .widgets import DispatchExplorer, message_html

# the handlers (whatif_for_box, plan_boxes, metrics_html) are whatif_handlers' names
__all__ = ["WhatIfDashboard", "whatif_dashboard"]


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
        cost_model: CostModel | None = None,
        *,
        num_tokens: int | None = None,
        trace_source: str = "trace",
        draw: bool = True,
        cost_models: dict[str, CostModel] | None = None,
        requests: pd.DataFrame | None = None,
    ) -> None:
        # no config: the newest generation, as every tool that chooses for the user
        config = GraphConfig() if config is None else config  # the newest release
        if not isinstance(config, GraphConfig):
            raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig")
        self.trace = check_trace(trace)
        self.trace_source = trace_source
        self.requests = requests  # with a cost model: vLLM's scheduler's latencies too
        if cost_models and cost_model is None:
            cost_model = next(iter(cost_models.values()))
        self.whatif_cost_model = as_cost_model(cost_model)
        self.draw = draw  # False: no figure (tests that only need the numbers)
        self.result: WhatIfResult | None = None
        self.metrics = w.HTML()
        # hidden while it holds no figure: an empty Image shows a broken-image icon
        self.plot = w.Image(format="png", layout=w.Layout(max_width="900px", display="none"))
        model = self.whatif_cost_model
        super().__init__(
            config.resolve(),
            model,
            num_tokens=num_tokens,
            cost_source="model" if model is None else cost_source(model),
        )
        self.model_box = w.Dropdown(
            options=list(cost_models or {}), description="cost model", disabled=not cost_models
        )
        self._cost_models = dict(cost_models or {})
        self.objective_box = w.ToggleButtons(options=["time", "padding"], value="time")
        self.graphs_box = w.BoundedIntText(value=16, min=1, max=512, description="max graphs")
        self.plan_button = w.Button(description="plan", button_style="primary")
        self.plan_button.on_click(lambda _b: self.plan())
        self.model_box.observe(self._on_model, names="value")
        planner = [
            w.HBox([self.model_box]),
            w.HBox([self.objective_box, self.graphs_box, self.plan_button]),
        ]
        self.children = [
            self.version_box,
            w.HBox([self.mode_box]),
            self.sizes_box,  # first text box: browser tests type into it
            self.decode_box,  # shown for vLLM 0.34 only
            *(planner if cost_models else []),
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
        if self._quiet:  # the boxes are being refilled on a generation switch
            return
        super()._on_config(change)
        self.update_whatif()

    def _on_model(self, change: dict[str, Any]) -> None:
        """Switch the cost model: the explorer's predictor, the metrics and the figure."""
        model = self._cost_models[change["new"]]
        self.whatif_cost_model = model
        self.cost_model, self.cost_source = model, cost_source(model)
        self.refresh()
        self.update_whatif()

    def plan(self) -> None:
        """Fill the sizes box(es) with the plan for the chosen objective, count and model."""
        boxes, notes = plan_boxes(
            self.base_config,
            self.trace,
            self.mode_box.value,
            self.objective_box.value,
            int(self.graphs_box.value),
            self.whatif_cost_model,
        )
        if boxes is None:
            self.message.value = message_html(notes)
            return
        if boxes.decode_text is not None:  # both boxes, then one what-if
            self._quiet = True
            try:
                self.decode_box.value = boxes.decode_text
            finally:
                self._quiet = False
        if self.sizes_box.value == boxes.sizes_text:
            self._on_config({"new": boxes.sizes_text})
        self.sizes_box.value = boxes.sizes_text  # the box's observer re-runs the what-if

    def update_whatif(self) -> None:
        """Re-run ``evaluate`` for the box's sizes and mode; show the metrics or the error."""
        result, notes = whatif_for_box(
            self.base_config,
            self.trace,
            self.sizes_box.value,
            self.mode_box.value,
            self.whatif_cost_model,
            self.decode_box.value,
        )
        self.result = result
        if result is None:
            self.metrics.value, self.plot.value = "", b""
            self.plot.layout.display = "none"
            self.decision.value = ""
            self.message.value = message_html(notes)
            return
        if self.draw:  # the figure first: once the metrics show, the figure is on its way
            self.plot.value = whatif_figure(result, self.trace_source)._repr_png_()
            self.plot.layout.display = None
        latency = None
        if self.requests is not None and self.whatif_cost_model is not None:
            latency = ladder_latency(result.config, self.requests, self.whatif_cost_model)
        self.metrics.value = metrics_html(result, self.trace_source, latency=latency)


def whatif_dashboard(
    trace: pd.DataFrame,
    config: GraphConfig | None = None,
    cost_model: CostModel | None = None,
    *,
    num_tokens: int | None = None,
    trace_source: str = "trace",
    cost_models: dict[str, CostModel] | None = None,
    requests: pd.DataFrame | None = None,
) -> WhatIfDashboard:
    """A dashboard to edit capture sizes and mode and see the what-if result on ``trace``.

    Shows, for the sizes in the box: step share per runtime mode, eager fallbacks, padding
    waste, with a cost model (see :mod:`cgdispatch.plan.costs`) the expected step time, trace
    time and graph memory labelled with its source, and a hit-rate figure; below, the
    batch-shape picker (num_tokens, uniform decode, LoRAs, cascade) with the dispatch
    decision, padded size and predicted step time. ``config`` (default
    ``GraphConfig()``, the newest generation; a toggle switches
    to V1)
    gives the generation, the scheduler limits and the starting sizes and mode; ``trace_source`` names the
    trace in the figure and the table (say ``synthetic`` when it is). ``cost_models``
    (name -> model, e.g. ``{"llama-3.1-8b on H200": device_cost_model(...), "affine":
    AffineCostModel()}``) adds a model switch and a planner row (objective, max graphs,
    "plan"). ``requests`` (the request table behind ``trace``) adds vLLM's own scheduler's
    p50/p99 TTFT and TPOT, throughput and preemptions for the sizes in the box, steps priced
    by their dispatch (needs a cost model).
    """
    return WhatIfDashboard(
        trace,
        config,
        cost_model,
        num_tokens=num_tokens,
        trace_source=trace_source,
        cost_models=cost_models,
        requests=requests,
    )
