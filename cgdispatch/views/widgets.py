"""ipywidgets dashboards, each one call: ``dispatch_explorer(config)`` here, ``whatif_dashboard(trace)``
in :mod:`cgdispatch.views.whatif_widgets` (built on the explorer).

The handlers are plain functions (``parse_sizes_box``, ``build_config``, ``decision_html``,
and ``explain_dispatch`` from :mod:`cgdispatch.views.explain`) so they are tested without a
browser; the widget classes only wire them to controls. A bad entry shows a message in the
dashboard, never a traceback. The decision is rendered inside an element with
``data-testid="dispatch-decision"`` whose ``data-*`` attributes carry the answer, a stable
hook for browser tests.
"""

from __future__ import annotations

import html
import re
import warnings
from collections.abc import Callable
from typing import Any

import ipywidgets as w

from ..core.config import GraphConfig
from ..core.dispatcher import CudagraphDispatcher, ready_dispatcher
from ..core.modes import CUDAGraphMode
from ..plan import costs
from ..plan.costs import CostModel
from .explain import explain_dispatch

__all__ = [
    "parse_sizes_box",
    "format_sizes",
    "build_config",
    "decision_html",
    "message_html",
    "explain_dispatch",
    "DispatchExplorer",
    "dispatch_explorer",
]

_SPLIT = re.compile(r"[,\s;]+")


def format_sizes(sizes: list[int]) -> str:
    """``[1, 2, 4]`` -> ``"1, 2, 4"`` (what the sizes box shows)."""
    return ", ".join(str(s) for s in sizes)


def parse_sizes_box(text: str, config: GraphConfig) -> tuple[list[int] | None, str | None]:
    """Parse a capture-sizes box: ``(sorted distinct sizes, None)`` or ``(None, message)``.

    Sizes are integers separated by commas or spaces. An empty box is an error (clear it
    to nothing and there is nothing to capture: pick mode NONE instead). A size below 1 or
    above the config's max_num_batched_tokens is an error, not silently dropped.
    """
    parts = [p for p in _SPLIT.split(text.strip()) if p]
    if not parts:
        return None, "no capture sizes given: enter sizes such as '1, 2, 4, 8' (or pick mode NONE)"
    bad = [p for p in parts if not re.fullmatch(r"[+]?\d+", p)]
    if bad:
        return None, f"capture sizes {bad} are not integers: enter sizes such as '1, 2, 4, 8'"
    sizes = sorted({int(p) for p in parts})
    if sizes[0] < 1:
        return None, "capture size 0 is invalid: sizes must be >= 1"
    limit = config.max_num_batched_tokens
    above = [s for s in sizes if s > limit]
    if above:
        return None, (
            f"capture sizes {above} exceed max_num_batched_tokens={limit}: no step is that "
            "large, so such graphs would never run; remove them"
        )
    return sizes, None


def build_config(
    base: GraphConfig, sizes_text: str, mode: str | CUDAGraphMode
) -> tuple[CudagraphDispatcher | None, list[str]]:
    """``(dispatcher, notes)`` for ``base`` with the box's sizes and ``mode``; ``(None, [error])`` on a bad entry.

    Warnings raised while building the config (e.g. sizes dropped for sequence parallelism)
    come back as notes beside a usable dispatcher.
    """
    sizes, error = parse_sizes_box(sizes_text, base)
    if error:
        return None, [error]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            config = base.replace(
                cudagraph_mode=CUDAGraphMode.parse(mode), cudagraph_capture_sizes=sizes
            )
            dispatcher = ready_dispatcher(config, record_stats=False)
    except ValueError as err:
        return None, [str(err)]
    return dispatcher, [str(c.message) for c in caught]


def decision_html(decision: dict[str, Any], cost_source: str = "model") -> str:
    """The decision box: mode, padded size, num_reqs, key, reason and predicted time."""
    e = html.escape
    mode, padded = decision["runtime_mode"], decision["padded_size"]
    if mode == "NONE":
        reqs = "n/a (eager: no graph key)"
    else:
        reqs = "any (PIECEWISE key)" if decision["num_reqs"] is None else decision["num_reqs"]
    rows = [
        ("runtime mode", f'<b data-testid="decision-mode">{e(mode)}</b>'),
        (
            "padded size",
            f'<b data-testid="decision-padded">{padded}</b> tokens '
            f"({decision['padding_tokens']} padding)",
        ),
        ("num_reqs", e(str(reqs))),
        ("key", f"<code>{e(decision['key'])}</code>"),
        ("why", e(decision["reason"])),
    ]
    if decision.get("predicted_ms") is not None:
        rows.append(("predicted step", f"{decision['predicted_ms']:.3f} ms ({e(cost_source)})"))
    body = "".join(f"<tr><td style='padding-right:1em'>{k}</td><td>{v}</td></tr>" for k, v in rows)
    attrs = (
        f'data-testid="dispatch-decision" data-runtime-mode="{e(mode)}" data-padded-size="{padded}" '
        f'data-num-tokens="{decision["num_tokens"]}" data-uniform="{str(decision["uniform_decode"]).lower()}" '
        f'data-loras="{decision["active_loras"]}" data-cascade="{str(decision["cascade"]).lower()}"'
    )
    return f"<div {attrs}><table>{body}</table></div>"


def message_html(messages: list[str], kind: str = "error") -> str:
    """Messages as a coloured block (``data-testid="dispatch-message"``); empty for none."""
    if not messages:
        return ""
    color = "#b00020" if kind == "error" else "#8a6d00"
    items = "<br>".join(html.escape(m) for m in messages)
    return f'<div data-testid="dispatch-message" data-kind="{kind}" style="color:{color}">{items}</div>'


def _slider_max(dispatcher: CudagraphDispatcher) -> int:
    """Slider range: twice the largest capture size (to show the eager region), within limits."""
    largest = dispatcher.max_capture_size
    return min(dispatcher.config.max_num_batched_tokens, max(2 * largest, largest + 16, 16))


class DispatchExplorer(w.VBox):
    """The dispatch explorer: batch controls in, the dispatcher's decision out.

    It asks a ``CudagraphDispatcher`` (rebuilt when the mode or sizes change) and shows its
    answer; it keeps no statistics and changes nothing outside itself.
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
        # the label shown next to a predicted time: given, else the cost model's own source
        self.cost_source = cost_source or costs.cost_source(self.cost_model)
        self.dispatcher = ready_dispatcher(config, record_stats=False)
        top = _slider_max(self.dispatcher)
        start = min(top, self.dispatcher.max_capture_size if num_tokens is None else num_tokens)
        style = {"description_width": "110px"}
        self.mode_box = w.Dropdown(
            options=[m.name for m in CUDAGraphMode],
            value=config.cudagraph_mode.name,
            description="mode",
            style=style,
        )
        self.sizes_box = w.Text(
            value=format_sizes(config.cudagraph_capture_sizes),
            description="capture sizes",
            continuous_update=False,
            style=style,
            layout=w.Layout(width="95%"),
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
        self.decision = w.HTML()
        self.message = w.HTML()
        for control in (self.slider, self.uniform, self.loras, self.cascade):
            control.observe(self._on_batch, names="value")
        for control in (self.mode_box, self.sizes_box):
            control.observe(self._on_config, names="value")
        super().__init__(
            [
                w.HBox([self.mode_box]),
                self.sizes_box,
                self.slider,
                w.HBox([self.uniform, self.cascade, self.loras]),
                self.decision,
                self.message,
            ]
        )
        self.refresh()

    def _on_config(self, _change: dict[str, Any]) -> None:
        dispatcher, notes = build_config(
            self.base_config, self.sizes_box.value, self.mode_box.value
        )
        if dispatcher is None:  # keep the last good dispatcher; say what is wrong
            self._show_error(notes[0])
            return
        self.dispatcher = dispatcher
        self.slider.max = _slider_max(dispatcher)  # may clamp the value, which refreshes too
        self.refresh(notes)

    def _show_error(self, message: str) -> None:
        self.decision.value = ""
        self.message.value = message_html([message])

    def _on_batch(self, _change: dict[str, Any]) -> None:
        self.refresh()

    def refresh(self, notes: list[str] | None = None) -> None:
        """Recompute the decision for the current controls and show it (or the error)."""
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

    Controls: cudagraph mode, capture sizes (text), num_tokens slider, uniform decode,
    cascade attention, active LoRAs. Output: runtime mode, padded size, num_reqs, key, the
    reason, and, with a cost model (a :class:`~cgdispatch.plan.costs.CostModel` such as the
    device model, or a callable ``f(mode, num_tokens)`` on arrays), the predicted step time
    at the padded size, labelled with ``cost_source`` (default: the cost model's
    ``source``). ``num_tokens`` sets the slider's start (default:
    the largest capture size).
    """
    return DispatchExplorer(config, cost_model, num_tokens=num_tokens, cost_source=cost_source)
