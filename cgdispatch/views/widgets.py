"""ipywidgets dashboards, each one call: ``dispatch_explorer(config)`` here, ``whatif_dashboard(trace)``
in :mod:`cgdispatch.views.whatif_widgets` (built on the explorer).

The explorer answers with either generation of vLLM's graph dispatch (a toggle: 0.33 V1
``CudagraphDispatcher``, 0.34 generation 2 ``CudaGraphManager``); with 0.34 the sizes box
holds the prefill token sizes and a second box the decode request sizes.

The handlers are plain functions (``parse_sizes_box``, ``build_config``, ``decision_html``
in :mod:`cgdispatch.views.explorer_handlers`, and ``explain_dispatch`` from
:mod:`cgdispatch.views.explain`) so they are tested without a
browser; the widget classes only wire them to controls. A bad entry shows a message in the
dashboard, never a traceback. The decision is rendered inside an element with
``data-testid="dispatch-decision"`` whose ``data-*`` attributes carry the answer, a stable
hook for browser tests.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import ipywidgets as w

from ..core.config import GraphConfig
from ..core.generation import (
    GENERATIONS,
    GraphDispatcher,
    for_generation,
    generation_of,
    make_graph_dispatcher,
)
from ..core.modes import CUDAGraphMode
from ..plan import costs
from ..plan.costs import CostModel
from .explain import explain_dispatch
from .explorer_handlers import (
    box_sizes,
    build_config,
    decision_html,
    largest_size,
    message_html,
    slider_max,
)
from .snapshots import Snapshot

__all__ = ["DispatchExplorer", "dispatch_explorer"]


class DispatchExplorer(Snapshot, w.VBox):
    """The dispatch explorer: batch controls in, the dispatcher's decision out.

    It asks a ``CudagraphDispatcher`` (V1) or ``CudaGraphManager`` (generation 2), rebuilt
    when the generation, mode or sizes change, and shows its answer; it keeps no statistics
    and changes nothing outside itself. Switching generation keeps the engine settings
    (:func:`~cgdispatch.core.generation.for_generation` of the config given, then ``resolve()``
    as that generation's runner does) and shows that generation's sizes.
    """

    def __init__(
        self,
        config: GraphConfig,
        cost_model: CostModel | Callable[..., Any] | None = None,
        *,
        num_tokens: int | None = None,
        cost_source: str | None = None,
    ) -> None:
        if not isinstance(config, GraphConfig):
            raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig")
        self.base_config, self.cost_model = config, costs.as_cost_model(cost_model)
        # the config per generation: the given one, the other made on the first switch
        self._bases: dict[str, GraphConfig] = {generation_of(config).release: config}
        self._origin = config  # the other generation is made from the config as given
        self._quiet = False  # True while the boxes are refilled on a generation switch
        # the label shown next to a predicted time: given, else the cost model's own source
        self.cost_source = cost_source or costs.cost_source(self.cost_model)
        self.dispatcher: GraphDispatcher = make_graph_dispatcher(config, record_stats=False)
        self._config_error: str | None = None  # what the config boxes hold wrong, if anything
        top = slider_max(self.dispatcher)
        start = min(top, largest_size(self.dispatcher) if num_tokens is None else num_tokens)
        self._make_controls(config, top, start)
        self.decision = w.HTML()
        self.message = w.HTML()
        self._show_generation_controls()
        for control in (self.slider, self.uniform, self.loras, self.cascade):
            control.observe(self._on_batch, names="value")
        for control in (self.mode_box, self.sizes_box, self.decode_box):
            control.observe(self._on_config, names="value")
        self.version_box.observe(self._on_version, names="value")
        super().__init__(
            [
                self.version_box,
                w.HBox([self.mode_box]),
                self.sizes_box,
                self.decode_box,
                self.slider,
                w.HBox([self.uniform, self.cascade, self.loras]),
                self.decision,
                self.message,
            ]
        )
        self.refresh()

    def _make_controls(self, config: GraphConfig, top: int, start: int) -> None:
        """The generation toggle, mode, sizes and batch controls, unobserved."""
        style = {"description_width": "110px"}
        self.version_box = w.ToggleButtons(
            options=[(f"{g.release} ({g.label})", g.release) for g in GENERATIONS.values()],
            value=generation_of(config).release,
            description="vLLM",
            style=style,
        )
        self.mode_box = w.Dropdown(
            options=[m.name for m in CUDAGraphMode],
            value=config.cudagraph_mode.name,
            description="mode",
            style=style,
        )
        sizes_text, decode_text = box_sizes(config)
        self.sizes_box, self.decode_box = (
            w.Text(
                value=text,
                description=label,
                continuous_update=False,  # a box is read when its entry is done
                style=style,
                layout=w.Layout(width="95%"),
            )
            for text, label in ((sizes_text, "capture sizes"), (decode_text, "decode requests"))
        )
        self.slider = w.IntSlider(
            value=max(start, 1),
            min=1,
            max=top,
            description="num_tokens",
            continuous_update=True,
            style=style,
            layout=w.Layout(width="95%"),
        )
        self.uniform = w.Checkbox(value=False, description="uniform decode", indent=False)
        self.loras = w.IntText(
            value=0, description="active LoRAs", style=style, layout=w.Layout(width="200px")
        )
        self.cascade = w.Checkbox(value=False, description="cascade attention", indent=False)

    def _show_generation_controls(self) -> None:
        """Two ladders show the decode request sizes box; no cascade attention, no toggle."""
        generation = generation_of(self.base_config)
        ladders = generation.ladder.ladders  # one box per ladder of the release's shape
        self.sizes_box.description = ladders[0].box
        self.decode_box.layout.display = None if len(ladders) > 1 else "none"
        if not generation.runner.cascade_attention:
            self.cascade.value = False
        self.cascade.disabled = not generation.runner.cascade_attention

    def _on_version(self, change: dict[str, Any]) -> None:
        version = change["new"]
        base = self._bases.get(version)
        if base is None:
            try:
                with warnings.catch_warnings():  # legacy sizes carried to gen 2 warn there
                    warnings.simplefilter("ignore")
                    # resolved as that generation's runner would (V1 rounds sizes to q)
                    base = for_generation(self._origin, version).resolve()
            except ValueError as err:
                self._show_error(str(err))
                return
            self._bases[version] = base
        self.base_config = base
        self._quiet = True
        try:
            self.sizes_box.value, self.decode_box.value = box_sizes(base)
            self._show_generation_controls()
        finally:
            self._quiet = False
        self._on_config(change)

    def _on_config(self, _change: dict[str, Any]) -> None:
        if self._quiet:
            return
        second_box = len(generation_of(self.base_config).ladder.ladders) > 1
        dispatcher, notes = build_config(
            self.base_config,
            self.sizes_box.value,
            self.mode_box.value,
            self.decode_box.value if second_box else None,
        )
        if dispatcher is None:  # keep the last good dispatcher; say what is wrong
            self._config_error = notes[0]
            self._show_error(notes[0])
            return
        self._config_error = None
        self.dispatcher = dispatcher
        self.slider.max = slider_max(dispatcher)  # may clamp the value, which refreshes too
        self.refresh(notes)

    def _show_error(self, message: str) -> None:
        self.decision.value = ""
        self.message.value = message_html([message])

    def _on_batch(self, _change: dict[str, Any]) -> None:
        if not self._quiet:
            self.refresh()

    def refresh(self, notes: list[str] | None = None) -> None:
        """Recompute the decision for the current controls and show it (or the error); while
        the sizes or mode boxes hold a value the dispatcher refuses, their error stays shown
        (a batch control moved meanwhile is answered once the boxes are fixed)."""
        if self._config_error is not None:
            self._show_error(self._config_error)
            return
        try:
            decision = explain_dispatch(
                self.dispatcher,
                self.slider.value,
                self.uniform.value,
                self.loras.value,
                self.cascade.value,
                self.cost_model,
            )
        except ValueError as err:
            self._show_error(str(err))
            return
        except Exception as err:  # the cost model is user code: show its failure, never raise
            self._show_error(f"cost model failed: {type(err).__name__}: {err}")
            return
        self.decision.value = decision_html(decision, self.cost_source)
        self.message.value = message_html(notes or [], kind="note")


def dispatch_explorer(
    config: GraphConfig,
    cost_model: CostModel | Callable[..., Any] | None = None,
    *,
    num_tokens: int | None = None,
    cost_source: str | None = None,
) -> DispatchExplorer:
    """A dashboard that shows the dispatch decision for a batch you pick.

    Controls: vLLM generation (0.33 V1 / 0.34 generation 2; starts at the config's
    ``vllm_version``), cudagraph mode, capture sizes (text; with 0.34 the
    prefill token sizes, plus a box of decode request sizes), num_tokens slider, uniform
    decode, cascade attention (V1 only), active LoRAs. Output: runtime mode, padded size,
    num_reqs, key (the generation's descriptor), the reason, and, with a cost model (a :class:`~cgdispatch.plan.costs.CostModel` such as the
    device model, or a callable ``f(mode, num_tokens)`` on arrays), the predicted step time
    at the padded size, labelled with ``cost_source`` (default: the cost model's
    ``source``). ``num_tokens`` sets the slider's start (default:
    the largest capture size).
    """
    return DispatchExplorer(config, cost_model, num_tokens=num_tokens, cost_source=cost_source)
